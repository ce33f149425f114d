"""The sync transport: the async engine on a private event-loop thread.

``transport`` is the public class; ``loop`` runs the thread, ``bodies`` carries bodies
across it, ``options`` types the keyword arguments forwarded. Strictly private.
"""

from hedgeclient._sync.transport import SyncHedgedTransport

__all__ = ["SyncHedgedTransport"]
