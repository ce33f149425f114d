"""hedgeclient next to the other httpx hedging libraries on PyPI, and a strawman.

Run from the repository root (installs nothing; peers that are not installed are
skipped and reported)::

    .venv/bin/pip install httpx-hedged hedge-python     # the peers, once
    .venv/bin/python benchmarks/bench_peers.py            # 5,000 requests per library
    .venv/bin/python benchmarks/bench_peers.py --quick    # 1,500

Names tried on PyPI (``pip download --no-deps``): ``httpx-hedged`` (found, 0.5.0),
``hedge-python`` (found, 0.3.0, module ``hedge``), ``httpx-hedging`` and
``hedged-requests`` (not found).

Neither peer knows about replicas: each sends the *same* ``httpx.Request`` for the
primary and the backup. To give them the best case we can, their inner transport is a
load balancer that picks a random replica for every attempt (what a service name behind
an L4 balancer gives), so a backup lands on another replica two times in three. The
**strawman** is the 20-line hedge below (``asyncio.wait(FIRST_COMPLETED)``, the backup
to the same replica as the primary, the loser never cancelled: its response is closed
when it eventually completes). It is a baseline to show what the properties buy, not a
library.

Workloads, each library configured as close to the others as it allows (one backup,
delay at the lab p95 of 30 ms, a budget that never binds):

1. **tail**: ``FakeService(latency="lab", mode="process")``, 3 replicas, interleaved
   rounds of every library plus a plain phase (bare httpx, random replica), end-to-end
   latency of ``client.get``. Concurrency 4 by default: at 20 the bare httpx client
   alone saturates a core of this 2-core machine (see ``docs/benchmarks.md``).
   Extra load = server-received / requests - 1; "other replica" = share of hedged
   requests (``x-request-id`` seen twice by the server) whose two attempts hit two
   replicas; "loser cancelled" = server-side ``abandoned`` / extra attempts.
2. **stalls**: the same, with each replica stalling 50 ms every 500 ms at its own phase
   (``Stall``): slowness owned by the replica, which a backup to the same replica shares.
3. **overhead**: CPU per request in-process over an instant ``MockTransport`` (no hedge
   fires), each library with its adaptive p95 defaults, asyncio (the peers are
   asyncio-only), interleaved repetitions, ratio to bare httpx.

Results: printed, and written to ``benchmarks/results/peers.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import statistics
import time
from typing import Any

import anyio
import httpx
from _common import (
    SERVICE,
    add_scheduler_flag,
    command,
    hedged_transport,
    machine,
    package_version,
    print_table,
    quantile,
    run_concurrently,
    small_response,
    use_scheduler_flag,
    write_json,
)

from hedgeclient import HedgeBudget, analysis
from hedgeclient.testing import FakeService, ReplicaConfig, Stall

DELAY = 0.030  # the lab sample's p95
LIMITS = httpx.Limits(max_connections=500, max_keepalive_connections=500)
PEERS_TRIED = {
    "httpx-hedged": "found",
    "hedge-python": "found",
    "httpx-hedging": "not on PyPI",
    "hedged-requests": "not on PyPI",
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


def peer_modules() -> dict[str, Any]:
    found: dict[str, Any] = {}
    with contextlib.suppress(ImportError):
        import httpx_hedged

        found["httpx-hedged"] = httpx_hedged
    with contextlib.suppress(ImportError):
        import hedge
        import hedge.transport

        found["hedge-python"] = hedge
    return found


def build(name: str, origins: list[str] | None, *, adaptive: bool) -> httpx.AsyncBaseTransport:
    """The transport of library ``name``; ``origins`` None: in-process (MockTransport)."""
    if origins is None:
        inner: httpx.AsyncBaseTransport = httpx.MockTransport(small_response)
        origins = ["http://10.0.0.1:8080", "http://10.0.0.2:8080", "http://10.0.0.3:8080"]
    else:
        inner = httpx.AsyncHTTPTransport(limits=LIMITS)
    if name == "bare":
        return inner
    if name == "hedgeclient":
        if adaptive:
            return hedged_transport(inner, replicas={SERVICE: origins}, metrics=False)
        return hedged_transport(
            inner,
            replicas={SERVICE: origins},
            delay=DELAY,
            budget=HedgeBudget(ratio=1.0, burst=1_000_000, min_per_second=0),
            metrics=False,
        )
    balanced = RandomReplica(inner, origins, seed=sum(map(ord, name)))
    if name == "strawman":
        return NaiveHedge(inner, 10.0 if adaptive else DELAY)  # the request's own replica
    if name == "httpx-hedged":
        from httpx_hedged import HedgeConfig
        from httpx_hedged import HedgedTransport as PeerTransport

        if adaptive:
            config = HedgeConfig(percentile=0.95)
        else:  # the warm-up delay forever: a fixed delay; a budget that never binds
            config = HedgeConfig(
                percentile=0.95,
                warmup_requests=10**9,
                warmup_delay=DELAY,
                budget_percent=100.0,
                estimated_rps=100_000.0,
            )
        return PeerTransport(balanced, default_config=config)
    if name == "hedge-python":
        from hedge import HedgeConfig as PyConfig
        from hedge.transport import HedgedHttpxTransport

        if adaptive:
            py_config = PyConfig(percentile=0.95)
        else:
            py_config = PyConfig(
                percentile=0.95,
                warmup_requests=10**9,
                warmup_delay=DELAY,
                budget_percent=100.0,
                estimated_rps=100_000.0,
            )
        return HedgedHttpxTransport(balanced, config=py_config)
    raise ValueError(name)


# -- 1 and 2: tail -------------------------------------------------------------------------------


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
            elif name == "strawman":
                clients[name] = httpx.AsyncClient(transport=build(name, origins, adaptive=False))
            else:
                clients[name] = httpx.AsyncClient(
                    transport=build(name, origins, adaptive=False), base_url=SERVICE
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


# -- 3: overhead -------------------------------------------------------------------------------


async def overhead(names: list[str], reps: int, n: int) -> dict[str, Any]:
    samples: dict[str, list[float]] = {name: [] for name in ["bare", *names]}
    for rep in range(reps):
        order = list(samples) if rep % 2 == 0 else list(reversed(samples))
        for name in order:
            transport = build(name, None, adaptive=True)
            async with httpx.AsyncClient(transport=transport, base_url=SERVICE) as client:
                for _ in range(300):
                    await client.get("/item")
                start = time.process_time()
                for _ in range(n):
                    await client.get("/item")
                samples[name].append((time.process_time() - start) / n)
    bare = samples["bare"]
    return {
        name: {
            "us_per_request": statistics.median(values) * 1e6,
            "ratio_to_bare": statistics.median([v / b for v, b in zip(values, bare, strict=True)]),
        }
        for name, values in samples.items()
    }


# -- main ------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--skip", nargs="*", default=[], choices=("tail", "stalls", "overhead"))
    parser.add_argument("--output", default="peers", help="results/<output>.json")
    add_scheduler_flag(parser)
    args = parser.parse_args()
    scheduler_task = use_scheduler_flag(args)
    modules = peer_modules()
    names = ["hedgeclient", *modules, "strawman"]
    total = 1_500 if args.quick else 5_000
    out: dict[str, Any] = {
        "command": command(),
        "machine": machine(),
        "peers_tried_on_pypi": PEERS_TRIED,
        "peers_installed": {
            "httpx-hedged": package_version("httpx-hedged"),
            "hedge-python": package_version("hedge-python"),
        },
        "settings": {
            "requests_per_library": total,
            "concurrency": args.concurrency,
            "scheduler_task": scheduler_task,
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
        out["overhead"] = anyio.run(overhead, names, 3 if args.quick else 7, 2_000)
        print(f"[overhead] done at {time.perf_counter() - started:.0f} s", flush=True)
    out["seconds"] = time.perf_counter() - started

    for key, title in (("tail", "lab law"), ("stalls", "lab law + per-replica 50 ms stalls")):
        if key not in out:
            continue
        t = out[key]
        rows = []
        for name, r in t["libraries"].items():
            ovh = out.get("overhead", {}).get(name)
            rows.append(
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
                    None if ovh is None else ovh["us_per_request"],
                    None if ovh is None else f"{ovh['ratio_to_bare']:.2f}",
                ]
            )
        pred = t["prediction_independent_ms"]
        print_table(
            f"{title}, d = {t['delay_ms']:.0f} ms, concurrency {args.concurrency}; prediction "
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
                "in-process µs/req",
                "× bare",
            ],
            rows,
        )
    path = write_json(args.output, out)
    print(f"wrote {path} in {out['seconds']:.0f} s")


if __name__ == "__main__":
    main()
