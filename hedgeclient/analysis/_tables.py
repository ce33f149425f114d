"""Trade tables, the delay for a load cap, and a sample's summary.

Strictly private: :mod:`hedgeclient.analysis` re-exports these names.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from types import MappingProxyType

from hedgeclient.analysis._exact import (
    above,
    check_real,
    delay_ns,
    exact,
    hedged_quantile_ns,
    prepare,
    quantile_ns,
    tail_of,
    to_seconds,
)

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
    xs = prepare(sample)
    tails = [(q, tail_of(q)) for q in quantiles]
    rows = []
    for delay in delays:
        d = delay_ns(delay)
        hedged = {q: to_seconds(hedged_quantile_ns(xs, d, tail)) for q, tail in tails}
        rows.append(
            TradeRow(
                delay=to_seconds(d),
                extra_load=above(xs, d) / len(xs),
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
    cap = check_real(max_extra_load, "max_extra_load")
    if not 0 <= cap <= 1:
        msg = f"`max_extra_load` must be in [0, 1], got {max_extra_load!r}"
        raise ValueError(msg)
    return to_seconds(quantile_ns(prepare(sample), exact(max_extra_load)))


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
    xs = prepare(sample)

    def at(q: str) -> float:
        return to_seconds(quantile_ns(xs, 1 - Fraction(q)))

    return Summary(
        count=len(xs),
        p50=at("0.5"),
        p90=at("0.9"),
        p95=at("0.95"),
        p99=at("0.99"),
        p999=at("0.999"),
        max=to_seconds(xs[-1]),
    )
