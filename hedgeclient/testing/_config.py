"""How one replica of the fake service behaves: latency law, slowness, stalls, faults.

Every class here is a frozen, validated dataclass; times are float seconds.

Two kinds of slowness (``docs/how-it-works.md``, "The condition that decides whether any of it
is real"): ``server-owned`` latency is drawn afresh by every attempt, so a backup is
independent of its primary; ``request-owned`` latency is a function of the request
(its path and query, or a key header) that every replica computes alike, so a
backup is exactly as slow as its primary. A :class:`Stall` adds pauses correlated in
time: stop-the-world, every request of the replica waits (Dean & Barroso, "The Tail at
Scale", 2013: garbage collection, background daemons).

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, final

from hedgeclient.testing._laws import Constant, LatencyLaw, _is_number
from hedgeclient.testing._parse import parse_law

__all__ = [
    "CloseMidBody",
    "Down",
    "ErrorStatus",
    "Fault",
    "LargeBody",
    "ReplicaConfig",
    "Reset",
    "SlowBody",
    "Slowness",
    "Stall",
]

Slowness = Literal["server-owned", "request-owned"]
"""``server-owned``: every attempt draws independently; ``request-owned``: the latency
is a deterministic function of the request, identical on every replica."""


def _check_p(p: float) -> None:
    if not _is_number(p):
        msg = f"`p` must be a number in [0, 1], got {p!r}"
        raise TypeError(msg)
    if not 0.0 <= p <= 1.0:
        msg = f"`p` must be in [0, 1], got {p!r}"
        raise ValueError(msg)


def _check_positive(name: str, value: float) -> None:
    msg = f"`{name}` must be a finite number > 0, got {value!r}"
    if not _is_number(value):
        raise TypeError(msg)
    if not (math.isfinite(value) and value > 0.0):
        raise ValueError(msg)


def _check_int(name: str, value: int, bounds: str) -> None:
    """Raise TypeError unless ``value`` is an int (not a bool); ``bounds`` ends the message."""
    if isinstance(value, bool) or not isinstance(value, int):
        msg = f"`{name}` must be an integer {bounds}, got {value!r}"
        raise TypeError(msg)


@final
@dataclass(frozen=True, slots=True)
class Stall:
    """Stop-the-world stalls: the replica freezes for ``duration`` s every ``every`` s.

    Stall windows are ``[origin + offset + k * every, ... + duration)`` for every
    integer k, where ``origin`` is the instant the replica started. A request makes no
    progress inside a window: one that arrives in a window starts when it ends, one
    whose work spans a window is delayed by it. Give replicas different offsets to
    desynchronise their stalls.

    Args:
        every: the period, seconds, > 0.
        duration: the length of each stall, seconds, in (0, every).
        offset: the phase of the first window after ``origin``, seconds (default 0:
            the replica starts stalled).

    Raises:
        TypeError: an ``every``, ``duration`` or ``offset`` that is not a number (an int
            or a float, not a bool).
        ValueError: ``every`` ≤ 0, ``duration`` outside (0, every), a non-finite offset.

    .. versionadded:: 0.1.0
    """

    every: float
    duration: float
    offset: float = 0.0

    def __post_init__(self) -> None:
        _check_positive("every", self.every)
        if not _is_number(self.duration):
            msg = f"`duration` must be a number in (0, every={self.every!r}), got {self.duration!r}"
            raise TypeError(msg)
        if not (math.isfinite(self.duration) and 0.0 < self.duration < self.every):
            msg = f"`duration` must be in (0, every={self.every!r}), got {self.duration!r}"
            raise ValueError(msg)
        msg = f"`offset` must be a finite number of seconds, got {self.offset!r}"
        if not _is_number(self.offset):
            raise TypeError(msg)
        if not math.isfinite(self.offset):
            raise ValueError(msg)

    def finish(self, start: float, work: float, origin: float = 0.0) -> float:
        """Return when ``work`` seconds of progress, begun at ``start``, complete.

        Args:
            start: the arrival instant, seconds on the replica's clock.
            work: the latency drawn for the request, seconds (≥ 0).
            origin: the instant the replica started, seconds on the same clock.

        Returns:
            The completion instant: ``start + work`` plus the stalled time in between.
        """
        window = origin + self.offset
        window += math.floor((start - window) / self.every) * self.every
        now, remaining = start, work
        while True:
            now = max(now, window + self.duration)
            following = window + self.every
            if now + remaining <= following:
                return now + remaining
            remaining -= following - now
            now = window = following


@final
@dataclass(frozen=True, slots=True)
class Down:
    """Connection refused: the port stays reserved (bound), but nothing listens.

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
        _check_int("status", self.status, "in [200, 599]")
        if not 200 <= self.status <= 599:
            msg = f"`status` must be in [200, 599], got {self.status!r}"
            raise ValueError(msg)
        _check_p(self.p)


@final
@dataclass(frozen=True, slots=True)
class SlowBody:
    """With probability ``p``, headers come after the latency, the body slowly after.

    Args:
        duration: how long the body takes after the headers, seconds, > 0.
        chunks: how many pieces it comes in, evenly spaced, ≥ 1 (default 10).
        p: the probability, in [0, 1] (default 1).

    Raises:
        TypeError: chunks that is not an int, or a duration or p that is not a number
            (a bool is neither).
        ValueError: a duration ≤ 0, chunks < 1 or p outside [0, 1].

    .. versionadded:: 0.1.0
    """

    duration: float
    chunks: int = 10
    p: float = 1.0

    def __post_init__(self) -> None:
        _check_positive("duration", self.duration)
        _check_int("chunks", self.chunks, "≥ 1")
        if self.chunks < 1:
            msg = f"`chunks` must be ≥ 1, got {self.chunks!r}"
            raise ValueError(msg)
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
        _check_int("size", self.size, "≥ 0 bytes")
        if self.size < 0:
            msg = f"`size` must be ≥ 0 bytes, got {self.size!r}"
            raise ValueError(msg)
        _check_p(self.p)


Fault = Down | Reset | ErrorStatus | SlowBody | CloseMidBody | LargeBody
"""One misbehaviour of a replica (or ``None``: healthy)."""

_FAULTS = (Down, Reset, ErrorStatus, SlowBody, CloseMidBody, LargeBody)


@final
@dataclass(frozen=True, slots=True)
class ReplicaConfig:
    """The behaviour of one replica; ``None`` fields inherit the service's setting.

    Args:
        latency: a law, its string form (``"lab"``, see :func:`parse_law`) or a
            constant in seconds.
        slowness: ``"server-owned"`` or ``"request-owned"``.
        stall: periodic stop-the-world stalls.
        fault: a fault (:class:`Down`, :class:`Reset`, :class:`ErrorStatus`,
            :class:`SlowBody`, :class:`CloseMidBody`, :class:`LargeBody`).
        slowdown: a factor (> 0, default 1) applied to every latency drawn.

    Raises:
        TypeError: a latency that is neither a law, a str nor a number, or a slowdown
            that is not a number (a bool is not a number).
        ValueError: a bad law string, an unknown slowness or fault, or a slowdown ≤ 0.

    .. versionadded:: 0.1.0
    """

    latency: LatencyLaw | None
    slowness: Slowness | None
    stall: Stall | None
    fault: Fault | None
    slowdown: float

    def __init__(
        self,
        *,
        latency: LatencyLaw | str | float | None = None,
        slowness: Slowness | None = None,
        stall: Stall | None = None,
        fault: Fault | None = None,
        slowdown: float = 1.0,
    ) -> None:
        if isinstance(latency, str):
            latency = parse_law(latency)
        elif _is_number(latency):
            latency = Constant(float(latency))
        elif latency is not None and not isinstance(latency, LatencyLaw):
            msg = "`latency` must be a LatencyLaw, a law string or a number of seconds, "
            msg += f"got {latency!r}"
            raise TypeError(msg)
        if slowness not in (None, "server-owned", "request-owned"):
            msg = f"`slowness` must be 'server-owned' or 'request-owned', got {slowness!r}"
            raise ValueError(msg)
        if stall is not None and not isinstance(stall, Stall):
            msg = f"`stall` must be a Stall or None, got {stall!r}"
            raise ValueError(msg)
        if fault is not None and not isinstance(fault, _FAULTS):
            msg = f"`fault` must be one of {', '.join(f.__name__ for f in _FAULTS)} or None, "
            msg += f"got {fault!r}"
            raise ValueError(msg)
        _check_positive("slowdown", slowdown)
        object.__setattr__(self, "latency", latency)
        object.__setattr__(self, "slowness", slowness)
        object.__setattr__(self, "stall", stall)
        object.__setattr__(self, "fault", fault)
        object.__setattr__(self, "slowdown", slowdown)

    def merged(self, override: ReplicaConfig | None) -> ReplicaConfig:
        """Return this config with the fields that ``override`` sets.

        A field is set when it is not None (for ``slowdown``: when it is not 1).
        """
        if override is None:
            return self
        return ReplicaConfig(
            latency=self.latency if override.latency is None else override.latency,
            slowness=override.slowness or self.slowness,
            stall=self.stall if override.stall is None else override.stall,
            fault=self.fault if override.fault is None else override.fault,
            slowdown=self.slowdown if override.slowdown == 1.0 else override.slowdown,
        )
