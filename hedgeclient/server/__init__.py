"""The server's half of hedging: ASGI middleware for the replicas a hedging client calls.

:class:`HedgeMiddleware` cancels a handler whose client went away (the loser of a
hedged request, whose work would otherwise run to its end), tells the handler which
attempt it serves, queues requests behind a concurrency limit with backups behind
primaries (and pushes back on backups when the queue is long), and serves the
replicas' side of tied requests (:class:`Ties`). See ``docs/server.md``.

Prometheus metrics (read from the counters at scrape time; label ``server`` is the
middleware's ``name``; middlewares sharing a name are summed, and one that is
garbage-collected leaves its counts, so that a counter never goes back):

=========================================== ======= ============ ===============================
Name                                        Type    Labels       Meaning
=========================================== ======= ============ ===============================
hedgeclient_server_requests_total           counter server, kind Requests; kind is primary,
                                                                 backup or unmarked.
hedgeclient_server_abandoned_total          counter server       Client gone before the
                                                                 response completed.
hedgeclient_server_abandoned_backups_total  counter server       The backups among those.
hedgeclient_server_cancelled_total          counter server       Handlers cancelled for it.
hedgeclient_server_rejected_total           counter server,      503 + Retry-After: pushback
                                                    reason       or queue_full.
hedgeclient_server_queue_wait_seconds_total counter server       Seconds waited in the queue.
hedgeclient_server_tie_drops_total          counter server, when Tied copies dropped: queued,
                                                                 arrival or answer.
hedgeclient_server_tie_messages_total       counter server,      Tie messages: sent, failed,
                                                    event        received, refused,
                                                                 twin_running.
hedgeclient_server_running                  gauge   server       Requests running now, past
                                                                 the admission queue (only
                                                                 with max_concurrency).
hedgeclient_server_queued                   gauge   server       Requests queued now (only
                                                                 with max_concurrency).
=========================================== ======= ============ ===============================

.. versionadded:: 0.1.0
"""

from typing import TYPE_CHECKING

from hedgeclient._deprecated import deprecated_names
from hedgeclient.server._config import Ties
from hedgeclient.server._middleware import HedgeMiddleware
from hedgeclient.server._stats import AttemptKind, HedgeAttempt, ServerStatistics, current_attempt

__all__ = [
    "AttemptKind",
    "HedgeAttempt",
    "HedgeMiddleware",
    "ServerStatistics",
    "Ties",
    "current_attempt",
]

if TYPE_CHECKING:  # the deprecated name still type-checks for this release
    from hedgeclient.server._middleware import CancelMode as CancelMode

__getattr__ = deprecated_names(
    __name__,
    {
        "CancelMode": (
            "hedgeclient.server._middleware",
            "CancelMode",
            "HedgeMiddleware(cancel=...) takes 'hedged', 'all' or 'none'; annotate a "
            "variable as Literal['hedged', 'all', 'none']",
        ),
    },
)
