"""Type-checked, never run: the public API as a user writes it (``mypy --strict``)."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Collection, Sequence
from typing import Literal

import httpx

from hedgeclient import (
    AdaptiveDelay,
    AttemptResult,
    DelayPolicy,
    DelaySnapshot,
    DiscoveryError,
    DiscoveryFailedError,
    DiscoveryStatistics,
    DnsReplicas,
    FixedDelay,
    HealthStatistics,
    HedgeBudget,
    HedgedTransport,
    HedgeInfo,
    PolledReplicas,
    PowerOfTwoChoices,
    Replica,
    ReplicaSelector,
    RequestRecord,
    Route,
    SnapshotDelayPolicy,
    SrvReplicas,
    SyncHedgedTransport,
    TiedRequests,
    WatchedReplicas,
    hedge_info,
)
from hedgeclient.instrumentation import OpenTelemetry
from hedgeclient.server import (
    HedgeAttempt,
    HedgeMiddleware,
    ServerStatistics,
    Ties,
    current_attempt,
)
from hedgeclient.testing import FakeService


class Sticky:
    """A user's selector: the first replica not excluded; counts unhealthy answers."""

    def __init__(self) -> None:
        self.unhealthy = 0

    def choose(self, replicas: Sequence[str], exclude: Collection[str]) -> str | None:
        return next((r for r in replicas if r not in exclude), None)

    def attempt_started(self, replica: str) -> None:
        del replica

    def attempt_finished(self, replica: str, *, result: AttemptResult) -> None:
        if result in ("unhealthy_status", "connect_failed"):
            self.unhealthy += 1


def snapshot_of(policy: DelayPolicy) -> DelaySnapshot | None:
    if isinstance(policy, SnapshotDelayPolicy):
        return policy.delay_snapshot()
    return None


def on_request(record: RequestRecord) -> None:
    seconds: float = record.duration
    hedged: bool = record.hedged
    trace_id: str | None = record.trace_id  # for a log line
    triggers = [a.trigger for a in record.attempts if a.trigger is not None]
    del seconds, hedged, trace_id, triggers


async def main() -> None:
    budget = HedgeBudget(ratio=0.05, burst=5, min_per_second=0.5)
    transport = HedgedTransport(
        httpx.AsyncHTTPTransport(http2=False),
        replicas={"http://catalog": ["http://10.0.0.7:8080", "http://10.0.0.8:8080"]},
        delay=AdaptiveDelay(quantile=0.95, window=60.0),
        max_hedges=1,
        budget=budget,
        selector=PowerOfTwoChoices(cooldown=2.0),
        hooks=[on_request],
        metrics=False,
        name="catalog",
    )
    fixed = HedgedTransport(delay=FixedDelay(0.030), metrics=False)
    one_knob = HedgedTransport(extra_load=0.01, metrics=False)  # the p99, a 2 % budget
    shared_knob = HedgedTransport(extra_load=0.05, budget=budget, metrics=False)
    sticky: ReplicaSelector = Sticky()
    long_fixed = HedgedTransport(
        delay=FixedDelay(30.0, max_delay=math.inf), selector=sticky, metrics=False
    )
    snapshot = snapshot_of(long_fixed.delay_policy)
    if snapshot is not None:
        seconds: float | None = snapshot.delay("GET http://catalog")
        del seconds
    async with httpx.AsyncClient(transport=transport, base_url="http://catalog") as client:
        response = await client.get("/items/42", extensions={"hedge": True})
        info: HedgeInfo | None = hedge_info(response)
        if info is not None:
            attempt: int = info.attempt
            delay: float | None = info.delay
            del attempt, delay
    traced = HedgedTransport(
        metrics=False, opentelemetry=OpenTelemetry(metrics=False, max_routes=100)
    )
    untraced = HedgedTransport(metrics=False, opentelemetry=False)
    await fixed.aclose()
    await one_knob.aclose()
    await shared_knob.aclose()
    await long_fixed.aclose()
    await traced.aclose()
    await untraced.aclose()
    decide: Literal["headers", "first_byte"] = "first_byte"
    llm = HedgedTransport(
        replicas={"http://llm": ["http://10.0.0.9:8000", "http://10.0.0.10:8000"]},
        routes=[
            Route(method="POST", path="/v1/chat/completions", hedge=True, decide_on=decide),
            Route(match=lambda request: request.url.path.endswith("/embeddings"), hedge=False),
        ],
        metrics=False,
    )
    async with httpx.AsyncClient(transport=llm, base_url="http://llm") as client:
        stream_request = client.build_request(
            "GET", "/v1/models", extensions={"hedge_decide_on": "headers"}
        )
        streamed = await client.send(stream_request, stream=True)
        await streamed.aclose()
    await discovered()
    tied = HedgedTransport(
        replicas={"http://catalog": ["http://10.0.0.7:8080", "http://10.0.0.8:8080"]},
        tied=TiedRequests(offset=0.002),
        metrics=False,
    )
    await tied.aclose()
    behind_a_sidecar = HedgedTransport(
        replicas={"https://catalog": ["http://10.0.0.7:8080", "http://10.0.0.8:8080"]},
        allow_plaintext=True,
        metrics=False,
    )
    await behind_a_sidecar.aclose()


async def asgi_app(scope: dict[str, object], receive: object, send: object) -> None:
    attempt: HedgeAttempt | None = current_attempt()
    if attempt is not None:
        number: int = attempt.number
        queued: float = attempt.queued
        del number, queued


def server() -> ServerStatistics:
    ties = Ties(peers=["http://10.0.0.7:8080"], secret=b"0123456789abcdef", max_skew=5.0)
    app = HedgeMiddleware(
        asgi_app, cancel="all", max_concurrency=8, pushback_queue=None, ties=ties, metrics=False
    )
    with FakeService(replicas=2, concurrency=1, disconnects="middleware") as svc:
        busy: float = svc.stats().busy
        del busy
    return app.statistics()


async def discovered() -> None:
    """Replica sources, zones and health, as a user types them."""

    async def registry() -> list[str | Replica]:
        return ["http://10.0.0.7:8080", Replica("http://10.0.0.8:8080", zone="b", weight=2)]

    async def watch() -> AsyncIterator[list[str]]:
        yield ["http://10.0.0.7:8080"]

    selector = PowerOfTwoChoices(max_cooldown=30.0, max_ejected=0.5)
    transport = HedgedTransport(
        replicas={
            "http://catalog:8080": DnsReplicas("catalog.shop.svc", min_ttl=1.0, max_ttl=30.0),
            "http://search": SrvReplicas("_http._tcp.search.consul", nameserver="127.0.0.1:8600"),
            "http://users": PolledReplicas(registry, interval=5.0),
            "http://feed": WatchedReplicas(watch, timeout=5.0),
            "http://static": [Replica("http://10.0.0.9:8080", zone="a")],
        },
        zones={"http://10.0.0.7:8080": "a"},
        zone="a",
        backup_zone="other",
        selector=selector,
        metrics=False,
    )
    try:
        await transport.refresh_replicas()
    except DiscoveryFailedError as exc:
        failures: dict[str, str] = exc.failures
        del failures
    stats: DiscoveryStatistics = transport.replica_statistics()["http://users"]
    kinds: dict[DiscoveryError, int] = stats.errors
    health: HealthStatistics = selector.statistics()
    result: AttemptResult = "connect_stalled"
    del kinds, health, result
    await transport.aclose()


def sync_client() -> None:
    """``httpx.Client`` takes a sync transport: mypy refuses a HedgedTransport there
    (``--strict`` warns of an unused ignore, so the ignore below asserts the error)."""
    httpx.Client(transport=HedgedTransport(metrics=False))  # type: ignore[arg-type]


def sync_transport() -> None:
    """``SyncHedgedTransport`` is an ``httpx.BaseTransport`` taking HedgedTransport's
    keyword arguments, type-checked through ``HedgeOptions`` (a misspelt or mistyped
    one is an error)."""
    transport = SyncHedgedTransport(
        httpx.HTTPTransport(), replicas={"http://a": ["http://b"]}, extra_load=0.05
    )
    on_a_loop = SyncHedgedTransport(httpx.AsyncHTTPTransport(), backend="asyncio")
    client = httpx.Client(transport=transport)
    delay: DelayPolicy = transport.delay_policy
    engine: HedgedTransport = transport.engine
    SyncHedgedTransport(extra_lod=0.05)  # type: ignore[call-arg]
    SyncHedgedTransport(max_hedges="1")  # type: ignore[arg-type]
    SyncHedgedTransport(backend="uv")  # type: ignore[arg-type]
    del client, delay, engine, on_a_loop
