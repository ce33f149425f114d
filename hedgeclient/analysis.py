"""Exact hedging arithmetic on an empirical latency sample: the planner behind ``plan``.

With ``X`` the latency of one attempt and ``d`` the hedge delay, a hedged request
completes at ``min(X, d + Y)`` for an independent copy ``Y`` of ``X``, so

    P(hedged > t) = P(X > t)                 for t <= d
    P(hedged > t) = P(X > t) * P(X > t - d)  for t >  d

and the extra load (backups per logical request) is ``P(X > d)``. Everything here is
evaluated *exactly* on the sample, not estimated: the functions reproduce every cell of
the lab table in ``docs/how-it-works.md``, including the cells that land exactly on a quantile
boundary (hedged p99 at ``d`` = 30 ms is ``0.05 * 0.20 = 1/100`` at ``t`` = 45 ms).

Conventions:

- Latencies and delays are float seconds (finite, >= 0).
- The q-quantile of a sample is its smallest value ``v`` with ``P(X > v) <= 1 - q``
  (``docs/how-it-works.md``); for ``n`` values that is the ``ceil(q * n)``-th smallest.

Exactness, and the two choices it takes:

- *Time is quantised to integer nanoseconds.* Each latency and delay is rounded once
  to the nearest nanosecond, and all comparisons, including ``X > t - d`` on the grid
  ``t = x + d``, are done on integers. In float seconds ``0.045 - 0.030`` is not
  ``0.015``, so a float comparison would put a sample value on the wrong side of a
  step. Results are whole nanoseconds returned as the nearest float second, so a
  millisecond-valued sample gives back the literals you expect (``0.045``).
- *Probabilities are compared as integers.* ``q`` is read as the shortest decimal that
  round-trips to the same float (its ``repr``), so ``0.99`` means exactly 99/100, and
  ``P(X > t) * P(X > t - d) <= 1 - q`` is tested as
  ``count1 * count2 * den <= (den - num) * n**2`` for ``q = num / den``. No epsilon.

Cost: each call sorts the sample once (``O(n log n)``); a quantile is then ``O(1)`` and
a hedged quantile two binary searches over the grid of sample values and sample values
plus ``d`` (the hedged survival is non-increasing in ``t`` and only steps on that grid),
``O(log^2 n)``. A 100,000-value sample takes well under a second. Only the standard
library is used.

Sources: J. Dean and L. A. Barroso, "The Tail at Scale", Communications of the ACM
56(2), 2013 (hedged requests, fan-out); ``docs/how-it-works.md`` in this repository (the
formulas, the percentile convention and the lab sample).

Example usage::

    >>> from hedgeclient import analysis
    >>> sample = analysis.lab_sample()
    >>> analysis.quantile(sample, 0.95)
    0.03
    >>> analysis.extra_load(sample, 0.030)
    0.05
    >>> analysis.hedged_quantile(sample, 0.030, 0.99)
    0.045

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import math
import numbers
from bisect import bisect_right
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from types import MappingProxyType

__all__ = [
    "DEFAULT_QUANTILES",
    "PRESETS",
    "Summary",
    "TradeRow",
    "child_quantile_for_parent",
    "extra_load",
    "hedged_quantile",
    "hedged_survival",
    "lab_sample",
    "parent_miss_probability",
    "quantile",
    "recommend_delay",
    "samples_needed",
    "summarize",
    "trade_table",
]

_NS_PER_SECOND = 1_000_000_000

_LAB_RUNS_MS = ((10, 40), (12, 25), (15, 15), (20, 10), (30, 5), (50, 3), (120, 1), (300, 1))
"""The lab sample of ``docs/how-it-works.md`` as run lengths: (latency in ms, count)."""

_LAB_SAMPLE = tuple(ms / 1000 for ms, count in _LAB_RUNS_MS for _ in range(count))

PRESETS: Mapping[str, tuple[float, ...]] = MappingProxyType({"lab": _LAB_SAMPLE})
"""Named canonical samples, in seconds. ``"lab"``: the 100 calls of ``docs/how-it-works.md``."""

DEFAULT_QUANTILES = (0.5, 0.95, 0.99, 0.999)
"""The hedged quantiles :func:`trade_table` reports by default (the lab table's columns)."""


@dataclass(frozen=True, slots=True)
class TradeRow:
    """One row of a hedging trade table: what a hedge delay costs and what it buys.

    Attributes:
        delay: the hedge delay, in seconds (>= 0).
        extra_load: backups sent per logical request, ``P(X > delay)``, in [0, 1].
        hedged: hedged latency quantiles, in seconds, keyed by quantile in (0, 1)
            (``row.hedged[0.99]``); read-only.

    .. versionadded:: 0.1.0
    """

    delay: float
    extra_load: float
    hedged: Mapping[float, float] = field(hash=False)


@dataclass(frozen=True, slots=True)
class Summary:
    """Unhedged percentiles of a latency sample, in seconds.

    Attributes:
        count: the number of values in the sample (>= 1).
        p50: the median.
        p90: the 0.9-quantile.
        p95: the 0.95-quantile.
        p99: the 0.99-quantile.
        p999: the 0.999-quantile.
        max: the largest value.

    .. versionadded:: 0.1.0
    """

    count: int
    p50: float
    p90: float
    p95: float
    p99: float
    p999: float
    max: float


# --- validation and conversion (strictly private) -------------------------------------


def _check_real(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        msg = f"`{name}` must be a real number, got {value!r}"
        raise TypeError(msg)
    return float(value)


def _to_ns(seconds: float) -> int:
    return round(seconds * _NS_PER_SECOND)


def _to_seconds(ns: int) -> float:
    return ns / _NS_PER_SECOND


def _prepare(sample: Iterable[float]) -> list[int]:
    """Validate ``sample`` and return it sorted, in integer nanoseconds."""
    values: list[int] = []
    for index, value in enumerate(sample):
        seconds = _check_real(value, "sample")
        if not math.isfinite(seconds) or seconds < 0:
            msg = f"`sample` values must be finite and >= 0 seconds, got {value!r} at index {index}"
            raise ValueError(msg)
        values.append(_to_ns(seconds))
    if not values:
        msg = "`sample` must hold at least one latency, got an empty sample"
        raise ValueError(msg)
    values.sort()
    return values


def _delay_ns(delay: float) -> int:
    seconds = _check_real(delay, "delay")
    if not math.isfinite(seconds) or seconds < 0:
        msg = f"`delay` must be a finite number of seconds >= 0, got {delay!r}"
        raise ValueError(msg)
    return _to_ns(seconds)


def _exact(value: float) -> Fraction:
    """``value`` as the exact decimal it was written as (``0.99`` -> 99/100)."""
    return Fraction(str(value))


def _tail(q: float, name: str = "q") -> Fraction:
    """Validate a quantile in (0, 1) and return ``1 - q`` exactly."""
    checked = _check_real(q, name)
    if not 0 < checked < 1:
        msg = f"`{name}` must be in (0, 1), got {q!r}"
        raise ValueError(msg)
    return 1 - _exact(q)


def _check_count(value: object, name: str) -> int:
    """Validate an integer >= 1 (a fan-out, a count of samples)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        msg = f"`{name}` must be an integer >= 1, got {value!r}"
        raise TypeError(msg)
    if value < 1:
        msg = f"`{name}` must be an integer >= 1, got {value!r}"
        raise ValueError(msg)
    return int(value)


# --- exact kernels on a sorted nanosecond sample (strictly private) -------------------


def _above(xs: Sequence[int], t: int) -> int:
    """How many values of the sorted sample ``xs`` are strictly greater than ``t``."""
    return len(xs) - bisect_right(xs, t)


def _quantile_ns(xs: Sequence[int], tail: Fraction) -> int:
    # The smallest v with count(X > v) <= tail * n is the (n - k)-th smallest value,
    # k = floor(tail * n). k == n only for tail == 1 (a load cap of 1): the smallest value.
    n = len(xs)
    k = math.floor(tail * n)
    return xs[max(n - k - 1, 0)]


def _hedged_above(xs: Sequence[int], d: int, t: int) -> int:
    """``n**2 * P(hedged > t)``, an integer: ``count(X > t) * count(X > t - d)``."""
    first = _above(xs, t)
    return first * (_above(xs, t - d) if t > d else len(xs))


def _first_true(xs: Sequence[int], offset: int, ok: Callable[[int], bool]) -> int | None:
    """The smallest ``x + offset``, ``x`` in the sorted ``xs``, where the monotone ``ok`` holds."""
    lo, hi = 0, len(xs)
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(xs[mid] + offset):
            hi = mid
        else:
            lo = mid + 1
    return xs[lo] + offset if lo < len(xs) else None


def _hedged_quantile_ns(xs: Sequence[int], d: int, tail: Fraction) -> int:
    n = len(xs)
    bound = tail.numerator * n * n

    def ok(t: int) -> bool:
        return _hedged_above(xs, d, t) * tail.denominator <= bound

    # The hedged survival is non-increasing in t and steps only at sample values and at
    # sample values + d, so the answer is the smaller of the first point satisfying the
    # bound in each half of that grid. The largest value always does (survival 0).
    found = (_first_true(xs, 0, ok), _first_true(xs, d, ok))
    return min(t for t in found if t is not None)


# --- public API -----------------------------------------------------------------------


def lab_sample() -> tuple[float, ...]:
    """Return the canonical lab sample of ``docs/how-it-works.md``: 100 latencies, in seconds.

    Run lengths (ms: count): 10: 40, 12: 25, 15: 15, 20: 10, 30: 5, 50: 3, 120: 1,
    300: 1. Unhedged median 12 ms, p95 30 ms, p99 120 ms. Also ``PRESETS["lab"]``.

    Returns:
        The 100 values in ascending order, in seconds.

    .. versionadded:: 0.1.0
    """
    return _LAB_SAMPLE


def quantile(sample: Iterable[float], q: float) -> float:
    """Return the q-quantile of ``sample``: its smallest value ``v`` with ``P(X > v) <= 1 - q``.

    Args:
        sample: latencies in seconds, finite and >= 0; at least one.
        q: the quantile, in (0, 1); read as the decimal it is written as (0.99 = 99/100).

    Returns:
        A value of the sample, in seconds (rounded to the nanosecond).

    Raises:
        ValueError: ``sample`` is empty or holds a negative or non-finite value, or
            ``q`` is not in (0, 1).
        TypeError: a value or ``q`` is not a real number.

    .. versionadded:: 0.1.0
    """
    tail = _tail(q)
    return _to_seconds(_quantile_ns(_prepare(sample), tail))


def extra_load(sample: Iterable[float], delay: float) -> float:
    """Return the extra load of hedging at ``delay``: backups per request, ``P(X > delay)``.

    Args:
        sample: latencies in seconds, finite and >= 0; at least one.
        delay: the hedge delay in seconds, finite and >= 0.

    Returns:
        The fraction of requests still unanswered at ``delay``, in [0, 1].

    Raises:
        ValueError: ``sample`` is empty or invalid, or ``delay`` is negative or not finite.
        TypeError: a value or ``delay`` is not a real number.

    .. versionadded:: 0.1.0
    """
    d = _delay_ns(delay)
    xs = _prepare(sample)
    return _above(xs, d) / len(xs)


def hedged_survival(sample: Iterable[float], delay: float, t: float) -> float:
    """Return ``P(hedged > t)`` when hedging at ``delay``.

    That is ``P(X > t)`` for ``t <= delay`` (hedging cannot help before the backup is
    sent) and ``P(X > t) * P(X > t - delay)`` for ``t > delay``, assuming the backup's
    latency is independent of the first attempt's (``docs/how-it-works.md``). At ``t = delay``
    this differs from ``P(min(X, delay + Y) > t)`` only if the sample holds zero
    latencies (a backup answering in no time); the ``docs/how-it-works.md`` form is kept.

    Args:
        sample: latencies in seconds, finite and >= 0; at least one.
        delay: the hedge delay in seconds, finite and >= 0.
        t: the time, in seconds, finite (any sign).

    Returns:
        The probability, in [0, 1].

    Raises:
        ValueError: ``sample`` is empty or invalid, ``delay`` is negative or not
            finite, or ``t`` is not finite.
        TypeError: a value, ``delay`` or ``t`` is not a real number.

    .. versionadded:: 0.1.0
    """
    d = _delay_ns(delay)
    when = _check_real(t, "t")
    if not math.isfinite(when):
        msg = f"`t` must be a finite number of seconds, got {t!r}"
        raise ValueError(msg)
    xs = _prepare(sample)
    n = len(xs)
    return _hedged_above(xs, d, _to_ns(when)) / (n * n)


def hedged_quantile(sample: Iterable[float], delay: float, q: float) -> float:
    """Return the q-quantile of the hedged latency when hedging at ``delay``.

    The smallest ``t`` with ``P(hedged > t) <= 1 - q``; ``t`` is searched on the grid
    where that survival steps, the sample values and the sample values plus ``delay``
    (``docs/how-it-works.md``), with exact integer arithmetic.

    Args:
        sample: latencies in seconds, finite and >= 0; at least one.
        delay: the hedge delay in seconds, finite and >= 0.
        q: the quantile, in (0, 1); read as the decimal it is written as (0.99 = 99/100).

    Returns:
        The hedged quantile, in seconds (a whole number of nanoseconds).

    Raises:
        ValueError: ``sample`` is empty or invalid, ``delay`` is negative or not
            finite, or ``q`` is not in (0, 1).
        TypeError: a value, ``delay`` or ``q`` is not a real number.

    .. versionadded:: 0.1.0
    """
    d = _delay_ns(delay)
    tail = _tail(q)
    return _to_seconds(_hedged_quantile_ns(_prepare(sample), d, tail))


def trade_table(
    sample: Iterable[float],
    delays: Iterable[float],
    quantiles: Iterable[float] = DEFAULT_QUANTILES,
) -> list[TradeRow]:
    """Tabulate, for each hedge delay, its extra load and the hedged quantiles.

    Read it as a trade: a shorter delay buys a lower tail with more backups.

    Args:
        sample: latencies in seconds, finite and >= 0; at least one.
        delays: hedge delays in seconds, each finite and >= 0; one row each, in order.
        quantiles: the hedged quantiles to report, each in (0, 1).

    Returns:
        One :class:`TradeRow` per delay.

    Raises:
        ValueError: ``sample`` is empty or invalid, a delay is negative or not finite,
            or a quantile is not in (0, 1).
        TypeError: a value, delay or quantile is not a real number.

    .. versionadded:: 0.1.0
    """
    xs = _prepare(sample)
    tails = [(q, _tail(q)) for q in quantiles]
    rows = []
    for delay in delays:
        d = _delay_ns(delay)
        hedged = {q: _to_seconds(_hedged_quantile_ns(xs, d, tail)) for q, tail in tails}
        rows.append(
            TradeRow(
                delay=_to_seconds(d),
                extra_load=_above(xs, d) / len(xs),
                hedged=MappingProxyType(hedged),
            )
        )
    return rows


def recommend_delay(sample: Iterable[float], max_extra_load: float) -> float:
    """Return the smallest hedge delay whose extra load stays within ``max_extra_load``.

    Among the sample's values, the smallest ``d`` with ``P(X > d) <= max_extra_load``,
    which is the ``(1 - max_extra_load)``-quantile: with independent attempts a shorter
    delay never gives a worse hedged tail, so this is the best tail the load cap allows.
    A cap of 0.05 gives the p95 (30 ms on the lab sample, exactly 5% extra load).

    Args:
        sample: latencies in seconds, finite and >= 0; at least one.
        max_extra_load: the cap on backups per request, in [0, 1]; read as the decimal
            it is written as (0.05 = 1/20).

    Returns:
        The delay, a value of the sample, in seconds.

    Raises:
        ValueError: ``sample`` is empty or invalid, or ``max_extra_load`` is not in [0, 1].
        TypeError: a value or ``max_extra_load`` is not a real number.

    .. versionadded:: 0.1.0
    """
    cap = _check_real(max_extra_load, "max_extra_load")
    if not 0 <= cap <= 1:
        msg = f"`max_extra_load` must be in [0, 1], got {max_extra_load!r}"
        raise ValueError(msg)
    return _to_seconds(_quantile_ns(_prepare(sample), _exact(max_extra_load)))


def summarize(sample: Iterable[float]) -> Summary:
    """Return the unhedged p50, p90, p95, p99, p99.9 and maximum of ``sample``.

    Args:
        sample: latencies in seconds, finite and >= 0; at least one.

    Returns:
        A :class:`Summary`, in seconds.

    Raises:
        ValueError: ``sample`` is empty or holds a negative or non-finite value.
        TypeError: a value is not a real number.

    .. versionadded:: 0.1.0
    """
    xs = _prepare(sample)

    def at(q: str) -> float:
        return _to_seconds(_quantile_ns(xs, 1 - Fraction(q)))

    return Summary(
        count=len(xs),
        p50=at("0.5"),
        p90=at("0.9"),
        p95=at("0.95"),
        p99=at("0.99"),
        p999=at("0.999"),
        max=_to_seconds(xs[-1]),
    )


def child_quantile_for_parent(target: float, fanout: int) -> float:
    """Return the quantile each of ``fanout`` children must meet for the parent's ``target``.

    A parent waiting for ``n`` independent children completes by ``t`` with probability
    ``F(t)**n``, so each child must meet its ``target**(1/n)`` quantile: for a parent
    p99, 0.99899 at n = 10, 0.999899 at n = 100, 0.9999899 at n = 1000 (Dean & Barroso
    2013; ``docs/how-it-works.md``).

    Args:
        target: the parent's quantile, in (0, 1).
        fanout: the number of children the parent waits for, an integer >= 1.

    Returns:
        The child quantile, in [target, 1).

    Raises:
        ValueError: ``target`` is not in (0, 1) or ``fanout`` is below 1.
        TypeError: ``target`` is not a real number or ``fanout`` not an integer.

    .. versionadded:: 0.1.0
    """
    _tail(target, "target")
    n = _check_count(fanout, "fanout")
    return math.pow(float(target), 1 / n)


def parent_miss_probability(child_quantile: float, fanout: int) -> float:
    """Return how often a parent misses when each child only meets ``child_quantile``.

    ``1 - child_quantile**fanout``: with children at their p99 the parent misses its
    p99 9.6% of the time at n = 10, 50.0% at n = 69 and 63.4% at n = 100 (Dean &
    Barroso 2013; ``docs/how-it-works.md``).

    Args:
        child_quantile: the quantile each child meets, in (0, 1).
        fanout: the number of children the parent waits for, an integer >= 1.

    Returns:
        The probability that at least one child is slower, in (0, 1).

    Raises:
        ValueError: ``child_quantile`` is not in (0, 1) or ``fanout`` is below 1.
        TypeError: ``child_quantile`` is not a real number or ``fanout`` not an integer.

    .. versionadded:: 0.1.0
    """
    _tail(child_quantile, "child_quantile")
    n = _check_count(fanout, "fanout")
    # -expm1(n log q) rather than 1 - q**n: keeps its precision when the result is tiny.
    return -math.expm1(n * math.log(float(child_quantile)))


def samples_needed(q: float, *, beyond: int = 10) -> int:
    """Return roughly how many samples it takes to estimate the q-quantile.

    The rule: enough samples that ``beyond`` of them (10 by default) are expected above
    the quantile, ``n = ceil(beyond / (1 - q))``. The number of sample values above the
    q-quantile is Binomial(n, 1 - q), the basis of the distribution-free confidence
    intervals for quantiles (H. A. David and H. N. Nagaraja, *Order Statistics*, 3rd ed.,
    Wiley 2003, section 7.1); with 10 expected its relative standard deviation is about
    1/sqrt(10), roughly 30%, and with fewer the estimate rests on a handful of values.
    This gives 1,000 samples for a p99 and 100,000 for a p99.99, the "order of 10^5"
    of ``docs/how-it-works.md``.

    Args:
        q: the quantile, in (0, 1); read as the decimal it is written as.
        beyond: the expected number of samples above the quantile, an integer >= 1.

    Returns:
        The number of samples, an integer >= ``beyond``.

    Raises:
        ValueError: ``q`` is not in (0, 1) or ``beyond`` is below 1.
        TypeError: ``q`` is not a real number or ``beyond`` not an integer.

    .. versionadded:: 0.1.0
    """
    tail = _tail(q)
    count = _check_count(beyond, "beyond")
    return math.ceil(count / tail)
