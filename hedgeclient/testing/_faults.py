"""Faults of one replica of the fake service: refused, black hole, reset, error status,
slow or cut body.

Every class here is a frozen, validated dataclass; times are float seconds, and numbers
are ``int`` or ``float`` only (see ``hedgeclient._checks``, ``plain``).

.. versionadded:: 0.1.0
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import final

from hedgeclient._checks import HOUR, check_int, check_number

__all__ = [
    "BlackHole",
    "CloseMidBody",
    "Down",
    "ErrorStatus",
    "Fault",
    "LargeBody",
    "Reset",
    "SlowBody",
]


def _check_p(p: float) -> None:
    check_number("p", p, low=0.0, high=1.0, plain=True)


@final
@dataclass(frozen=True, slots=True)
class Down:
    """Connection refused: the port stays reserved (bound), but nothing listens.

    .. versionadded:: 0.1.0
    """


@final
@dataclass(frozen=True, slots=True)
class BlackHole:
    """Connections neither succeed nor fail: a connect hangs until the client gives up.

    The port listens with a full accept queue (a backlog of 0, filled by the fake
    service's own connections), so the kernel drops every new SYN: the client's connect
    waits for its connect timeout, as it would for a host that vanished or a firewall
    that drops packets. Established connections are closed, so pooled ones reconnect.

    .. versionadded:: 0.1.0
    """


@final
@dataclass(frozen=True, slots=True)
class Reset:
    """With probability ``p``, reset the connection (TCP RST) instead of answering.

    The request is read and its latency waited first. Under hypercorn, which has no
    way to reset, the stream is closed after the response headers instead.

    Args:
        p: the probability, in [0, 1] (default 1).

    Raises:
        TypeError: a p that is not a number (an int or a float, not a bool).
        ValueError: p outside [0, 1].

    .. versionadded:: 0.1.0
    """

    p: float = 1.0

    def __post_init__(self) -> None:
        _check_p(self.p)


@final
@dataclass(frozen=True, slots=True)
class ErrorStatus:
    """With probability ``p``, answer with ``status`` after the latency.

    Args:
        status: the HTTP status, in [200, 599] (default 503).
        p: the probability, in [0, 1] (default 1).

    Raises:
        TypeError: a status that is not an int, or a p that is not a number (a bool
            is neither).
        ValueError: a status or p out of range.

    .. versionadded:: 0.1.0
    """

    status: int = 503
    p: float = 1.0

    def __post_init__(self) -> None:
        check_int("status", self.status, 200, 599)
        _check_p(self.p)


@final
@dataclass(frozen=True, slots=True)
class SlowBody:
    """With probability ``p``, headers come after the latency, the body slowly after.

    Args:
        duration: how long the body takes after the headers, seconds, in (0, 3600].
        chunks: how many pieces it comes in, evenly spaced, ≥ 1 (default 10).
        p: the probability, in [0, 1] (default 1).

    Raises:
        TypeError: chunks that is not an int, or a duration or p that is not a number
            (a bool is neither).
        ValueError: a duration outside (0, 3600], chunks < 1 or p outside [0, 1].

    .. versionadded:: 0.1.0
    """

    duration: float
    chunks: int = 10
    p: float = 1.0

    def __post_init__(self) -> None:
        check_number(
            "duration", self.duration, low=0.0, high=HOUR, low_open=True, unit="seconds", plain=True
        )
        check_int("chunks", self.chunks, 1)
        _check_p(self.p)


@final
@dataclass(frozen=True, slots=True)
class CloseMidBody:
    """With probability ``p``, announce the body's length, send half of it, then close.

    The client sees a truncated body (httpx raises ``RemoteProtocolError``).

    Args:
        p: the probability, in [0, 1] (default 1).

    Raises:
        TypeError: a p that is not a number (an int or a float, not a bool).
        ValueError: p outside [0, 1].

    .. versionadded:: 0.1.0
    """

    p: float = 1.0

    def __post_init__(self) -> None:
        _check_p(self.p)


@final
@dataclass(frozen=True, slots=True)
class LargeBody:
    """With probability ``p``, answer with ``size`` bytes of :func:`large_body` content.

    Args:
        size: the body's length, bytes, ≥ 0.
        p: the probability, in [0, 1] (default 1).

    Raises:
        TypeError: a size that is not an int, or a p that is not a number (a bool is
            neither).
        ValueError: a negative size or p outside [0, 1].

    .. versionadded:: 0.1.0
    """

    size: int
    p: float = 1.0

    def __post_init__(self) -> None:
        check_int("size", self.size, 0, unit="bytes")
        _check_p(self.p)


Fault = Down | BlackHole | Reset | ErrorStatus | SlowBody | CloseMidBody | LargeBody
"""One misbehaviour of a replica (or ``None``: healthy)."""

_FAULTS = (Down, BlackHole, Reset, ErrorStatus, SlowBody, CloseMidBody, LargeBody)
