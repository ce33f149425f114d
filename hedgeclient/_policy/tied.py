"""Tied requests: two copies of a request, each naming its twin's replica.

The client sends the first copy of an eligible request to one replica and, ``offset``
seconds later, its *twin* to another. Both carry the same tie id (``Hedge-Tie``) and
the other copy's replica origin (``Hedge-Twin``). On the replicas, the
:class:`hedgeclient.server.HedgeMiddleware` tells the twin's replica to drop its copy
as soon as one copy starts to execute; a dropped copy answers ``503`` with the
``Hedge-Tie-Dropped`` header. The race treats that answer as "the twin has it": never
a winner, never a failure that calls for a backup (``_race.race``). Both copies may start
in the same instant; then both run and the first answer wins, as with a hedge.

The header names and :func:`is_dropped` are shared by the client and the server
middleware: this module is pure (no anyio, no httpcore).

Source: Dean & Barroso, "The Tail at Scale", CACM 56(2), 2013, section "tied
requests": "the client can introduce a small delay of two times the average network
message delay (1 ms or less in modern data-center networks) between sending the first
request and sending the second request".

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import final

import httpx

from hedgeclient._checks import check_number

__all__ = [
    "DROPPED_HEADER",
    "DROPPED_STATUS",
    "MAX_OFFSET",
    "TIE_HEADER",
    "TWIN_HEADER",
    "TiedRequests",
    "is_dropped",
    "new_tie_id",
]

TIE_HEADER = "hedge-tie"
"""Request header: the tie id shared by the two copies (32 lower-case hex digits)."""

TWIN_HEADER = "hedge-twin"
"""Request header: the twin copy's replica origin (``"http://10.0.0.8:8080"``)."""

DROPPED_HEADER = "hedge-tie-dropped"
"""Response header of a dropped copy; its value is the tie id."""

DROPPED_STATUS = 503
"""The status of a dropped copy: an error to any client that does not know ties."""

MAX_OFFSET = 1.0
"""The largest ``offset``, seconds: a later twin is a hedge, not a tie."""


def new_tie_id() -> str:
    """Return a fresh tie id: 128 random bits as 32 lower-case hex digits."""
    return secrets.token_hex(16)


def is_dropped(response: httpx.Response) -> bool:
    """True when ``response`` is a tied copy's "dropped: the twin has it" answer."""
    return response.status_code == DROPPED_STATUS and DROPPED_HEADER in response.headers


@final
@dataclass(frozen=True, slots=True)
class TiedRequests:
    """Send each eligible request as two tied copies (``HedgedTransport(tied=...)``).

    The first copy goes to one replica and its twin, ``offset`` seconds later, to
    another; each names the other's replica. The replicas must serve through
    :class:`hedgeclient.server.HedgeMiddleware` configured with
    :class:`hedgeclient.server.Ties` (and each other as ``peers``). The first copy
    (the *leader*) starts as soon as its replica lets it; the twin (the *follower*),
    as it is about to start, asks the leader's replica, which decides alone: a leader
    still queued there is dropped and the follower runs, a leader that started means
    the follower is dropped before any work. One message per pair at most, and the
    two copies never both run unless that message fails. Without that middleware
    every request runs twice.

    The twin is the request's first backup: it needs an eligible request (an
    idempotent method, or ``extensions={"hedge": True}``, a replayable body, a
    service with two replicas, ``max_hedges`` >= 1). It is *not* drawn from the hedge
    budget (a dropped copy costs its replica no work), so every eligible request sends
    it; ``extensions={"tie": False}`` sends one request untied (then hedged by delay
    as usual). A copy that comes back dropped gives its backup back: if its twin then
    fails, a backup goes at once, as after any failure, and if its twin is slow, the
    next backup goes by the hedge delay, drawn from the budget as usual. The dropped
    answer is never returned to the caller.

    Args:
        offset: seconds between the first copy and its twin, in [0, 1]; default
            0.002. The roles do not depend on it (the first copy leads); a small
            offset lets the leader start first on an idle replica, so that its
            follower is dropped at its first question. Dean & Barroso suggest twice
            the network's one-way message delay.

    Raises:
        TypeError: ``offset`` is not a number (a bool is not a number).
        ValueError: ``offset`` is negative, NaN or above 1.

    Example usage::

        transport = HedgedTransport(
            replicas={"http://catalog": ["http://10.0.0.7:8080", "http://10.0.0.8:8080"]},
            tied=TiedRequests(offset=0.002),
        )

    .. versionadded:: 0.1.0
    """

    offset: float = 0.002

    def __post_init__(self) -> None:
        seconds = check_number("offset", self.offset, low=0.0, high=MAX_OFFSET, unit="seconds")
        object.__setattr__(self, "offset", seconds)
