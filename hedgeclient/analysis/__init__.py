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

from typing import TYPE_CHECKING

from hedgeclient._deprecated import deprecated_names
from hedgeclient.analysis._fanout import (
    child_quantile_for_parent,
    parent_miss_probability,
    samples_needed,
)
from hedgeclient.analysis._sample import (
    extra_load,
    hedged_quantile,
    hedged_survival,
    lab_sample,
    quantile,
)
from hedgeclient.analysis._tables import (
    DEFAULT_QUANTILES,
    Summary,
    TradeRow,
    recommend_delay,
    summarize,
    trade_table,
)

__all__ = [
    "DEFAULT_QUANTILES",
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

if TYPE_CHECKING:  # the deprecated names still type-check for this release
    from hedgeclient.analysis._sample import PRESETS as PRESETS

__getattr__ = deprecated_names(
    __name__,
    {
        "PRESETS": (
            "hedgeclient.analysis._sample",
            "PRESETS",
            "its one sample, 'lab', is lab_sample()",
        ),
    },
)
