"""Fan-out: the quantile a child must meet, how often a parent misses, samples needed.

A parent waiting for ``n`` independent children completes by ``t`` with probability
``F(t)**n`` (Dean & Barroso 2013; ``docs/how-it-works.md``). Strictly private:
:mod:`hedgeclient.analysis` re-exports these names.
"""

from __future__ import annotations

import math

from hedgeclient.analysis._exact import check_count, tail_of


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
    tail_of(target, "target")
    n = check_count(fanout, "fanout")
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
    tail_of(child_quantile, "child_quantile")
    n = check_count(fanout, "fanout")
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
    tail = tail_of(q)
    count = check_count(beyond, "beyond")
    return math.ceil(count / tail)
