"""hedgeclient next to the other Python hedging libraries on PyPI, and a strawman.

Run from the repository root (installs nothing; peers that are not installed are
skipped and reported)::

    .venv/bin/pip install httpx-hedged hedge-python asynchedging grit-toolkit nopanic
    .venv/bin/python benchmarks/bench_peers.py                         # everything
    .venv/bin/python benchmarks/bench_peers.py --skip tail stalls      # the CPU rows only
    .venv/bin/python benchmarks/bench_peers.py --quick                 # fewer requests

The peers (names found by searching PyPI's package list for "hedg"; see
:data:`PEERS_TRIED`): two httpx transports, ``httpx-hedged`` and ``hedge-python``
(module ``hedge``), with an adaptive delay and a budget; and three that hedge any
coroutine function, wrapped here as a transport whose attempt is the inner transport's
``handle_async_request``: ``asynchedging`` (``hedge(factory, delays_s=[d])``),
``grit-toolkit`` (``grit.hedge.hedge(d)``) and ``nopanic`` (``nopanic.hedge(delay=d)``),
each with a fixed delay only and no budget.

No peer knows about replicas: each sends the *same* ``httpx.Request`` for the primary
and the backup. In the loopback workloads, to give them the best case we can, their
inner transport is a load balancer that picks a random replica for every attempt (what
a service name behind an L4 balancer gives), so a backup lands on another replica two
times in three. In the in-process rows they wrap the ``MockTransport`` directly (an L4
balancer costs the client no CPU), while hedgeclient pays its own routing. The
**strawman** is the 20-line hedge below (``asyncio.wait(FIRST_COMPLETED)``, the backup
to the same replica as the primary, the loser never cancelled: its response is closed
when it eventually completes). It is a baseline to show what the properties buy, not a
library. The three function-level peers and the strawman run on asyncio only, as do
the two transports; so every row here is asyncio.

Workloads, each library configured as close to the others as it allows (one backup,
a budget that never binds):

1. **tail**: ``FakeService(latency="lab", mode="process")``, 3 replicas, delay at the
   lab p95 of 30 ms, interleaved rounds of every library plus a plain phase (bare httpx,
   random replica), end-to-end latency of ``client.get``. Concurrency 4 by default: at
   20 the bare httpx client alone saturates a core of this 2-core machine (see
   ``docs/benchmarks.md``). Extra load = server-received / requests - 1; "other
   replica" = share of hedged requests (``x-request-id`` seen twice by the server) whose
   two attempts hit two replicas; "loser cancelled" = server-side ``abandoned`` / extra
   attempts.
2. **stalls**: the same, with each replica stalling 50 ms every 500 ms at its own phase
   (``Stall``): slowness owned by the replica, which a backup to the same replica shares.
3. **overhead** (no hedge fires): CPU per request in-process over an instant
   ``MockTransport``, sequential requests, each library with its adaptive p95 defaults
   (the fixed-delay-only peers and the strawman at a 10 s delay), interleaved
   repetitions, ratio to bare httpx. Besides the peers: ``hedgeclient`` (its adaptive
   defaults, metrics off), ``hedgeclient, metrics on`` (its defaults: metrics and
   OpenTelemetry on) and ``floor`` (``_common.Forward``: route to one of three
   replicas, the inner call under one anyio cancel scope; ``bench_overhead.py``'s
   floor). Targets (issue 25): ``hedgeclient, metrics on`` below the cheapest peer
   (median of the per-repetition ratios to the cheapest peer < 1); ``hedgeclient``
   (metrics off) at most 10 µs above the floor (median of the per-repetition
   differences).
4. **every request hedged**: the same, over a ``MockTransport`` whose handler sleeps
   2 ms (``anyio.sleep``) before answering, and every library at a fixed 1 ms delay (a
   budget that never binds, one backup): every request sends a backup, which loses to
   the primary and is cancelled. CPU per request (``time.process_time()`` over the
   sequential requests, so the sleeping is not in it) and handler calls per request
   (2.0 when every request hedges). Target (issues 15 and 25): hedgeclient's CPU per
   request (metrics off, as the peers have none) at most that of the cheapest peer
   measured in the same run (the strawman is not a peer), judged on the median over
   repetitions of hedgeclient / the cheapest peer of that repetition; the same ratio
   is reported for ``hedgeclient, metrics on``.

Results: printed, and written to ``benchmarks/results/peers.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import random
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import httpx
from _common import (
    SERVICE,
    Forward,
    command,
    machine,
    package_version,
    print_table,
    quantile,
    run_concurrently,
    small_response,
    verdict,
    write_json,
)

from hedgeclient import HedgeBudget, HedgedTransport, analysis
from hedgeclient.testing import FakeService, ReplicaConfig, Stall

DELAY = 0.030  # the lab sample's p95
NO_HEDGE = 10.0  # a fixed delay no in-process request reaches
METRICS_ON = "hedgeclient, metrics on"  # hedgeclient's defaults, metrics included
FLOOR = "floor"  # routing + one cancel scope (bench_overhead.py's floor)
ABOVE_FLOOR_US = 10.0  # target (issue 25): hedgeclient, metrics off, above the floor
LABELS = {"hedgeclient": "hedgeclient, metrics off", "strawman": "strawman (STRAWMAN)"}
EVERY_DELAY = 0.001  # "every request hedged": the hedge delay ...
EVERY_HANDLER = 0.002  # ... and how long the handler sleeps before it answers
LIMITS = httpx.Limits(max_connections=500, max_keepalive_connections=500)
IN_PROCESS_ORIGINS = ["http://10.0.0.1:8080", "http://10.0.0.2:8080", "http://10.0.0.3:8080"]
# PyPI distribution -> import name, for the peers this script can drive.
PEERS = {
    "httpx-hedged": "httpx_hedged",
    "hedge-python": "hedge",
    "asynchedging": "asynchedging",
    "grit-toolkit": "grit",
    "nopanic": "nopanic",
}
# Searched in PyPI's package list for "hedg" (2026-12-01), then ``pip install``.
PEERS_TRIED = {
    "httpx-hedged": "found: an httpx transport, adaptive delay (DDSketch), token budget",
    "hedge-python": "found: an httpx transport (module hedge), adaptive delay, token budget",
    "asynchedging": "found: hedge(factory, delays_s) over asyncio tasks; fixed delays",
    "grit-toolkit": "found: grit.hedge.hedge(delay) decorator, asyncio; fixed delay",
    "nopanic": "found: nopanic.hedge(delay=, max_hedges=) policy, asyncio and trio",
    "httpx-hedging": "not on PyPI",
    "hedged-requests": "not on PyPI",
    "gpuhedge": "not tried: races serverless GPU providers, not HTTP requests",
    "transmission-announce-relay": "not tried: an application (a BitTorrent relay)",
}


# -- the strawman -------------------------------------------------------------------------


class NaiveHedge(httpx.AsyncBaseTransport):
    """STRAWMAN: hedge after ``delay`` to the same URL, never cancel the loser."""

    def __init__(self, inner: httpx.AsyncBaseTransport, delay: float) -> None:
        self.inner, self.delay, self.background = inner, delay, set()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        first = asyncio.ensure_future(self.inner.handle_async_request(request))
        done, _ = await asyncio.wait({first}, timeout=self.delay)
        if done:
            return first.result()
        second = asyncio.ensure_future(self.inner.handle_async_request(request))
        done, pending = await asyncio.wait({first, second}, return_when="FIRST_COMPLETED")
        for loser in pending:  # not cancelled: close its response whenever it completes
            self.background.add(loser)
            loser.add_done_callback(self._discard)
        return done.pop().result()

    def _discard(self, task: asyncio.Future[httpx.Response]) -> None:
        self.background.discard(task)
        if not task.cancelled() and task.exception() is None:
            closing = asyncio.ensure_future(task.result().aclose())
            self.background.add(closing)
            closing.add_done_callback(self.background.discard)

    async def aclose(self) -> None:
        await self.inner.aclose()


# -- helpers ----------------------------------------------------------------------------------


class RandomReplica(httpx.AsyncBaseTransport):
    """A load balancer: every attempt to ``SERVICE`` goes to a random replica."""

    def __init__(self, inner: httpx.AsyncBaseTransport, origins: list[str], seed: int) -> None:
        self.inner = inner
        self.origins = [httpx.URL(o) for o in origins]
        self.rng = random.Random(seed)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        origin = self.rng.choice(self.origins)
        url = request.url.copy_with(scheme=origin.scheme, host=origin.host, port=origin.port)
        attempt = httpx.Request(
            request.method,
            url,
            headers=request.headers,
            stream=request.stream,
            extensions=request.extensions,
        )
        return await self.inner.handle_async_request(attempt)

    async def aclose(self) -> None:
        await self.inner.aclose()


class FunctionHedge(httpx.AsyncBaseTransport):
    """A peer that hedges a coroutine function, as a transport: an attempt is ``send()``.

    ``race`` takes a zero-argument coroutine function (one attempt of the request) and
    returns the winning response, hedging it as its library does.
    """

    def __init__(
        self,
        inner: httpx.AsyncBaseTransport,
        race: Callable[[Callable[[], Awaitable[httpx.Response]]], Awaitable[httpx.Response]],
    ) -> None:
        self.inner, self.race = inner, race

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        send = self.inner.handle_async_request
        return await self.race(lambda: send(request))

    async def aclose(self) -> None:
        await self.inner.aclose()


def peer_modules() -> dict[str, Any]:
    """The peers whose module imports here, by PyPI name."""
    found: dict[str, Any] = {}
    for name, module in PEERS.items():
        with contextlib.suppress(ImportError):
            found[name] = __import__(module)
    return found


def build(
    name: str, inner: httpx.AsyncBaseTransport, origins: list[str], delay: float | None
) -> httpx.AsyncBaseTransport:
    """The transport of library ``name`` over ``inner``.

    ``delay`` None: each library's adaptive defaults (a fixed :data:`NO_HEDGE` delay
    for those without one); a number: that fixed delay, one backup, a budget that
    never binds. The peers send every attempt through ``inner`` as given (wrap it in
    :class:`RandomReplica` to spread them).
    """
    if name == "bare":
        return inner
    if name == FLOOR:
        return Forward(inner, "_replace", cancel_scope=True, targets=origins)
    if name in ("hedgeclient", METRICS_ON):
        metrics: dict[str, Any] = {} if name == METRICS_ON else {"metrics": False}
        if delay is None:
            return HedgedTransport(inner, replicas={SERVICE: origins}, **metrics)
        return HedgedTransport(
            inner,
            replicas={SERVICE: origins},
            delay=delay,
            max_hedges=1,
            budget=HedgeBudget(ratio=1.0, burst=1_000_000, min_per_second=0),
            **metrics,
        )
    fixed = NO_HEDGE if delay is None else delay
    if name == "strawman":
        return NaiveHedge(inner, fixed)
    if name in ("httpx-hedged", "hedge-python"):
        if name == "httpx-hedged":
            from httpx_hedged import HedgeConfig
            from httpx_hedged import HedgedTransport as PeerTransport
        else:
            from hedge import HedgeConfig
            from hedge.transport import HedgedHttpxTransport as PeerTransport
        if delay is None:
            config = HedgeConfig(percentile=0.95)
        else:  # the warm-up delay forever: a fixed delay; a budget that never binds
            config = HedgeConfig(
                percentile=0.95,
                warmup_requests=10**9,
                warmup_delay=delay,
                min_delay=min(delay, 0.001),
                budget_percent=100.0,
                estimated_rps=100_000.0,
            )
        if name == "httpx-hedged":
            return PeerTransport(inner, default_config=config)
        return PeerTransport(inner, config=config)
    if name == "asynchedging":
        from asynchedging import hedge as race_factory

        async def race(attempt: Callable[[], Awaitable[httpx.Response]]) -> httpx.Response:
            response, _ = await race_factory(attempt, delays_s=[fixed])
            return response

        return FunctionHedge(inner, race)
    if name == "grit-toolkit":
        from grit.hedge import hedge as grit_hedge

        return FunctionHedge(inner, grit_hedge(fixed)(_call))
    if name == "nopanic":
        import nopanic

        return FunctionHedge(inner, nopanic.hedge(delay=fixed, max_hedges=1)(_call))
    raise ValueError(name)


async def _call(attempt: Callable[[], Awaitable[httpx.Response]]) -> httpx.Response:
    """One attempt, as the function the decorator-style peers hedge (called per attempt)."""
    return await attempt()


# -- 1 and 2: tail -------------------------------------------------------------------------------


def loopback_transport(name: str, origins: list[str]) -> httpx.AsyncBaseTransport:
    """Library ``name`` over loopback at :data:`DELAY`; peers behind a random balancer."""
    inner: httpx.AsyncBaseTransport = httpx.AsyncHTTPTransport(limits=LIMITS)
    if name not in ("hedgeclient", "strawman"):
        inner = RandomReplica(inner, origins, seed=sum(map(ord, name)))
    return build(name, inner, origins, DELAY)


async def tail(
    names: list[str], total: int, rounds: int, concurrency: int, *, stalls: bool
) -> dict[str, Any]:
    overrides = None
    if stalls:
        overrides = {
            i: ReplicaConfig(stall=Stall(every=0.5, duration=0.05, offset=i * 0.5 / 3))
            for i in range(3)
        }
    rng = random.Random(4)
    with FakeService(
        replicas=3,
        latency="lab",
        mode="process",
        seed=31,
        keep=5_000,
        replica_overrides=overrides,
    ) as svc:
        origins = svc.origins
        clients: dict[str, httpx.AsyncClient] = {}
        for name in ["plain", *names]:
            if name == "plain":
                clients[name] = httpx.AsyncClient(limits=LIMITS)
            elif name == "strawman":  # the request's replica is chosen by the caller
                clients[name] = httpx.AsyncClient(transport=loopback_transport(name, origins))
            else:
                clients[name] = httpx.AsyncClient(
                    transport=loopback_transport(name, origins), base_url=SERVICE
                )
        data = {
            name: {
                "lat": [],
                "requests": 0,
                "received": 0,
                "abandoned": 0,
                "hedged": 0,
                "other": 0,
                "cpu": 0.0,
            }
            for name in clients
        }
        seq = iter(range(10**9))

        async def chunk(name: str, n: int, record: bool) -> None:
            client = clients[name]
            d = data[name]

            async def one(i: int) -> None:
                rid = f"{name}-{next(seq)}"
                # plain and strawman: the request's replica is chosen here
                url = rng.choice(origins) + "/item" if name in ("plain", "strawman") else "/item"
                start = time.perf_counter()
                response = await client.get(url, headers={"x-request-id": rid})
                elapsed = time.perf_counter() - start
                response.raise_for_status()
                if record:
                    d["lat"].append(elapsed)

            svc.reset_stats()
            c0 = time.process_time()
            await run_concurrently(n, concurrency, one)
            cpu = time.process_time() - c0
            deadline = time.perf_counter() + 5.0
            while True:  # losers finish or disconnect; the strawman's run to completion
                stats = svc.stats()
                if sum(r.in_flight for r in stats.replicas) == 0:
                    break
                if time.perf_counter() > deadline:
                    break
                await anyio.sleep(0.02)
            if record:
                d["requests"] += n
                d["received"] += stats.received
                d["abandoned"] += stats.abandoned
                d["cpu"] += cpu
                for visits in stats.requests.values():
                    if len(visits) > 1:
                        d["hedged"] += 1
                        d["other"] += len({v.replica for v in visits}) > 1

        async with contextlib.AsyncExitStack() as stack:
            for client in clients.values():  # entered, as most code does
                await stack.enter_async_context(client)
            for name in clients:
                await chunk(name, 200, record=False)
            per = max(1, total // rounds)
            order = list(clients)
            for r in range(rounds):
                for name in order if r % 2 == 0 else list(reversed(order)):
                    await chunk(name, per, record=True)

    x = data["plain"]["lat"]
    out: dict[str, Any] = {
        "delay_ms": DELAY * 1000,
        "stalls": stalls,
        "prediction_independent_ms": {
            "p99": analysis.hedged_quantile(x, DELAY, 0.99) * 1000,
            "extra_load": analysis.extra_load(x, DELAY),
        },
        "libraries": {},
    }
    for name, d in data.items():
        extra = d["received"] / d["requests"] - 1
        out["libraries"][name] = {
            "requests": d["requests"],
            "p50_ms": quantile(d["lat"], 0.5) * 1000,
            "p95_ms": quantile(d["lat"], 0.95) * 1000,
            "p99_ms": quantile(d["lat"], 0.99) * 1000,
            "extra_load": extra,
            "hedged_requests_seen_by_server": d["hedged"],
            "backup_to_other_replica": d["other"] / d["hedged"] if d["hedged"] else None,
            "losers_abandoned_server_side": d["abandoned"],
            "loser_cancelled_share": (
                d["abandoned"] / (d["received"] - d["requests"])
                if d["received"] > d["requests"]
                else None
            ),
            "client_cpu_us_per_request": d["cpu"] / d["requests"] * 1e6,
        }
    return out


# -- 3 and 4: CPU per request in-process --------------------------------------------------


async def _sleepy(request: httpx.Request) -> httpx.Response:
    await anyio.sleep(EVERY_HANDLER)
    return httpx.Response(200, content=b"ok")


async def cpu_rows(names: list[str], reps: int, n: int, *, every_hedged: bool) -> dict[str, Any]:
    """CPU per sequential request in-process, each library, interleaved repetitions.

    ``every_hedged``: the 2 ms handler and a 1 ms fixed delay for every library;
    otherwise the instant handler and each library's defaults (no hedge fires).
    """
    everyone = ["bare", *names]
    samples: dict[str, list[float]] = {name: [] for name in everyone}
    calls_per_request: dict[str, list[float]] = {name: [] for name in everyone}
    for rep in range(reps):
        for name in everyone if rep % 2 == 0 else list(reversed(everyone)):
            calls = 0
            handler = _sleepy if every_hedged else small_response

            def counted(request: httpx.Request, handler: Any = handler) -> Any:
                nonlocal calls
                calls += 1
                return handler(request)

            transport = build(
                name,
                httpx.MockTransport(counted),
                IN_PROCESS_ORIGINS,
                EVERY_DELAY if every_hedged else None,
            )
            async with httpx.AsyncClient(transport=transport, base_url=SERVICE) as client:
                for _ in range(100 if every_hedged else 300):  # warm-up: caches, adaptive delays
                    await client.get("/item")
                calls = 0
                start = time.process_time()
                for _ in range(n):
                    await client.get("/item")
                samples[name].append((time.process_time() - start) / n)
                calls_per_request[name].append(calls / n)
            await anyio.sleep(0.05)  # let a loser that is never cancelled (strawman) finish
    bare = samples["bare"]
    out: dict[str, Any] = {"libraries": {}}
    for name, values in samples.items():
        out["libraries"][name] = {
            "us_per_request": statistics.median(values) * 1e6,
            "us_per_request_all": [v * 1e6 for v in values],
            "ratio_to_bare": statistics.median([v / b for v, b in zip(values, bare, strict=True)]),
            "handler_calls_per_request": statistics.median(calls_per_request[name]),
        }
    peers = [name for name in names if name in PEERS]
    if "hedgeclient" in samples and peers:
        ratios = [
            samples["hedgeclient"][rep] / min(samples[p][rep] for p in peers) for rep in range(reps)
        ]
        cheapest = min(peers, key=lambda p: statistics.median(samples[p]))
        out["cheapest_peer"] = cheapest
        out["hedgeclient_to_cheapest_peer"] = statistics.median(ratios)
        out["hedgeclient_to_cheapest_peer_all"] = ratios
        out["verdict"] = verdict(statistics.median(ratios) <= 1.0)
    if METRICS_ON in samples and peers:
        ratios = [
            samples[METRICS_ON][rep] / min(samples[p][rep] for p in peers) for rep in range(reps)
        ]
        out["metrics_on_to_cheapest_peer"] = statistics.median(ratios)
        out["metrics_on_to_cheapest_peer_all"] = ratios
        # no hedge: below the cheapest peer; every request hedged: at most it
        limit_ok = statistics.median(ratios) < 1.0 if not every_hedged else None
        out["metrics_on_verdict"] = None if limit_ok is None else verdict(limit_ok)
    if FLOOR in samples and "hedgeclient" in samples:
        above = statistics.median(
            (h - f) * 1e6 for h, f in zip(samples["hedgeclient"], samples[FLOOR], strict=True)
        )
        out["hedgeclient_us_above_floor"] = above
        out["above_floor_verdict"] = verdict(above <= ABOVE_FLOOR_US)
    return out


# -- main ------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer requests everywhere")
    parser.add_argument("--tail-requests", type=int, default=None, help="per library (5,000)")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument(
        "--skip", nargs="*", default=[], choices=("tail", "stalls", "overhead", "every")
    )
    parser.add_argument("--output", default="peers", help="results/<output>.json")
    args = parser.parse_args()
    modules = peer_modules()
    names = ["hedgeclient", *modules, "strawman"]
    total = args.tail_requests or (1_500 if args.quick else 5_000)
    reps, n_overhead, n_every = (3, 1_000, 300) if args.quick else (7, 2_000, 600)
    out: dict[str, Any] = {
        "command": command(),
        "machine": machine(),
        "peers_tried_on_pypi": PEERS_TRIED,
        "peers_installed": {name: package_version(name) for name in PEERS},
        "settings": {
            "tail_requests_per_library": total,
            "concurrency": args.concurrency,
            "cpu_reps": reps,
            "overhead_requests_per_rep": n_overhead,
            "every_hedged_requests_per_rep": n_every,
            "every_hedged_delay_s": EVERY_DELAY,
            "every_hedged_handler_sleep_s": EVERY_HANDLER,
        },
    }
    started = time.perf_counter()
    if "tail" not in args.skip:
        out["tail"] = anyio.run(lambda: tail(names, total, 5, args.concurrency, stalls=False))
        print(f"[tail] done at {time.perf_counter() - started:.0f} s", flush=True)
    if "stalls" not in args.skip:
        out["stalls"] = anyio.run(lambda: tail(names, total, 5, args.concurrency, stalls=True))
        print(f"[stalls] done at {time.perf_counter() - started:.0f} s", flush=True)
    if "overhead" not in args.skip:
        in_process = [FLOOR, "hedgeclient", METRICS_ON, *names[1:]]
        out["overhead"] = anyio.run(
            lambda: cpu_rows(in_process, reps, n_overhead, every_hedged=False)
        )
        print(f"[overhead] done at {time.perf_counter() - started:.0f} s", flush=True)
    if "every" not in args.skip:
        in_process = ["hedgeclient", METRICS_ON, *names[1:]]
        out["every_hedged"] = anyio.run(
            lambda: cpu_rows(in_process, reps, n_every, every_hedged=True)
        )
        print(f"[every request hedged] done at {time.perf_counter() - started:.0f} s", flush=True)
    out["seconds"] = time.perf_counter() - started
    report(out, args.concurrency)
    path = write_json(args.output, out)
    print(f"wrote {path} in {out['seconds']:.0f} s")


def report(out: dict[str, Any], concurrency: int) -> None:
    for key, title in (("tail", "lab law"), ("stalls", "lab law + per-replica 50 ms stalls")):
        if key not in out:
            continue
        t = out[key]
        rows = [
            [
                name + (" (STRAWMAN)" if name == "strawman" else ""),
                r["p50_ms"],
                r["p99_ms"],
                f"{r['extra_load']:.1%}",
                "-"
                if r["backup_to_other_replica"] is None
                else f"{r['backup_to_other_replica']:.0%}",
                "-"
                if r["loser_cancelled_share"] is None
                else f"{r['losers_abandoned_server_side']} ({r['loser_cancelled_share']:.0%})",
                r["client_cpu_us_per_request"],
            ]
            for name, r in t["libraries"].items()
        ]
        pred = t["prediction_independent_ms"]
        print_table(
            f"{title}, d = {t['delay_ms']:.0f} ms, concurrency {concurrency}; prediction "
            f"from the plain sample: p99 {pred['p99']:.1f} ms, extra load "
            f"{pred['extra_load']:.1%}",
            [
                "library",
                "p50 ms",
                "p99 ms",
                "extra load",
                "backup to other replica",
                "losers abandoned (share)",
                "loopback CPU µs/req",
            ],
            rows,
        )
    rows_by_name: dict[str, list[object]] = {}
    for key in ("overhead", "every_hedged"):
        for name, r in out.get(key, {}).get("libraries", {}).items():
            row = rows_by_name.setdefault(name, [LABELS.get(name, name)])
            row.extend([r["us_per_request"], f"{r['ratio_to_bare']:.2f}"])
            if key == "every_hedged":
                row.append(f"{r['handler_calls_per_request']:.2f}")
    if rows_by_name:
        columns = ["library"]
        if "overhead" in out:
            columns += ["no hedge: µs/req", "× bare"]
        if "every_hedged" in out:
            columns += ["every request hedged: µs/req", "× bare", "handler calls/req"]
        print_table(
            "CPU per request in-process, asyncio, sequential; medians of interleaved reps",
            columns,
            list(rows_by_name.values()),
        )
    if "cheapest_peer" in out.get("every_hedged", {}):
        e = out["every_hedged"]
        print(
            f"every request hedged: hedgeclient / the cheapest peer of each rep = "
            f"{e['hedgeclient_to_cheapest_peer']:.3f} (cheapest by median: {e['cheapest_peer']}) "
            f"<= 1.0 -> {e['verdict']}; with metrics on "
            f"{e.get('metrics_on_to_cheapest_peer', math.nan):.3f}"
        )
    o = out.get("overhead", {})
    if "metrics_on_to_cheapest_peer" in o:
        print(
            f"no hedge: hedgeclient (defaults, metrics on) / the cheapest peer of each rep = "
            f"{o['metrics_on_to_cheapest_peer']:.3f} < 1.0 -> {o['metrics_on_verdict']}"
        )
    if "hedgeclient_us_above_floor" in o:
        print(
            f"no hedge: hedgeclient (metrics off) - the floor = "
            f"{o['hedgeclient_us_above_floor']:+.1f} µs (<= {ABOVE_FLOOR_US:.0f}) -> "
            f"{o['above_floor_verdict']}"
        )


if __name__ == "__main__":
    main()
