"""``hedgeclient demo --discovery``: the scenario itself, and its figures.

See :mod:`._discovery` for what it shows. Strictly private: the command line is the
interface.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.to_thread
import httpx

from hedgeclient import (
    AttemptResult,
    DnsReplicas,
    HedgedTransport,
    PowerOfTwoChoices,
    Replica,
    RequestRecord,
)
from hedgeclient.cli._args import UsageError
from hedgeclient.cli.demo._options import DEFAULT_CONCURRENCY
from hedgeclient.testing import Down, FakeService, LatencyLaw

__all__ = ["DEFAULT_SECONDS", "MIN_SECONDS", "NAME", "TTL", "DiscoveryOptions", "discover"]

NAME = "api.demo.test"
"""The DNS name the replicas are behind."""

TTL = 1
"""Seconds: the TTL of the name's records, the shortest ``DnsReplicas`` follows."""

DEFAULT_SECONDS = 12.0
MIN_SECONDS = 6.0
"""The shortest run: the leaver's removal is seen within TTL + 1 s of half the run, and
it is stopped 1 s after that, before the end."""

_STOP_AFTER = 1.0
"""Seconds between the client seeing the leaver's removal and the leaver stopping: its
attempts in flight then (the law's tail is well under it) end normally first."""


@dataclass(frozen=True, slots=True)
class DiscoveryOptions:
    """The run's settings; times in seconds. Strictly private."""

    seconds: float = DEFAULT_SECONDS
    concurrency: int = DEFAULT_CONCURRENCY
    latency: str = "demo"
    law: LatencyLaw | None = None
    seed: int = 0
    backend: str = "asyncio"


class _Watched:
    """The default selector, ``PowerOfTwoChoices``, and when each attempt started and
    each replica set was applied (``anyio.current_time()``). Strictly private."""

    def __init__(self, seed: int) -> None:
        self.inner = PowerOfTwoChoices(rng=random.Random(seed))
        self.started: list[tuple[float, str]] = []
        self.sets: list[tuple[float, frozenset[str]]] = []

    def choose(self, replicas: Sequence[str], exclude: Collection[str]) -> str | None:
        return self.inner.choose(replicas, exclude)

    def attempt_started(self, replica: str) -> None:
        self.started.append((anyio.current_time(), replica))
        self.inner.attempt_started(replica)

    def attempt_finished(self, replica: str, *, result: AttemptResult) -> None:
        self.inner.attempt_finished(replica, result=result)

    def replicas_changed(self, service: str, replicas: Sequence[Replica]) -> None:
        self.sets.append((anyio.current_time(), frozenset(r.origin for r in replicas)))
        self.inner.replicas_changed(service, replicas)

    async def wait_set(self, condition: Any, after: float) -> float:
        """Poll (every 10 ms) until a set applied after ``after`` satisfies ``condition``;
        return when it was applied."""
        while True:
            for instant, replicas in self.sets:
                if instant >= after and condition(replicas):
                    return instant
            await anyio.sleep(0.01)


@dataclass
class _Tally:
    """What the hook and the senders saw. Strictly private."""

    records: list[tuple[float, RequestRecord]] = field(default_factory=list)  # (sent, record)
    latencies: list[float] = field(default_factory=list)
    failed: int = 0

    def __call__(self, record: RequestRecord, /) -> None:
        self.records.append((anyio.current_time() - record.duration, record))


def _quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q * len(ordered) - 1e-9)) - 1] if ordered else math.nan


async def discover(options: DiscoveryOptions) -> dict[str, Any]:
    """Run the scenario; return its figures (seconds, counts), as ``--json`` prints them.

    Raises:
        UsageError: the service cannot start (its loopback addresses cannot be bound).
    """
    from hedgeclient.testing import FakeNameserver  # lazy: dnspython

    law = options.law if options.law is not None else options.latency
    try:
        service = FakeService(
            replicas=4, own_address=True, latency=law, seed=options.seed, mode="process"
        )
        await service.__aenter__()
    except (OSError, RuntimeError) as exc:
        msg = f"--discovery: cannot start the replicas on 127.0.0.2-5: {exc}"
        raise UsageError(msg) from exc
    try:
        async with FakeNameserver({NAME: service.addresses[:3]}, ttl=TTL) as dns_server:
            return await _run(options, service, dns_server)
    finally:
        await service.__aexit__(None, None, None)


async def _run(options: DiscoveryOptions, svc: FakeService, dns_server: Any) -> dict[str, Any]:
    origins, addresses = svc.origins, svc.addresses
    selector = _Watched(options.seed)
    tally = _Tally()
    source = DnsReplicas(nameserver=dns_server.nameserver, min_ttl=float(TTL))
    base = f"http://{NAME}:{svc.port}"
    transport = HedgedTransport(
        replicas={base: source}, selector=selector, hooks=[tally], metrics=False
    )
    marks: dict[str, float] = {}
    async with httpx.AsyncClient(transport=transport, base_url=base) as client:
        await transport.refresh_replicas()
        start = anyio.current_time()

        async def traffic(worker: int) -> None:
            n = 0
            while anyio.current_time() - start < options.seconds:
                n += 1
                sent = anyio.current_time()
                try:
                    response = await client.get(f"/{worker}/{n}")
                except httpx.HTTPError:
                    tally.failed += 1
                    continue
                if response.status_code != 200:
                    tally.failed += 1
                else:
                    tally.latencies.append(anyio.current_time() - sent)

        async def deploy() -> None:
            await anyio.sleep_until(start + options.seconds / 4)
            marks["joined"] = anyio.current_time()
            await anyio.to_thread.run_sync(dns_server.set_records, {NAME: addresses[:4]})
            marks["join_seen"] = await selector.wait_set(lambda s: origins[3] in s, marks["joined"])
            await anyio.sleep_until(start + options.seconds / 2)
            marks["left"] = anyio.current_time()
            await anyio.to_thread.run_sync(dns_server.set_records, {NAME: addresses[1:4]})
            marks["leave_seen"] = await selector.wait_set(
                lambda s: origins[0] not in s, marks["left"]
            )
            await anyio.sleep(_STOP_AFTER)
            marks["stopped"] = anyio.current_time()
            await anyio.to_thread.run_sync(lambda: svc.set_fault(Down(), replicas=0))

        async with anyio.create_task_group() as tg:
            tg.start_soon(deploy)
            for worker in range(options.concurrency):
                tg.start_soon(traffic, worker)
    return _figures(options, origins, selector, tally, marks, start)


def _figures(
    options: DiscoveryOptions,
    origins: list[str],
    selector: _Watched,
    tally: _Tally,
    marks: dict[str, float],
    start: float,
) -> dict[str, Any]:
    primaries: Counter[str] = Counter()
    backups: Counter[str] = Counter()
    joiner_primaries = [
        sent for sent, record in tally.records if record.attempts[0].replica == origins[3]
    ]
    for _, record in tally.records:
        for attempt in record.attempts:
            (primaries if attempt.kind == "primary" else backups)[attempt.replica] += 1
    seen = marks["leave_seen"]
    after_seen = sum(1 for t, r in selector.started if r == origins[0] and t > seen)
    between = sum(1 for t, r in selector.started if r == origins[0] and marks["left"] < t <= seen)
    requests = len(tally.records)
    sent_backups = sum(backups.values())
    first = min((t for t in joiner_primaries if t >= marks["joined"]), default=math.nan)
    names = {
        origins[0]: ("leaves", 0.0, marks["left"] - start),
        origins[1]: ("stays", 0.0, None),
        origins[2]: ("stays", 0.0, None),
        origins[3]: ("joins", marks["joined"] - start, None),
    }
    return {
        "name": NAME,
        "ttl_seconds": TTL,
        "seconds": options.seconds,
        "concurrency": options.concurrency,
        "latency": options.latency,
        "backend": options.backend,
        "requests": requests,
        "failed": tally.failed,
        "p50_seconds": _quantile(tally.latencies, 0.50),
        "p99_seconds": _quantile(tally.latencies, 0.99),
        "extra_load": sent_backups / requests if requests else math.nan,
        "join": {
            "replica": origins[3],
            "at_seconds": marks["joined"] - start,
            "seen_after_seconds": marks["join_seen"] - marks["joined"],
            "first_primary_after_seconds": first - marks["joined"],
            "bound_seconds": TTL + 1.0,
        },
        "leave": {
            "replica": origins[0],
            "at_seconds": marks["left"] - start,
            "seen_after_seconds": seen - marks["left"],
            "attempts_before_seen": between,
            "attempts_after_seen": after_seen,
            "stopped_at_seconds": marks["stopped"] - start,
        },
        "replicas": [
            {
                "replica": origin,
                "role": role,
                "in_name_from_seconds": since,
                "in_name_until_seconds": until,
                "primaries": primaries[origin],
                "backups": backups[origin],
            }
            for origin, (role, since, until) in names.items()
        ],
    }
