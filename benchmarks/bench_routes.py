"""Two routes on one client, and retries sharing the hedge budget (issue 27), in virtual time.

Run from the repository root::

    .venv/bin/python benchmarks/bench_routes.py                 # seeds 1-3, both parts
    .venv/bin/python benchmarks/bench_routes.py --seeds 1 --json out.json

Both parts run the real ``HedgedTransport`` over ``httpx.MockTransport`` model replicas
on trio's ``MockClock(autojump_threshold=0)`` (the harness of
``bench_stalls_virtual.py``: answers woken in their order of arrival, deadlines due at
one instant expired in the order they were set, trio's scheduler seeded), so the
figures are the library's logic, not the machine's load; 3 replicas of ``http://svc``.

**Two routes.** ``/lookup``, log-normal with a 10 ms median, and ``/export``, log-normal
with a 900 ms median (both with the lab law's spread, ``sigma = ln(30 / 12) / z(0.95)``,
so p95 = 2.5 x median), on one client with ``routes=[Route(path="/lookup",
name="lookup"), Route(path="/export", name="export", quantile=0.95)]`` (the export route
gets an ``AdaptiveDelay`` of its own), the default budget shared. 2 workers loop on
``/lookup`` and 20 on ``/export`` for ``--seconds`` of virtual time after a
``--warmup``; then each route is served alone by the same workers, with the same
draws (keyed by seed, route, request and attempt). Per route: the extra load (backups
begun per request), the mean of the law's ``P(X > d)`` over the delays the counted
requests used, and p50/p99 of the latency the caller sees, mixed and alone.

Targets: each route's extra load within 1 point of its own ``P(X > d)``; its p99
within 5 % of the same route served alone.

**Retries and the budget.** A service whose every replica answers ``503`` after 1 ms;
5 workers call it through stamina (3 attempts, its default back-off, which sleeps in
virtual time) around a hedged client (one backup, sent at once after a failed
attempt). Three clients: plain (no retries, no hedging: one request a call), stamina
around hedging with no budget that binds, and stamina around hedging with one budget,
``HedgeBudget(ratio=0.1, burst=10, min_per_second=0)`` (the floor off: the ratio is
what is measured), drawn by the backups and by stamina's ``on=`` predicate
(``docs/budget.md``'s recipe). The first ``--calls-warmup`` calls drain the burst;
then requests per call over ``--calls`` calls.

Target: once drained, the all-503 service sees at most 1.1x the requests of a plain
client.

Deterministic for a seed (stdout); CPU time to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import random
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist
from typing import Any

import anyio
import httpx
import stamina
import trio
import trio.testing
from _common import command, machine, print_table, quantile, verdict, with_fixed_hash_seed
from bench_stalls_virtual import Wakes, _deadlines_in_registration_order

from hedgeclient import (
    HedgeBudget,
    HedgedTransport,
    PowerOfTwoChoices,
    Route,
    hedge_info,
)
from hedgeclient.testing import LogNormal

SERVICE = "http://svc"
REPLICAS = ["http://r0", "http://r1", "http://r2"]
SIGMA = math.log(0.030 / 0.012) / NormalDist().inv_cdf(0.95)  # the lab law's spread
LAWS = {"lookup": LogNormal(median=0.010, sigma=SIGMA), "export": LogNormal(0.900, SIGMA)}
WORKERS = {"lookup": 2, "export": 40}
LOAD_SLACK = 0.01  # extra load within a point of P(X > d)
P99_SLACK = 0.05  # p99 within 5 % of the route served alone
RETRY_TARGET = 1.1  # requests per call, against a plain client's 1


@dataclass
class RouteRun:
    """What one route measured over the counted window."""

    latencies: list[float] = field(default_factory=list)
    backups: int = 0
    p_over: list[float] = field(default_factory=list)  # the law's P(X > d) per request

    def summary(self) -> dict[str, Any]:
        n = len(self.latencies)
        return {
            "requests": n,
            "extra_load": self.backups / n,
            "law_p_over_delay": statistics.fmean(self.p_over) if self.p_over else None,
            "p50_s": quantile(self.latencies, 0.5),
            "p99_s": quantile(self.latencies, 0.99),
        }


async def serve_routes(args: argparse.Namespace, seed: int, names: Sequence[str]) -> dict:
    """Drive the workers of ``names`` for the warm-up and the counted window."""
    wakes = Wakes()
    t0 = anyio.current_time()
    start_counting, stop = t0 + args.warmup, t0 + args.warmup + args.seconds
    runs = {name: RouteRun() for name in names}
    keys = {"lookup": 1, "export": 2}

    async def handler(request: httpx.Request) -> httpx.Response:
        name = request.url.path.strip("/")
        index = int(request.headers["x-request"])
        attempt = int(request.headers.get("hedge-attempt", "1"))
        rng = random.Random(seed << 56 | keys[name] << 48 | index << 8 | attempt)
        await wakes.wait_until(anyio.current_time() + LAWS[name].sample(rng))
        return httpx.Response(200)

    transport = HedgedTransport(
        httpx.MockTransport(handler),
        replicas={SERVICE: REPLICAS},
        routes=[
            Route(path="/lookup", name="lookup"),
            Route(path="/export", name="export", quantile=0.95),
        ],
        selector=PowerOfTwoChoices(rng=random.Random(f"selector {seed}")),
        metrics=False,
        opentelemetry=False,
    )
    async with httpx.AsyncClient(transport=transport, base_url=SERVICE) as client:

        async def worker(name: str, number: int) -> None:
            law, run = LAWS[name], runs[name]
            for i in range(number * 10**6, (number + 1) * 10**6):
                began = anyio.current_time()
                if began >= stop:
                    return
                response = await client.get(f"/{name}", headers={"x-request": str(i)})
                response.raise_for_status()
                if began < start_counting:
                    continue
                info = hedge_info(response)
                assert info is not None
                run.latencies.append(anyio.current_time() - began)
                run.backups += info.attempts - 1
                run.p_over.append(1.0 if info.delay is None else 1.0 - law.cdf(info.delay))

        async with anyio.create_task_group() as replicas:
            replicas.start_soon(wakes.run)
            async with anyio.create_task_group() as tg:
                for name in names:
                    for k in range(WORKERS[name]):
                        tg.start_soon(worker, name, keys[name] * 1000 + k)
            replicas.cancel_scope.cancel()
    return {name: run.summary() for name, run in runs.items()}


@dataclass
class RetryRun:
    """Requests the service saw per call, once drained."""

    calls: int = 0
    seen: int = 0  # requests of the counted calls (their x-call header)
    retries: int = 0  # drawn while the counted calls ran
    backups: int = 0
    tokens_at_start: float = math.nan  # the balance as the first counted call began


async def serve_retries(args: argparse.Namespace, seed: int, client_kind: str) -> RetryRun:
    """``client_kind``: ``plain``, ``stamina`` (no budget that binds) or ``shared``."""
    run = RetryRun()

    async def handler(request: httpx.Request) -> httpx.Response:
        if int(request.headers["x-call"]) >= args.calls_warmup:  # a counted call's
            run.seen += 1
        await anyio.sleep(0.001)
        return httpx.Response(503)

    if client_kind == "plain":
        transport: httpx.AsyncBaseTransport = httpx.MockTransport(handler)
        budget = None
    else:
        budget = (
            HedgeBudget(ratio=0.1, burst=10, min_per_second=0)
            if client_kind == "shared"
            else HedgeBudget(ratio=1.0, burst=1e9, min_per_second=0)
        )
        transport = HedgedTransport(
            httpx.MockTransport(handler),
            replicas={SERVICE: REPLICAS},
            budget=budget,
            selector=PowerOfTwoChoices(rng=random.Random(f"selector {seed}")),
            metrics=False,
            opentelemetry=False,
        )

    def on(exc: Exception) -> bool:
        """stamina's ``on``: a 5xx, if the shared budget pays (docs/budget.md)."""
        if not isinstance(exc, httpx.HTTPStatusError) or exc.response.status_code < 500:
            return False
        return client_kind == "stamina" or (budget is not None and budget.try_retry())

    total = args.calls_warmup + args.calls
    counter = iter(range(total))
    async with httpx.AsyncClient(transport=transport, base_url=SERVICE) as client:

        async def get(call: int) -> httpx.Response:
            return (await client.get("/", headers={"x-call": str(call)})).raise_for_status()

        retried = stamina.retry(on=on, attempts=3)(get) if client_kind != "plain" else get

        async def worker() -> None:
            for i in counter:
                if i == args.calls_warmup and budget is not None:
                    stats = budget.statistics()
                    run.retries, run.backups = -stats.retries, -stats.withdrawals
                    run.tokens_at_start = budget.tokens
                if i >= args.calls_warmup:
                    run.calls += 1
                with contextlib.suppress(httpx.HTTPStatusError):  # every call fails
                    await retried(i)

        async with anyio.create_task_group() as tg:
            for _ in range(args.retry_concurrency):
                tg.start_soon(worker)
    if budget is not None:
        stats = budget.statistics()
        run.retries += stats.retries
        run.backups += stats.withdrawals
    return run


def in_trio(fn: Any, *fn_args: Any, seed: int) -> Any:
    """``fn(*fn_args)`` in a trio run of its own on a fresh MockClock, seeded."""
    _deadlines_in_registration_order()
    trio._core._run._r.seed(seed)
    random.seed(seed)  # stamina's jitter
    return trio.run(fn, *fn_args, clock=trio.testing.MockClock(autojump_threshold=0))


def ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.1f}"


def pct(share: float | None) -> str:
    return "-" if share is None else f"{share:.2%}"


def main(args: argparse.Namespace) -> None:
    payload: dict[str, Any] = {"command": command(), "machine": machine(), "seeds": {}}
    route_rows, retry_rows = [], []
    stamina.instrumentation.set_on_retry_hooks([])  # no log line per retry
    for seed in args.seeds:
        began = time.process_time()
        mixed = in_trio(serve_routes, args, seed, ("lookup", "export"), seed=seed)
        alone = {
            name: in_trio(serve_routes, args, seed, (name,), seed=seed)[name]
            for name in ("lookup", "export")
        }
        retries = {
            kind: in_trio(serve_retries, args, seed, kind, seed=seed)
            for kind in ("plain", "stamina", "shared")
        }
        print(f"seed {seed}: {time.process_time() - began:.1f} s CPU", file=sys.stderr)
        seed_out: dict[str, Any] = {"routes": {}, "retries": {}}
        for name in ("lookup", "export"):
            m, a = mixed[name], alone[name]
            gap = m["extra_load"] - m["law_p_over_delay"]
            p99_ratio = m["p99_s"] / a["p99_s"]
            targets = [verdict(abs(gap) <= LOAD_SLACK), verdict(abs(p99_ratio - 1) <= P99_SLACK)]
            seed_out["routes"][name] = {"mixed": m, "alone": a, "targets": targets}
            route_rows.append(
                [
                    seed, name, m["requests"], pct(m["extra_load"]), pct(m["law_p_over_delay"]),
                    ms(m["p50_s"]), ms(m["p99_s"]), ms(a["p99_s"]), f"{p99_ratio:.3f}",
                    " ".join(targets),
                ]
            )  # fmt: skip
        plain = retries["plain"].seen / retries["plain"].calls
        for kind in ("plain", "stamina", "shared"):
            r = retries[kind]
            per_call = r.seen / r.calls
            target = verdict(per_call <= RETRY_TARGET * plain) if kind == "shared" else ""
            seed_out["retries"][kind] = {
                "calls": r.calls, "requests": r.seen, "per_call": per_call,
                "ratio_to_plain": per_call / plain, "retries": r.retries, "backups": r.backups,
                "tokens_at_start": r.tokens_at_start,
            }  # fmt: skip
            retry_rows.append(
                [seed, kind, r.calls, r.seen, f"{per_call:.3f}", f"{per_call / plain:.3f}x",
                 r.retries, r.backups, target]
            )  # fmt: skip
        payload["seeds"][seed] = seed_out
    print_table(
        f"Virtual time: /lookup (10 ms median) and /export (900 ms) on one client, "
        f"{args.seconds:g} s counted after {args.warmup:g} s; then each alone",
        ["seed", "route", "requests", "extra load", "law P(X>d)", "p50 ms", "p99 ms",
         "p99 alone ms", "p99 / alone", "targets"],
        route_rows,
    )  # fmt: skip
    print("  targets: extra load within 1 pt of P(X>d); p99 within 5 % of the route alone")
    print_table(
        f"Virtual time: an all-503 service, 3 stamina attempts around one backup, "
        f"{args.calls} calls counted after {args.calls_warmup}",
        ["seed", "client", "calls", "requests", "per call", "vs plain", "retries",
         "backups", "target"],
        retry_rows,
    )  # fmt: skip
    print("  target: shared budget (ratio 0.1, burst 10, no floor) <= 1.1x a plain client")
    if args.json:
        Path(args.json).write_text(json.dumps(payload, indent=2) + "\n")
        print(f"wrote {args.json}", file=sys.stderr)


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--seconds", type=float, default=120.0, help="virtual, counted")
    parser.add_argument("--warmup", type=float, default=300.0, help="virtual seconds left out")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--calls-warmup", type=int, default=200)
    parser.add_argument("--retry-concurrency", type=int, default=5)
    parser.add_argument("--json", metavar="PATH", help="also write the results there")
    return parser.parse_args(argv)


if __name__ == "__main__":
    with_fixed_hash_seed()
    main(parse())
