"""Plain, hedged and tied requests at equal offered load, on queueing replicas.

Run from the repository root::

    .venv/bin/python benchmarks/bench_tied.py                   # 3 x 30 s at 70 %
    .venv/bin/python benchmarks/bench_tied.py --seconds 10      # quicker
    .venv/bin/python benchmarks/bench_tied.py --utilisation 0.5 --name tied_u50

``FakeService(concurrency=...)`` in process mode: each replica runs at most
``--concurrency`` requests at once and queues the rest in HedgeMiddleware's admission
queue; service times are log-normal with mean ``--mean`` seconds (sigma 0.5), so at
``--utilisation`` of the capacity ``replicas * concurrency / mean`` the latency is
mostly queueing (the scenario of Dean & Barroso's tied requests). One run offers the
same Poisson arrivals (seeded) to each mode, open loop, after a warm-up:

- ``plain``: one attempt per request (``HedgedTransport(max_hedges=0)``, the same
  client path and replica choice);
- ``hedged``: a backup after a fixed delay equal to the plain phase's p95, under the
  default hedge budget and the middleware's default pushback;
- ``tied``: ``TiedRequests(offset=...)`` for each of ``--offsets``, no backup by delay.

Per mode: client latency p50/p99/p99.9 (from sending to the response read), extra
requests sent (attempts per request - 1), extra server work (handler-seconds run by
every replica, cancelled or not, over the handler-seconds of the copies whose answer
was used, minus 1), tied copies dropped, and drop messages per tied pair. Results in
``benchmarks/results/<name>.json`` (default ``tied``) with the command, the time and
``uptime``.
"""

from __future__ import annotations

import argparse
import math
import random
import subprocess
import time
from collections.abc import Collection, Sequence
from typing import Any

import anyio
import httpx
from _common import command, machine, ms, print_table, quantile, verdict, write_json

from hedgeclient import AttemptResult, FixedDelay, HedgedTransport, TiedRequests
from hedgeclient.testing import FakeService, LogNormal, ServiceStats

SERVICE = "http://svc"


class RandomReplica:
    """A uniformly random replica among those allowed: one of many independent clients,
    which cannot see the queues the others fill (one client with PowerOfTwoChoices
    would see all the load and balance it away)."""

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)

    def choose(self, replicas: Sequence[str], exclude: Collection[str]) -> str | None:
        allowed = [r for r in replicas if r not in exclude]
        return self._rng.choice(allowed) if allowed else None

    def attempt_started(self, replica: str) -> None:
        return None

    def attempt_finished(self, replica: str, *, result: AttemptResult) -> None:
        return None


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--utilisation", type=float, default=0.7)
    parser.add_argument("--seconds", type=float, default=30.0, help="per mode")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds before each mode")
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=1, help="slots per replica")
    parser.add_argument("--mean", type=float, default=0.050, help="mean service time, s")
    parser.add_argument("--sigma", type=float, default=0.2, help="of log service time")
    parser.add_argument(
        "--offsets", default="0.002,0.005", help="tie offsets, s, comma-separated: a row each"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--name", default="tied")
    return parser.parse_args()


def arrivals(rate: float, seconds: float, seed: int) -> list[float]:
    """Poisson arrival instants in [0, seconds) at ``rate`` per second."""
    rng = random.Random(seed)
    out, t = [], rng.expovariate(rate)
    while t < seconds:
        out.append(t)
        t += rng.expovariate(rate)
    return out


def transport(mode: str, origins: list[str], delay: float, seed: int) -> HedgedTransport:
    limits = httpx.Limits(max_connections=400, max_keepalive_connections=400)
    inner = httpx.AsyncHTTPTransport(limits=limits)
    common: dict[str, Any] = {"replicas": {SERVICE: origins}, "metrics": False}
    common["selector"] = RandomReplica(seed)
    if mode == "plain":
        return HedgedTransport(inner, max_hedges=0, **common)
    if mode == "hedged":
        return HedgedTransport(inner, delay=FixedDelay(delay), **common)
    offset = float(mode.partition(" ")[2])
    return HedgedTransport(inner, delay=5.0, tied=TiedRequests(offset=offset), **common)


async def run_mode(
    svc: FakeService, mode: str, plan: list[float], warm: list[float], args: Any, delay: float
) -> dict[str, Any]:
    latencies: list[float] = []
    winners: dict[str, int] = {}
    attempts = 0
    errors = 0

    async with httpx.AsyncClient(
        transport=transport(mode, svc.origins, delay, args.seed), base_url=SERVICE
    ) as client:

        async def one(rid: str, record: bool) -> None:
            nonlocal attempts, errors
            start = time.perf_counter()
            try:
                response = await client.get("/work", headers={"x-request-id": rid})
            except httpx.HTTPError:
                errors += record
                return
            if record:
                latencies.append(time.perf_counter() - start)
                info = response.extensions["hedge"]
                winners[rid] = info.attempt
                attempts += info.attempts
                errors += response.status_code != 200

        async def offer(instants: list[float], prefix: str, record: bool) -> None:
            t0 = anyio.current_time()
            async with anyio.create_task_group() as tg:
                for i, at in enumerate(instants):
                    await anyio.sleep_until(t0 + at)
                    tg.start_soon(one, f"{prefix}{i}", record)

        await offer(warm, f"warm-{mode}-", False)
        svc.reset_stats()
        before = svc.stats()
        await offer(plan, f"{mode}-", True)
    with anyio.fail_after(30):
        after = await svc.wait_stats(lambda s: all(r.in_flight == 0 for r in s.replicas))
    return summarise(mode, latencies, winners, attempts, errors, before, after)


def summarise(
    mode: str,
    latencies: list[float],
    winners: dict[str, int],
    attempts: int,
    errors: int,
    before: ServiceStats,
    after: ServiceStats,
) -> dict[str, Any]:
    used = 0.0
    for rid, attempt in winners.items():
        for visit in after.visits(rid):
            if visit.attempt == str(attempt) and visit.outcome == "completed":
                used += visit.worked
                break
    counts: dict[str, int] = {}
    for name in ("dropped_queued", "dropped_on_arrival", "messages_sent", "rejected_pushback"):
        counts[name] = sum(
            getattr(a.server, name) - getattr(b.server, name)
            for a, b in zip(after.replicas, before.replicas, strict=True)
            if a.server is not None and b.server is not None
        )
    n = len(latencies)
    return {
        "mode": mode,
        "requests": n,
        "errors": errors,
        "p50_ms": ms(quantile(latencies, 0.5)),
        "p95_ms": ms(quantile(latencies, 0.95)),
        "p99_ms": ms(quantile(latencies, 0.99)),
        "p999_ms": ms(quantile(latencies, 0.999)),
        "extra_requests": attempts / n - 1.0,
        "handler_seconds": after.busy,
        "used_handler_seconds": used,
        "extra_server_work": after.busy / used - 1.0 if used else math.nan,
        "abandoned": after.abandoned,
        **counts,
        "messages_per_pair": counts["messages_sent"] / n if mode.startswith("tied") else None,
    }


async def main() -> None:
    args = parse()
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()  # noqa: ASYNC221 - before any request
    capacity = args.replicas * args.concurrency / args.mean
    rate = args.utilisation * capacity
    median = args.mean / math.exp(args.sigma**2 / 2)  # mean of a log-normal: median e^(s^2/2)
    plan = arrivals(rate, args.seconds, args.seed)
    warm = arrivals(rate, args.warmup, args.seed + 1)
    print(f"capacity {capacity:.0f}/s, offered {rate:.0f}/s, {len(plan)} requests per mode")
    results = []
    async with FakeService(
        replicas=args.replicas, latency=LogNormal(median, args.sigma), concurrency=args.concurrency,
        mode="process", seed=args.seed, keep=1_000_000,
    ) as svc:  # fmt: skip
        plain = await run_mode(svc, "plain", plan, warm, args, 0.0)
        results.append(plain)
        delay = plain["p95_ms"] / 1000.0
        results.append(await run_mode(svc, "hedged", plan, warm, args, delay))
        for offset in args.offsets.split(","):
            mode = f"tied {float(offset):g}"
            results.append(await run_mode(svc, mode, plan, warm, args, delay))
    hedged = results[1]
    targets = {}
    for tied in results[2:]:
        name = tied["mode"]
        best = tied["p99_ms"] < min(hedged["p99_ms"], plain["p99_ms"])
        targets[f"{name}: p99 below hedged and plain"] = best
        targets[f"{name}: extra server work <= 5 %"] = tied["extra_server_work"] <= 0.05
        targets[f"{name}: <= 1 drop message per pair"] = tied["messages_per_pair"] <= 1.0
    columns = ["mode", "p50 ms", "p99 ms", "p99.9 ms", "extra req", "extra work", "dropped"]
    rows = [
        [r["mode"], r["p50_ms"], r["p99_ms"], r["p999_ms"], r["extra_requests"],
         r["extra_server_work"], r["dropped_queued"] + r["dropped_on_arrival"]]
        for r in results
    ]  # fmt: skip
    print_table(
        f"utilisation {args.utilisation:.0%}, hedge delay {ms(delay):.1f} ms", columns, rows
    )
    for name, ok in targets.items():
        print(f"{verdict(ok)}  {name}")
    path = write_json(
        args.name,
        {
            "command": command(),
            "started": started,
            "uptime": uptime,
            "machine": machine(),
            "settings": {**vars(args), "capacity_per_s": capacity, "rate_per_s": rate,
                         "service_time": f"LogNormal(median={median:.6f}, sigma={args.sigma})",
                         "hedge_delay_s": delay},
            "results": results,
            "targets": {k: verdict(v) for k, v in targets.items()},
        },
    )  # fmt: skip
    print(f"wrote {path}")


if __name__ == "__main__":
    anyio.run(main)
