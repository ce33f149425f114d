"""Exact kernels of :mod:`hedgeclient.analysis`: validation, nanoseconds, integer counts.

Latencies and delays are rounded once to integer nanoseconds and probabilities compared
as integers, so that every cell of the lab table of ``docs/how-it-works.md`` comes out
exactly (the package docstring says why). Strictly private.
"""

from __future__ import annotations

import math
import numbers
from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence
from fractions import Fraction

NS_PER_SECOND = 1_000_000_000


def check_real(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        msg = f"`{name}` must be a real number, got {value!r}"
        raise TypeError(msg)
    return float(value)


def to_ns(seconds: float) -> int:
    return round(seconds * NS_PER_SECOND)


def to_seconds(ns: int) -> float:
    return ns / NS_PER_SECOND


def prepare(sample: Iterable[float]) -> list[int]:
    """Validate ``sample`` and return it sorted, in integer nanoseconds."""
    values: list[int] = []
    for index, value in enumerate(sample):
        seconds = check_real(value, "sample")
        if not math.isfinite(seconds) or seconds < 0:
            msg = f"`sample` values must be finite and >= 0 seconds, got {value!r} at index {index}"
            raise ValueError(msg)
        values.append(to_ns(seconds))
    if not values:
        msg = "`sample` must hold at least one latency, got an empty sample"
        raise ValueError(msg)
    values.sort()
    return values


def delay_ns(delay: float) -> int:
    seconds = check_real(delay, "delay")
    if not math.isfinite(seconds) or seconds < 0:
        msg = f"`delay` must be a finite number of seconds >= 0, got {delay!r}"
        raise ValueError(msg)
    return to_ns(seconds)


def exact(value: float) -> Fraction:
    """``value`` as the exact decimal it was written as (``0.99`` -> 99/100)."""
    return Fraction(str(value))


def tail_of(q: float, name: str = "q") -> Fraction:
    """Validate a quantile in (0, 1) and return ``1 - q`` exactly."""
    checked = check_real(q, name)
    if not 0 < checked < 1:
        msg = f"`{name}` must be in (0, 1), got {q!r}"
        raise ValueError(msg)
    return 1 - exact(q)


def check_count(value: object, name: str) -> int:
    """Validate an integer >= 1 (a fan-out, a count of samples)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        msg = f"`{name}` must be an integer >= 1, got {value!r}"
        raise TypeError(msg)
    if value < 1:
        msg = f"`{name}` must be an integer >= 1, got {value!r}"
        raise ValueError(msg)
    return int(value)


# --- exact kernels on a sorted nanosecond sample (strictly private) -------------------


def above(xs: Sequence[int], t: int) -> int:
    """How many values of the sorted sample ``xs`` are strictly greater than ``t``."""
    return len(xs) - bisect_right(xs, t)


def quantile_ns(xs: Sequence[int], tail: Fraction) -> int:
    # The smallest v with count(X > v) <= tail * n is the (n - k)-th smallest value,
    # k = floor(tail * n). k == n only for tail == 1 (a load cap of 1): the smallest value.
    n = len(xs)
    k = math.floor(tail * n)
    return xs[max(n - k - 1, 0)]


def hedged_above(xs: Sequence[int], d: int, t: int) -> int:
    """``n**2 * P(hedged > t)``, an integer: ``count(X > t) * count(X > t - d)``."""
    first = above(xs, t)
    return first * (above(xs, t - d) if t > d else len(xs))


def first_true(xs: Sequence[int], offset: int, ok: Callable[[int], bool]) -> int | None:
    """The smallest ``x + offset``, ``x`` in the sorted ``xs``, where the monotone ``ok`` holds."""
    lo, hi = 0, len(xs)
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(xs[mid] + offset):
            hi = mid
        else:
            lo = mid + 1
    return xs[lo] + offset if lo < len(xs) else None


def hedged_quantile_ns(xs: Sequence[int], d: int, tail: Fraction) -> int:
    n = len(xs)
    bound = tail.numerator * n * n

    def ok(t: int) -> bool:
        return hedged_above(xs, d, t) * tail.denominator <= bound

    # The hedged survival is non-increasing in t and steps only at sample values and at
    # sample values + d, so the answer is the smaller of the first point satisfying the
    # bound in each half of that grid. The largest value always does (survival 0).
    found = (first_true(xs, 0, ok), first_true(xs, d, ok))
    return min(t for t in found if t is not None)
