"""A rotating latency histogram: HDR buckets over a sliding time window.

:class:`RotatingHistogram` keeps the latencies of the last ``window`` seconds in a ring of
``buckets`` sub-histograms ("slices"), each covering ``window / buckets`` seconds of clock
time. When the clock enters a new slice, the oldest slice expires and its samples leave
the window. A running total of the live slices is kept up to date (an expired slice's
counts are subtracted on rotation), so a quantile never merges the ring.

Bucketing is HdrHistogram's (``_policy.hdr``: 1 µs to 1 hour; a quantile reads its bucket's top,
above the value by less than 1/128 of it from 128 µs up, by at most 1 µs below),
but counts are kept in sparse dicts (bucket index -> count) instead of ``hdrh``'s dense
arrays: ``HdrHistogram.record_value`` is pure Python, while the inlined index plus two
dict increments is a fraction of its cost (``benchmarks/bench_delay_cost.py``), and a
dict holds only the buckets a route's latencies touch, not 3,328 counts per slice.

Prior art: HdrHistogram (Gil Tene, http://hdrhistogram.org/); tower's ``hedge``
middleware, whose ``rotating_histogram`` swaps a read and a write histogram every period
(ours is a ring, so the window slides in ``buckets`` steps instead of jumping).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import final

from hedgeclient._checks import check_clock, check_int, check_seconds, shown
from hedgeclient._policy.hdr import (
    BIT_SHIFT,
    HALF_COUNT,
    HALF_COUNT_MAGNITUDE,
    HIGHEST_MICROSECONDS,
    LOWEST_MICROSECONDS,
    SUB_BUCKET_MASK,
    UNIT_MAGNITUDE,
    sparse_quantile,
)

__all__ = ["MAX_BUCKETS", "MIN_SLICE", "HistogramStatistics", "RotatingHistogram", "check_window"]

#: The most slices a window may have: each is built up front, for every route.
MAX_BUCKETS = 1000

_LOWEST_US_F = float(LOWEST_MICROSECONDS)
_HIGHEST_US_F = float(HIGHEST_MICROSECONDS)
_US_PER_SECOND = 1_000_000.0

MIN_SLICE = 1e-6
"""The shortest slice of a window, in seconds: 1 µs, the histogram's unit."""


def check_window(window: object, buckets: object) -> tuple[float, int]:
    """Return ``window`` (seconds, in (0, 3600]) and ``buckets`` (an int in [1, 1000]) if
    each slice, ``window / buckets``, is at least :data:`MIN_SLICE` (1 µs):
    ``window=5e-324, buckets=1000`` gave slices of 0.0 s, and a division by zero.

    Raises:
        TypeError: ``window`` is not a number, or ``buckets`` not an int.
        ValueError: either is out of range, or a slice is shorter than 1 µs.
    """
    seconds = check_seconds("window", window, low_open=True)
    count = check_int("buckets", buckets, 1, MAX_BUCKETS)
    if seconds < count * MIN_SLICE:  # not seconds / count: window=buckets*1e-6 passes
        msg = (
            f"`window` / `buckets` (a slice) must be at least 1e-06 s, got {shown(window)} / "
            f"{count}: give window >= {count * MIN_SLICE!r} or fewer buckets"
        )
        raise ValueError(msg)
    return seconds, count


@final
@dataclass(frozen=True, slots=True)
class HistogramStatistics:
    """A snapshot of a :class:`RotatingHistogram`.

    Attributes:
        count: samples in the window now.
        recorded: samples recorded since creation (clamped ones included).
        clamped: samples outside 1 µs .. 1 hour, recorded at the nearest end of the range.
        invalid: NaN samples, which have no place in a histogram and were not recorded.
        window: the window, in seconds.
        buckets: the number of slices the window is divided into.

    .. versionadded:: 0.1.0
    """

    count: int
    recorded: int
    clamped: int
    invalid: int
    window: float
    buckets: int


@final
class RotatingHistogram:
    """Latencies of the last ``window`` seconds, in HdrHistogram buckets.

    The window is a ring of ``buckets`` slices of ``window / buckets`` seconds each,
    aligned on multiples of that length on the clock's time axis. A sample stays in the
    window until the clock enters the ``buckets``-th slice after its own: between
    ``window - window / buckets`` and ``window`` seconds after it was recorded. Rotation
    is lazy (on the next call that reads the clock) and costs O(live buckets of the
    expired slices); a clock that jumps a whole window or more (an idle hour) clears the
    ring in O(``buckets``). A clock that goes backwards does not rotate.

    Values are seconds at the API and whole microseconds inside (truncated). The
    trackable range is 1 µs .. 1 hour; a value outside it (0, above an hour, infinite)
    is *clamped* to the nearest end, recorded and counted in ``statistics().clamped``,
    never raised and never dropped. A negative value (a clock that stepped back) is
    taken as 0, so it is clamped to 1 µs like 0: a latency is never negative here. NaN
    is not a latency: it is counted in ``statistics().invalid`` and not recorded.

    Not thread-safe: single-event-loop state, like the rest of hedgeclient.

    Args:
        window: the span of the window, in seconds; in (0, 3600]. Default 60. Longer
            windows are refused: they are almost always milliseconds.
        buckets: the number of slices of the window; an int in [1, 1000] (each slice
            is a dict, built up front). Default 6 (10 s slices).
        clock: a callable returning the current time in seconds (monotonic); default
            ``anyio.current_time``, looked up at call time, so a histogram can be built
            outside an event loop. Tests inject a fake clock.

    Raises:
        TypeError: a parameter has the wrong type.
        ValueError: ``window`` not in (0, 3600], ``buckets`` not in [1, 1000], or
            ``window / buckets`` below 1 µs.

    Example usage::

        histogram = RotatingHistogram(window=60.0, buckets=6)
        histogram.record(0.012)
        p95 = histogram.quantile(0.95)  # seconds

    .. versionadded:: 0.1.0
    """

    __slots__ = (
        "_buckets",
        "_clamped",
        "_clock",
        "_count",
        "_current",
        "_epoch",
        "_invalid",
        "_recorded",
        "_slice_counts",
        "_slice_seconds",
        "_slices",
        "_total",
        "_window",
    )

    def __init__(
        self,
        *,
        window: float = 60.0,
        buckets: int = 6,
        clock: Callable[[], float] | None = None,
    ) -> None:
        window, self._buckets = check_window(window, buckets)
        self._window = window
        self._slice_seconds = window / buckets
        self._clock = check_clock(clock)
        # One sparse {counts index: count} dict per slice, plus their running sum.
        self._slices: list[dict[int, int]] = [{} for _ in range(buckets)]
        self._slice_counts = [0] * buckets
        self._total: dict[int, int] = {}
        self._count = 0
        # The slice the clock was in at the last call; None until the first clock read.
        self._epoch: int | None = None
        self._current = self._slices[0]
        self._recorded = 0
        self._clamped = 0
        self._invalid = 0

    @property
    def window(self) -> float:
        """The span of the window, in seconds."""
        return self._window

    @property
    def buckets(self) -> int:
        """The number of slices the window is divided into."""
        return self._buckets

    @property
    def clamped(self) -> int:
        """Samples clamped into 1 µs .. 1 hour since creation (does not read the clock)."""
        return self._clamped

    @property
    def count(self) -> int:
        """The number of samples in the window now (reads the clock)."""
        self._advance(self._clock())
        return self._count

    def record(self, seconds: float, *, now: float | None = None) -> int:
        """Record one latency.

        Args:
            seconds: the latency, in seconds. Outside 1 µs .. 1 hour it is clamped to the
                nearest end and counted (a negative value is taken as 0, clamped to
                1 µs); NaN is counted as invalid and not recorded.
            now: the current clock reading, if the caller already has it (saves a clock
                call); default: read the clock.

        Returns:
            The number of samples in the window after recording.
        """
        if now is None:
            now = self._clock()
        if self._epoch is None or now // self._slice_seconds != self._epoch:
            self._advance(now)
        us_f = seconds * _US_PER_SECOND
        if _LOWEST_US_F <= us_f <= _HIGHEST_US_F:
            us = int(us_f)
        elif us_f > _HIGHEST_US_F:
            us = HIGHEST_MICROSECONDS
            self._clamped += 1
        elif us_f < _LOWEST_US_F:
            us = LOWEST_MICROSECONDS
            self._clamped += 1
        else:  # NaN compares false with everything.
            self._invalid += 1
            return self._count
        # Inlined _hdr.counts_index(us): this is the hot path.
        bucket = (us | SUB_BUCKET_MASK).bit_length() - BIT_SHIFT
        index = ((bucket + 1) << HALF_COUNT_MAGNITUDE) + (us >> (bucket + UNIT_MAGNITUDE))
        index -= HALF_COUNT
        current = self._current
        current[index] = current.get(index, 0) + 1
        total = self._total
        total[index] = total.get(index, 0) + 1
        self._recorded += 1
        self._count += 1
        return self._count

    def quantile(self, q: float, *, now: float | None = None) -> float | None:
        """Return the ``q``-quantile of the window, in seconds.

        The quantile is the smallest recorded value ``v`` with ``P(X > v) <= 1 - q``
        (docs/how-it-works.md's convention), reported as the exclusive upper edge of its HDR
        bucket: at or above the exact sample quantile, and less than 1/128 (0.78 %)
        plus 1 µs above it. Cost: a sort of the window's non-empty buckets (up to about
        a thousand for a wide log-normal law); call it rarely.

        Args:
            q: the quantile, in [0, 1].
            now: the current clock reading, if the caller already has it.

        Returns:
            The quantile in seconds, or ``None`` if the window is empty.

        Raises:
            ValueError: ``q`` is outside [0, 1].
        """
        if not 0.0 <= q <= 1.0:
            msg = f"`q` must be in [0, 1], got {shown(q)}"
            raise ValueError(msg)
        self._advance(self._clock() if now is None else now)
        if not self._count:
            return None
        return sparse_quantile(self._total, self._count, q)

    def clear(self) -> None:
        """Forget every sample in the window (the lifetime counters are kept)."""
        self._slices = [{} for _ in range(self._buckets)]
        self._slice_counts = [0] * self._buckets
        self._total = {}
        self._count = 0
        self._current = self._slices[0 if self._epoch is None else self._epoch % self._buckets]

    def reseed(self, samples: Iterable[float], *, now: float | None = None) -> int:
        """Replace the window's samples by ``samples``, all put in the current slice.

        For a caller that knows the older samples no longer describe the latency law
        (:class:`~hedgeclient.AdaptiveDelay` recovering from its cut-off). The lifetime
        counters (``recorded``, ``clamped``, ``invalid``) do not change: the samples
        were counted when first recorded. They leave the window with the current slice.

        Args:
            samples: latencies in seconds, taken as :meth:`record` takes them.
            now: the current clock reading, if the caller already has it.

        Returns:
            The number of samples in the window afterwards.
        """
        if now is None:
            now = self._clock()
        self._advance(now)
        self.clear()
        counters = (self._recorded, self._clamped, self._invalid)
        for seconds in samples:
            self.record(seconds, now=now)
        self._recorded, self._clamped, self._invalid = counters
        return self._count

    def statistics(self) -> HistogramStatistics:
        """Return a snapshot of the histogram's counters (reads the clock to rotate)."""
        return HistogramStatistics(
            count=self.count,
            recorded=self._recorded,
            clamped=self._clamped,
            invalid=self._invalid,
            window=self._window,
            buckets=self._buckets,
        )

    def _advance(self, now: float) -> None:
        """Rotate the ring to the slice that contains ``now``."""
        epoch = int(now // self._slice_seconds)
        previous = self._epoch
        if previous is not None and epoch <= previous:
            return  # Same slice, or a clock that went backwards: no rotation.
        self._epoch = epoch
        if previous is None or epoch - previous >= self._buckets:
            # First clock read, or idle for a whole window or more: everything expired.
            self.clear()
            return
        # Close the slice being written: its count was only tracked in _count so far.
        closing = previous % self._buckets
        self._slice_counts[closing] = sum(self._slices[closing].values())
        total = self._total
        for expiring in range(previous + 1, epoch + 1):
            slot = expiring % self._buckets
            for index, count in self._slices[slot].items():
                left = total[index] - count
                if left:
                    total[index] = left
                else:
                    del total[index]
            self._count -= self._slice_counts[slot]
            self._slice_counts[slot] = 0
            self._slices[slot] = {}
        self._current = self._slices[epoch % self._buckets]

    def __repr__(self) -> str:
        return f"RotatingHistogram(window={self._window!r}, buckets={self._buckets!r})"
