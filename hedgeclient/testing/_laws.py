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
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from itertools import accumulate
from statistics import NormalDist
from typing import Protocol, TypeGuard, final, runtime_checkable

__all__ = ["LAB", "Constant", "Empirical", "LatencyLaw", "LogNormal", "Pareto"]

_TOLERANCE = 1e-9  # relative slack when comparing a cumulative fraction with q


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
    if not 0.0 < q < 1.0:
        msg = f"`q` must be in (0, 1), got {q!r}"
        raise ValueError(msg)


def _is_number(value: object) -> TypeGuard[float]:
    """Whether ``value`` is an int or a float; a bool is not a number here."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_seconds(name: str, value: float, *, positive: bool = False) -> None:
    """Raise TypeError unless a number, ValueError unless finite and ≥ 0 (or > 0)."""
    bound = "> 0" if positive else "≥ 0"
    msg = f"`{name}` must be a finite number of seconds {bound}, got {value!r}"
    if not _is_number(value):
        raise TypeError(msg)
    if not (math.isfinite(value) and (value > 0.0 if positive else value >= 0.0)):
        raise ValueError(msg)


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
class Empirical:
    """Draw uniformly from a sample given as run lengths ``{seconds: count}``.

    ``Empirical({0.010: 40, 0.012: 25})`` holds 65 values and draws each with
    probability 1/65. Quantiles are exact on the sample (``docs/how-it-works.md`` convention).

    Args:
        table: latency in seconds (≥ 0) to its count (an int ≥ 1); not empty.

    Raises:
        TypeError: not a mapping, a latency that is not a number, or a count that is not
            an int (or a bool).
        ValueError: empty table, a negative or non-finite latency, a count below 1.

    .. versionadded:: 0.1.0

    Example usage::

        Empirical({0.010: 40, 0.012: 25}).quantile(0.5)  # 0.010
    """

    __slots__ = ("_cumulative", "_population", "counts", "values")

    def __init__(self, table: Mapping[float, int]) -> None:
        if not isinstance(table, Mapping):
            msg = f"`table` must be a mapping of latency (seconds) to count, got {table!r}"
            raise TypeError(msg)
        if not table:
            msg = "`table` must hold at least one latency, got an empty table"
            raise ValueError(msg)
        for value, count in table.items():
            _check_seconds("table", value)
            msg = f"`table` counts must be integers ≥ 1, got {count!r} for {value!r}"
            if isinstance(count, bool) or not isinstance(count, int):
                raise TypeError(msg)
            if count < 1:
                raise ValueError(msg)
        self.values: tuple[float, ...] = tuple(sorted(table))
        self.counts: tuple[int, ...] = tuple(table[v] for v in self.values)
        self._cumulative = tuple(accumulate(self.counts))
        self._population = tuple(
            v for v, c in zip(self.values, self.counts, strict=True) for _ in range(c)
        )

    @classmethod
    def from_samples(cls, samples: Iterable[float]) -> Empirical:
        """Build the law of measured latencies (seconds), one value per call."""
        table: dict[float, int] = {}
        for value in samples:
            table[value] = table.get(value, 0) + 1
        return cls(table)

    def __reduce__(self) -> tuple[type[Empirical], tuple[dict[float, int]]]:
        return (Empirical, (dict(zip(self.values, self.counts, strict=True)),))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Empirical):
            return NotImplemented
        return (self.values, self.counts) == (other.values, other.counts)

    def __hash__(self) -> int:
        return hash((self.values, self.counts))

    def __repr__(self) -> str:
        return f"Empirical({dict(zip(self.values, self.counts, strict=True))!r})"

    @property
    def size(self) -> int:
        """How many values the sample holds (the sum of the counts)."""
        return self._cumulative[-1]

    def sample(self, rng: random.Random) -> float:
        """Return one of the sample's values, each with probability 1/size."""
        return self._population[int(rng.random() * len(self._population))]

    def cdf(self, x: float) -> float:
        """Return the fraction of the sample at or below ``x`` seconds."""
        i = bisect_right(self.values, x)
        return self._cumulative[i - 1] / self.size if i else 0.0

    def quantile(self, q: float) -> float:
        """Return the smallest sample value ``v`` with ``P(X > v) <= 1 - q``.

        Args:
            q: in (0, 1); a tolerance of 1e-9 absorbs ``q * size`` rounding, so the
                lab sample's 0.95-quantile is exactly 0.030.

        Raises:
            ValueError: q outside (0, 1).
        """
        _check_q(q)
        need = q * self.size * (1.0 - _TOLERANCE)
        return self.values[bisect_left(self._cumulative, need)]


LAB = Empirical(
    {0.010: 40, 0.012: 25, 0.015: 15, 0.020: 10, 0.030: 5, 0.050: 3, 0.120: 1, 0.300: 1}
)
"""The project's canonical lab sample (``docs/how-it-works.md``): 100 calls, median 0.012 s,
p95 0.030 s, p99 0.120 s."""


@final
@dataclass(frozen=True, slots=True)
class LogNormal:
    """Log-normal latency: ``median * exp(sigma * Z)`` with Z standard normal.

    Args:
        median: seconds, > 0.
        sigma: the standard deviation of ``log X``, ≥ 0 (0 gives a constant).

    Raises:
        TypeError: a median or sigma that is not a number.
        ValueError: a median ≤ 0 or a negative sigma.

    .. versionadded:: 0.1.0
    """

    median: float
    sigma: float

    def __post_init__(self) -> None:
        _check_seconds("median", self.median, positive=True)
        msg = f"`sigma` must be a finite number ≥ 0, got {self.sigma!r}"
        if not _is_number(self.sigma):
            raise TypeError(msg)
        if not (math.isfinite(self.sigma) and self.sigma >= 0.0):
            raise ValueError(msg)

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
        msg = f"`alpha` must be a finite number > 0, got {self.alpha!r}"
        if not _is_number(self.alpha):
            raise TypeError(msg)
        if not (math.isfinite(self.alpha) and self.alpha > 0.0):
            raise ValueError(msg)
        if self.cap is not None:
            msg = f"`cap` must be None or a finite number of seconds ≥ scale, got {self.cap!r}"
            if not _is_number(self.cap):
                raise TypeError(msg)
            if not (math.isfinite(self.cap) and self.cap >= self.scale):
                raise ValueError(msg)

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
