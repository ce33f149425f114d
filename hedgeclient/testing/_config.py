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

from hedgeclient._checks import HOUR, as_seconds, check_number
from hedgeclient.testing._faults import (
    _FAULTS,
    BlackHole,
    CloseMidBody,
    Down,
    ErrorStatus,
    Fault,
    LargeBody,
    Reset,
    SlowBody,
)
from hedgeclient.testing._generation import Generation
from hedgeclient.testing._laws import Constant, LatencyLaw
from hedgeclient.testing._parse import parse_law

MAX_CONSTANT_LATENCY = 10.0  # seconds: a bare number above it is milliseconds meant

__all__ = [
    "BlackHole",
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
        every: the period, seconds, in (0, 3600].
        duration: the length of each stall, seconds, in (0, every).
        offset: the phase of the first window after ``origin``, seconds (default 0:
            the replica starts stalled).

    Raises:
        TypeError: an ``every``, ``duration`` or ``offset`` that is not a number (an int
            or a float, not a bool).
        ValueError: ``every`` outside (0, 3600], ``duration`` outside (0, every), a
            non-finite offset.

    .. versionadded:: 0.1.0
    """

    every: float
    duration: float
    offset: float = 0.0

    def __post_init__(self) -> None:
        every = check_number(
            "every", self.every, low=0.0, high=HOUR, low_open=True, unit="seconds", plain=True
        )
        check_number(
            "duration",
            self.duration,
            low=0.0,
            high=every,
            low_open=True,
            high_open=True,
            bounds=f"in (0, every={self.every!r})",
            plain=True,
        )
        check_number("offset", self.offset, unit="seconds", plain=True)

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
class ReplicaConfig:
    """The behaviour of one replica; ``None`` fields inherit the service's setting.

    Args:
        latency: a law, its string form (``"lab"``, see :func:`parse_law`) or a
            constant in seconds, in [0, 10] (longer: a law, or ``fault=BlackHole()``).
        slowness: ``"server-owned"`` or ``"request-owned"``.
        stall: periodic stop-the-world stalls.
        fault: a fault (:class:`Down`, :class:`Reset`, :class:`ErrorStatus`,
            :class:`SlowBody`, :class:`CloseMidBody`, :class:`LargeBody`).
        slowdown: a factor (> 0, default 1) applied to every latency drawn.
        generation: how ``POST /v1/chat/completions`` generates (token rate, default
            length); ``None`` inherits (the service default is :class:`Generation()`).
            There, the latency drawn is the time to the first token.

    Raises:
        TypeError: a latency that is neither a law, a str nor a number, or a slowdown
            that is not a number (a bool is not a number), or a ``generation`` that is
            not a :class:`Generation`.
        ValueError: a bad law string, a constant latency outside [0, 10] s, an unknown
            slowness or fault, or a slowdown ≤ 0.

    .. versionadded:: 0.1.0
    """

    latency: LatencyLaw | None
    slowness: Slowness | None
    stall: Stall | None
    fault: Fault | None
    slowdown: float
    generation: Generation | None

    def __init__(
        self,
        *,
        latency: LatencyLaw | str | float | None = None,
        slowness: Slowness | None = None,
        stall: Stall | None = None,
        fault: Fault | None = None,
        slowdown: float = 1.0,
        generation: Generation | None = None,
    ) -> None:
        seconds = as_seconds(latency, plain=True)
        if isinstance(latency, str):
            latency = parse_law(latency)
        elif seconds is not None:
            if not 0.0 <= seconds <= MAX_CONSTANT_LATENCY:
                msg = (
                    f"`latency` is in seconds and must be in [0, {MAX_CONSTANT_LATENCY:g}], "
                    f"got {latency!r}"
                )
                if seconds > MAX_CONSTANT_LATENCY:
                    msg += f": for {latency!r} ms write {seconds / 1000:g}; for a replica "
                    msg += "that never answers, use fault=BlackHole()"
                raise ValueError(msg)
            latency = Constant(seconds)
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
        check_number("slowdown", slowdown, low=0.0, low_open=True, plain=True)
        if generation is not None and not isinstance(generation, Generation):
            msg = f"`generation` must be a Generation or None, got {generation!r}"
            raise TypeError(msg)
        object.__setattr__(self, "latency", latency)
        object.__setattr__(self, "slowness", slowness)
        object.__setattr__(self, "stall", stall)
        object.__setattr__(self, "fault", fault)
        object.__setattr__(self, "slowdown", slowdown)
        object.__setattr__(self, "generation", generation)

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
            generation=override.generation or self.generation,
        )
