"""hedgeclient: hedged requests for httpx.

Send a call to one replica; if no response has arrived by the hedge delay, send one
backup request to a different replica, return whichever answers first and cancel the
other. See Dean & Barroso, "The Tail at Scale", CACM 56(2), 2013.

``__all__`` holds what a user constructs, calls, catches, implements or reads back;
``docs/api.md`` ("What is public, and why") gives the rule and each deprecated name.
"""

from typing import TYPE_CHECKING

from hedgeclient._deprecated import deprecated_names
from hedgeclient._discovery import (
    DiscoveryError,
    DiscoveryStatistics,
    DnsReplicas,
    PolledReplicas,
    SrvReplicas,
    WatchedReplicas,
)
from hedgeclient._events import AttemptRecord, HedgeInfo, RequestRecord
from hedgeclient._hedge_info import hedge_info
from hedgeclient._policy.adaptive import AdaptiveDelay, AdaptiveDelayStatistics, RouteStatistics
from hedgeclient._policy.budget import BudgetStatistics, HedgeBudget
from hedgeclient._policy.delay import DelayPolicy, DelaySnapshot, FixedDelay, SnapshotDelayPolicy
from hedgeclient._policy.overrides import HedgePolicy
from hedgeclient._policy.routes import Route
from hedgeclient._policy.tied import TiedRequests
from hedgeclient._replicas.replica import Replica
from hedgeclient._replicas.selector import (
    AttemptResult,
    HealthStatistics,
    PowerOfTwoChoices,
    ReplicaSelector,
)
from hedgeclient._sync import SyncHedgedTransport
from hedgeclient._transport import DiscoveryFailedError, HedgedTransport, TransportClosedError
from hedgeclient._version import __version__

__all__ = [
    "AdaptiveDelay",
    "AdaptiveDelayStatistics",
    "AttemptRecord",
    "AttemptResult",
    "BudgetStatistics",
    "DelayPolicy",
    "DelaySnapshot",
    "DiscoveryError",
    "DiscoveryFailedError",
    "DiscoveryStatistics",
    "DnsReplicas",
    "FixedDelay",
    "HealthStatistics",
    "HedgeBudget",
    "HedgeInfo",
    "HedgePolicy",
    "HedgedTransport",
    "PolledReplicas",
    "PowerOfTwoChoices",
    "Replica",
    "ReplicaSelector",
    "RequestRecord",
    "Route",
    "RouteStatistics",
    "SnapshotDelayPolicy",
    "SrvReplicas",
    "SyncHedgedTransport",
    "TiedRequests",
    "TransportClosedError",
    "WatchedReplicas",
    "__version__",
    "hedge_info",
]

if TYPE_CHECKING:  # the deprecated names still type-check for this release
    from hedgeclient._events import HedgeHook as HedgeHook
    from hedgeclient._policy.routes import DecideOn as DecideOn

__getattr__ = deprecated_names(
    __name__,
    {
        "DecideOn": (
            "hedgeclient._policy.routes",
            "DecideOn",
            "Route(decide_on=...) takes 'headers' or 'first_byte'; annotate a variable "
            "as Literal['headers', 'first_byte']",
        ),
        "HedgeHook": (
            "hedgeclient._events",
            "HedgeHook",
            "a hook is any callable taking a RequestRecord; annotate it as "
            "Callable[[RequestRecord], None]",
        ),
    },
)
