"""The sync client (``SyncHedgedTransport``) beside the async one, plain ``httpx.Client``
and the sync peers (issue 26).

Run from the repository root::

    .venv/bin/pip install httpx-hedged grit-toolkit   # the peers (skipped when missing)
    .venv/bin/python benchmarks/bench_sync.py           # both parts, both laws
    .venv/bin/python benchmarks/bench_sync.py --quick   # fewer requests
    .venv/bin/python benchmarks/bench_sync.py --skip cpu --laws lab \
        --libraries "hedgeclient sync" "hedgeclient async"   # some rows of one law

1. **tail**: ``FakeService(latency=<law>, mode="process")``, 3 replicas, a fixed hedge
   delay of 30 ms (the lab p95), one backup, a budget that never binds; 4 threads
   sharing one ``httpx.Client`` (the sync rows: ``hedgeclient sync``, the engine on the
   callers' threads, and ``hedgeclient sync, loop thread``, on a private event-loop
   thread) or 4 tasks sharing one ``httpx.AsyncClient`` (``hedgeclient async``),
   interleaved rounds of every row; one
   more row, ``hedgeclient sync, delay 25 ms``, which on the lab law sends the peers'
   extra load, so that p99 can be compared at equal extra load. Two laws (``--laws``):
   the lab law, whose atoms make exact ties common (a primary drawing 50 ms and a
   backup sent at 30 ms drawing 20 ms finish at the same instant), and
   ``lognormal:median=0.012,sigma=0.56``, the lab's median (12 ms) and p95 (30 ms)
   without atoms (``bench_stalls.py --law``'s). End-to-end latency of ``client.get``;
   extra load = attempts the server received / requests - 1.

   The losers. The inner transport of every hedging row notes, on the client's clock
   (``time.perf_counter``), when each attempt was sent and got its response headers,
   and when a cancelled one unwound (the peers' attempts are numbered by the balancer
   in front of the replicas). The winner's answer is the request's first headers. A
   loser's *work left* is its send instant plus the latency its replica drew, minus
   the winner's answer; it is **running** when that is positive (it had not answered:
   there was something to stop); it **left** when its replica saw the client go away
   (``abandoned``), at its send instant plus the handler time the replica measured
   (``worked``). With no clock shared with the replicas' process both under-read by
   the loser's send-to-application time (a fraction of a millisecond on loopback, more
   when it opens a connection). Columns: of all losers, the share that left within
   50 ms of the winner's answer (the issue's wording); the same share of the running
   ones (the target as a design can meet it: a handler that answered cannot leave); and
   of those with at least 5 ms of work left (more than the stop takes to travel). Also
   in the results: the stop at the client (winner's headers to the loser unwound, p50
   and p99), and, for the losers not seen leaving, their draws (primary/backup) and
   their work left. Peers: ``httpx-hedged``'s ``SyncHedgedTransport`` (the warm-up
   delay fixed at 30 ms, a budget of 100 %) and ``grit-toolkit``'s ``hedge(0.030)``
   around one attempt (send and read the body), each attempt of theirs to a random
   replica (they know no replicas).
   Targets: sync hedged p99 within 10 % of async hedged p99 at the same extra load;
   >= 99 % of the running losers seen leaving within 50 ms (the verdict printed).
2. **cpu**: CPU per unhedged request (``time.process_time()`` of this process over
   sequential requests; the replicas run in another process), 1 ms replicas, a hedge
   delay of 5 s so that no hedge fires, interleaved repetitions, the load average
   beside each figure: plain ``httpx.Client``, ``SyncHedgedTransport`` on the callers'
   threads (metrics off and on) and on a loop thread (``backend="asyncio"``), the async
   ``HedgedTransport`` under ``httpx.AsyncClient`` and plain ``httpx.AsyncClient`` for
   reference, and httpx-hedged's sync transport; wall-clock time per request beside it,
   for the latency each design adds (the async rows' include their event loop's start
   and a 100-request warm-up). Target: the sync hedged client (threads, the default) at
   most 1.3x plain ``httpx.Client`` (median of the per-repetition ratios).

Results: printed, and written to ``benchmarks/results/<output>.json`` (``sync.json``):
``tail`` by law, then by row.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import statistics
import threading
import time
from typing import Any

import anyio
import httpx
from _common import (
    SERVICE,
    command,
    machine,
    on_threads,
    package_version,
    per_request,
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
# The lab law (atoms: exact ties between a primary and a backup are common) and a law
# without atoms of the same median (12 ms) and p95 (30 ms), bench_stalls' --law.
BUSY = 0.005  # a loser with this much work left at the winner's answer has time to be stopped
LAWS = ("lab", "lognormal:median=0.012,sigma=0.56")
LIMITS = httpx.Limits(max_connections=100, max_keepalive_connections=100)
PEERS = {"httpx-hedged": "httpx_hedged", "grit-toolkit": "grit"}
SYNC_HEDGED = "hedgeclient sync"  # backend="threads", the default
SYNC_LOOP = f"{SYNC_HEDGED}, loop thread"  # backend="asyncio": the engine on an event loop
ASYNC_HEDGED = "hedgeclient async"
SHORTER = 0.025  # a second delay: on the lab law as much extra load as the peers' at 30 ms
SYNC_SHORTER = f"{SYNC_HEDGED}, delay {SHORTER * 1000:.0f} ms"


def generous() -> HedgeBudget:
    return HedgeBudget(ratio=1.0, burst=1_000_000, min_per_second=0)


def few_ms(values: list[float]) -> list[float] | dict[str, float]:
    """``values`` (seconds) in ms: every one, sorted, if they are few; else quantiles."""
    ordered = sorted(round(x * 1000, 2) for x in values)
    if len(ordered) <= 60:
        return ordered
    return {f"q{q}": quantile(ordered, q / 100) for q in (1, 10, 50, 90, 99)}


def share(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def installed(name: str) -> bool:
    return package_version(name) is not None


# -- the attempts' instants at the client --------------------------------------------------


class Instants:
    """When each attempt of each request was sent and got its response headers, on the
    client's clock (``time.perf_counter``), by ``(x-request-id, hedge-attempt)``; the
    primary attempt is ``"1"``. Thread-safe."""

    def __init__(self) -> None:
        self.sent: dict[tuple[str, str], float] = {}
        self.answered: dict[tuple[str, str], float] = {}
        self.stopped: dict[tuple[str, str], float] = {}  # raised (a loser: cancelled)
        self._lock = threading.Lock()

    @staticmethod
    def key(request: httpx.Request) -> tuple[str, str]:
        return request.headers.get("x-request-id", ""), request.headers.get("hedge-attempt", "1")

    def note(self, into: dict[tuple[str, str], float], key: tuple[str, str]) -> None:
        now = time.perf_counter()
        with self._lock:
            into[key] = now

    def clear(self) -> None:
        with self._lock:
            self.sent.clear()
            self.answered.clear()
            self.stopped.clear()


class TimedAsync(httpx.AsyncBaseTransport):
    """The hedgeclient rows' inner transport: an ``httpx.AsyncHTTPTransport`` whose
    attempts' instants are noted (a cancelled attempt gets no answer)."""

    def __init__(self, instants: Instants) -> None:
        self._inner = httpx.AsyncHTTPTransport(limits=LIMITS)
        self._instants = instants

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        key = Instants.key(request)
        self._instants.note(self._instants.sent, key)
        try:
            response = await self._inner.handle_async_request(request)
        except BaseException:  # a loser cancelled: its connection is closed by now
            self._instants.note(self._instants.stopped, key)
            raise
        self._instants.note(self._instants.answered, key)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


class TimedSync(httpx.HTTPTransport):
    """The threads row's inner transport: an ``httpx.HTTPTransport`` (so that its
    sockets are watched) whose attempts' instants are noted (a stopped attempt gets no
    answer)."""

    def __init__(self, instants: Instants) -> None:
        super().__init__(limits=LIMITS)
        self._instants = instants

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        key = Instants.key(request)
        self._instants.note(self._instants.sent, key)
        try:
            response = super().handle_request(request)
        except BaseException:  # a loser stopped: its socket shut down, its connection closed
            self._instants.note(self._instants.stopped, key)
            raise
        self._instants.note(self._instants.answered, key)
        return response


# -- the peers, sync ------------------------------------------------------------------------


class RandomReplica(httpx.BaseTransport):
    """A load balancer in front of the replicas: every attempt to a random one, numbered
    in its ``hedge-attempt`` header (1, 2, ...: the peers send none) and its instants
    noted in ``instants``."""

    def __init__(
        self,
        inner: httpx.BaseTransport,
        origins: list[str],
        seed: int,
        instants: Instants | None = None,
    ) -> None:
        self._inner = inner
        self._origins = [httpx.URL(o) for o in origins]
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._instants = instants
        self._attempts: dict[str, int] = {}

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        rid = request.headers.get("x-request-id", "")
        with self._lock:
            target = self._rng.choice(self._origins)
            number = self._attempts[rid] = self._attempts.get(rid, 0) + 1
            if len(self._attempts) > 10_000:
                del self._attempts[next(iter(self._attempts))]
        url = request.url.copy_with(scheme=target.scheme, host=target.host, port=target.port)
        headers = httpx.Headers(request.headers)
        headers["hedge-attempt"] = str(number)
        replica = httpx.Request(request.method, url, headers=headers, stream=request.stream)
        replica.extensions = request.extensions
        if self._instants is None:
            return self._inner.handle_request(replica)
        key = Instants.key(replica)
        self._instants.note(self._instants.sent, key)
        response = self._inner.handle_request(replica)
        self._instants.note(self._instants.answered, key)
        return response

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


def sync_client(
    name: str,
    origins: list[str],
    delay: float,
    *,
    metrics: bool = False,
    instants: Instants | None = None,
) -> Any:
    """The sync client of library ``name`` (``plain``: ``httpx.Client`` alone), its
    attempts' instants noted in ``instants`` if given."""
    if name == "plain":
        return httpx.Client(limits=LIMITS)
    if name.startswith(SYNC_HEDGED):
        loop = name.startswith(SYNC_LOOP)
        transport = SyncHedgedTransport(**_hedged(origins, delay, metrics, instants, sync=not loop))
        return httpx.Client(transport=transport, base_url=SERVICE)
    balancer = RandomReplica(
        httpx.HTTPTransport(limits=LIMITS), origins, seed=len(name), instants=instants
    )
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


def async_client(
    origins: list[str], delay: float, *, metrics: bool = False, instants: Instants | None = None
) -> httpx.AsyncClient:
    transport = HedgedTransport(**_hedged(origins, delay, metrics, instants))
    return httpx.AsyncClient(transport=transport, base_url=SERVICE)


def _hedged(
    origins: list[str],
    delay: float,
    metrics: bool,
    instants: Instants | None,
    *,
    sync: bool = False,
) -> dict[str, Any]:
    """The settings all of our transports get here (sync and async alike): a fixed
    delay, one backup, a budget that never binds, the inner transport (``sync``: for the
    engine on threads) timed if asked."""
    inner: httpx.BaseTransport | httpx.AsyncBaseTransport
    if sync:
        inner = httpx.HTTPTransport(limits=LIMITS) if instants is None else TimedSync(instants)
    else:
        inner = (
            httpx.AsyncHTTPTransport(limits=LIMITS) if instants is None else TimedAsync(instants)
        )
    return {
        "transport": inner,
        "replicas": {SERVICE: origins},
        "delay": delay,
        "max_hedges": 1,
        "budget": generous(),
        "metrics": metrics,
        "opentelemetry": metrics,
    }


# -- 1. tail ----------------------------------------------------------------------------------


def _losers(stats: Any, times: dict[str, float], instants: Instants, d: dict[str, Any]) -> None:
    """Account the losers of one chunk's requests into ``d``.

    The winner's answer is the first instant an attempt of the request got its response
    headers at the client (``time.perf_counter``). On that clock, a loser's handler was
    due to end at its send instant plus the latency its replica drew for it: its *work
    left* at the winner's answer is that instant minus the winner's answer; a loser is
    *running* at the winner's answer when its work left is positive (it had not
    answered yet, so there was something to stop). A loser that left did so at its send
    instant plus the handler time its replica measured (``worked``). Both estimates
    under-read by the loser's send-to-application time (no shared clock with the
    replicas' process), a fraction of a millisecond on loopback."""
    by_request: dict[str, dict[str, float]] = {}
    for (rid, attempt), at in instants.answered.items():
        by_request.setdefault(rid, {})[attempt] = at
    for rid, visits in stats.requests.items():
        if len(visits) < 2 or rid not in times:
            continue
        answers = by_request.get(rid)
        if not answers:
            continue
        won = min(answers, key=answers.__getitem__)
        winner_at = answers[won]
        draws = {v.attempt or "1": v.latency for v in visits}
        for visit in visits:
            attempt = visit.attempt or "1"
            if attempt == won or (rid, attempt) not in instants.sent:
                continue
            sent = instants.sent[rid, attempt]
            work_left = sent + visit.latency - winner_at
            stopped = instants.stopped.get((rid, attempt))
            if stopped is not None:
                d["stop"].append(stopped - winner_at)
            left = visit.outcome == "abandoned"
            leave = sent + visit.worked - winner_at
            in_time = left and leave <= LEAVE_WITHIN
            d["losers"] += 1
            d["left"] += left
            d["left_50"] += in_time
            if work_left > 0:
                d["running"] += 1
                d["running_left_50"] += in_time
            if work_left >= BUSY:
                d["busy"] += 1
                d["busy_left_50"] += in_time
            if left:
                d["leave"].append(leave)
                continue
            key = (  # why it was not seen leaving: its draw and the other attempt's
                "primary" if attempt == "1" else "backup",
                round(draws.get("1", 0.0) * 1000),
                round(draws.get("2", 0.0) * 1000),
            )
            d["unseen"][key] = d["unseen"].get(key, 0) + 1
            d["unseen_left"].append(work_left)
            d["answered_first"] += work_left <= 0


def tail(names: list[str], total: int, rounds: int, law: str) -> dict[str, Any]:
    with FakeService(replicas=3, latency=law, mode="process", seed=31, keep=5_000) as svc:
        origins = svc.origins
        instants = Instants()
        sync_clients = {
            n: sync_client(n, origins, SHORTER if n == SYNC_SHORTER else DELAY, instants=instants)
            for n in names
            if n != ASYNC_HEDGED
        }
        data: dict[str, dict[str, Any]] = {
            n: {
                "lat": [],
                "requests": 0,
                "received": 0,
                "abandoned": 0,
                "leave": [],
                "load": [],
                "losers": 0,
                "left": 0,
                "left_50": 0,
                "running": 0,
                "running_left_50": 0,
                "busy": 0,
                "busy_left_50": 0,
                "answered_first": 0,
                "unseen": {},
                "unseen_left": [],
                "stop": [],
            }
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
            instants.clear()
            if name == ASYNC_HEDGED:

                async def run() -> None:
                    async with async_client(origins, DELAY, instants=instants) as client:

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

                on_threads(n, one_sync, THREADS)
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
            _losers(stats, times, instants, d)

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

    out: dict[str, Any] = {"law": law, "delay_ms": DELAY * 1000, "threads": THREADS}
    out["libraries"] = {}
    for name, d in data.items():
        extra_attempts = d["received"] - d["requests"]
        leave = d["leave"]
        unseen = sorted(d["unseen"].items(), key=lambda kv: -kv[1])
        out["libraries"][name] = {
            "requests": d["requests"],
            "p50_ms": quantile(d["lat"], 0.5) * 1000,
            "p99_ms": quantile(d["lat"], 0.99) * 1000,
            "extra_load": extra_attempts / d["requests"],
            "losers_left_share": d["abandoned"] / extra_attempts if extra_attempts else None,
            "losers": d["losers"],
            "losers_left": d["left"],
            "losers_left_within_50ms_share": share(d["left_50"], d["losers"]),
            "losers_answered_first": d["answered_first"],
            "losers_running": d["running"],
            "running_left_within_50ms_share": share(d["running_left_50"], d["running"]),
            "losers_busy_5ms": d["busy"],
            "busy_left_within_50ms_share": share(d["busy_left_50"], d["busy"]),
            "left_within_50ms_share": (
                sum(1 for x in leave if x <= LEAVE_WITHIN) / len(leave) if leave else None
            ),
            "leave_p50_ms": quantile(leave, 0.5) * 1000 if leave else None,
            "leave_p99_ms": quantile(leave, 0.99) * 1000 if leave else None,
            "leave_max_ms": max(leave) * 1000 if leave else None,
            "stop_p50_ms": quantile(d["stop"], 0.5) * 1000 if d["stop"] else None,
            "stop_p99_ms": quantile(d["stop"], 0.99) * 1000 if d["stop"] else None,
            "stop_max_ms": max(d["stop"]) * 1000 if d["stop"] else None,
            "unseen_losers": [  # the ten commonest pairs of draws
                {"loser": k[0], "primary_draw_ms": k[1], "backup_draw_ms": k[2], "count": c}
                for k, c in unseen[:10]
            ],
            "unseen_work_left_ms": few_ms(d["unseen_left"]),
            "loadavg_1m": statistics.median(d["load"]),
        }
    libs = out["libraries"]
    if SYNC_HEDGED in libs and ASYNC_HEDGED in libs:
        ratio = libs[SYNC_HEDGED]["p99_ms"] / libs[ASYNC_HEDGED]["p99_ms"]
        out["sync_to_async_p99"] = ratio
        out["p99_verdict"] = verdict(ratio <= 1.10)
        running = libs[SYNC_HEDGED]["running_left_within_50ms_share"]
        out["leave_verdict"] = verdict(running is not None and running >= 0.99)
    return out


# -- 2. cpu ------------------------------------------------------------------------------------


def cpu(names: list[str], reps: int, n: int) -> dict[str, Any]:
    samples: dict[str, list[float]] = {name: [] for name in names}
    walls: dict[str, list[float]] = {name: [] for name in names}
    loads: dict[str, list[float]] = {name: [] for name in names}
    with FakeService(replicas=3, latency=0.001, mode="process") as svc:
        origins = svc.origins
        clients = {
            name: sync_client(
                name.replace(", metrics on", ""), origins, NO_HEDGE, metrics="metrics on" in name
            )
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
    libraries = per_request(samples, walls, loads, "plain")
    out: dict[str, Any] = {"requests_per_rep": n, "reps": reps, "libraries": libraries}
    ratio = out["libraries"][SYNC_HEDGED]["ratio_to_plain"]
    out["sync_to_plain"] = ratio
    out["verdict"] = verdict(ratio <= 1.3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer requests")
    parser.add_argument("--skip", nargs="*", default=[], choices=("tail", "cpu"))
    parser.add_argument("--output", default="sync", help="results/<output>.json")
    parser.add_argument(
        "--requests",
        type=int,
        default=None,
        help="the tail part's requests per row (default 6,000; --quick 1,200), in 6 rounds",
    )
    parser.add_argument(
        "--libraries", nargs="*", default=[], help="the tail part's rows (default: all)"
    )
    parser.add_argument(
        "--laws",
        nargs="+",
        default=list(LAWS),
        help="the replicas' latency laws of the tail part (parse_law's string form)",
    )
    args = parser.parse_args()
    peers = [p for p in PEERS if installed(p)]
    out: dict[str, Any] = {
        "machine": machine(),
        "command": command(),
        "peers_missing": [p for p in PEERS if p not in peers],
    }
    if "tail" not in args.skip:
        total, rounds = (1_200, 4) if args.quick else (6_000, 6)
        if args.requests is not None:
            total, rounds = args.requests, 6
        names = ["plain", SYNC_HEDGED, SYNC_LOOP, ASYNC_HEDGED, *peers, SYNC_SHORTER]
        names = [n for n in names if not args.libraries or n in args.libraries]
        out["tail"] = {law: tail(names, total, rounds, law) for law in args.laws}
    if "cpu" not in args.skip:
        reps, n = (3, 300) if args.quick else (7, 1_000)
        names = [
            "plain",
            SYNC_HEDGED,
            f"{SYNC_HEDGED}, metrics on",
            SYNC_LOOP,
            ASYNC_HEDGED,
            "async plain",
            *(p for p in peers if p == "httpx-hedged"),
        ]
        out["cpu"] = cpu(names, reps, n)
    report(out)
    print(write_json(args.output, out))


def report(out: dict[str, Any]) -> None:
    for law, t in out.get("tail", {}).items():
        rows = [
            [
                name,
                r["requests"],
                r["p50_ms"],
                r["p99_ms"],
                r["extra_load"],
                r["losers_left_within_50ms_share"],
                r["running_left_within_50ms_share"],
                r["busy_left_within_50ms_share"],
                r["loadavg_1m"],
            ]
            for name, r in t["libraries"].items()
        ]
        print_table(
            f"{law}, 3 replicas, {THREADS} threads, delay {DELAY * 1000:.0f} ms",
            [
                "library",
                "requests",
                "p50 ms",
                "p99 ms",
                "extra load",
                "losers left <= 50 ms",
                "of those running",
                "with >= 5 ms of work left",
                "load 1m",
            ],
            rows,
        )
        for name, r in t["libraries"].items():
            if r["unseen_losers"] and name.startswith("hedgeclient"):
                top = ", ".join(
                    f"{u['loser']} of {u['primary_draw_ms']}/{u['backup_draw_ms']} ms x{u['count']}"
                    for u in r["unseen_losers"][:4]
                )
                print(
                    f"{name}: {r['losers'] - r['losers_left']} "
                    f"losers not seen leaving, by draws (primary/backup): {top}; "
                    f"{r['losers_answered_first']} had answered before the winner; their work "
                    f"left (ms): {r['unseen_work_left_ms']}; stop at the "
                    f"client p50/p99 {r['stop_p50_ms']:.2f}/{r['stop_p99_ms']:.2f} ms"
                )
        with contextlib.suppress(KeyError):
            print(
                f"sync/async p99: {t['sync_to_async_p99']:.3f} {t['p99_verdict']}; "
                f"running losers left within 50 ms: {t['leave_verdict']}"
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
