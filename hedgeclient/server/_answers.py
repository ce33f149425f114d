"""The middleware's small fixed answers and shared values.

Strictly private.
"""

from __future__ import annotations

from hedgeclient._policy.tied import DROPPED_HEADER, DROPPED_STATUS
from hedgeclient.server._exchange import Send
from hedgeclient.server._stats import HedgeAttempt

__all__ = ["ATTEMPTS", "BY_VALUE", "attempt_of", "dropped", "parse_attempt", "queue_too_long"]


ATTEMPTS = tuple(HedgeAttempt(n) for n in range(1, 9))
"""``HedgeAttempt(1)`` to ``HedgeAttempt(8)``, shared (they are frozen)."""


def attempt_of(number: int) -> HedgeAttempt:
    """``HedgeAttempt(number)``, shared for the common numbers (it is frozen)."""
    return ATTEMPTS[number - 1] if number <= len(ATTEMPTS) else HedgeAttempt(number)


BY_VALUE = {str(attempt.number).encode(): attempt for attempt in ATTEMPTS}
"""The attempt header's common values (``b"1"`` to ``b"8"``) and their shared
:class:`HedgeAttempt`: one dict look-up per marked request (:func:`parse_attempt`
reads the others)."""


def parse_attempt(value: bytes) -> HedgeAttempt | None:
    """The attempt an attempt header's value names: 1 to 3 ASCII digits, 1 and up
    (``b"01"`` is 1), with any spaces and tabs around them (a field value's optional
    whitespace, RFC 9110 5.5, which some servers pass on); ``None`` for anything
    else (as if the header were absent)."""
    value = value.strip(b" \t")
    number = int(value) if value.isdigit() and 0 < len(value) < 4 else 0
    return attempt_of(number) if number else None


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
