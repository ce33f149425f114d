"""One latency sample, one hedge delay: quantiles, extra load, the hedged survival.

Strictly private: :mod:`hedgeclient.analysis` re-exports these names.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from types import MappingProxyType

from hedgeclient.analysis._exact import (
    above,
    check_real,
    delay_ns,
    hedged_above,
    hedged_quantile_ns,
    prepare,
    quantile_ns,
    tail_of,
    to_ns,
    to_seconds,
)

_LAB_RUNS_MS = ((10, 40), (12, 25), (15, 15), (20, 10), (30, 5), (50, 3), (120, 1), (300, 1))
"""The lab sample of ``docs/how-it-works.md`` as run lengths: (latency in ms, count)."""

_LAB_SAMPLE = tuple(ms / 1000 for ms, count in _LAB_RUNS_MS for _ in range(count))

PRESETS: Mapping[str, tuple[float, ...]] = MappingProxyType({"lab": _LAB_SAMPLE})
"""Named canonical samples, in seconds. ``"lab"``: the 100 calls of ``docs/how-it-works.md``."""


def lab_sample() -> tuple[float, ...]:
    """Return the canonical lab sample of ``docs/how-it-works.md``: 100 latencies, in seconds.

    Run lengths (ms: count): 10: 40, 12: 25, 15: 15, 20: 10, 30: 5, 50: 3, 120: 1,
    300: 1. Unhedged median 12 ms, p95 30 ms, p99 120 ms.

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
    tail = tail_of(q)
    return to_seconds(quantile_ns(prepare(sample), tail))


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
    d = delay_ns(delay)
    xs = prepare(sample)
    return above(xs, d) / len(xs)


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
    d = delay_ns(delay)
    when = check_real(t, "t")
    if not math.isfinite(when):
        msg = f"`t` must be a finite number of seconds, got {t!r}"
        raise ValueError(msg)
    xs = prepare(sample)
    n = len(xs)
    return hedged_above(xs, d, to_ns(when)) / (n * n)


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
    d = delay_ns(delay)
    tail = tail_of(q)
    return to_seconds(hedged_quantile_ns(prepare(sample), d, tail))
