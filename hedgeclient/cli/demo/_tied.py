"""``hedgeclient demo --tied``: plain, hedged and tied requests at equal offered load.

``FakeService(concurrency=1)`` replicas in a subprocess, each serving one request at a
time through :class:`~hedgeclient.server.HedgeMiddleware` and queueing the rest;
service times log-normal (mean 50 ms, sigma 0.2), so at the chosen utilisation of the
capacity ``replicas / mean`` the latency is mostly queueing, the case Dean & Barroso's
tied requests are for. The same seeded Poisson arrivals are offered, open loop, to:

- ``plain``: one attempt per request (``HedgedTransport(max_hedges=0)``: the same
  client path and replica choice);
- ``hedged``: a backup after a fixed delay, the plain phase's p95, under the default
  hedge budget and the middleware's default pushback;
- ``tied <offset>``: ``TiedRequests(offset=...)``, no backup by delay.

Replicas are chosen at random (:class:`RandomReplica`), as many independent clients
would: one client balancing by its own outstanding requests would see all the load.
Per mode: latency p50, p99, p99.9 (sending to the response read), extra requests
sent, extra server work (handler-seconds run by every replica, cancelled or not, over
those of the copies whose answer was used, minus 1), tied copies dropped unexecuted,
and tie messages per tied pair. ``benchmarks/bench_tied.py`` runs the same and
writes JSON.

Source: Dean & Barroso, "The Tail at Scale", CACM 56(2), 2013 ("tied requests").

Strictly private: the command line is the interface.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import httpx

from hedgeclient import AttemptResult, FixedDelay, HedgedTransport, TiedRequests
from hedgeclient.testing import FakeService, LogNormal, ServiceStats

__all__ = ["RandomReplica", "TiedOptions", "compare", "rows"]

SERVICE = "http://svc"


@dataclass(frozen=True, slots=True)
class TiedOptions:
    """The comparison's settings (seconds, requests per second)."""

    utilisation: float = 0.7
    seconds: float = 30.0  # measured, per mode
    warmup: float = 3.0  # per mode
    replicas: int = 3
    concurrency: int = 1  # slots per replica
    mean: float = 0.050  # mean service time
    sigma: float = 0.2  # of log service time
    offsets: tuple[float, ...] = (0.002, 0.005)
    seed: int = 1

    @property
    def capacity(self) -> float:
        """Requests per second the replicas can serve."""
        return self.replicas * self.concurrency / self.mean

    @property
    def law(self) -> LogNormal:
        """Service times with mean ``mean``: a log-normal's mean is median e^(s^2/2)."""
        return LogNormal(self.mean / math.exp(self.sigma**2 / 2), self.sigma)


class RandomReplica:
    """A uniformly random replica among those allowed: one of many independent
    clients, which cannot see the queues the others fill."""

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)

    def choose(self, replicas: Sequence[str], exclude: Collection[str]) -> str | None:
        """A random replica not in ``exclude``, or ``None``."""
        allowed = [r for r in replicas if r not in exclude]
        return self._rng.choice(allowed) if allowed else None

    def attempt_started(self, replica: str) -> None:
        """Ignored: no state."""

    def attempt_finished(self, replica: str, *, result: AttemptResult) -> None:
        """Ignored: no state."""


def arrivals(rate: float, seconds: float, seed: int) -> list[float]:
    """Poisson arrival instants in [0, seconds) at ``rate`` per second."""
    rng = random.Random(seed)
    out, t = [], rng.expovariate(rate)
    while t < seconds:
        out.append(t)
        t += rng.expovariate(rate)
    return out


def _quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q * len(ordered) - 1e-9)) - 1]


def _transport(mode: str, origins: list[str], delay: float, seed: int) -> HedgedTransport:
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


async def _run_mode(
    svc: FakeService, mode: str, options: TiedOptions, delay: float
) -> dict[str, Any]:
    rate = options.utilisation * options.capacity
    plan = arrivals(rate, options.seconds, options.seed)
    warm = arrivals(rate, options.warmup, options.seed + 1)
    latencies: list[float] = []
    winners: dict[str, int] = {}
    counts = {"attempts": 0, "errors": 0}
    transport = _transport(mode, svc.origins, delay, options.seed)
    async with httpx.AsyncClient(transport=transport, base_url=SERVICE) as client:

        async def one(rid: str, record: bool) -> None:
            start = time.perf_counter()
            try:
                response = await client.get("/work", headers={"x-request-id": rid})
            except httpx.HTTPError:
                counts["errors"] += record
                return
            if record:
                latencies.append(time.perf_counter() - start)
                info = response.extensions["hedge"]
                winners[rid] = info.attempt
                counts["attempts"] += info.attempts
                counts["errors"] += response.status_code != 200

        async def offer(instants: list[float], prefix: str, record: bool) -> None:
            t0 = anyio.current_time()
            async with anyio.create_task_group() as tg:
                for i, at in enumerate(instants):
                    await anyio.sleep_until(t0 + at)
                    tg.start_soon(one, f"{prefix}{i}", record)

        await offer(warm, f"warm-{mode}-", False)
        await anyio.to_thread.run_sync(svc.reset_stats)
        before = await anyio.to_thread.run_sync(svc.stats)
        await offer(plan, f"{mode}-", True)
    with anyio.fail_after(30):
        after = await svc.wait_stats(lambda s: all(r.in_flight == 0 for r in s.replicas))
    return _summary(mode, latencies, winners, counts, before, after)


def _summary(
    mode: str,
    latencies: list[float],
    winners: dict[str, int],
    counts: dict[str, int],
    before: ServiceStats,
    after: ServiceStats,
) -> dict[str, Any]:
    used = 0.0
    both = 0
    for rid, attempt in winners.items():
        visits = after.visits(rid)
        both += len(visits) > 1
        used += next((v.worked for v in visits if v.attempt == str(attempt)), 0.0)
    server: dict[str, int] = {}
    for name in (
        "dropped_queued",
        "dropped_on_arrival",
        "dropped_on_answer",
        "messages_sent",
        "messages_failed",
        "twins_running",
        "rejected_pushback",
    ):
        server[name] = sum(
            getattr(a.server, name) - getattr(b.server, name)
            for a, b in zip(after.replicas, before.replicas, strict=True)
            if a.server is not None and b.server is not None
        )
    n = len(latencies)
    tied = mode.startswith("tied")
    return {
        "mode": mode,
        "requests": n,
        "errors": counts["errors"],
        "p50_s": _quantile(latencies, 0.5),
        "p95_s": _quantile(latencies, 0.95),
        "p99_s": _quantile(latencies, 0.99),
        "p999_s": _quantile(latencies, 0.999),
        "extra_requests": counts["attempts"] / n - 1.0,
        "handler_seconds": after.busy,
        "used_handler_seconds": used,
        "extra_server_work": after.busy / used - 1.0 if used else math.nan,
        "both_copies_ran": both if tied else None,
        **server,
        "messages_per_pair": server["messages_sent"] / n if tied else None,
    }


async def compare(
    options: TiedOptions, note: Callable[[str], None] = lambda _: None
) -> list[dict[str, Any]]:
    """Run every mode on one service; return one summary per mode (seconds)."""
    results = []
    async with FakeService(
        replicas=options.replicas, latency=options.law, concurrency=options.concurrency,
        mode="process", seed=options.seed, keep=1_000_000,
    ) as svc:  # fmt: skip
        note(f"plain ({options.seconds:g} s)")
        plain = await _run_mode(svc, "plain", options, 0.0)
        results.append(plain)
        note(f"hedged at the plain p95, {plain['p95_s'] * 1000:.1f} ms")
        results.append(await _run_mode(svc, "hedged", options, plain["p95_s"]))
        for offset in options.offsets:
            note(f"tied, offset {offset * 1000:g} ms")
            results.append(await _run_mode(svc, f"tied {offset:g}", options, 0.0))
    return results


def rows(results: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """The printed table: headers and one row per mode (milliseconds, percent)."""
    headers = ["mode", "p50 ms", "p99 ms", "p99.9 ms", "extra requests", "extra work", "dropped"]
    out = []
    for r in results:
        dropped = r["dropped_queued"] + r["dropped_on_arrival"] + r["dropped_on_answer"]
        out.append([
            r["mode"], *(f"{r[k] * 1000:.1f}" for k in ("p50_s", "p99_s", "p999_s")),
            f"{r['extra_requests']:.1%}", f"{r['extra_server_work']:.1%}", str(dropped),
        ])  # fmt: skip
    return headers, out
