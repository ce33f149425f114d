"""RotatingHistogram: HDR precision, rotation by a fake clock, clamping."""

from __future__ import annotations

import math
from typing import Any

import anyio
import pytest
from hdrh.histogram import HdrHistogram
from hypothesis import given
from hypothesis import strategies as st

from hedgeclient._policy.hdr import HIGHEST_MICROSECONDS, counts_index
from hedgeclient._policy.histogram import HistogramStatistics, RotatingHistogram

# HDR at 2 significant figures: a bucket is at most 1/128 of its values wide; the
# reported quantile is the bucket's upper edge, plus up to 1 µs of truncation.
HDR_RELATIVE_ERROR = 1 / 128

HDRH_REFERENCE: Any = HdrHistogram(1, HIGHEST_MICROSECONDS, 2)

# HEDGING.md's lab sample, latency in ms: count.
LAB_SAMPLE = {10: 40, 12: 25, 15: 15, 20: 10, 30: 5, 50: 3, 120: 1, 300: 1}


class FakeClock:
    """A settable clock, in seconds."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def assert_hdr_close(reported: float | None, exact: float) -> None:
    assert reported is not None
    assert exact <= reported <= exact * (1 + HDR_RELATIVE_ERROR) + 1e-6


def lab_histogram() -> RotatingHistogram:
    histogram = RotatingHistogram(clock=FakeClock())
    for ms, count in LAB_SAMPLE.items():
        for _ in range(count):
            histogram.record(ms / 1000)
    return histogram


@pytest.mark.parametrize(
    ("q", "exact"),
    [(0.5, 0.012), (0.95, 0.030), (0.99, 0.120), (1.0, 0.300), (0.0, 0.010)],
)
def test_lab_sample_quantiles_within_hdr_precision(q: float, exact: float) -> None:
    """The lab sample's median, p95, p99 and extremes come out within HDR precision."""
    assert_hdr_close(lab_histogram().quantile(q), exact)


def test_quantile_rank_convention_is_smallest_value_meeting_q() -> None:
    """q = 0.07 over 100 samples is the 7th value, despite 0.07 * 100 > 7 in floats."""
    histogram = RotatingHistogram(clock=FakeClock())
    for ms in range(1, 101):
        histogram.record(ms / 1000)
    assert_hdr_close(histogram.quantile(0.07), 0.007)


@given(st.integers(min_value=1, max_value=HIGHEST_MICROSECONDS))
def test_counts_index_matches_hdrh(us: int) -> None:
    """The inlined bucket index is HdrHistogram's own index for every trackable value
    (``hdrh``'s public ``get_counts_array_index``)."""
    assert counts_index(us) == HDRH_REFERENCE.get_counts_array_index(us)


def test_empty_window_has_no_quantile() -> None:
    """An empty histogram reports no quantile and a count of zero."""
    histogram = RotatingHistogram(clock=FakeClock())
    assert histogram.quantile(0.95) is None
    assert histogram.count == 0


def test_count_is_samples_in_window() -> None:
    """count and record()'s return value are the number of samples in the window."""
    histogram = RotatingHistogram(clock=FakeClock())
    assert [histogram.record(0.01) for _ in range(3)] == [1, 2, 3]
    assert histogram.count == 3


def test_sample_ages_out_after_window() -> None:
    """A sample leaves the window once `window` seconds have passed, not before."""
    clock = FakeClock()
    histogram = RotatingHistogram(window=60.0, buckets=6, clock=clock)
    histogram.record(0.010)
    clock.now = 59.999
    assert histogram.count == 1
    clock.now = 60.0
    assert histogram.count == 0
    assert histogram.quantile(0.5) is None


def test_window_slides_slice_by_slice() -> None:
    """Each 10 s slice of a 60 s window expires on its own, oldest first."""
    clock = FakeClock()
    histogram = RotatingHistogram(window=60.0, buckets=6, clock=clock)
    for second in range(0, 60, 10):
        clock.now = second
        histogram.record(0.001 * (second + 10))  # 10 ms at t=0 ... 60 ms at t=50
    assert histogram.count == 6
    clock.now = 75.0  # the slices of t=0 and t=10 have expired
    assert histogram.count == 4
    assert_hdr_close(histogram.quantile(0.0), 0.030)
    assert_hdr_close(histogram.quantile(1.0), 0.060)


def test_big_clock_jump_clears_everything() -> None:
    """After hours of idleness every slice has expired and new data stands alone."""
    clock = FakeClock()
    histogram = RotatingHistogram(clock=clock)
    for i in range(600):
        clock.now = i * 0.1
        histogram.record(1.0)
    clock.now += 5 * 3600
    assert histogram.count == 0
    assert histogram.record(0.002) == 1
    assert_hdr_close(histogram.quantile(1.0), 0.002)


def test_jump_of_a_few_slices_keeps_the_rest() -> None:
    """A jump of less than a window expires only the slices it passes."""
    clock = FakeClock()
    histogram = RotatingHistogram(window=6.0, buckets=6, clock=clock)
    for second in range(6):
        clock.now = second + 0.5
        histogram.record(0.010)
    clock.now = 9.5  # slices 0..3 expired, 4 and 5 remain
    assert histogram.count == 2


def test_clock_going_backwards_does_not_rotate() -> None:
    """A clock that steps back keeps the window as it is."""
    clock = FakeClock(100.0)
    histogram = RotatingHistogram(clock=clock)
    histogram.record(0.010)
    clock.now = 50.0
    assert histogram.record(0.020) == 2


def test_out_of_range_values_are_clamped_and_counted() -> None:
    """0 s, negative and 20 h are recorded at the range ends and counted as clamped."""
    histogram = RotatingHistogram(clock=FakeClock())
    for seconds in (0.0, -1.0, 20 * 3600.0, math.inf):
        histogram.record(seconds)
    stats = histogram.statistics()
    assert stats.clamped == 4
    assert stats.count == 4
    assert_hdr_close(histogram.quantile(0.0), 1e-6)
    assert_hdr_close(histogram.quantile(1.0), 3600.0)


def test_negative_latency_is_taken_as_zero() -> None:
    """A negative latency (a clock that stepped back) lands in the 1 µs bucket, as 0 does."""
    histogram = RotatingHistogram(clock=FakeClock())
    histogram.record(-0.250)
    histogram.record(-math.inf)
    assert histogram.quantile(1.0) == histogram.quantile(0.0)
    assert_hdr_close(histogram.quantile(1.0), 1e-6)
    assert histogram.statistics().clamped == 2


def test_reseed_replaces_the_window_keeping_lifetime_counters() -> None:
    """reseed() drops the window's samples for the given ones; recorded is unchanged."""
    clock = FakeClock()
    histogram = RotatingHistogram(window=60.0, clock=clock)
    for _ in range(50):
        histogram.record(9.0)
    for _ in range(3):
        histogram.record(0.010)
    clock.now = 25.0
    assert histogram.reseed([0.010, 0.020, 0.030], now=clock.now) == 3
    assert_hdr_close(histogram.quantile(1.0), 0.030)
    stats = histogram.statistics()
    assert (stats.count, stats.recorded) == (3, 53)
    clock.now = 65.0  # 50 s later, still inside the window of the slice reseeded into
    assert histogram.count == 3
    clock.now = 85.0
    assert histogram.count == 0


def test_clamped_high_values_still_move_the_quantile() -> None:
    """Ten 20-hour samples among a hundred put the p95 at the one-hour ceiling."""
    histogram = RotatingHistogram(clock=FakeClock())
    for _ in range(90):
        histogram.record(0.010)
    assert_hdr_close(histogram.quantile(0.95), 0.010)
    for _ in range(10):
        histogram.record(20 * 3600.0)
    assert_hdr_close(histogram.quantile(0.95), 3600.0)


def test_nan_is_counted_as_invalid_not_recorded() -> None:
    """NaN has no place in a histogram: it is counted, not recorded, and never raises."""
    histogram = RotatingHistogram(clock=FakeClock())
    assert histogram.record(math.nan) == 0
    assert histogram.statistics().invalid == 1


def test_statistics_snapshot() -> None:
    """statistics() reports window counts and lifetime counters in a frozen dataclass."""
    clock = FakeClock()
    histogram = RotatingHistogram(window=6.0, buckets=3, clock=clock)
    histogram.record(0.010)
    histogram.record(-1.0)
    clock.now = 100.0
    histogram.record(0.010)
    assert histogram.statistics() == HistogramStatistics(
        count=1, recorded=3, clamped=1, invalid=0, window=6.0, buckets=3
    )


def test_default_clock_is_anyio_time() -> None:
    """Built outside an event loop, the histogram reads anyio's clock inside one."""
    histogram = RotatingHistogram()

    async def main() -> int:
        return histogram.record(0.010)

    assert anyio.run(main) == 1


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (
            {"window": 0.0},
            ValueError,
            r"^`window` must be a number of seconds in \(0, 3600\], got 0\.0$",
        ),
        (
            {"window": -1},
            ValueError,
            r"^`window` must be a number of seconds in \(0, 3600\], got -1$",
        ),
        (
            {"window": 60000},
            ValueError,
            r"^`window` must be a number of seconds in \(0, 3600\], got 60000$",
        ),
        ({"window": math.inf}, ValueError, r"^`window` must be .*, got inf$"),
        ({"window": math.nan}, ValueError, r"^`window` must be .*, got nan$"),
        (
            {"window": "60"},
            TypeError,
            r"^`window` must be a number of seconds in \(0, 3600\], got '60'$",
        ),
        ({"buckets": 0}, ValueError, r"^`buckets` must be in \[1, 1000\], got 0$"),
        ({"buckets": 1001}, ValueError, r"^`buckets` must be in \[1, 1000\], got 1001$"),
        ({"buckets": 2.0}, TypeError, r"^`buckets` must be an int in \[1, 1000\], got 2\.0$"),
        ({"buckets": True}, TypeError, r"^`buckets` must be an int in \[1, 1000\], got True$"),
        (
            {"clock": 3},
            TypeError,
            r"^`clock` must be a callable returning seconds, or None, got 3$",
        ),
    ],
)
def test_invalid_parameters_are_rejected(
    kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    """Bad constructor arguments raise, naming the parameter and the allowed range."""
    with pytest.raises(error, match=message):
        RotatingHistogram(**kwargs)


@pytest.mark.parametrize("q", [-0.1, 1.5, math.nan])
def test_quantile_outside_unit_interval_is_rejected(q: float) -> None:
    """quantile(q) requires q in [0, 1]."""
    with pytest.raises(ValueError, match=r"^`q` must be in \[0, 1\], got .+$"):
        RotatingHistogram(clock=FakeClock()).quantile(q)
