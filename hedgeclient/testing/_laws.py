"""Latency laws for the fake slow server: pure, seeded, in float seconds.

A law draws one latency (seconds, ≥ 0) from a :class:`random.Random` owned by the
caller, so a seeded service replays the same latencies. Every law also gives its
distribution function ``cdf(x)`` and its ``quantile(q)`` with the project's convention:
the q-quantile is the smallest ``v`` with ``P(X > v) <= 1 - q``.

Prior art: the lab sample and the quantile convention of ``docs/how-it-works.md``; Dean &
Barroso, "The Tail at Scale", CACM 56(2), 2013 (pauses owned by the server); the
log-normal body and Pareto tail are the usual service-time models (Harchol-Balter,
"Performance Modeling and Design of Computer Systems", 2013, ch. 20).

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from statistics import NormalDist
from typing import Protocol, final, runtime_checkable

from hedgeclient._checks import check_number

__all__ = ["Constant", "LatencyLaw", "LogNormal", "Pareto"]


@runtime_checkable
class LatencyLaw(Protocol):
    """A distribution of latencies in seconds.

    Implementations must be picklable (process mode ships them to a subprocess) and
    draw only from the ``rng`` they are given (so that seeds replay).

    .. versionadded:: 0.1.0
    """

    def sample(self, rng: random.Random) -> float:
        """Draw one latency.

        Args:
            rng: the source of randomness; the law keeps none of its own.

        Returns:
            A latency in seconds, ≥ 0.
        """
        ...

    def cdf(self, x: float) -> float:
        """Return ``P(X <= x)``, in [0, 1], for ``x`` in seconds."""
        ...

    def quantile(self, q: float) -> float:
        """Return the q-quantile.

        Args:
            q: in (0, 1).

        Returns:
            The smallest ``v`` (seconds) with ``P(X > v) <= 1 - q``.

        Raises:
            ValueError: q outside (0, 1).
        """
        ...


def _check_q(q: float) -> None:
    """Raise unless ``q`` is a number in (0, 1)."""
    check_number("q", q, low=0.0, high=1.0, low_open=True, high_open=True)


def _check_seconds(name: str, value: float, *, positive: bool = False) -> None:
    """Raise TypeError unless an int or a float, ValueError unless finite and ≥ 0 (> 0).

    Only ``int`` and ``float`` (``plain``): the laws are frozen dataclasses that keep
    the value as given and travel pickled to the fake server's subprocess.
    """
    check_number(name, value, low=0.0, low_open=positive, unit="seconds", plain=True)


def _invert(cdf: Callable[[float], float], q: float, lo: float, hi: float) -> float:
    """Bisect for the smallest x in [lo, hi] with cdf(x) >= q, to 1e-12 s."""
    if cdf(lo) >= q:
        return lo
    while hi - lo > 1e-12 * max(1.0, hi):
        mid = (lo + hi) / 2.0
        if cdf(mid) >= q:
            hi = mid
        else:
            lo = mid
    return hi


@final
@dataclass(frozen=True, slots=True)
class Constant:
    """Every request takes the same time.

    Args:
        value: the latency, seconds, ≥ 0.

    Raises:
        TypeError: a value that is not a number (an int or a float, not a bool).
        ValueError: a negative or non-finite value.

    .. versionadded:: 0.1.0
    """

    value: float

    def __post_init__(self) -> None:
        _check_seconds("value", self.value)

    def sample(self, rng: random.Random) -> float:
        """Return ``value``."""
        return self.value

    def cdf(self, x: float) -> float:
        """Return 1 at and above ``value``, else 0."""
        return 1.0 if x >= self.value else 0.0

    def quantile(self, q: float) -> float:
        """Return ``value`` for every q in (0, 1)."""
        _check_q(q)
        return self.value


@final
@dataclass(frozen=True, slots=True)
class LogNormal:
    """Log-normal latency: ``median * exp(sigma * Z)`` with Z standard normal.

    Args:
        median: seconds, > 0.
        sigma: the standard deviation of ``log X``, in [0, 10] (0 gives a constant;
            at 10 two standard deviations already span 17 orders of magnitude, and a
            sigma near the float range makes every draw ``inf`` or ``0.0``).

    Raises:
        TypeError: a median or sigma that is not a number.
        ValueError: a median ≤ 0, or a sigma outside [0, 10].

    .. versionadded:: 0.1.0
    """

    median: float
    sigma: float

    def __post_init__(self) -> None:
        _check_seconds("median", self.median, positive=True)
        check_number("sigma", self.sigma, low=0.0, high=10.0, plain=True)

    def sample(self, rng: random.Random) -> float:
        """Return ``median * exp(sigma * Z)``."""
        return self.median * math.exp(self.sigma * rng.gauss(0.0, 1.0))

    def cdf(self, x: float) -> float:
        """Return ``Φ(log(x / median) / sigma)``."""
        if x <= 0.0:
            return 0.0
        if self.sigma == 0.0:
            return 1.0 if x >= self.median else 0.0
        return NormalDist().cdf(math.log(x / self.median) / self.sigma)

    def quantile(self, q: float) -> float:
        """Return ``median * exp(sigma * Φ⁻¹(q))``."""
        _check_q(q)
        return self.median * math.exp(self.sigma * NormalDist().inv_cdf(q))


@final
@dataclass(frozen=True, slots=True)
class Pareto:
    """Pareto tail: ``P(X > x) = (scale / x) ** alpha`` for ``x >= scale``.

    Args:
        scale: the minimum latency, seconds, > 0.
        alpha: the tail index, > 0 (the mean is infinite for alpha ≤ 1).
        cap: optional maximum, seconds (≥ scale): larger draws are clipped to it.

    Raises:
        TypeError: a scale, alpha or cap that is not a number (a cap may be None).
        ValueError: a scale or alpha ≤ 0, or a cap below the scale.

    .. versionadded:: 0.1.0
    """

    scale: float
    alpha: float
    cap: float | None = None

    def __post_init__(self) -> None:
        _check_seconds("scale", self.scale, positive=True)
        check_number("alpha", self.alpha, low=0.0, low_open=True, plain=True)
        if self.cap is not None:
            check_number(
                "cap",
                self.cap,
                low=self.scale,
                unit="seconds",
                bounds=">= scale",
                or_none=True,
                plain=True,
            )

    def _clip(self, x: float) -> float:
        return x if self.cap is None else min(x, self.cap)

    def sample(self, rng: random.Random) -> float:
        """Return ``scale * U ** (-1 / alpha)``, clipped to ``cap``."""
        return self._clip(self.scale * rng.paretovariate(self.alpha))

    def cdf(self, x: float) -> float:
        """Return ``1 - (scale / x) ** alpha`` (0 below scale, 1 from cap)."""
        if x < self.scale:
            return 0.0
        if self.cap is not None and x >= self.cap:
            return 1.0
        return 1.0 - math.pow(self.scale / x, self.alpha)

    def quantile(self, q: float) -> float:
        """Return ``scale * (1 - q) ** (-1 / alpha)``, clipped to ``cap``."""
        _check_q(q)
        return self._clip(self.scale * math.pow(1.0 - q, -1.0 / self.alpha))
