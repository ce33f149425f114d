"""hedgeclient: hedged requests for httpx.

Send a call to one replica; if no response has arrived by the hedge delay, send one
backup request to a different replica, return whichever answers first and cancel the
other. See Dean & Barroso, "The Tail at Scale", CACM 56(2), 2013.
"""

from hedgeclient._delay import DelayPolicy, FixedDelay
from hedgeclient._events import AttemptRecord, HedgeHook, RequestRecord
from hedgeclient._version import __version__

__all__ = [
    "AttemptRecord",
    "DelayPolicy",
    "FixedDelay",
    "HedgeHook",
    "RequestRecord",
    "__version__",
]
