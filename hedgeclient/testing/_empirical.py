"""An empirical latency law: a measured sample, drawn uniformly; and the lab sample.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import random
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping
from itertools import accumulate
from typing import final

from hedgeclient._checks import check_int
from hedgeclient.testing._laws import _check_q, _check_seconds

__all__ = ["LAB", "Empirical"]

_TOLERANCE = 1e-9  # relative slack when comparing a cumulative fraction with q


@final
class Empirical:
    """Draw uniformly from a sample given as run lengths ``{seconds: count}``.

    ``Empirical({0.010: 40, 0.012: 25})`` holds 65 values and draws each with
    probability 1/65. Quantiles are exact on the sample (``docs/how-it-works.md`` convention).

    Args:
        table: latency in seconds (≥ 0) to its count (an int ≥ 1); not empty.

    Raises:
        TypeError: not a mapping, a latency that is not a number, or a count that is not
            an int (or a bool); the message names the entry (``table[0.01]``).
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
            check_int(f"table[{value!r}]", count, 1)
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
