"""What HedgedTransport costs next to bare httpx when no hedge fires.

Run from the repository root::

    .venv/bin/python benchmarks/bench_overhead.py            # full
    .venv/bin/python benchmarks/bench_overhead.py --quick    # fewer repetitions
    .venv/bin/python benchmarks/bench_overhead.py --profile  # also pyinstrument the hot path

(a) **CPU per request in-process.** ``httpx.AsyncClient`` over an instant
``httpx.MockTransport`` (a 2-byte 200 response), bare, and wrapped in
``HedgedTransport`` with three configured replicas and a fixed 10 s delay (no hedge
ever fires), metrics off (``metrics=False``) and on (``metrics=CollectorRegistry()``),
plus the defaults (``AdaptiveDelay``, metrics off) and ``scheduler_task=True`` (the
backup scheduler: no task per request). Requests are sequential;
``time.process_time()`` per request. Variants are interleaved (bare, hedged, bare,
hedged, ...) and the reported ratio is the median of the per-repetition ratios, so the
shared machine's drift cancels. Run on asyncio and on trio. Target: hedged / bare <=
1.10.

(b) **Loopback.** ``FakeService(latency=0, mode="process")``, 3 replicas, requests at
concurrency 50, bare httpx (a random replica per request) against ``HedgedTransport``
(fixed 1 s delay, metrics off), interleaved in rounds. Targets: throughput hedged /
bare >= 0.95; p50 (client-side) within 5 %.

(c) **Per-request costs of the delay policy**: taken from
``benchmarks/results/delay_cost.json`` (``benchmarks/bench_delay_cost.py``), not
re-measured here.

(d) **Candidates for removal**: micro-benchmarks of each piece of the no-hedge path, in
µs per call on the running event loop, so the lead can weigh each change.

Results: printed, and written to ``benchmarks/results/overhead.json`` (the profile, with
``--profile``, to ``benchmarks/results/overhead_profile.txt``).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import random
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import anyio
import anyio.lowlevel
import httpx
from _common import (
    RESULTS_DIR,
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

from hedgeclient import FixedDelay, HedgedTransport
from hedgeclient.testing import FakeService

REPLICAS = {SERVICE: ["http://10.0.0.1:8080", "http://10.0.0.2:8080", "http://10.0.0.3:8080"]}


# -- (a) in-process CPU per request ------------------------------------------------------


def make_transport(variant: str) -> httpx.AsyncBaseTransport:
    inner = httpx.MockTransport(small_response)
    if variant == "bare":
        return inner
    if variant == "hedged, metrics off":
        return HedgedTransport(inner, replicas=REPLICAS, delay=10.0, metrics=False)
    if variant == "hedged, metrics on":
        from prometheus_client import CollectorRegistry

        return HedgedTransport(inner, replicas=REPLICAS, delay=10.0, metrics=CollectorRegistry())
    if variant == "hedged, defaults (adaptive), metrics off":
        return HedgedTransport(inner, replicas=REPLICAS, metrics=False)
    if variant == "hedged, scheduler_task=True, metrics off":
        return HedgedTransport(
            inner, replicas=REPLICAS, delay=10.0, metrics=False, scheduler_task=True
        )
    if variant == "hedged, scheduler_task=True, metrics on":
        from prometheus_client import CollectorRegistry

        return HedgedTransport(
            inner, replicas=REPLICAS, delay=10.0, metrics=CollectorRegistry(), scheduler_task=True
        )
    if variant == FLOOR_ROUTE:
        return _Forward(inner, "_replace")
    if variant == FLOOR_SCOPE:
        return _Forward(inner, "_replace", cancel_scope=True)
    raise ValueError(variant)


# The least any hedging transport does on a request that is never hedged: send it to a
# replica (a new request with the replica's URL) and run it under a cancel scope, so a
# backup that wins can interrupt it. Only the target's (a) ratio is measured against it.
FLOOR_ROUTE = "floor: wrapper, request rewritten to a replica"
FLOOR_SCOPE = "floor: rewritten + under a cancel scope"


async def cpu_per_request(transport: httpx.AsyncBaseTransport, n: int) -> float:
    """Seconds of CPU per sequential request through an AsyncClient over ``transport``."""
    async with httpx.AsyncClient(transport=transport, base_url=SERVICE) as client:
        for _ in range(200):  # warm-up: caches, the adaptive route, metric children
            await client.get("/item")
        start = time.process_time()
        for _ in range(n):
            await client.get("/item")
        return (time.process_time() - start) / n


async def in_process(variants: list[str], reps: int, n: int) -> dict[str, Any]:
    samples: dict[str, list[float]] = {v: [] for v in variants}
    errors: dict[str, str] = {}
    for rep in range(reps):
        order = variants if rep % 2 == 0 else list(reversed(variants))
        for variant in order:
            if variant in errors:
                continue
            try:
                transport = make_transport(variant)
            except Exception as exc:  # report a variant that cannot be built
                errors[variant] = f"{type(exc).__name__}: {exc}"
                continue
            samples[variant].append(await cpu_per_request(transport, n))
    bare = samples["bare"]
    result: dict[str, Any] = {"errors": errors, "variants": {}}
    for variant, values in samples.items():
        if not values:
            continue
        ratios = [v / b for v, b in zip(values, bare, strict=True)]
        result["variants"][variant] = {
            "us_per_request_median": statistics.median(values) * 1e6,
            "us_per_request_all": [v * 1e6 for v in values],
            "ratio_to_bare_median": statistics.median(ratios),
            "ratio_to_bare_all": ratios,
            "us_added_median": statistics.median(
                [(v - b) * 1e6 for v, b in zip(values, bare, strict=True)]
            ),
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
        hedged, scheduled = (
            httpx.AsyncClient(
                transport=HedgedTransport(
                    httpx.AsyncHTTPTransport(limits=limits),
                    replicas={SERVICE: origins},
                    delay=1.0,
                    metrics=False,
                    scheduler_task=scheduler_task,
                ),
                base_url=SERVICE,
            )
            for scheduler_task in (False, True)
        )
        floor = httpx.AsyncClient(
            transport=_Forward(
                httpx.AsyncHTTPTransport(limits=limits),
                "_replace",
                cancel_scope=True,
                targets=origins,
            ),
            base_url=SERVICE,
        )
        clients = {
            "bare": bare,
            "hedged": hedged,
            "hedged, scheduler_task=True": scheduled,
            FLOOR_SCOPE: floor,
        }
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
            async with bare, hedged, scheduled, floor:  # entered, as most code does
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
    sched = out["hedged, scheduler_task=True"]
    out["scheduler_task_throughput_ratio"] = sched["throughput_rps"] / out["bare"]["throughput_rps"]
    out["scheduler_task_p50_ratio"] = sched["p50_ms"] / out["bare"]["p50_ms"]
    out["floor_throughput_ratio"] = (
        out[FLOOR_SCOPE]["throughput_rps"] / out["bare"]["throughput_rps"]
    )
    out["server_received"] = stats.received
    return out


# -- (d) micro-costs of the pieces of the no-hedge path -----------------------------------


def per_call(fn: Callable[[], object], n: int = 20_000, repeats: int = 5) -> float:
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - start) / n)
    return best * 1e6


async def per_await(fn: Callable[[], Awaitable[object]], n: int = 3_000, repeats: int = 9) -> float:
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(n):
            await fn()
        best = min(best, (time.perf_counter() - start) / n)
    return best * 1e6


async def micro_costs() -> dict[str, float]:
    """µs per call of each candidate piece, measured on the running loop."""
    from hedgeclient import PowerOfTwoChoices
    from hedgeclient._events import HedgeInfo

    costs: dict[str, float] = {}
    request = httpx.Request("GET", "http://svc/item?x=1", headers={"accept": "*/*"})
    url = request.url
    response = httpx.Response(200, content=b"ok")

    async def inner() -> httpx.Response:
        return response

    async def direct() -> httpx.Response:
        return await inner()

    async def task_group_race() -> httpx.Response | None:
        # The shape of Race._run_hedged on the no-hedge path: a task group, one task for
        # the primary, an Event, and a CancelScope with the hedge deadline around wait().
        changed = anyio.Event()
        box: list[httpx.Response] = []

        async def attempt() -> None:
            box.append(await inner())
            changed.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(attempt)
            with anyio.CancelScope(deadline=anyio.current_time() + 10.0):
                await changed.wait()
            tg.cancel_scope.cancel()
        return box[0]

    async def task_group_only() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(inner)

    async def cancel_scope_only() -> None:
        with anyio.CancelScope():
            await inner()

    async def shielded_scope() -> None:
        with anyio.CancelScope(shield=True):  # noqa: ASYNC100 - the scope's own cost
            pass

    async def deadline_wait_set_event() -> None:
        event = anyio.Event()
        event.set()
        with anyio.CancelScope(deadline=anyio.current_time() + 10.0):
            await event.wait()

    async def task_group_named() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(inner, name="attempt")

    async def task_group_cancel_after() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(inner, name="attempt")
            await anyio.lowlevel.checkpoint()  # the child runs and finishes
            tg.cancel_scope.cancel()  # nothing left to cancel

    async def task_group_no_cancel_after() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(inner, name="attempt")
            await anyio.lowlevel.checkpoint()

    costs["await inner transport directly (baseline)"] = await per_await(direct)
    costs["task group + 1 task + Event + deadline scope (the race, no hedge)"] = await per_await(
        task_group_race
    )
    costs["task group + 1 task alone"] = await per_await(task_group_only)
    costs["task group + 1 task, start_soon(name=...)"] = await per_await(task_group_named)
    costs["task group, child done, then cancel_scope.cancel()"] = await per_await(
        task_group_cancel_after
    )
    costs["task group, child done, no cancel()"] = await per_await(task_group_no_cancel_after)
    costs["CancelScope() around the await (transport's close scope)"] = await per_await(
        cancel_scope_only
    )
    costs["shielded CancelScope, nothing to close (_close_losers)"] = await per_await(
        shielded_scope
    )
    costs["Event + deadline CancelScope + wait on a set Event"] = await per_await(
        deadline_wait_set_event
    )
    costs["anyio.current_time()"] = per_call(anyio.current_time)
    costs["url.copy_with(scheme, host, port)"] = per_call(
        lambda: url.copy_with(scheme="http", host="10.0.0.1", port=8080)
    )

    def replace_components() -> httpx.URL:
        new = httpx.URL.__new__(httpx.URL)
        new._uri_reference = url._uri_reference._replace(scheme="http", host="10.0.0.1", port=8080)
        return new

    costs["URL via url._uri_reference._replace (httpx-private)"] = per_call(replace_components)

    def header_copy() -> None:
        headers = request.headers.copy()
        headers["Hedge-Attempt"] = "1"

    costs["headers.copy() + set Hedge-Attempt"] = per_call(header_copy)
    stream = httpx.ByteStream(b"")
    costs["httpx.Request(method, url, headers, stream, extensions)"] = per_call(
        lambda: httpx.Request(
            "GET", url, headers=request.headers, stream=stream, extensions=request.extensions
        )
    )
    costs["httpx.ByteStream(body)"] = per_call(lambda: httpx.ByteStream(b""))
    costs["request.content (property)"] = per_call(lambda: request.content)
    costs["request.url (property, then .port/.host/.scheme)"] = per_call(
        lambda: (request.url.scheme, request.url.host, request.url.port)
    )
    costs["f'{method} {origin}' route string"] = per_call(
        lambda: f"{request.method} {'http://svc'}"
    )
    selector = PowerOfTwoChoices()
    replicas = tuple(REPLICAS[SERVICE])
    costs["PowerOfTwoChoices.choose(3 replicas)"] = per_call(lambda: selector.choose(replicas, ()))
    rng = random.Random()
    costs["  of which random.sample(list, 2)"] = per_call(lambda: rng.sample(replicas, 2))
    costs["PowerOfTwoChoices.attempt_started + attempt_finished"] = per_call(
        lambda: (
            selector.attempt_started(replicas[0]),
            selector.attempt_finished(replicas[0], result="ok"),
        )
    )
    costs["HedgeInfo(...) (frozen dataclass)"] = per_call(
        lambda: HedgeInfo(attempt=1, replica=replicas[0], attempts=1, delay=1.0)
    )
    costs["response.extensions['hedge'] = ..."] = per_call(
        lambda: response.extensions.__setitem__("hedge", 1)
    )
    delay = FixedDelay(10.0)
    costs["FixedDelay.hedge_delay + record"] = per_call(
        lambda: (delay.hedge_delay("r"), delay.record("r", 0.001, censored=False))
    )
    return costs


class _Forward(httpx.AsyncBaseTransport):
    """A do-nothing middleware: what any wrapper costs; optionally the floor's pieces.

    ``rewrite`` sends each request to the next of ``targets`` (round robin) by one of
    two URL rewrites; ``cancel_scope`` runs the inner call under an anyio cancel scope.
    """

    def __init__(
        self,
        inner: httpx.AsyncBaseTransport,
        rewrite: str | None = None,
        *,
        cancel_scope: bool = False,
        targets: Sequence[str] = ("http://10.0.0.1:8080",),
    ) -> None:
        self.inner = inner
        self.rewrite = rewrite
        self.cancel_scope = cancel_scope
        self.targets = [httpx.URL(t) for t in targets]
        self.sent = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        target = self.targets[self.sent % len(self.targets)]
        self.sent += 1
        if self.rewrite == "copy_with":
            url = request.url.copy_with(scheme=target.scheme, host=target.host, port=target.port)
            request = httpx.Request(
                request.method,
                url,
                headers=request.headers,
                stream=request.stream,
                extensions=request.extensions,
            )
        elif self.rewrite == "_replace":
            # httpx-private fast path: the origin was validated when it was configured, so
            # swap the parsed components without re-parsing (ParseResult is a NamedTuple).
            url = httpx.URL.__new__(httpx.URL)
            parts = target._uri_reference
            url._uri_reference = request.url._uri_reference._replace(
                scheme=parts.scheme, host=parts.host, port=parts.port
            )
            request = httpx.Request(
                request.method,
                url,
                headers=request.headers,
                stream=request.stream,
                extensions=request.extensions,
            )
        if self.cancel_scope:
            with anyio.CancelScope():
                return await self.inner.handle_async_request(request)
        return await self.inner.handle_async_request(request)


async def race_structure_costs(reps: int, n: int) -> dict[str, float]:
    """Whole-transport timing of the no-hedge path, pieces swapped out, µs per call.

    ``handle_async_request`` called directly (no AsyncClient), variants interleaved,
    median over ``reps`` repetitions of ``n`` calls.
    """
    from prometheus_client import CollectorRegistry

    inner = httpx.MockTransport(small_response)
    request = httpx.Request("GET", "http://svc/item")
    variants: dict[str, httpx.AsyncBaseTransport] = {
        "inner MockTransport alone": inner,
        "do-nothing wrapper": _Forward(inner),
        "wrapper + URL rewrite by url.copy_with + new Request": _Forward(inner, "copy_with"),
        "wrapper + URL rewrite by ParseResult._replace + new Request": _Forward(inner, "_replace"),
        "HedgedTransport, replicas, fixed 10 s, metrics off": HedgedTransport(
            inner, replicas=REPLICAS, delay=10.0, metrics=False
        ),
        "HedgedTransport, no replicas (no URL rewrite)": HedgedTransport(
            inner, delay=10.0, metrics=False
        ),
        "HedgedTransport, replicas, attempt_header=None": HedgedTransport(
            inner, replicas=REPLICAS, delay=10.0, metrics=False, attempt_header=None
        ),
        "HedgedTransport, replicas, scheduler_task=True (entered: the backup scheduler)": (
            HedgedTransport(
                inner, replicas=REPLICAS, delay=10.0, metrics=False, scheduler_task=True
            )
        ),
        "HedgedTransport, replicas, max_hedges=0 (sequential path, no task group)": (
            HedgedTransport(inner, replicas=REPLICAS, delay=10.0, metrics=False, max_hedges=0)
        ),
        "HedgedTransport, replicas, AdaptiveDelay": HedgedTransport(
            inner, replicas=REPLICAS, metrics=False
        ),
        "HedgedTransport, replicas, fixed 10 s, metrics on": HedgedTransport(
            inner, replicas=REPLICAS, delay=10.0, metrics=CollectorRegistry()
        ),
    }
    samples: dict[str, list[float]] = {name: [] for name in variants}
    async with contextlib.AsyncExitStack() as stack:
        for transport in variants.values():
            if isinstance(transport, HedgedTransport):  # entered, as AsyncClient does
                await stack.enter_async_context(transport)
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
            start = time.perf_counter()
            for _ in range(n):
                await transport.handle_async_request(request)
            samples[name].append((time.perf_counter() - start) / n * 1e6)


# -- main -----------------------------------------------------------------------------------


def run_backend(backend: str, args: argparse.Namespace, out: dict[str, Any]) -> None:
    variants = [
        "bare",
        "hedged, metrics off",
        "hedged, metrics on",
        "hedged, defaults (adaptive), metrics off",
        "hedged, scheduler_task=True, metrics off",
        "hedged, scheduler_task=True, metrics on",
        FLOOR_ROUTE,
        FLOOR_SCOPE,
    ]

    async def main() -> None:
        out["in_process"][backend] = await in_process(variants, args.reps, args.n)
        out["micro_costs_us"][backend] = await micro_costs()
        out["transport_direct_us"][backend] = await race_structure_costs(args.reps, args.n)

    anyio.run(main, backend=backend)


def profile(args: argparse.Namespace) -> str:
    from pyinstrument import Profiler

    transport = make_transport("hedged, metrics off")

    async def main() -> None:
        async with httpx.AsyncClient(transport=transport, base_url=SERVICE) as client:
            for _ in range(500):
                await client.get("/item")
            profiler = Profiler(interval=0.0001, async_mode="disabled")
            profiler.start()
            for _ in range(args.n * 2):
                await client.get("/item")
            profiler.stop()
            text = profiler.output_text(unicode=False, color=False, show_all=False)
            path = RESULTS_DIR / "overhead_profile.txt"
            path.write_text(text)
            print(f"profile written to {path}")

    anyio.run(main, backend="asyncio")
    return str(RESULTS_DIR / "overhead_profile.txt")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--profile", action="store_true", help="pyinstrument the hot path")
    parser.add_argument("--skip-loopback", action="store_true")
    parser.add_argument("--output", default="overhead", help="results/<output>.json")
    args = parser.parse_args()
    args.reps = 5 if args.quick else 9
    args.n = 2_000 if args.quick else 5_000
    loop_total = 4_000 if args.quick else 20_000
    loop_rounds = 4 if args.quick else 8  # a multiple of the 4 variants (rotated order)
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
        "in_process": {},
        "micro_costs_us": {},
        "transport_direct_us": {},
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

    rows = []
    for backend, result in out["in_process"].items():
        for variant, v in result["variants"].items():
            reference = variant == "bare" or variant.startswith("floor")
            ok = None if reference else v["ratio_to_bare_median"] <= 1.10
            rows.append(
                [
                    backend,
                    variant,
                    f"{v['us_per_request_median']:.1f}",
                    f"{v['ratio_to_bare_median']:.3f}",
                    f"{v['us_added_median']:+.1f}",
                    "-" if ok is None else verdict(ok),
                ]
            )
        for variant, error in result["errors"].items():
            rows.append([backend, variant, error, "-", "-", "MISS"])
    print_table(
        "(a) CPU per request in-process (MockTransport, sequential); median of interleaved reps",
        ["backend", "variant", "µs/request", "× bare", "µs added", "≤ 1.10"],
        rows,
    )
    for backend, result in out["in_process"].items():
        floor = result["variants"].get(FLOOR_SCOPE)
        ours = result["variants"].get("hedged, scheduler_task=True, metrics off")
        if floor is None or ours is None:
            continue
        print(
            f"{backend}: the floor (rewrite + cancel scope) is {floor['ratio_to_bare_median']:.3f}"
            f" x bare ({floor['us_added_median']:+.1f} µs); scheduler_task=True adds "
            f"{ours['us_added_median'] - floor['us_added_median']:+.1f} µs above it"
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
                for name in ("bare", "hedged", "hedged, scheduler_task=True", FLOOR_SCOPE)
            ],
        )
        print(
            f"throughput hedged/bare = {lb['throughput_ratio']:.3f} "
            f"(median of rounds {lb['throughput_ratio_median_of_rounds']:.3f}) -> "
            f"{verdict(lb['throughput_ratio'] >= 0.95)}; p50 hedged/bare = {lb['p50_ratio']:.3f} "
            f"-> {verdict(abs(lb['p50_ratio'] - 1) <= 0.05)}"
        )
        print(
            f"scheduler_task=True: throughput/bare = {lb['scheduler_task_throughput_ratio']:.3f} "
            f"-> {verdict(lb['scheduler_task_throughput_ratio'] >= 0.95)}; p50/bare = "
            f"{lb['scheduler_task_p50_ratio']:.3f} "
            f"-> {verdict(abs(lb['scheduler_task_p50_ratio'] - 1) <= 0.05)}"
        )
    for backend in out["micro_costs_us"]:
        print_table(
            f"(d) pieces of the no-hedge path, µs per call ({backend}; pieces: best of 5-9, "
            "transports: median of interleaved reps)",
            ["piece", "µs"],
            [[k, f"{v:.2f}"] for k, v in out["micro_costs_us"][backend].items()]
            + [[k, f"{v:.2f}"] for k, v in out["transport_direct_us"][backend].items()],
        )
    if "delay_policy_costs_from_bench_delay_cost" in out:
        print_table(
            "(c) delay policy and budget, from results/delay_cost.json",
            ["measurement", "µs/call"],
            [[k, f"{v:.3f}"] for k, v in out["delay_policy_costs_from_bench_delay_cost"].items()],
        )
    path = write_json(args.output, out)
    print(f"wrote {path} in {out['seconds']:.0f} s")


if __name__ == "__main__":
    main()
