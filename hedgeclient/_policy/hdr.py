"""HdrHistogram's bucket geometry, for the rotating histogram's sparse counts.

Values are whole microseconds from 1 µs to 1 hour at 2 significant figures: 128 linear
sub-buckets per power of two, so a bucket is at most 1/128 of its values wide and a
quantile reported as a bucket's upper edge is less than 1/128 (0.78 %) above the exact
value, plus the 1 µs truncation of the seconds-to-microseconds conversion.

The geometry is HdrHistogram's own definition (its ``AbstractHistogram``: the unit
magnitude ``floor(log2(lowest))``, ``2 * 10**figures`` values at single-unit
resolution, so ``ceil(log2(200)) - 1`` = 7 for the half count's magnitude), computed
here rather than read from ``hdrh``'s undocumented attributes; :func:`counts_index` is
HdrHistogram's counts-array index, which the histogram's hot path inlines (``hdrh``'s
public ``get_counts_array_index`` costs about 0.8 µs more a sample). The unit tests
check both against ``hdrh``'s public methods, and the upper edge of a bucket comes from
them (``get_value_from_index``, ``get_highest_equivalent_value``), off the hot path.

Prior art: HdrHistogram (Gil Tene, http://hdrhistogram.org/).

Strictly private.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Mapping
from itertools import accumulate
from typing import Any

from hdrh.histogram import HdrHistogram

__all__ = [
    "BIT_SHIFT",
    "HALF_COUNT",
    "HALF_COUNT_MAGNITUDE",
    "HIGHEST_MICROSECONDS",
    "LOWEST_MICROSECONDS",
    "SIGNIFICANT_FIGURES",
    "SUB_BUCKET_MASK",
    "UNIT_MAGNITUDE",
    "counts_index",
    "sparse_quantile",
    "upper_edge_seconds",
]

#: Lowest trackable value, in microseconds. Smaller values (0 and negatives included)
#: are clamped up to it and counted.
LOWEST_MICROSECONDS = 1
#: Highest trackable value, in microseconds (1 hour). Larger values are clamped down to
#: it and counted.
HIGHEST_MICROSECONDS = 3_600_000_000
#: Significant decimal figures: a bucket is at most 1/128 of its values wide.
SIGNIFICANT_FIGURES = 2

#: ``floor(log2(lowest))``: the power of two of the smallest unit told apart.
UNIT_MAGNITUDE = LOWEST_MICROSECONDS.bit_length() - 1
#: ``ceil(log2(2 * 10**figures)) - 1``: sub-buckets per half bucket, as a power of two
#: (``(n - 1).bit_length()`` is ``ceil(log2(n))``; HdrHistogram keeps it at least 0).
HALF_COUNT_MAGNITUDE: int = max((2 * 10**SIGNIFICANT_FIGURES - 1).bit_length(), 1) - 1
#: Sub-buckets per half bucket (128).
HALF_COUNT = 1 << HALF_COUNT_MAGNITUDE
#: The bits of a value that select its sub-bucket in the first bucket.
SUB_BUCKET_MASK = ((HALF_COUNT << 1) - 1) << UNIT_MAGNITUDE
BIT_SHIFT = UNIT_MAGNITUDE + HALF_COUNT_MAGNITUDE + 1

# For the exclusive upper edge of a bucket, through hdrh's public methods.
_GEOMETRY: Any = HdrHistogram(LOWEST_MICROSECONDS, HIGHEST_MICROSECONDS, SIGNIFICANT_FIGURES)
_US_PER_SECOND = 1_000_000.0


def counts_index(us: int) -> int:
    """HdrHistogram's counts index of ``us`` (whole microseconds, in the trackable range)."""
    bucket = (us | SUB_BUCKET_MASK).bit_length() - BIT_SHIFT
    return ((bucket + 1) << HALF_COUNT_MAGNITUDE) + (us >> (bucket + UNIT_MAGNITUDE)) - HALF_COUNT


def upper_edge_seconds(index: int) -> float:
    """The exclusive upper edge of bucket ``index``, in seconds."""
    highest: int = _GEOMETRY.get_highest_equivalent_value(_GEOMETRY.get_value_from_index(index))
    return (highest + 1) / _US_PER_SECOND


def sparse_quantile(counts: Mapping[int, int], total: int, q: float) -> float:
    """The ``q``-quantile of sparse counts (index -> count, ``total`` in all), in seconds.

    The smallest recorded value ``v`` with ``P(X > v) <= 1 - q`` (docs/how-it-works.md's
    convention), reported as the exclusive upper edge of its bucket. ``total`` ≥ 1 and
    ``q`` in [0, 1] are the caller's to check.
    """
    # Smallest rank r with r >= q * n; the tolerance absorbs float error in q * n
    # (0.07 * 100 == 7.000000000000001 must give rank 7, not 8).
    rank = max(1, math.ceil(q * total - 1e-9))
    indices = sorted(counts)
    cumulative = list(accumulate([counts[i] for i in indices]))
    return upper_edge_seconds(indices[bisect_left(cumulative, rank)])
