"""The sync client (``SyncHedgedTransport``) beside the async one, plain ``httpx.Client``
and the sync peers (issue 26).

Run from the repository root::

    .venv/bin/pip install httpx-hedged grit-toolkit   # the peers (skipped when missing)
    .venv/bin/python benchmarks/bench_sync.py           # both parts
    .venv/bin/python benchmarks/bench_sync.py --quick   # fewer requests

1. **tail**: ``FakeService(latency="lab", mode="process")``, 3 replicas, a fixed hedge
   delay at the lab p95 (30 ms), one backup, a budget that never binds; 4 threads
   sharing one ``httpx.Client`` (the sync rows) or 4 tasks sharing one
   ``httpx.AsyncClient`` (``hedgeclient async``), interleaved rounds of every library.
   End-to-end latency of ``client.get``; extra load = attempts the server received /
   requests - 1; "losers left" = attempts the server saw abandoned / extra attempts;
   "left within 50 ms" = the share of abandoned losers whose handler ended within
   50 ms of the winner's answer, estimated per request as the loser's send instant
   (0, or the hedge delay for a backup) plus the handler time the server measured,
   minus the request's duration at the client (no shared clock: it under-reads by the
   loser's send-to-application time, a fraction of a millisecond on loopback, and
   over-reads by a late backup's lateness). Peers: ``httpx-hedged``'s
   ``SyncHedgedTransport`` (the warm-up delay fixed at 30 ms, a budget of 100 %) and
   ``grit-toolkit``'s ``hedge(0.030)`` around one attempt (send and read the body),
   each attempt of theirs to a random replica (they know no replicas).
   Targets: sync hedged p99 within 10 % of async hedged p99 at the same extra load;
   >= 99 % of losers seen leaving within 50 ms.
2. **cpu**: CPU per unhedged request (``time.process_time()`` of this process over
   sequential requests; the replicas run in another process), 1 ms replicas, a hedge
   delay of 5 s so that no hedge fires, interleaved repetitions, the load average
   beside each figure: plain ``httpx.Client``, ``SyncHedgedTransport`` (metrics off and
   on), the async ``HedgedTransport`` under ``httpx.AsyncClient`` and plain
   ``httpx.AsyncClient`` for reference, and httpx-hedged's sync transport; wall-clock
   time per request beside it, for the latency the thread hand-over adds (the async
   rows' include their event loop's start and a 100-request warm-up). Target: the sync
   hedged client at most 1.3x plain ``httpx.Client`` (median of the per-repetition
   ratios).

Results: printed, and written to ``benchmarks/results/<output>.json`` (``sync.json``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import queue
import random
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import anyio
import httpx
from _common import (
    SERVICE,
    command,
    machine,
    package_version,
    print_table,
    quantile,
    run_concurrently,
    verdict,
    write_json,
)

from hedgeclient import HedgeBudget, HedgedTransport, SyncHedgedTransport
from hedgeclient.testing import FakeService

DELAY = 0.030  # the lab sample's p95
NO_HEDGE = 5.0  # a delay no request of the CPU part reaches (the longest a FixedDelay takes)
THREADS = 4
LEAVE_WITHIN = 0.050
LIMITS = httpx.Limits(max_connections=100, max_keepalive_connections=100)
PEERS = {"httpx-hedged": "httpx_hedged", "grit-toolkit": "grit"}
SYNC_HEDGED = "hedgeclient sync"
ASYNC_HEDGED = "hedgeclient async"


def generous() -> HedgeBudget:
    return HedgeBudget(ratio=1.0, burst=1_000_000, min_per_second=0)


def installed(name: str) -> bool:
    return package_version(name) is not None


# -- the peers, sync ------------------------------------------------------------------------


class RandomReplica(httpx.BaseTransport):
    """A load balancer in front of the replicas: every attempt to a random one."""

    def __init__(self, inner: httpx.BaseTransport, origins: list[str], seed: int) -> None:
        self._inner = inner
        self._origins = [httpx.URL(o) for o in origins]
        self._rng = random.Random(seed)
        self._lock = threading.Lock()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        with self._lock:
            target = self._rng.choice(self._origins)
        url = request.url.copy_with(scheme=target.scheme, host=target.host, port=target.port)
        replica = httpx.Request(request.method, url, headers=request.headers, stream=request.stream)
        replica.extensions = request.extensions
        return self._inner.handle_request(replica)

    def close(self) -> None:
        self._inner.close()


class GritHedge(httpx.BaseTransport):
    """grit's sync ``hedge(delay)`` around one attempt (send, read the body): each
    attempt on a thread of its own; the loser runs to its end."""

    def __init__(self, inner: httpx.BaseTransport, delay: float) -> None:
        from grit.hedge import hedge

        self._inner = inner
        self._attempt = hedge(delay)(self._one)

    def _one(self, request: httpx.Request) -> httpx.Response:
        response = self._inner.handle_request(request)
        try:
            content = b"".join(response.stream)  # type: ignore[union-attr]
        finally:
            response.close()
        return httpx.Response(response.status_code, headers=response.headers, content=content)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return self._attempt(request)  # type: ignore[no-any-return]

    def close(self) -> None:
        self._inner.close()


def sync_client(name: str, origins: list[str], delay: float, *, metrics: bool = False) -> Any:
    """The sync client of library ``name`` (``plain``: ``httpx.Client`` alone)."""
    if name == "plain":
        return httpx.Client(limits=LIMITS)
    if name.startswith(SYNC_HEDGED):
        transport = SyncHedgedTransport(
            httpx.AsyncHTTPTransport(limits=LIMITS),
            replicas={SERVICE: origins},
            delay=delay,
            max_hedges=1,
            budget=generous(),
            metrics=metrics,
            opentelemetry=metrics,
        )
        return httpx.Client(transport=transport, base_url=SERVICE)
    balancer = RandomReplica(httpx.HTTPTransport(limits=LIMITS), origins, seed=len(name))
    if name == "httpx-hedged":
        from httpx_hedged import HedgeConfig
        from httpx_hedged import SyncHedgedTransport as Peer

        config = HedgeConfig(
            percentile=0.95,
            warmup_requests=10**9,
            warmup_delay=delay,
            min_delay=min(delay, 0.001),
            budget_percent=100.0,
            estimated_rps=100_000.0,
        )
        return httpx.Client(transport=Peer(balancer, default_config=config), base_url=SERVICE)
    if name == "grit-toolkit":
        return httpx.Client(transport=GritHedge(balancer, delay), base_url=SERVICE)
    raise ValueError(name)


def async_client(origins: list[str], delay: float, *, metrics: bool = False) -> httpx.AsyncClient:
    transport = HedgedTransport(
        httpx.AsyncHTTPTransport(limits=LIMITS),
        replicas={SERVICE: origins},
        delay=delay,
        max_hedges=1,
        budget=generous(),
        metrics=metrics,
        opentelemetry=metrics,
    )
    return httpx.AsyncClient(transport=transport, base_url=SERVICE)


# -- 1. tail ----------------------------------------------------------------------------------


def _threaded(n: int, one: Callable[[int], None]) -> None:
    """``n`` calls of ``one`` on :data:`THREADS` threads."""
    work: queue.SimpleQueue[int] = queue.SimpleQueue()
    for i in range(n):
        work.put(i)

    def worker() -> None:
        while True:
            try:
                i = work.get_nowait()
            except queue.Empty:
                return
            one(i)

    threads = [threading.Thread(target=worker) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def tail(names: list[str], total: int, rounds: int) -> dict[str, Any]:
    with FakeService(replicas=3, latency="lab", mode="process", seed=31, keep=5_000) as svc:
        origins = svc.origins
        sync_clients = {n: sync_client(n, origins, DELAY) for n in names if n != ASYNC_HEDGED}
        data: dict[str, dict[str, Any]] = {
            n: {"lat": [], "requests": 0, "received": 0, "abandoned": 0, "leave": [], "load": []}
            for n in names
        }
        seq = iter(range(10**9))
        lock = threading.Lock()

        def chunk(name: str, n: int, record: bool) -> None:
            d = data[name]
            times: dict[str, float] = {}

            def note(rid: str, elapsed: float) -> None:
                with lock:
                    times[rid] = elapsed

            svc.reset_stats()
            if name == ASYNC_HEDGED:

                async def run() -> None:
                    async with async_client(origins, DELAY) as client:

                        async def one(i: int) -> None:
                            rid = f"{name}-{next(seq)}"
                            start = time.perf_counter()
                            response = await client.get("/item", headers={"x-request-id": rid})
                            note(rid, time.perf_counter() - start)
                            response.raise_for_status()

                        await run_concurrently(n, THREADS, one)

                anyio.run(run)
            else:
                client = sync_clients[name]

                def one_sync(i: int) -> None:
                    rid = f"{name}-{next(seq)}"
                    url = rng_choice(origins) + "/item" if name == "plain" else "/item"
                    start = time.perf_counter()
                    response = client.get(url, headers={"x-request-id": rid})
                    note(rid, time.perf_counter() - start)
                    response.raise_for_status()

                _threaded(n, one_sync)
            deadline = time.perf_counter() + 5.0
            while time.perf_counter() < deadline:  # losers finish or leave
                stats = svc.stats()
                if sum(r.in_flight for r in stats.replicas) == 0:
                    break
                time.sleep(0.02)
            if not record:
                return
            d["lat"] += list(times.values())
            d["requests"] += n
            d["received"] += stats.received
            d["abandoned"] += stats.abandoned
            d["load"].append(os.getloadavg()[0])
            for rid, visits in stats.requests.items():
                if len(visits) < 2 or rid not in times:
                    continue
                for visit in visits:
                    if visit.outcome == "abandoned":
                        sent = DELAY if visit.attempt == "2" else 0.0
                        d["leave"].append(sent + visit.worked - times[rid])

        rng = random.Random(4)
        rng_lock = threading.Lock()

        def rng_choice(seq_: list[str]) -> str:
            with rng_lock:
                return rng.choice(seq_)

        for name in names:
            chunk(name, 200, record=False)
        per = max(1, total // rounds)
        for r in range(rounds):
            for name in names if r % 2 == 0 else list(reversed(names)):
                chunk(name, per, record=True)
        for client in sync_clients.values():
            client.close()

    out: dict[str, Any] = {"delay_ms": DELAY * 1000, "threads": THREADS, "libraries": {}}
    for name, d in data.items():
        extra_attempts = d["received"] - d["requests"]
        leave = d["leave"]
        out["libraries"][name] = {
            "requests": d["requests"],
            "p50_ms": quantile(d["lat"], 0.5) * 1000,
            "p99_ms": quantile(d["lat"], 0.99) * 1000,
            "extra_load": extra_attempts / d["requests"],
            "losers_left_share": d["abandoned"] / extra_attempts if extra_attempts else None,
            "left_within_50ms_share": (
                sum(1 for x in leave if x <= LEAVE_WITHIN) / len(leave) if leave else None
            ),
            "leave_p99_ms": quantile(leave, 0.99) * 1000 if leave else None,
            "loadavg_1m": statistics.median(d["load"]),
        }
    libs = out["libraries"]
    if SYNC_HEDGED in libs and ASYNC_HEDGED in libs:
        ratio = libs[SYNC_HEDGED]["p99_ms"] / libs[ASYNC_HEDGED]["p99_ms"]
        out["sync_to_async_p99"] = ratio
        out["p99_verdict"] = verdict(ratio <= 1.10)
        share = libs[SYNC_HEDGED]["left_within_50ms_share"]
        out["leave_verdict"] = verdict(share is not None and share >= 0.99)
    return out


# -- 2. cpu ------------------------------------------------------------------------------------


def cpu(names: list[str], reps: int, n: int) -> dict[str, Any]:
    samples: dict[str, list[float]] = {name: [] for name in names}
    walls: dict[str, list[float]] = {name: [] for name in names}
    loads: dict[str, list[float]] = {name: [] for name in names}
    with FakeService(replicas=3, latency=0.001, mode="process") as svc:
        origins = svc.origins
        clients = {
            name: sync_client(name.split(",")[0], origins, NO_HEDGE, metrics="metrics on" in name)
            for name in names
            if not name.startswith(("async", ASYNC_HEDGED))
        }

        def run_sync(name: str, count: int) -> float:
            client = clients[name]
            start = time.process_time()
            for i in range(count):
                url = origins[i % 3] + "/item" if name == "plain" else "/item"
                client.get(url).raise_for_status()
            return time.process_time() - start

        async def run_async(name: str, count: int) -> float:
            if name == ASYNC_HEDGED:
                client = async_client(origins, NO_HEDGE)
            else:
                client = httpx.AsyncClient(limits=LIMITS)
            async with client:
                for i in range(100):
                    await client.get(origins[i % 3] + "/item" if name != ASYNC_HEDGED else "/item")
                start = time.process_time()
                for i in range(count):
                    url = origins[i % 3] + "/item" if name != ASYNC_HEDGED else "/item"
                    (await client.get(url)).raise_for_status()
                return time.process_time() - start

        for name in clients:
            run_sync(name, 200)  # warm-up: connections, caches
        for rep in range(reps):
            for name in names if rep % 2 == 0 else list(reversed(names)):
                wall = time.perf_counter()
                spent = run_sync(name, n) if name in clients else anyio.run(run_async, name, n)
                samples[name].append(spent / n)
                walls[name].append((time.perf_counter() - wall) / n)
                loads[name].append(os.getloadavg()[0])
        for client in clients.values():
            client.close()
    plain = samples["plain"]
    out: dict[str, Any] = {"requests_per_rep": n, "reps": reps, "libraries": {}}
    for name, values in samples.items():
        out["libraries"][name] = {
            "us_per_request": statistics.median(values) * 1e6,
            "ratio_to_plain": statistics.median(
                [v / p for v, p in zip(values, plain, strict=True)]
            ),
            "wall_us_per_request": statistics.median(walls[name]) * 1e6,
            "loadavg_1m": statistics.median(loads[name]),
        }
    ratio = out["libraries"][SYNC_HEDGED]["ratio_to_plain"]
    out["sync_to_plain"] = ratio
    out["verdict"] = verdict(ratio <= 1.3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer requests")
    parser.add_argument("--skip", nargs="*", default=[], choices=("tail", "cpu"))
    parser.add_argument("--output", default="sync", help="results/<output>.json")
    args = parser.parse_args()
    peers = [p for p in PEERS if installed(p)]
    out: dict[str, Any] = {
        "machine": machine(),
        "command": command(),
        "peers_missing": [p for p in PEERS if p not in peers],
    }
    if "tail" not in args.skip:
        total, rounds = (1_200, 4) if args.quick else (6_000, 6)
        names = ["plain", SYNC_HEDGED, ASYNC_HEDGED, *peers]
        out["tail"] = tail(names, total, rounds)
    if "cpu" not in args.skip:
        reps, n = (3, 300) if args.quick else (7, 1_000)
        names = [
            "plain",
            SYNC_HEDGED,
            f"{SYNC_HEDGED}, metrics on",
            ASYNC_HEDGED,
            "async plain",
            *(p for p in peers if p == "httpx-hedged"),
        ]
        out["cpu"] = cpu(names, reps, n)
    report(out)
    print(write_json(args.output, out))


def report(out: dict[str, Any]) -> None:
    if "tail" in out:
        t = out["tail"]
        rows = [
            [
                name,
                r["requests"],
                r["p50_ms"],
                r["p99_ms"],
                r["extra_load"],
                r["losers_left_share"],
                r["left_within_50ms_share"],
                r["loadavg_1m"],
            ]
            for name, r in t["libraries"].items()
        ]
        print_table(
            f"lab law, 3 replicas, {THREADS} threads, delay {DELAY * 1000:.0f} ms",
            [
                "library",
                "requests",
                "p50 ms",
                "p99 ms",
                "extra load",
                "losers left",
                "left <= 50 ms",
                "load 1m",
            ],
            rows,
        )
        with contextlib.suppress(KeyError):
            print(
                f"sync/async p99: {t['sync_to_async_p99']:.3f} {t['p99_verdict']}; "
                f"losers within 50 ms: {t['leave_verdict']}"
            )
    if "cpu" in out:
        c = out["cpu"]
        rows = [
            [
                name,
                r["us_per_request"],
                r["ratio_to_plain"],
                r["wall_us_per_request"],
                r["loadavg_1m"],
            ]
            for name, r in c["libraries"].items()
        ]
        print_table(
            "CPU per unhedged request",
            ["client", "CPU µs/req", "× plain", "wall µs/req", "load 1m"],
            rows,
        )
        print(f"sync hedged / plain httpx.Client: {c['sync_to_plain']:.2f} {c['verdict']}")


if __name__ == "__main__":
    main()
