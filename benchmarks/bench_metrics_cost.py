"""What the Prometheus metrics cost per request.

Run from the repository root::

    .venv/bin/python benchmarks/bench_metrics_cost.py

Measures, each against a fresh ``CollectorRegistry``:

- the hook alone (``PrometheusMetrics.bind(transport)``), fed a typical record (one
  primary that won) and a hedged one (primary cancelled, backup won), in µs per record;
- the same two records through a naive hook that calls ``.labels(...)`` on every
  request instead of caching the children, to show what the cache saves;
- a whole request through ``httpx.AsyncClient`` + ``HedgedTransport`` around an
  ``httpx.MockTransport`` that answers at once (delay 0.05 s, so never hedged), on
  asyncio, with ``metrics=False``, with a no-op hook (the transport then builds a
  ``RequestRecord``: the part of the cost that is not this module's) and with
  ``metrics=registry``; small batches of the three take turns and are timed in
  process CPU time; the table gives the best batch of each and the median over rounds
  of the paired differences, so that other load on the machine mostly cancels out;
- one scrape (``generate_latest``) after those requests.

Timings are the best of several repeats, per call, loop overhead included; the table
is printed and written as JSON to ``benchmarks/results/metrics_cost.json``.
"""

from __future__ import annotations

import json
import math
import platform
import statistics
import sys
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

import anyio
import httpx
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from hedgeclient import AttemptRecord, HedgedTransport, RequestRecord
from hedgeclient.instrumentation import DURATION_BUCKETS, PrometheusMetrics

RESULTS = Path(__file__).resolve().parent / "results" / "metrics_cost.json"
REPEATS = 5
HOOK_N = 100_000
CLIENT_N = 500
CLIENT_ROUNDS = 60
ROUTE = "GET http://svc"

TYPICAL = RequestRecord(
    client="bench",
    route=ROUTE,
    outcome="ok",
    duration=0.0112,
    delay=0.030,
    attempts=(AttemptRecord("primary", "http://a", 0.0, 0.0112, "won", 200, censored=False),),
    suppressed=None,
)
HEDGED = RequestRecord(
    client="bench",
    route=ROUTE,
    outcome="ok",
    duration=0.0415,
    delay=0.030,
    attempts=(
        AttemptRecord("primary", "http://a", 0.0, 0.0415, "cancelled", None, censored=True),
        AttemptRecord("backup", "http://b", 0.030, 0.0115, "won", 200, censored=False),
    ),
    suppressed=None,
)


def best_per_call(run: Callable[[], int]) -> float:
    """Best of REPEATS runs of ``run`` (which returns its call count), in µs per call."""
    best = math.inf
    for _ in range(REPEATS):
        start = time.perf_counter()
        calls = run()
        best = min(best, (time.perf_counter() - start) / calls)
    return best * 1e6


def transport(**kwargs: Any) -> HedgedTransport:
    return HedgedTransport(
        httpx.MockTransport(lambda request: httpx.Response(200)),
        replicas={"http://svc": ["http://a", "http://b"]},
        delay=0.05,
        name="bench",
        **kwargs,
    )


def bench_hook(record: RequestRecord) -> float:
    keep = transport(metrics=False)
    hook = PrometheusMetrics.for_registry(CollectorRegistry()).bind(keep)

    def run() -> int:
        for _ in range(HOOK_N):
            hook(record)
        return HOOK_N

    return best_per_call(run)


def naive_hook(registry: CollectorRegistry) -> Callable[[RequestRecord], None]:
    """The same counting as the real hook, calling ``.labels()`` every time."""
    requests = Counter("n_requests_total", "", ("client", "route", "outcome"), registry=registry)
    attempts = Counter(
        "n_attempts_total", "", ("client", "route", "kind", "replica"), registry=registry
    )
    hedges = Counter("n_hedges_total", "", ("client", "route"), registry=registry)
    wins = Counter("n_wins_total", "", ("client", "route"), registry=registry)
    cancelled = Counter("n_cancelled_total", "", ("client", "route", "replica"), registry=registry)
    request_duration = Histogram(
        "n_request_seconds", "", ("client", "route"), registry=registry, buckets=DURATION_BUCKETS
    )
    attempt_duration = Histogram(
        "n_attempt_seconds", "", ("client", "route", "kind"), registry=registry,
        buckets=DURATION_BUCKETS,
    )  # fmt: skip

    def hook(record: RequestRecord) -> None:
        client, route = record.client, record.route
        requests.labels(client, route, record.outcome).inc()
        if record.outcome == "ok":
            request_duration.labels(client, route).observe(record.duration)
        for a in record.attempts:
            attempts.labels(client, route, a.kind, a.replica).inc()
            if a.kind == "backup":
                hedges.labels(client, route).inc()
                if a.outcome == "won":
                    wins.labels(client, route).inc()
            if a.outcome == "cancelled":
                cancelled.labels(client, route, a.replica).inc()
                if a.kind == "primary":
                    attempt_duration.labels(client, route, a.kind).observe(a.duration)
            elif a.status is not None:
                attempt_duration.labels(client, route, a.kind).observe(a.duration)

    return hook


def bench_naive(record: RequestRecord) -> float:
    hook = naive_hook(CollectorRegistry())

    def run() -> int:
        for _ in range(HOOK_N):
            hook(record)
        return HOOK_N

    return best_per_call(run)


async def _interleaved(configs: dict[str, dict[str, Any]]) -> dict[str, list[float]]:
    """CPU µs per request of each config in every round; the configs take turns."""
    rounds: dict[str, list[float]] = {name: [] for name in configs}
    clients = {
        name: httpx.AsyncClient(transport=transport(**kwargs), base_url="http://svc")
        for name, kwargs in configs.items()
    }
    try:
        for client in clients.values():
            for _ in range(200):  # warm up
                await client.get("/items/1")
        for _ in range(CLIENT_ROUNDS):
            for name, client in clients.items():
                start = time.process_time()
                for _ in range(CLIENT_N):
                    await client.get("/items/1")
                rounds[name].append((time.process_time() - start) / CLIENT_N * 1e6)
    finally:
        for client in clients.values():
            await client.aclose()
    return rounds


def bench_client() -> dict[str, float]:
    """Best per config, and the median over rounds of the paired differences."""
    configs: dict[str, dict[str, Any]] = {
        "off": {"metrics": False},
        "noop": {"metrics": False, "hooks": [lambda record: None]},
        "on": {"metrics": CollectorRegistry()},
    }
    rounds: dict[str, list[float]] = anyio.run(_interleaved, configs, backend="asyncio")
    off, noop, on = rounds["off"], rounds["noop"], rounds["on"]
    return {
        "off": min(off),
        "noop": min(noop),
        "on": min(on),
        "on-off": statistics.median(b - a for a, b in zip(off, on, strict=True)),
        "noop-off": statistics.median(b - a for a, b in zip(off, noop, strict=True)),
        "on-noop": statistics.median(b - a for a, b in zip(noop, on, strict=True)),
    }


def bench_scrape() -> tuple[float, int]:
    registry = CollectorRegistry()
    keep = transport(metrics=registry)
    hook = PrometheusMetrics.for_registry(registry).bind(keep)  # the instance metrics= used
    hook(TYPICAL)
    hook(HEDGED)
    size = len(generate_latest(registry))

    def run() -> int:
        for _ in range(200):
            generate_latest(registry)
        return 200

    return best_per_call(run), size


def main() -> None:
    rows: list[tuple[str, float]] = []
    rows.append(("hook, typical record (µs/record)", bench_hook(TYPICAL)))
    rows.append(("hook, hedged record (µs/record)", bench_hook(HEDGED)))
    rows.append(("naive .labels() hook, typical (µs/record)", bench_naive(TYPICAL)))
    rows.append(("naive .labels() hook, hedged (µs/record)", bench_naive(HEDGED)))
    client = bench_client()
    rows.append(("client request, metrics=False (CPU µs/request)", client["off"]))
    rows.append(("client request, a no-op hook (CPU µs/request)", client["noop"]))
    rows.append(("client request, metrics=registry (CPU µs/request)", client["on"]))
    rows.append(("  on - off, median of paired rounds", client["on-off"]))
    rows.append(("  no-op hook - off (building the record)", client["noop-off"]))
    rows.append(("  on - no-op hook (this module's hook)", client["on-noop"]))
    scrape, size = bench_scrape()
    rows.append(("scrape, one client and route (µs/scrape)", scrape))

    width = max(len(name) for name, _ in rows)
    print(f"{'measure'.ljust(width)}  value")
    for name, value in rows:
        print(f"{name.ljust(width)}  {value:8.2f}")
    print(f"(scrape body: {size} bytes)")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "python": sys.version.split()[0],
                "platform": platform.platform(),
                "prometheus_client": version("prometheus-client"),
                "httpx": version("httpx"),
                "hook_records": HOOK_N,
                "client_requests": CLIENT_N,
                "client_rounds": CLIENT_ROUNDS,
                "repeats": REPEATS,
                "results_us": {name: round(value, 3) for name, value in rows},
                "scrape_bytes": size,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"written to {RESULTS}")


if __name__ == "__main__":
    main()
