"""What the middleware tells the handler (:class:`HedgeAttempt`) and what it counts
(:class:`ServerStatistics`).

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass, fields
from typing import Literal, final

__all__ = ["AttemptKind", "HedgeAttempt", "ServerStatistics", "current_attempt"]

AttemptKind = Literal["primary", "backup", "unmarked"]
"""``primary``: attempt 1 of a hedging client; ``backup``: attempt 2 or later;
``unmarked``: a request without the attempt header."""


@final
@dataclass(frozen=True, slots=True)
class HedgeAttempt:
    """Which attempt of a hedged request the handler is serving.

    Handlers find it with :func:`current_attempt` or in ``scope["state"]["hedge"]``
    (Starlette and FastAPI: ``request.state.hedge``).

    Attributes:
        number: the attempt header's value: 1 for the primary, 2 for the first backup
            (or a tied request's twin), and so on.
        tie: the tie id of a tied copy (``Hedge-Tie``), or ``None``.
        queued: seconds the request waited in the admission queue (0 without one).

    .. versionadded:: 0.1.0
    """

    number: int
    tie: str | None = None
    queued: float = 0.0

    @property
    def kind(self) -> Literal["primary", "backup"]:
        """``primary`` for attempt 1, ``backup`` for any later attempt."""
        return "primary" if self.number == 1 else "backup"


_CURRENT: contextvars.ContextVar[HedgeAttempt | None] = contextvars.ContextVar(
    "hedgeclient_server_attempt", default=None
)


def current_attempt() -> HedgeAttempt | None:
    """Return the :class:`HedgeAttempt` of the request this task serves, or ``None``
    when the request carries no attempt header (or outside a request).

    .. versionadded:: 0.1.0
    """
    return _CURRENT.get()


@final
@dataclass(frozen=True, slots=True)
class ServerStatistics:
    """A snapshot of one :class:`~hedgeclient.server.HedgeMiddleware`'s counters.

    Counts since the middleware was created; ``running`` and ``queued`` are gauges.

    Attributes:
        primaries: requests with attempt number 1.
        backups: requests with attempt number 2 or more.
        unmarked: requests without the attempt header.
        abandoned: requests whose client went away before the response completed
            (as far as the middleware watched them: see ``cancel``).
        abandoned_backups: the part of ``abandoned`` that were backups.
        cancelled: handlers (or queued requests) cancelled because their client
            went away.
        rejected_pushback: backups answered 503 at once because the queue was long.
        rejected_full: requests answered 503 because the queue was full.
        running: requests running now, past the admission queue (0 without one).
        queued: requests waiting in the admission queue now.
        queue_seconds: seconds spent waiting in the admission queue, summed.
        dropped_queued: tied copies (leaders) dropped from the queue (their follower
            was about to start elsewhere).
        dropped_on_arrival: tied copies (leaders) dropped as they arrived (their
            follower had started elsewhere before they came).
        dropped_on_answer: tied copies (followers) dropped as they were about to
            start, their leader's replica answering that the leader had started.
        messages_sent: tie messages sent to a leader's replica (one per follower that
            was about to start).
        messages_failed: tie messages that got no usable answer (the peer down, a
            timeout); the follower then ran.
        messages_received: authenticated tie messages received.
        messages_refused: tie messages refused (not authenticated, stale, replayed,
            malformed).
        twins_running: tie messages received for a leader already running or
            finished (left alone; its follower is dropped).

    .. versionadded:: 0.1.0
    """

    primaries: int = 0
    backups: int = 0
    unmarked: int = 0
    abandoned: int = 0
    abandoned_backups: int = 0
    cancelled: int = 0
    rejected_pushback: int = 0
    rejected_full: int = 0
    running: int = 0
    queued: int = 0
    queue_seconds: float = 0.0
    dropped_queued: int = 0
    dropped_on_arrival: int = 0
    dropped_on_answer: int = 0
    messages_sent: int = 0
    messages_failed: int = 0
    messages_received: int = 0
    messages_refused: int = 0
    twins_running: int = 0


_NAMES = tuple(f.name for f in fields(ServerStatistics))


@final
class Counters:
    """The mutable counters behind :class:`ServerStatistics`. Strictly private."""

    __slots__ = _NAMES

    def __init__(self) -> None:
        for name in _NAMES:
            setattr(self, name, 0)
        self.queue_seconds = 0.0

    def snapshot(self) -> ServerStatistics:
        """A frozen copy (ints and a float, safe to read from a scrape thread)."""
        return ServerStatistics(**{name: getattr(self, name) for name in _NAMES})

    # Declared for the type checker; set in __init__.
    primaries: int
    backups: int
    unmarked: int
    abandoned: int
    abandoned_backups: int
    cancelled: int
    rejected_pushback: int
    rejected_full: int
    running: int
    queued: int
    queue_seconds: float
    dropped_queued: int
    dropped_on_arrival: int
    dropped_on_answer: int
    messages_sent: int
    messages_failed: int
    messages_received: int
    messages_refused: int
    twins_running: int
