"""The hedge-delay seam: how long to wait for the primary attempt before a backup request.

``HedgedTransport(delay=...)`` takes either a float (a fixed hedge delay, in seconds)
or any object implementing :class:`DelayPolicy`. The transport asks the policy for the
delay of a route when a hedgeable request starts, and reports every primary attempt's
latency back to it, including *censored* samples: a primary cancelled because its
backup won is recorded at its elapsed time, a lower bound on its true latency.

Prior art: tower's ``hedge`` middleware (a ``Policy`` plus a latency ``Record`` sink);
Dean & Barroso, "The Tail at Scale", CACM 56(2), 2013, section "Hedged requests".
"""

from __future__ import annotations

import math
from typing import Protocol, final, runtime_checkable

from hedgeclient._checks import as_seconds

__all__ = ["DelayPolicy", "FixedDelay", "check_delay"]


def check_delay(value: object, parameter: str, expected: str) -> float:
    """Return ``value`` as float seconds if it is a finite number ≥ 0, else raise.

    Args:
        value: the candidate delay.
        parameter: the parameter name the messages give (``"delay"``, ``"seconds"``).
        expected: what the TypeError says is allowed (``"a number of seconds"``).

    Raises:
        TypeError: ``value`` is not a real number (``numbers.Real``; bools are refused).
        ValueError: ``value`` is negative, NaN or infinite.
    """
    seconds = as_seconds(value)
    if seconds is None:
        msg = f"`{parameter}` must be {expected}, got {value!r}"
        raise TypeError(msg)
    if not math.isfinite(seconds) or seconds < 0:
        msg = f"`{parameter}` must be a finite number of seconds >= 0, got {value!r}"
        raise ValueError(msg)
    return seconds


@runtime_checkable
class DelayPolicy(Protocol):
    """Chooses the hedge delay of a route and learns from observed latencies.

    Implementations must be cheap: :meth:`hedge_delay` runs once per hedgeable request
    and :meth:`record` once per primary attempt, both on the event loop.

    .. versionadded:: 0.1.0
    """

    def hedge_delay(self, route: str) -> float | None:
        """Return the hedge delay for ``route`` in seconds (≥ 0).

        ``None`` means hedging is suspended for this route right now (for example the
        delay estimate is above a cutoff); the transport then sends no backup and counts
        a suppressed hedge with reason ``cutoff``.
        """
        ...

    def record(self, route: str, seconds: float, *, censored: bool) -> None:
        """Record one primary attempt's time to response headers, in seconds.

        ``censored`` is true when the attempt was cancelled because a backup won: the
        value is then its elapsed time at cancellation, a lower bound on its latency.
        Must never raise into the request path.
        """
        ...


@final
class FixedDelay:
    """A constant hedge delay, in seconds, for every route.

    ``HedgedTransport(delay=0.030)`` is shorthand for ``delay=FixedDelay(0.030)``.

    Args:
        seconds: the hedge delay in seconds; finite and ≥ 0.

    Raises:
        TypeError: ``seconds`` is not a real number.
        ValueError: ``seconds`` is negative, NaN or infinite.

    .. versionadded:: 0.1.0
    """

    __slots__ = ("_seconds",)

    def __init__(self, seconds: float) -> None:
        self._seconds = check_delay(seconds, "seconds", "a number of seconds")

    @property
    def seconds(self) -> float:
        """The fixed hedge delay, in seconds."""
        return self._seconds

    def hedge_delay(self, route: str) -> float:
        """Return the fixed delay, whatever the route."""
        return self._seconds

    def record(self, route: str, seconds: float, *, censored: bool) -> None:
        """Ignore the sample: a fixed delay does not learn."""

    def __repr__(self) -> str:
        return f"FixedDelay({self._seconds!r})"
