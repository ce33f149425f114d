"""Why ``extra_load`` gives the budget twice its ratio: the backups a steady law asks for
and the budget refuses, at Finagle's split (ratio = extra load) and at ours (twice).

Run from the repository root::

    .venv/bin/python benchmarks/bench_extra_load.py

The adaptive delay at the ``1 - extra_load`` quantile and a default-shaped budget (a
burst of 10, a floor of 1 backup per second) run on a fake clock over a log-normal law
that never changes (median 12 ms, p95 30 ms), Poisson arrivals, a backup that wins
recording its primary censored, as the transport does. Counted after a 120 s warm-up of
the 60 s window, over three seeds. No event loop and no sockets: the figures are exact
for the seeds and do not depend on the machine. ``docs/budget.md`` quotes them, and
``tests/unit/test_extra_load.py`` checks their shape.
"""

from __future__ import annotations

import math
import random

from hedgeclient import AdaptiveDelay, HedgeBudget

ROUTE = "GET http://catalog"
WARM_UP = 120.0  # seconds: two windows of the adaptive delay


def refusals(
    extra_load: float, ratio_per_load: float, rate: float, seconds: float, seed: int
) -> tuple[int, int, int]:
    """Requests, backups asked for and backups refused, after the warm-up."""
    rng = random.Random(seed)
    now = [0.0]

    def clock() -> float:
        return now[0]

    delay = AdaptiveDelay(quantile=1 - extra_load, clock=clock)
    budget = HedgeBudget(ratio=ratio_per_load * extra_load, clock=clock)
    mu, sigma = math.log(0.012), (math.log(0.030) - math.log(0.012)) / 1.645
    requests = wanted = refused = 0
    while now[0] < WARM_UP + seconds:
        now[0] += rng.expovariate(rate)
        counted = now[0] > WARM_UP
        requests += counted
        budget.deposit()
        d = delay.hedge_delay(ROUTE)
        latency = rng.lognormvariate(mu, sigma)
        if d is not None and latency > d:
            wanted += counted
            if budget.try_withdraw():
                backup = d + rng.lognormvariate(mu, sigma)
                if backup < latency:
                    delay.record(ROUTE, backup, censored=True)
                    continue
            else:
                refused += counted
        delay.record(ROUTE, latency, censored=False)
    return requests, wanted, refused


def main() -> None:
    """Print the table ``docs/budget.md`` quotes."""
    print("extra_load  rate/s  budget ratio  asked for  refused")
    for extra_load in (0.01, 0.05, 0.1):
        for rate in (20.0, 100.0, 1000.0):
            seconds = 180.0 if rate >= 1000 else 780.0
            for split in (1.0, 2.0):
                totals = [0, 0, 0]
                for seed in range(3):
                    for i, n in enumerate(refusals(extra_load, split, rate, seconds, seed)):
                        totals[i] += n
                requests, wanted, refused = totals
                ratio = f"{split:>4.0f} x = {split * extra_load:<4.0%}"
                print(
                    f"{extra_load:>10.0%}  {rate:>6.0f}  {ratio}"
                    f"  {wanted / requests:>9.2%}  {refused / max(wanted, 1):>7.1%}"
                )


if __name__ == "__main__":
    main()
