"""hedgeclient.analysis: every figure of HEDGING.md, exactly, plus validation."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from fractions import Fraction
from functools import partial

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hedgeclient import analysis
from hedgeclient.analysis._sample import PRESETS

LAB = analysis.lab_sample()

# HEDGING.md, "The lab sample": delay ms, extra load %, hedged p50, p95, p99, p99.9 (ms).
LAB_TABLE = [
    (10, 60, 12, 22, 30, 50),
    (12, 35, 12, 24, 30, 50),
    (15, 20, 12, 27, 30, 50),
    (20, 10, 12, 30, 35, 50),
    (30, 5, 12, 30, 45, 60),
    (50, 2, 12, 30, 62, 80),
    (120, 1, 12, 30, 120, 140),
]
QUANTILES = (0.5, 0.95, 0.99, 0.999)


def exact(message: str) -> str:
    """An anchored pattern matching ``message`` literally."""
    return rf"^{re.escape(message)}$"


def test_lab_sample_is_the_run_lengths_of_hedging_md() -> None:
    """The lab preset holds the 100 calls of HEDGING.md, in seconds."""
    runs = {10: 40, 12: 25, 15: 15, 20: 10, 30: 5, 50: 3, 120: 1, 300: 1}
    assert len(LAB) == 100
    assert {ms: LAB.count(ms / 1000) for ms in runs} == runs
    assert PRESETS["lab"] is LAB


@pytest.mark.parametrize(
    ("q", "expected_ms"),
    [(0.5, 12), (0.9, 20), (0.95, 30), (0.99, 120), (0.999, 300)],
)
def test_unhedged_quantiles_of_the_lab_sample(q: float, expected_ms: int) -> None:
    """Median 12 ms, p95 30 ms and p99 120 ms, landing exactly on the boundaries."""
    assert analysis.quantile(LAB, q) == expected_ms / 1000


def test_summarize_gives_the_unhedged_percentiles() -> None:
    """summarize reports p50/p90/p95/p99/p99.9/max of the lab sample, in seconds."""
    assert analysis.summarize(LAB) == analysis.Summary(
        count=100, p50=0.012, p90=0.020, p95=0.030, p99=0.120, p999=0.300, max=0.300
    )


@pytest.mark.parametrize(("delay_ms", "load_percent", *("p50", "p95", "p99", "p999")), LAB_TABLE)
def test_every_cell_of_the_lab_table(
    delay_ms: int, load_percent: int, p50: int, p95: int, p99: int, p999: int
) -> None:
    """extra_load and hedged_quantile reproduce each row of HEDGING.md's table exactly."""
    delay = delay_ms / 1000
    assert analysis.extra_load(LAB, delay) == load_percent / 100
    hedged = [analysis.hedged_quantile(LAB, delay, q) for q in QUANTILES]
    assert hedged == [p50 / 1000, p95 / 1000, p99 / 1000, p999 / 1000]


def test_trade_table_is_the_lab_table() -> None:
    """trade_table returns one row per delay with the same figures as HEDGING.md."""
    rows = analysis.trade_table(LAB, [row[0] / 1000 for row in LAB_TABLE])
    assert [(r.delay, r.extra_load, tuple(r.hedged.values())) for r in rows] == [
        (d / 1000, load / 100, tuple(ms / 1000 for ms in hedged)) for d, load, *hedged in LAB_TABLE
    ]
    assert list(rows[0].hedged) == list(analysis.DEFAULT_QUANTILES)


def test_trade_row_quantiles_are_read_only() -> None:
    """A TradeRow is hashable and cannot be changed, not even its hedged mapping."""
    (row,) = analysis.trade_table(LAB, [0.030], quantiles=[0.99])
    with pytest.raises(TypeError):
        row.hedged[0.99] = 0.0  # type: ignore[index]
    assert hash(row) == hash(analysis.TradeRow(0.030, 0.05, {0.99: 0.045}))


def test_p99_at_the_p95_delay_sits_on_the_boundary() -> None:
    """At d = 30 ms the hedged survival at 45 ms is exactly 0.05 * 0.20 = 1/100."""
    assert analysis.hedged_survival(LAB, 0.030, 0.045) == 0.01
    assert analysis.hedged_survival(LAB, 0.030, 0.044) == (5 * 35) / 100**2


def test_a_large_sample_is_exact_and_fast() -> None:
    """The lab sample repeated 1,000 times (100,000 values) gives the same table."""
    big = LAB * 1000
    rows = analysis.trade_table(big, [0.030, 0.120])
    assert [tuple(r.hedged.values()) for r in rows] == [
        (0.012, 0.030, 0.045, 0.060),
        (0.012, 0.030, 0.120, 0.140),
    ]
    assert analysis.recommend_delay(big, 0.05) == 0.030


@pytest.mark.parametrize("delay_ms", [0, 10, 12, 30, 120, 500])
def test_hedged_survival_before_the_delay_is_unhedged(delay_ms: int) -> None:
    """For t <= d the backup has not been sent: P(hedged > t) = P(X > t)."""
    delay = delay_ms / 1000
    for ms in [0, 5, 10, 11, 12, 15, 20, 30, 45, 50, 120, 300, 500]:
        if ms <= delay_ms:
            t = ms / 1000
            assert analysis.hedged_survival(LAB, delay, t) == analysis.extra_load(LAB, t)


def test_hedged_survival_after_the_delay_is_the_product() -> None:
    """For t > d, P(hedged > t) = P(X > t) * P(X > t - d), exact at float-unfriendly t."""
    # 0.045 - 0.030 != 0.015 in floats; the nanosecond grid keeps 15 ms on the right side.
    assert analysis.hedged_survival(LAB, 0.030, 0.045) == (5 * 20) / 100**2
    assert analysis.hedged_survival(LAB, 0.012, 0.024) == (10 * 35) / 100**2
    assert analysis.hedged_survival(LAB, 0.010, -1.0) == 1.0


def test_times_are_rounded_to_the_nanosecond() -> None:
    """Values are quantised to whole nanoseconds before any comparison."""
    assert analysis.quantile([0.0123456789012], 0.5) == 0.012345679
    assert analysis.quantile([1, 2, 3], 0.5) == 2.0


@pytest.mark.parametrize(
    ("cap", "expected_ms"),
    [(0.05, 30), (0.35, 12), (0.6, 10), (0.04, 50), (0.0, 300), (1.0, 10), (1, 10)],
)
def test_recommend_delay_is_the_shortest_under_the_cap(cap: float, expected_ms: int) -> None:
    """The recommended delay is the smallest sample value with P(X > d) <= cap."""
    delay = analysis.recommend_delay(LAB, cap)
    assert delay == expected_ms / 1000
    assert analysis.extra_load(LAB, delay) <= cap


@pytest.mark.parametrize(
    ("fanout", "low", "high"),
    [
        (10, 0.99899, 0.99900),
        (100, 0.999899, 0.999900),
        (1000, 0.9999899, 0.9999900),
        (1, 0.99, 0.99),
    ],
)
def test_child_quantile_for_a_parent_p99(fanout: int, low: float, high: float) -> None:
    """Each child must meet 0.99 ** (1/n): 0.99899, 0.999899, 0.9999899 (HEDGING.md digits)."""
    assert low <= analysis.child_quantile_for_parent(0.99, fanout) <= high


@pytest.mark.parametrize(("fanout", "percent"), [(10, 9.6), (69, 50.0), (100, 63.4), (1, 1.0)])
def test_parent_miss_probability_with_children_at_p99(fanout: int, percent: float) -> None:
    """With children at their p99 the parent misses 9.6%, 50.0%, 63.4% of the time."""
    assert round(analysis.parent_miss_probability(0.99, fanout) * 100, 1) == percent


def test_child_quantile_brings_the_parent_back_on_target() -> None:
    """A parent whose children meet the child quantile misses exactly 1 - target."""
    child = analysis.child_quantile_for_parent(0.99, 100)
    assert analysis.parent_miss_probability(child, 100) == pytest.approx(0.01, rel=1e-12)


@pytest.mark.parametrize(
    ("q", "beyond", "expected"),
    [(0.9999, 10, 100_000), (0.99, 10, 1_000), (0.5, 10, 20), (0.999, 1, 1_000), (0.3, 1, 2)],
)
def test_samples_needed(q: float, beyond: int, expected: int) -> None:
    """n = ceil(beyond / (1 - q)): a p99.99 needs on the order of 10^5 samples."""
    assert analysis.samples_needed(q, beyond=beyond) == expected


INVALID_CALLS = [
    (
        analysis.quantile,
        ([], 0.5),
        ValueError,
        "`sample` must hold at least one latency, got an empty sample",
    ),
    (
        analysis.quantile,
        ([0.1, -1.0], 0.5),
        ValueError,
        "`sample` values must be finite and >= 0 seconds, got -1.0 at index 1",
    ),
    (
        analysis.summarize,
        ([math.nan],),
        ValueError,
        "`sample` values must be finite and >= 0 seconds, got nan at index 0",
    ),
    (
        analysis.extra_load,
        ([math.inf], 0.01),
        ValueError,
        "`sample` values must be finite and >= 0 seconds, got inf at index 0",
    ),
    (analysis.quantile, (["1"], 0.5), TypeError, "`sample` must be a real number, got '1'"),
    (analysis.quantile, (LAB, 1.5), ValueError, "`q` must be in (0, 1), got 1.5"),
    (analysis.quantile, (LAB, 0), ValueError, "`q` must be in (0, 1), got 0"),
    (analysis.hedged_quantile, (LAB, 0.01, 1.0), ValueError, "`q` must be in (0, 1), got 1.0"),
    (analysis.hedged_quantile, (LAB, 0.01, math.nan), ValueError, "`q` must be in (0, 1), got nan"),
    (analysis.trade_table, (LAB, [0.01], [0.5, 2]), ValueError, "`q` must be in (0, 1), got 2"),
    (analysis.quantile, (LAB, "0.5"), TypeError, "`q` must be a real number, got '0.5'"),
    (
        analysis.extra_load,
        (LAB, -0.01),
        ValueError,
        "`delay` must be a finite number of seconds >= 0, got -0.01",
    ),
    (
        analysis.hedged_quantile,
        (LAB, math.inf, 0.5),
        ValueError,
        "`delay` must be a finite number of seconds >= 0, got inf",
    ),
    (
        analysis.trade_table,
        (LAB, [0.01, math.nan]),
        ValueError,
        "`delay` must be a finite number of seconds >= 0, got nan",
    ),
    (analysis.extra_load, (LAB, True), TypeError, "`delay` must be a real number, got True"),
    (
        analysis.hedged_survival,
        (LAB, 0.01, math.inf),
        ValueError,
        "`t` must be a finite number of seconds, got inf",
    ),
    (
        analysis.recommend_delay,
        (LAB, 1.5),
        ValueError,
        "`max_extra_load` must be in [0, 1], got 1.5",
    ),
    (
        analysis.recommend_delay,
        (LAB, -0.1),
        ValueError,
        "`max_extra_load` must be in [0, 1], got -0.1",
    ),
    (
        analysis.child_quantile_for_parent,
        (1.0, 10),
        ValueError,
        "`target` must be in (0, 1), got 1.0",
    ),
    (
        analysis.child_quantile_for_parent,
        (0.99, 0),
        ValueError,
        "`fanout` must be an integer >= 1, got 0",
    ),
    (
        analysis.child_quantile_for_parent,
        (0.99, 2.5),
        TypeError,
        "`fanout` must be an integer >= 1, got 2.5",
    ),
    (
        analysis.parent_miss_probability,
        (0.0, 10),
        ValueError,
        "`child_quantile` must be in (0, 1), got 0.0",
    ),
    (
        analysis.parent_miss_probability,
        (0.99, -3),
        ValueError,
        "`fanout` must be an integer >= 1, got -3",
    ),
    (analysis.samples_needed, (1.5,), ValueError, "`q` must be in (0, 1), got 1.5"),
    (
        partial(analysis.samples_needed, beyond=0),
        (0.99,),
        ValueError,
        "`beyond` must be an integer >= 1, got 0",
    ),
    (
        partial(analysis.samples_needed, beyond=2.0),  # type: ignore[arg-type]  # wrong on purpose
        (0.99,),
        TypeError,
        "`beyond` must be an integer >= 1, got 2.0",
    ),
]


@pytest.mark.parametrize(("function", "args", "error", "message"), INVALID_CALLS)
def test_invalid_arguments_are_rejected(
    function: Callable[..., object],
    args: tuple[object, ...],
    error: type[Exception],
    message: str,
) -> None:
    """Each bad argument raises an error naming the parameter, the value and the range."""
    with pytest.raises(error, match=exact(message)):
        function(*args)


# --- property: the O(n log n) search against a brute-force O(n^2) reference ------------


def brute_force_hedged_quantile(sample_ms: list[int], delay_ms: int, q: float) -> int:
    """The HEDGING.md definition, literally: scan the whole grid with exact fractions."""
    n = len(sample_ms)

    def survival(t: int) -> Fraction:
        above = Fraction(sum(x > t for x in sample_ms), n)
        if t <= delay_ms:
            return above
        return above * Fraction(sum(x > t - delay_ms for x in sample_ms), n)

    grid = sorted(set(sample_ms) | {x + delay_ms for x in sample_ms})
    return next(t for t in grid if survival(t) <= 1 - Fraction(str(q)))


samples_ms = st.lists(st.integers(min_value=0, max_value=400), min_size=1, max_size=40)
quantiles = st.sampled_from([0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999, 1 / 3])


@given(sample_ms=samples_ms, delay_ms=st.integers(min_value=0, max_value=400), q=quantiles)
def test_hedged_quantile_matches_brute_force(sample_ms: list[int], delay_ms: int, q: float) -> None:
    """On random ms samples (as float seconds) the fast search equals the brute force."""
    sample = [ms / 1000 for ms in sample_ms]
    expected = brute_force_hedged_quantile(sample_ms, delay_ms, q)
    assert analysis.hedged_quantile(sample, delay_ms / 1000, q) == expected / 1000


@given(sample_ms=samples_ms, delay_ms=st.integers(min_value=0, max_value=400), q=quantiles)
def test_hedging_never_worsens_a_quantile(sample_ms: list[int], delay_ms: int, q: float) -> None:
    """A hedged quantile is at most the unhedged one, and equal when the delay is beyond it."""
    sample = [ms / 1000 for ms in sample_ms]
    unhedged = analysis.quantile(sample, q)
    hedged = analysis.hedged_quantile(sample, delay_ms / 1000, q)
    assert hedged <= unhedged
    if delay_ms / 1000 >= unhedged:
        assert hedged == unhedged


@given(sample_ms=samples_ms, delay_ms=st.integers(min_value=0, max_value=400))
def test_hedged_survival_up_to_the_delay_is_unhedged(sample_ms: list[int], delay_ms: int) -> None:
    """For every t <= d on the grid, hedged survival equals the unhedged P(X > t)."""
    sample = [ms / 1000 for ms in sample_ms]
    for t_ms in sorted(set(sample_ms)):
        if t_ms <= delay_ms:
            t = t_ms / 1000
            assert analysis.hedged_survival(sample, delay_ms / 1000, t) == analysis.extra_load(
                sample, t
            )
