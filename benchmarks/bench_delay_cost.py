"""What the adaptive hedge delay costs per request, and how often it refreshes.

Run from the repository root::

    .venv/bin/python benchmarks/bench_delay_cost.py

Measures, at the defaults of :class:`~hedgeclient._policy.adaptive.AdaptiveDelay` (p95 over a
60 s window of 6 slices, refresh every 1,000 samples or 1 s):

- ``hedge_delay()``: the cached lookup, once per hedgeable request;
- ``record()``: once per primary attempt, without refreshes and amortised with them,
  with a fake clock and with the default ``anyio.current_time`` inside an event loop;
- the refresh itself (a quantile over a full window) and how many run per second at
  several request rates on one route;
- ``RotatingHistogram.record()`` alone, and the budget's ``deposit()`` and
  ``try_withdraw()``.

Latencies are log-normal (median 10 ms, sigma 1.0). Timings are the best of several
repeats, per call, loop overhead included; the table is printed and written as JSON to
``benchmarks/results/delay_cost.json``.
"""

from __future__ import annotations

import json
import math
import platform
import random
import sys
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

import anyio

from hedgeclient._policy.adaptive import AdaptiveDelay
from hedgeclient._policy.budget import HedgeBudget
from hedgeclient._policy.histogram import RotatingHistogram

RESULTS = Path(__file__).resolve().parent / "results" / "delay_cost.json"
REPEATS = 5
N = 200_000


class FakeClock:
    """A clock advanced by hand, in seconds."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def latencies(n: int, seed: int = 1) -> list[float]:
    rng = random.Random(seed)
    return [rng.lognormvariate(math.log(0.010), 1.0) for _ in range(n)]


def best_per_call(run: Callable[[], int]) -> float:
    """Best of REPEATS runs of ``run`` (which returns its call count), in µs per call."""
    best = math.inf
    for _ in range(REPEATS):
        start = time.perf_counter()
        calls = run()
        best = min(best, (time.perf_counter() - start) / calls)
    return best * 1e6


def warm_policy(clock: Callable[[], float] | None, **kwargs: Any) -> AdaptiveDelay:
    policy = AdaptiveDelay(clock=clock, **kwargs)
    for value in latencies(5_000, seed=2):
        policy.record("route", value, censored=False)
    return policy


def bench_hedge_delay() -> float:
    policy = warm_policy(FakeClock())
    hedge_delay = policy.hedge_delay

    def run() -> int:
        for _ in range(N):
            hedge_delay("route")
        return N

    return best_per_call(run)


def bench_record(*, refresh_samples: int, refresh_interval: float) -> float:
    """record() with a fake clock; refreshes included unless they are disabled."""
    values = latencies(N)
    clock = FakeClock()
    policy = warm_policy(clock, refresh_samples=refresh_samples, refresh_interval=refresh_interval)
    record = policy.record

    def run() -> int:
        for value in values:
            record("route", value, censored=False)
        return N

    return best_per_call(run)


def bench_record_anyio() -> float:
    """record() with the default anyio clock, inside an asyncio event loop."""
    values = latencies(N)
    result: list[float] = []

    async def main() -> None:
        policy = warm_policy(None)
        record = policy.record

        def run() -> int:
            for value in values:
                record("route", value, censored=False)
            return N

        result.append(best_per_call(run))

    anyio.run(main)
    return result[0]


def bench_histogram_record() -> float:
    values = latencies(N)
    histogram = RotatingHistogram(clock=FakeClock())
    record = histogram.record

    def run() -> int:
        for value in values:
            record(value, now=1.0)
        return N

    return best_per_call(run)


def bench_refresh(rate: float) -> tuple[float, int]:
    """The quantile over a full 60 s window at ``rate`` requests/s: µs, non-empty buckets."""
    clock = FakeClock()
    histogram = RotatingHistogram(clock=clock)
    for value in latencies(round(60 * rate), seed=3):
        histogram.record(value)
        clock.now += 1 / rate
    clock.now -= 1 / rate  # stay inside the window just filled
    quantile = histogram.quantile

    def run() -> int:
        for _ in range(200):
            quantile(0.95)
        return 200

    return best_per_call(run), histogram.statistics().count


def refreshes_per_second(rate: float, seconds: float = 60.0) -> float:
    """Refreshes per second of one route at ``rate`` requests/s, defaults, fake clock."""
    clock = FakeClock()
    policy = AdaptiveDelay(clock=clock)
    values = latencies(round(rate * seconds), seed=4)
    for value in values:
        clock.now += 1 / rate
        policy.record("route", value, censored=False)
    return policy.statistics().routes["route"].refreshes / seconds


def bench_budget() -> tuple[float, float]:
    budget = HedgeBudget(clock=FakeClock())

    def deposits() -> int:
        for _ in range(N):
            budget.deposit()
        return N

    def withdrawals() -> int:
        for _ in range(N):
            budget.try_withdraw()
        return N

    return best_per_call(deposits), best_per_call(withdrawals)


def main() -> None:
    rows: list[tuple[str, float, str]] = []
    rows.append(("AdaptiveDelay.hedge_delay() (cached)", bench_hedge_delay(), "µs/call"))
    rows.append(
        (
            "AdaptiveDelay.record(), refreshes off, fake clock",
            bench_record(refresh_samples=10**9, refresh_interval=math.inf),
            "µs/call",
        )
    )
    rows.append(
        (
            "AdaptiveDelay.record(), defaults, frozen fake clock (refresh/1000 amortised)",
            bench_record(refresh_samples=1000, refresh_interval=1.0),
            "µs/call",
        )
    )
    rows.append(
        (
            "AdaptiveDelay.record(), defaults, anyio clock on asyncio",
            bench_record_anyio(),
            "µs/call",
        )
    )
    rows.append(("RotatingHistogram.record(now=...)", bench_histogram_record(), "µs/call"))
    refresh: dict[str, dict[str, float]] = {}
    for rate in (100.0, 1_000.0, 10_000.0):
        cost, count = bench_refresh(rate)
        per_second = refreshes_per_second(rate)
        refresh[f"{rate:g}"] = {
            "quantile_us": cost,
            "window_samples": count,
            "refreshes_per_second": per_second,
            "cpu_fraction": cost * 1e-6 * per_second,
            "amortised_us_per_request": cost * per_second / rate,
        }
        rows.append((f"refresh at {rate:g} req/s ({count} samples in window)", cost, "µs/call"))
        rows.append((f"  refreshes per second at {rate:g} req/s", per_second, "1/s"))
        rows.append(
            (
                f"  refresh cost amortised per request at {rate:g} req/s",
                cost * per_second / rate,
                "µs",
            )
        )
    deposit, withdraw = bench_budget()
    rows.append(("HedgeBudget.deposit()", deposit, "µs/call"))
    rows.append(("HedgeBudget.try_withdraw() (mostly refused)", withdraw, "µs/call"))

    width = max(len(name) for name, _, _ in rows)
    print(f"{'measurement':<{width}}  {'value':>9}  unit")
    for name, value, unit in rows:
        print(f"{name:<{width}}  {value:>9.3f}  {unit}")

    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "command": "python benchmarks/bench_delay_cost.py",
                "python": sys.version.split()[0],
                "platform": platform.platform(),
                "hdrhistogram": version("hdrhistogram"),
                "latency_law": "log-normal, median 10 ms, sigma 1.0",
                "measurements": [
                    {"name": name, "value": value, "unit": unit} for name, value, unit in rows
                ],
                "refresh_by_rate": refresh,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"\nwrote {RESULTS}")


if __name__ == "__main__":
    main()
