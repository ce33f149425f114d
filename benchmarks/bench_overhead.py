"""What HedgedTransport costs next to bare httpx when no hedge fires.

Run from the repository root::

    .venv/bin/python benchmarks/bench_overhead.py            # full, about 5 min
    .venv/bin/python benchmarks/bench_overhead.py --quick    # fewer repetitions, under 2 min
    .venv/bin/python benchmarks/bench_overhead.py --pieces   # also the transport's pieces
    .venv/bin/python benchmarks/bench_overhead.py --profile  # also pyinstrument the hot path

(a) **CPU per request in-process.** ``httpx.AsyncClient`` over an instant
``httpx.MockTransport`` (a 2-byte 200 response), sequential requests,
``time.process_time()`` per request, on asyncio and on trio. Variants, interleaved in
one run (the order reversed every repetition, so the shared machine's drift falls on
all of them alike):

- ``bare``: the MockTransport alone;
- ``floor, routing``: a do-nothing wrapper that sends each request to one of three
  replicas (a new ``httpx.Request`` with the replica's URL);
- ``floor, routing + cancel scope``: the same, the inner call under one anyio
  ``CancelScope``. This is **the floor**: the least any hedging transport does on a
  request that is never hedged (route it, and be able to interrupt it when a backup
  wins);
- ``hedged, metrics off`` / ``hedged, metrics on``: ``HedgedTransport`` with three
  replicas, a fixed 5 s delay (the longest ``FixedDelay`` allows by default; no hedge
  fires), ``metrics=False`` / ``metrics=CollectorRegistry()``;
- ``hedged, adaptive delay, metrics off``: the defaults (``AdaptiveDelay``).

Every figure is the median over repetitions of a per-repetition quantity (µs per
request, ratio to bare, µs above the floor), so each comparison is between variants
measured minutes apart at most. Targets (issue 15): hedged, metrics off, at most
**10 µs above the floor**; metrics on, at most **5 µs more** than metrics off.

(b) **Loopback at 50 in flight.** ``FakeService(latency=0, mode="process")``, three
replicas; bare httpx (a random replica per request), ``HedgedTransport`` (fixed 1 s
delay, metrics off) and the floor over ``AsyncHTTPTransport``, in rounds whose order
rotates. Targets: throughput hedged / bare >= 0.97; p50 (client-side) within 3 %.

(c) **Per-request costs of the delay policy**: taken from
``benchmarks/results/delay_cost.json`` (``benchmarks/bench_delay_cost.py``), not
re-measured here.

(d) With ``--pieces``: ``handle_async_request`` called directly (no AsyncClient) on
variants of the transport (no replicas, no attempt header, ``max_hedges=0``, the
adaptive delay, metrics on), to say where the µs above the floor go.

Results: printed, and written to ``benchmarks/results/overhead.json`` (the profile, with
``--profile``, to ``benchmarks/results/overhead_profile.txt``).
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import time
from typing import Any

import anyio
import httpx
from _common import (
    RESULTS_DIR,
    SERVICE,
    Forward,
    command,
    machine,
    print_table,
    quantile,
    run_concurrently,
    small_response,
    verdict,
    write_json,
)

from hedgeclient import HedgedTransport
from hedgeclient.testing import FakeService

REPLICAS = {SERVICE: ["http://10.0.0.1:8080", "http://10.0.0.2:8080", "http://10.0.0.3:8080"]}
BARE = "bare"
FLOOR_ROUTE = "floor, routing"
FLOOR_SCOPE = "floor, routing + cancel scope"
OFF = "hedged, metrics off"
ON = "hedged, metrics on"
ADAPTIVE = "hedged, adaptive delay, metrics off"
VARIANTS = [BARE, FLOOR_ROUTE, FLOOR_SCOPE, OFF, ON, ADAPTIVE]
ABOVE_FLOOR_US = 10.0  # target: hedged, metrics off, at most this far above the floor
METRICS_US = 5.0  # target: metrics on costs at most this much more than metrics off
LOOPBACK_THROUGHPUT = 0.97  # target: hedged / bare at 50 in flight, at least
LOOPBACK_P50 = 0.03  # target: hedged p50 within this fraction of bare


# -- (a) in-process CPU per request ------------------------------------------------------


def make_transport(variant: str) -> httpx.AsyncBaseTransport:
    inner = httpx.MockTransport(small_response)
    if variant == BARE:
        return inner
    if variant == FLOOR_ROUTE:
        return Forward(inner, "_replace", targets=REPLICAS[SERVICE])
    if variant == FLOOR_SCOPE:
        return Forward(inner, "_replace", cancel_scope=True, targets=REPLICAS[SERVICE])
    if variant == OFF:
        return HedgedTransport(inner, replicas=REPLICAS, delay=5.0, metrics=False)
    if variant == ON:
        from prometheus_client import CollectorRegistry

        return HedgedTransport(inner, replicas=REPLICAS, delay=5.0, metrics=CollectorRegistry())
    if variant == ADAPTIVE:
        return HedgedTransport(inner, replicas=REPLICAS, metrics=False)
    raise ValueError(variant)


async def cpu_per_request(transport: httpx.AsyncBaseTransport, n: int) -> float:
    """Seconds of CPU per sequential request through an AsyncClient over ``transport``."""
    async with httpx.AsyncClient(transport=transport, base_url=SERVICE) as client:
        for _ in range(200):  # warm-up: caches, the adaptive route, metric children
            await client.get("/item")
        start = time.process_time()
        for _ in range(n):
            await client.get("/item")
        return (time.process_time() - start) / n


def _median_of(a: list[float], b: list[float], op: Any) -> float:
    return statistics.median([op(x, y) for x, y in zip(a, b, strict=True)])


async def in_process(reps: int, n: int) -> dict[str, Any]:
    samples: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for rep in range(reps):
        for variant in VARIANTS if rep % 2 == 0 else list(reversed(VARIANTS)):
            samples[variant].append(await cpu_per_request(make_transport(variant), n))
    bare, floor = samples[BARE], samples[FLOOR_SCOPE]
    result: dict[str, Any] = {}
    for variant, values in samples.items():
        result[variant] = {
            "us_per_request_median": statistics.median(values) * 1e6,
            "us_per_request_all": [v * 1e6 for v in values],
            "ratio_to_bare_median": _median_of(values, bare, lambda v, b: v / b),
            "us_added_to_bare_median": _median_of(values, bare, lambda v, b: (v - b) * 1e6),
            "us_above_floor_median": _median_of(values, floor, lambda v, f: (v - f) * 1e6),
        }
    off_on = _median_of(samples[ON], samples[OFF], lambda on, off: (on - off) * 1e6)
    result["targets"] = {
        "us_above_floor_metrics_off": result[OFF]["us_above_floor_median"],
        "above_floor_verdict": verdict(result[OFF]["us_above_floor_median"] <= ABOVE_FLOOR_US),
        "us_metrics_on_minus_off": off_on,
        "metrics_verdict": verdict(off_on <= METRICS_US),
    }
    return result


# -- (b) loopback ------------------------------------------------------------------------


class _GcTimer:
    """Seconds spent in the cyclic garbage collector, and its collections, per variant."""

    def __init__(self, names: list[str]) -> None:
        self.seconds = dict.fromkeys(names, 0.0)
        self.collections = {name: [0, 0, 0] for name in names}
        self.current: str | None = None
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        elif self.current is not None:
            self.seconds[self.current] += time.perf_counter() - self._started
            self.collections[self.current][info["generation"]] += 1


async def loopback(total: int, rounds: int, concurrency: int) -> dict[str, Any]:
    limits = httpx.Limits(max_connections=200, max_keepalive_connections=200)
    rng = random.Random(3)
    out: dict[str, Any] = {}
    with FakeService(replicas=3, latency=0.0, mode="process", seed=5, keep=1000) as svc:
        origins = svc.origins
        bare = httpx.AsyncClient(limits=limits)
        hedged = httpx.AsyncClient(
            transport=HedgedTransport(
                httpx.AsyncHTTPTransport(limits=limits),
                replicas={SERVICE: origins},
                delay=1.0,
                metrics=False,
            ),
            base_url=SERVICE,
        )
        floor = httpx.AsyncClient(
            transport=Forward(
                httpx.AsyncHTTPTransport(limits=limits),
                "_replace",
                cancel_scope=True,
                targets=origins,
            ),
            base_url=SERVICE,
        )
        clients = {"bare": bare, "hedged": hedged, FLOOR_SCOPE: floor}
        latencies: dict[str, list[float]] = {name: [] for name in clients}
        wall = dict.fromkeys(clients, 0.0)
        cpu = dict.fromkeys(clients, 0.0)
        per_round: dict[str, list[float]] = {name: [] for name in clients}
        gc_timer = _GcTimer(list(clients))

        async def run(name: str, n: int, record: bool) -> None:
            client = clients[name]
            sink = latencies[name]

            async def one(i: int) -> None:
                url = rng.choice(origins) + "/" if name == "bare" else "/"
                start = time.perf_counter()
                response = await client.get(url)
                if record:
                    sink.append(time.perf_counter() - start)
                response.raise_for_status()

            c0, w0 = time.process_time(), time.perf_counter()
            gc_timer.current = name if record else None
            await run_concurrently(n, concurrency, one)
            gc_timer.current = None
            if record:
                w = time.perf_counter() - w0
                wall[name] += w
                cpu[name] += time.process_time() - c0
                per_round[name].append(n / w)

        gc.callbacks.append(gc_timer)
        try:
            async with bare, hedged, floor:  # entered, as most code does
                for name in clients:
                    await run(name, 500, record=False)  # open the connections
                per = max(1, total // rounds)
                order = list(clients)
                for r in range(rounds):  # rotate: each variant runs first, second, ... in turn
                    for name in order[r % len(order) :] + order[: r % len(order)]:
                        await run(name, per, record=True)
        finally:
            gc.callbacks.remove(gc_timer)
        stats = svc.stats()
    for name in clients:
        n = len(latencies[name])
        out[name] = {
            "requests": n,
            "throughput_rps": n / wall[name],
            "p50_ms": quantile(latencies[name], 0.5) * 1000,
            "p99_ms": quantile(latencies[name], 0.99) * 1000,
            "cpu_us_per_request": cpu[name] / n * 1e6,
            "gc_us_per_request": gc_timer.seconds[name] / n * 1e6,
            "gc_collections_by_generation": gc_timer.collections[name],
            "throughput_per_round": per_round[name],
        }
    ratios = [h / b for h, b in zip(per_round["hedged"], per_round["bare"], strict=True)]
    out["throughput_ratio"] = out["hedged"]["throughput_rps"] / out["bare"]["throughput_rps"]
    out["throughput_ratio_median_of_rounds"] = statistics.median(ratios)
    out["p50_ratio"] = out["hedged"]["p50_ms"] / out["bare"]["p50_ms"]
    out["throughput_verdict"] = verdict(out["throughput_ratio"] >= LOOPBACK_THROUGHPUT)
    out["p50_verdict"] = verdict(abs(out["p50_ratio"] - 1) <= LOOPBACK_P50)
    out["floor_throughput_ratio"] = (
        out[FLOOR_SCOPE]["throughput_rps"] / out["bare"]["throughput_rps"]
    )
    out["server_received"] = stats.received
    return out


async def pieces(reps: int, n: int) -> dict[str, float]:
    """Whole-transport CPU time of the no-hedge path, pieces swapped out, µs per call.

    ``handle_async_request`` called directly (no AsyncClient), variants interleaved,
    median over ``reps`` repetitions of ``n`` calls.
    """
    from prometheus_client import CollectorRegistry

    inner = httpx.MockTransport(small_response)
    request = httpx.Request("GET", "http://svc/item")
    variants: dict[str, httpx.AsyncBaseTransport] = {
        "inner MockTransport alone": inner,
        "do-nothing wrapper": Forward(inner),
        "wrapper + URL rewrite by url.copy_with + new Request": Forward(inner, "copy_with"),
        "wrapper + URL rewrite by ParseResult._replace + new Request": Forward(inner, "_replace"),
        "the floor: _replace rewrite + new Request + cancel scope": Forward(
            inner, "_replace", cancel_scope=True
        ),
        "HedgedTransport, replicas, fixed 5 s, metrics off": HedgedTransport(
            inner, replicas=REPLICAS, delay=5.0, metrics=False
        ),
        "HedgedTransport, no replicas (no URL rewrite)": HedgedTransport(
            inner, delay=5.0, metrics=False
        ),
        "HedgedTransport, replicas, attempt_header=None": HedgedTransport(
            inner, replicas=REPLICAS, delay=5.0, metrics=False, attempt_header=None
        ),
        "HedgedTransport, replicas, max_hedges=0 (never hedges)": (
            HedgedTransport(inner, replicas=REPLICAS, delay=5.0, metrics=False, max_hedges=0)
        ),
        "HedgedTransport, replicas, AdaptiveDelay": HedgedTransport(
            inner, replicas=REPLICAS, metrics=False
        ),
        "HedgedTransport, replicas, fixed 5 s, metrics on": HedgedTransport(
            inner, replicas=REPLICAS, delay=5.0, metrics=CollectorRegistry()
        ),
    }
    samples: dict[str, list[float]] = {name: [] for name in variants}
    await _time_variants(variants, samples, request, reps, n)
    return {name: statistics.median(values) for name, values in samples.items()}


async def _time_variants(
    variants: dict[str, httpx.AsyncBaseTransport],
    samples: dict[str, list[float]],
    request: httpx.Request,
    reps: int,
    n: int,
) -> None:
    for rep in range(reps):
        names = list(variants) if rep % 2 == 0 else list(reversed(variants))
        for name in names:
            transport = variants[name]
            for _ in range(100):
                await transport.handle_async_request(request)
            start = time.process_time()
            for _ in range(n):
                await transport.handle_async_request(request)
            samples[name].append((time.process_time() - start) / n * 1e6)


# -- main -----------------------------------------------------------------------------------


def run_backend(backend: str, args: argparse.Namespace, out: dict[str, Any]) -> None:
    async def main() -> None:
        out["in_process"][backend] = await in_process(args.reps, args.n)
        if args.pieces:
            out["pieces_us"][backend] = await pieces(args.reps, args.n)

    anyio.run(main, backend=backend)


def profile(args: argparse.Namespace) -> str:
    from pyinstrument import Profiler

    transport = make_transport(OFF)
    path = RESULTS_DIR / "overhead_profile.txt"

    async def main() -> None:
        async with httpx.AsyncClient(transport=transport, base_url=SERVICE) as client:
            for _ in range(500):
                await client.get("/item")
            profiler = Profiler(interval=0.0001, async_mode="disabled")
            profiler.start()
            for _ in range(args.n * 2):
                await client.get("/item")
            profiler.stop()
            path.write_text(profiler.output_text(unicode=False, color=False, show_all=False))
            print(f"profile written to {path}")

    anyio.run(main, backend="asyncio")
    return str(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (under 2 min)")
    parser.add_argument("--pieces", action="store_true", help="(d): the transport's pieces")
    parser.add_argument("--profile", action="store_true", help="pyinstrument the hot path")
    parser.add_argument("--skip-loopback", action="store_true")
    parser.add_argument("--output", default="overhead", help="results/<output>.json")
    args = parser.parse_args()
    args.reps = 5 if args.quick else 9
    args.n = 2_000 if args.quick else 5_000
    loop_total = 4_500 if args.quick else 18_000
    loop_rounds = 6 if args.quick else 9  # a multiple of the 3 variants (rotated order)
    out: dict[str, Any] = {
        "command": command(),
        "machine": machine(),
        "settings": {
            "in_process_requests_per_rep": args.n,
            "in_process_reps": args.reps,
            "loopback_requests_per_variant": loop_total,
            "loopback_rounds": loop_rounds,
            "loopback_concurrency": 50,
        },
        "targets": {
            "in_process_us_above_floor_metrics_off": ABOVE_FLOOR_US,
            "in_process_us_metrics_on_minus_off": METRICS_US,
            "loopback_throughput_ratio_min": LOOPBACK_THROUGHPUT,
            "loopback_p50_ratio_within": LOOPBACK_P50,
        },
        "in_process": {},
        "pieces_us": {},
    }
    started = time.perf_counter()
    for backend in ("asyncio", "trio"):
        run_backend(backend, args, out)
        print(f"[in-process {backend}] done at {time.perf_counter() - started:.0f} s", flush=True)
    if not args.skip_loopback:
        out["loopback"] = anyio.run(loopback, loop_total, loop_rounds, 50)
        print(f"[loopback] done at {time.perf_counter() - started:.0f} s", flush=True)
    delay_cost = RESULTS_DIR / "delay_cost.json"
    if delay_cost.exists():
        data = json.loads(delay_cost.read_text())
        out["delay_policy_costs_from_bench_delay_cost"] = {
            m["name"]: m["value"]
            for m in data.get("measurements", [])
            if m["name"].startswith(("AdaptiveDelay", "HedgeBudget"))
        }
    if args.profile:
        out["profile"] = profile(args)
    out["seconds"] = time.perf_counter() - started
    report(out)
    path = write_json(args.output, out)
    print(f"wrote {path} in {out['seconds']:.0f} s")


def report(out: dict[str, Any]) -> None:
    rows = []
    for backend, result in out["in_process"].items():
        for variant in VARIANTS:
            v = result[variant]
            rows.append(
                [
                    backend,
                    variant,
                    f"{v['us_per_request_median']:.1f}",
                    f"{v['ratio_to_bare_median']:.3f}",
                    f"{v['us_added_to_bare_median']:+.1f}",
                    f"{v['us_above_floor_median']:+.1f}",
                ]
            )
    print_table(
        "(a) CPU per request in-process (MockTransport, sequential); medians of per-rep values",
        ["backend", "variant", "µs/request", "× bare", "µs vs bare", "µs vs floor"],
        rows,
    )
    for backend, result in out["in_process"].items():
        t = result["targets"]
        print(
            f"{backend}: hedged, metrics off: {t['us_above_floor_metrics_off']:+.1f} µs above "
            f"the floor (<= {ABOVE_FLOOR_US:.0f}) -> {t['above_floor_verdict']}; metrics on: "
            f"{t['us_metrics_on_minus_off']:+.1f} µs more (<= {METRICS_US:.0f}) -> "
            f"{t['metrics_verdict']}"
        )
    if "loopback" in out:
        lb = out["loopback"]
        print_table(
            "(b) Loopback, FakeService latency 0, concurrency 50",
            ["variant", "requests", "req/s", "p50 ms", "p99 ms", "CPU µs/req", "of it GC"],
            [
                [
                    name,
                    lb[name]["requests"],
                    lb[name]["throughput_rps"],
                    lb[name]["p50_ms"],
                    lb[name]["p99_ms"],
                    lb[name]["cpu_us_per_request"],
                    lb[name]["gc_us_per_request"],
                ]
                for name in ("bare", "hedged", FLOOR_SCOPE)
            ],
        )
        print(
            f"throughput hedged/bare = {lb['throughput_ratio']:.3f} "
            f"(median of rounds {lb['throughput_ratio_median_of_rounds']:.3f}; "
            f">= {LOOPBACK_THROUGHPUT}) -> {lb['throughput_verdict']}; p50 hedged/bare = "
            f"{lb['p50_ratio']:.3f} (within {LOOPBACK_P50:.0%}) -> {lb['p50_verdict']}"
        )
    for backend, costs in out["pieces_us"].items():
        print_table(
            f"(d) transports called directly, µs of CPU per call ({backend}; median of "
            "interleaved reps)",
            ["transport", "µs"],
            [[k, f"{v:.2f}"] for k, v in costs.items()],
        )
    if "delay_policy_costs_from_bench_delay_cost" in out:
        print_table(
            "(c) delay policy and budget, from results/delay_cost.json",
            ["measurement", "µs/call"],
            [[k, f"{v:.3f}"] for k, v in out["delay_policy_costs_from_bench_delay_cost"].items()],
        )


if __name__ == "__main__":
    main()
