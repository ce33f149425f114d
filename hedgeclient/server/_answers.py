"""The middleware's small fixed answers and shared values.

Strictly private.
"""

from __future__ import annotations

from hedgeclient._tied import DROPPED_HEADER, DROPPED_STATUS
from hedgeclient.server._exchange import Send
from hedgeclient.server._stats import HedgeAttempt

__all__ = ["ATTEMPTS", "attempt_of", "dropped", "queue_too_long"]


ATTEMPTS = tuple(HedgeAttempt(n) for n in range(1, 9))
"""``HedgeAttempt(1)`` to ``HedgeAttempt(8)``, shared (they are frozen)."""


def attempt_of(number: int) -> HedgeAttempt:
    """``HedgeAttempt(number)``, shared for the common numbers (it is frozen)."""
    return ATTEMPTS[number - 1] if number <= len(ATTEMPTS) else HedgeAttempt(number)


async def dropped(send: Send, tie: str) -> None:
    """Answer a dropped tied copy: 503 with ``Hedge-Tie-Dropped``, no body."""
    headers = [(DROPPED_HEADER.encode(), tie.encode()), (b"content-length", b"0")]
    await send({"type": "http.response.start", "status": DROPPED_STATUS, "headers": headers})
    await send({"type": "http.response.body", "body": b""})


async def queue_too_long(send: Send, retry_after: bytes) -> None:
    """Answer 503 with ``Retry-After: <retry_after>`` (pushback, or a full queue)."""
    headers = [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", b"22"),
        (b"retry-after", retry_after),
    ]
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": b"server queue too long\n"})
