"""Memory and task leaks over a long run, the pool after hedging, and how cost scales.

Run from the repository root::

    .venv/bin/python benchmarks/bench_memory.py            # 500,000 requests per backend
    .venv/bin/python benchmarks/bench_memory.py --quick    # 50,000, smaller sweeps

1. **Long run, in-process**, on asyncio and on trio: ``HedgedTransport`` (3 replicas,
   fixed delay 0.5 ms, default budget, metrics on a fresh ``CollectorRegistry``) over an
   ``httpx.MockTransport`` whose handler answers at once, except 5 % of calls, which
   ``anyio.sleep(0.020)`` first: those primaries are due a backup. 50 requests in
   flight keep the event loop busy all the time, so timers run late: how many backups
   go out, and whether the loser is cancelled or already has its headers ("lost"),
   depends on the loop's backlog; the hedges, cancelled and lost losers are reported
   (from the metrics) so a leak can be told from a change in the mix. Resident memory
   (psutil RSS, after ``gc.collect()``) and live tasks (``anyio.get_running_tasks()``:
   every asyncio task, or every trio task including system tasks; counted between
   batches, when no request is in flight) are sampled before the first request and
   after every tenth of the run. Targets: RSS growth from the end of the first tenth
   (the warm-up) to the end <= 10 MB; no growth in live tasks from the end of the
   warm-up on (tasks an engine starts once per event loop, lazily, are in the warm-up
   count; the count before any request is reported too).
2. **Pool after hedging, loopback**: ``FakeService(latency="lab", mode="process")``,
   hedged at 12 ms (most requests: P(X > 12 ms) is about 0.7 on the lab law), then the
   httpcore pool is inspected: every connection idle or closed, no request queued, and
   the server sees nothing in flight.
3. **Concurrency sweep**: 10, 100, 1,000 and 5,000 requests in flight over an
   in-process handler that sleeps 10 ms; bare against hedged (fixed 1 s delay, so no
   hedge fires; metrics off), interleaved. CPU per request and the p99 latency each
   adds. Then why it grows: GC-tracked objects held per in-flight request (2,000 parked
   in the handler, ``gc.get_objects()``), and the CPU per request at 5,000 in flight with
   the cyclic collector on and off.
4. **Routes**: 1, 100 and 1,000 distinct ``route_key`` values (the default
   ``AdaptiveDelay`` keeps a histogram per route; metrics keep series per route), with
   metrics off and on: CPU per request and the memory retained (tracemalloc).

Results: printed, and written to ``benchmarks/results/memory.json``.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import time
import tracemalloc
from typing import Any

import anyio
import httpx
import psutil
from _common import (
    SERVICE,
    command,
    machine,
    print_table,
    quantile,
    run_concurrently,
    small_response,
    verdict,
    write_json,
)

from hedgeclient import HedgeBudget, HedgedTransport
from hedgeclient.testing import FakeService

REPLICAS = {SERVICE: ["http://10.0.0.1:8080", "http://10.0.0.2:8080", "http://10.0.0.3:8080"]}
MB = 1024 * 1024
SLOW = 0.020  # seconds a slow handler call takes: 40x the 0.5 ms hedge delay


def rss() -> int:
    gc.collect()
    return psutil.Process().memory_info().rss


# -- 1. long run ----------------------------------------------------------------------------


async def long_run(total: int, concurrency: int) -> dict[str, Any]:
    from prometheus_client import CollectorRegistry

    rng = random.Random(1)
    slow = 0

    async def handler(request: httpx.Request) -> httpx.Response:
        nonlocal slow
        if rng.random() < 0.05:
            slow += 1
            await anyio.sleep(SLOW)
        return httpx.Response(200, content=b"ok")

    registry = CollectorRegistry()
    transport = HedgedTransport(
        httpx.MockTransport(handler),
        replicas=REPLICAS,
        delay=0.0005,
        metrics=registry,
    )
    checkpoints: list[dict[str, Any]] = []
    step = total // 10
    started = time.perf_counter()
    async with httpx.AsyncClient(transport=transport, base_url=SERVICE) as client:

        async def one(i: int) -> None:
            response = await client.get("/item")
            response.raise_for_status()

        baseline_tasks = len(anyio.get_running_tasks())
        for k in range(10):
            await run_concurrently(step, concurrency, one)
            budget = transport.budget.statistics()
            checkpoints.append(
                {
                    "requests": (k + 1) * step,
                    "rss_mb": rss() / MB,
                    "live_tasks": len(anyio.get_running_tasks()),
                    "seconds": time.perf_counter() - started,
                    "hedges": budget.withdrawals,
                    "budget_refusals": budget.refusals,
                }
            )
            print(
                f"  long run {checkpoints[-1]['requests']:>7}: "
                f"RSS {checkpoints[-1]['rss_mb']:.1f} MB, tasks {checkpoints[-1]['live_tasks']}",
                flush=True,
            )

    def sample(name: str, **labels: str) -> float:
        return registry.get_sample_value(name, {"client": "default", **labels}) or 0.0

    route = f"GET {SERVICE}"
    warm = checkpoints[0]
    growth = checkpoints[-1]["rss_mb"] - warm["rss_mb"]
    peak = max(c["rss_mb"] for c in checkpoints[1:]) - warm["rss_mb"]
    cancelled, lost = (
        sum(sample(name, route=route, replica=r) for r in REPLICAS[SERVICE])
        for name in ("hedgeclient_cancelled_attempts_total", "hedgeclient_lost_attempts_total")
    )
    return {
        "requests": total,
        "concurrency": concurrency,
        "baseline_tasks": baseline_tasks,
        "checkpoints": checkpoints,
        "slow_handler_calls": slow,
        "hedges_total_metric": sample("hedgeclient_hedges_total", route=route),
        "cancelled_attempts_metric": cancelled,
        "lost_attempts_metric": lost,
        "hedge_wins_metric": sample("hedgeclient_hedge_wins_total", route=route),
        "rss_growth_after_warmup_mb": growth,
        "rss_peak_growth_after_warmup_mb": peak,
        "live_task_growth": checkpoints[-1]["live_tasks"] - warm["live_tasks"],
        "rss_target": verdict(growth <= 10.0),
        "tasks_target": verdict(all(c["live_tasks"] <= warm["live_tasks"] for c in checkpoints)),
    }


# -- 2. pool after hedging ----------------------------------------------------------------


async def pool_after_hedging(total: int) -> dict[str, Any]:
    limits = httpx.Limits(max_connections=100, max_keepalive_connections=100)
    with FakeService(replicas=3, latency="lab", mode="process", seed=21, keep=1000) as svc:
        inner = httpx.AsyncHTTPTransport(limits=limits)
        transport = HedgedTransport(
            inner,
            replicas={SERVICE: svc.origins},
            delay=0.012,
            budget=HedgeBudget(ratio=1.0, burst=1_000_000, min_per_second=0),
            metrics=False,
        )
        hedged = 0
        async with httpx.AsyncClient(transport=transport, base_url=SERVICE) as client:

            async def one(i: int) -> None:
                nonlocal hedged
                response = await client.get("/item")
                response.raise_for_status()
                hedged += response.extensions["hedge"].attempts > 1

            await run_concurrently(total, 10, one)
            await anyio.sleep(0.2)  # losers' connections close; the server sees them
            pool = inner._pool  # httpcore internals, read only
            states = {"idle": 0, "closed": 0, "busy": 0}
            for connection in pool.connections:
                if connection.is_closed():
                    states["closed"] += 1
                elif connection.is_idle():
                    states["idle"] += 1
                else:
                    states["busy"] += 1
            queued = len(pool._requests)
            stats = svc.stats()
    in_flight = sum(r.in_flight for r in stats.replicas)
    return {
        "requests": total,
        "hedged_requests": hedged,
        "server_received": stats.received,
        "server_abandoned": stats.abandoned,
        "server_in_flight_after": in_flight,
        "pool_connections": states,
        "pool_queued_requests": queued,
        "pool_idle": verdict(states["busy"] == 0 and queued == 0 and in_flight == 0),
    }


# -- 3. concurrency sweep --------------------------------------------------------------------


async def concurrency_sweep(levels: list[int], reps: int) -> list[dict[str, Any]]:
    async def handler(request: httpx.Request) -> httpx.Response:
        await anyio.sleep(0.010)
        return httpx.Response(200, content=b"ok")

    def make(variant: str) -> httpx.AsyncBaseTransport:
        inner = httpx.MockTransport(handler)
        if variant == "bare":
            return inner
        return HedgedTransport(inner, replicas=REPLICAS, delay=1.0, metrics=False)

    results = []
    for level in levels:
        n = max(5_000, 4 * level)
        data: dict[str, dict[str, list[float]]] = {
            v: {"cpu": [], "p50": [], "p99": [], "wall": []} for v in ("bare", "hedged")
        }
        for rep in range(reps):
            for variant in ("bare", "hedged") if rep % 2 == 0 else ("hedged", "bare"):
                latencies: list[float] = []
                async with httpx.AsyncClient(transport=make(variant), base_url=SERVICE) as client:

                    async def one(
                        i: int,
                        client: httpx.AsyncClient = client,
                        latencies: list[float] = latencies,
                    ) -> None:
                        start = time.perf_counter()
                        await client.get("/item")
                        latencies.append(time.perf_counter() - start)

                    await run_concurrently(min(level, 200), level, one)  # warm-up
                    latencies.clear()
                    c0, w0 = time.process_time(), time.perf_counter()
                    await run_concurrently(n, level, one)
                    data[variant]["cpu"].append((time.process_time() - c0) / n)
                    data[variant]["wall"].append(time.perf_counter() - w0)
                data[variant]["p50"].append(quantile(latencies, 0.5))
                data[variant]["p99"].append(quantile(latencies, 0.99))
        med = {v: {k: statistics.median(x) for k, x in d.items()} for v, d in data.items()}
        results.append(
            {
                "concurrency": level,
                "requests": n,
                "bare_cpu_us": med["bare"]["cpu"] * 1e6,
                "hedged_cpu_us": med["hedged"]["cpu"] * 1e6,
                "cpu_added_us": (med["hedged"]["cpu"] - med["bare"]["cpu"]) * 1e6,
                "bare_p50_ms": med["bare"]["p50"] * 1e3,
                "hedged_p50_ms": med["hedged"]["p50"] * 1e3,
                "bare_p99_ms": med["bare"]["p99"] * 1e3,
                "hedged_p99_ms": med["hedged"]["p99"] * 1e3,
                "p99_added_ms": (med["hedged"]["p99"] - med["bare"]["p99"]) * 1e3,
            }
        )
        print(f"  concurrency {level} done", flush=True)
    return results


# -- 3b. what concurrency costs: objects held per request, and the collector -------------


async def gc_pressure(parked: int, level: int, n: int) -> dict[str, Any]:
    """GC-tracked objects held per in-flight request; CPU at ``level`` in flight, GC on/off."""
    out: dict[str, Any] = {}
    gate = anyio.Event()

    async def parked_handler(request: httpx.Request) -> httpx.Response:
        await gate.wait()
        return httpx.Response(200, content=b"ok")

    async def sleepy(request: httpx.Request) -> httpx.Response:
        await anyio.sleep(0.010)
        return httpx.Response(200, content=b"ok")

    def make(variant: str, handler: Any) -> httpx.AsyncBaseTransport:
        inner = httpx.MockTransport(handler)
        if variant == "bare":
            return inner
        return HedgedTransport(inner, replicas=REPLICAS, delay=5.0, metrics=False)

    for variant in ("bare", "hedged"):
        gate = anyio.Event()
        async with httpx.AsyncClient(
            transport=make(variant, parked_handler), base_url=SERVICE
        ) as client:
            gc.collect()
            before = len(gc.get_objects())
            async with anyio.create_task_group() as tg:
                for _ in range(parked):
                    tg.start_soon(client.get, "/item")
                await anyio.sleep(0.5)
                gc.collect()
                during = len(gc.get_objects())
                gate.set()
        out[f"{variant}_gc_objects_per_in_flight_request"] = (during - before) / parked
    for collector in ("on", "off"):
        for variant in ("bare", "hedged"):
            async with httpx.AsyncClient(
                transport=make(variant, sleepy), base_url=SERVICE
            ) as client:

                async def one(i: int, client: httpx.AsyncClient = client) -> None:
                    await client.get("/item")

                await run_concurrently(level, level, one)
                gc.collect()
                if collector == "off":
                    gc.disable()
                try:
                    c0 = time.process_time()
                    await run_concurrently(n, level, one)
                    cpu = (time.process_time() - c0) / n
                finally:
                    gc.enable()
            out[f"{variant}_cpu_us_at_{level}_in_flight_gc_{collector}"] = cpu * 1e6
    return out


# -- 4. routes -------------------------------------------------------------------------------


async def routes_cost(route_counts: list[int], n: int, reps: int) -> list[dict[str, Any]]:
    from prometheus_client import CollectorRegistry

    def make(routes: int, metrics: bool) -> httpx.AsyncBaseTransport:
        inner = httpx.MockTransport(small_response)
        if routes == 0:
            return inner
        return HedgedTransport(
            inner,
            replicas=REPLICAS,
            route_key=lambda request: request.url.path,
            metrics=CollectorRegistry() if metrics else False,
        )  # default AdaptiveDelay, default budget

    async def drive(transport: httpx.AsyncBaseTransport, routes: int, count: int) -> float:
        paths = [f"/r/{i}" for i in range(max(routes, 1))]
        async with httpx.AsyncClient(transport=transport, base_url=SERVICE) as client:
            for path in paths:  # create every route before timing
                await client.get(path)
            start = time.process_time()
            for i in range(count):
                await client.get(paths[i % len(paths)])
            return (time.process_time() - start) / count

    variants = [(0, False)] + [(r, m) for m in (False, True) for r in route_counts]
    cpu: dict[tuple[int, bool], list[float]] = {v: [] for v in variants}
    for rep in range(reps):
        for v in variants if rep % 2 == 0 else list(reversed(variants)):
            cpu[v].append(await drive(make(*v), v[0], n))
    results = []
    bare = statistics.median(cpu[(0, False)])
    for routes, metrics in variants:
        # Memory retained by the transport once every route has been seen 20 times.
        gc.collect()
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        transport = make(routes, metrics)
        await drive(transport, routes, 20 * max(routes, 1))
        gc.collect()
        retained = tracemalloc.get_traced_memory()[0] - base
        tracemalloc.stop()
        del transport
        value = statistics.median(cpu[(routes, metrics)])
        results.append(
            {
                "routes": routes,
                "metrics": metrics,
                "cpu_us_per_request": value * 1e6,
                "ratio_to_bare": value / bare,
                "retained_kb": retained / 1024,
                "retained_kb_per_route": retained / 1024 / max(routes, 1),
            }
        )
    return results


# -- main -------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--requests", type=int, default=None, help="long-run requests")
    parser.add_argument(
        "--skip", nargs="*", default=[], choices=("long", "pool", "sweep", "routes")
    )
    parser.add_argument("--output", default="memory", help="results/<output>.json")
    parser.add_argument("--backend", nargs="*", default=["asyncio", "trio"], help="long run")
    args = parser.parse_args()
    total = args.requests or (50_000 if args.quick else 500_000)
    out: dict[str, Any] = {"command": command(), "machine": machine()}
    started = time.perf_counter()
    if "long" not in args.skip:
        out["long_run"] = {}
        for backend in args.backend:
            print(f"[long run, {backend}]", flush=True)
            out["long_run"][backend] = anyio.run(long_run, total, 50, backend=backend)
            done = time.perf_counter() - started
            print(f"[long run, {backend}] done at {done:.0f} s", flush=True)
    if "pool" not in args.skip:
        out["pool"] = anyio.run(pool_after_hedging, 1_000 if args.quick else 3_000)
        print(f"[pool] done at {time.perf_counter() - started:.0f} s", flush=True)
    if "sweep" not in args.skip:
        levels = [10, 100, 1_000] if args.quick else [10, 100, 1_000, 5_000]
        out["concurrency_sweep"] = anyio.run(concurrency_sweep, levels, 2)
        print(f"[sweep] done at {time.perf_counter() - started:.0f} s", flush=True)
    if "sweep" not in args.skip:
        out["gc_pressure"] = anyio.run(gc_pressure, 2_000, 5_000, 10_000)
        print(f"[gc] done at {time.perf_counter() - started:.0f} s", flush=True)
    if "routes" not in args.skip:
        out["routes"] = anyio.run(routes_cost, [1, 100, 1_000], 3_000, 3)
        print(f"[routes] done at {time.perf_counter() - started:.0f} s", flush=True)
    out["seconds"] = time.perf_counter() - started

    for backend, lr in out.get("long_run", {}).items():
        print_table(
            f"1. Long run, {backend}: {lr['requests']} requests in-process, 5 % slow "
            "(hedged), concurrency 50",
            ["requests", "RSS MB", "live tasks", "hedges", "seconds"],
            [
                [c["requests"], c["rss_mb"], c["live_tasks"], c["hedges"], c["seconds"]]
                for c in lr["checkpoints"]
            ],
        )
        first, last = lr["checkpoints"][0], lr["checkpoints"][-1]
        print(
            f"{backend}: RSS growth after warm-up {lr['rss_growth_after_warmup_mb']:+.2f} MB "
            f"(peak {lr['rss_peak_growth_after_warmup_mb']:+.2f}) <= 10 MB -> {lr['rss_target']}; "
            f"live tasks before any request {lr['baseline_tasks']}, after warm-up "
            f"{first['live_tasks']}, at the end {last['live_tasks']}: no growth -> "
            f"{lr['tasks_target']}; hedges {lr['hedges_total_metric']:.0f}, backups won "
            f"{lr['hedge_wins_metric']:.0f}, losers cancelled {lr['cancelled_attempts_metric']:.0f}"
            f", lost {lr['lost_attempts_metric']:.0f}"
        )
    if "pool" in out:
        p = out["pool"]
        print(
            f"2. Pool after {p['requests']} requests ({p['hedged_requests']} hedged, "
            f"{p['server_abandoned']} abandoned server-side): connections {p['pool_connections']}, "
            f"queued {p['pool_queued_requests']}, server in flight {p['server_in_flight_after']} "
            f"-> {p['pool_idle']}"
        )
    if "concurrency_sweep" in out:
        print_table(
            "3. Concurrency sweep: in-process handler sleeping 10 ms; medians of interleaved reps",
            [
                "in flight",
                "requests",
                "bare µs CPU",
                "hedged µs CPU",
                "added µs",
                "bare p99 ms",
                "hedged p99 ms",
                "p99 added ms",
            ],
            [
                [
                    r["concurrency"],
                    r["requests"],
                    r["bare_cpu_us"],
                    r["hedged_cpu_us"],
                    r["cpu_added_us"],
                    r["bare_p99_ms"],
                    r["hedged_p99_ms"],
                    r["p99_added_ms"],
                ]
                for r in out["concurrency_sweep"]
            ],
        )
    if "gc_pressure" in out:
        print_table(
            "3b. Objects held per in-flight request; CPU per request at 5,000 in flight",
            ["measurement", "value"],
            [[k, v] for k, v in out["gc_pressure"].items()],
        )
    if "routes" in out:
        print_table(
            "4. Routes (route_key=path, default AdaptiveDelay): CPU per request, memory retained",
            ["routes", "metrics", "µs/request", "× bare", "retained KB", "KB/route"],
            [
                [
                    "bare" if r["routes"] == 0 else r["routes"],
                    r["metrics"],
                    r["cpu_us_per_request"],
                    f"{r['ratio_to_bare']:.2f}",
                    r["retained_kb"],
                    r["retained_kb_per_route"],
                ]
                for r in out["routes"]
            ],
        )
    path = write_json(args.output, out)
    print(f"wrote {path} in {out['seconds']:.0f} s")


if __name__ == "__main__":
    main()
