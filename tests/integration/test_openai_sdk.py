"""The real ``openai`` SDK as the client: ``AsyncOpenAI(http_client=httpx.AsyncClient(
transport=HedgedTransport(...)))`` against the fake model server on 127.0.0.1.

Every test runs on asyncio and on trio (the SDK runs on both through anyio). Real clock:
outcomes and counts are asserted (which replica won, what the server generated, how
many requests it received), never timings.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Literal

import anyio
import httpx
import pytest
from openai import AsyncOpenAI, InternalServerError, RateLimitError

from hedgeclient import FixedDelay, HedgeBudget, HedgedTransport, Route
from hedgeclient.testing import (
    ErrorStatus,
    FakeService,
    FirstReplica,
    Generation,
    ReplicaConfig,
    ServiceStats,
)

DecideOn = Literal["headers", "first_byte"]

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.slow,
    # The SDK stops reading its server-sent events at `data: [DONE]` with a `break`,
    # leaving its own async generators and those of httpx's response above the
    # transport unexhausted; trio warns as it collects them. Plain httpx under the SDK
    # shows the same warnings (and httpcore's too, which hedgeclient's stream ends).
    pytest.mark.filterwarnings(
        r"ignore:Async generator '(openai\..*|httpx\._models\..*|httpx\._client\..*)' "
        "was garbage collected:ResourceWarning"
    ),
]

LLM = "http://llm"
MESSAGES: Any = [{"role": "user", "content": "hedge the first token"}]
GENERATION = Generation(tokens_per_second=200, tokens=12)


def chat_route(decide_on: DecideOn = "first_byte") -> Route:
    """The route an SDK user configures: chat completions, opted in, decided on it."""
    return Route(method="POST", path="/v1/chat/completions", hedge=True, decide_on=decide_on)


def generous() -> HedgeBudget:
    """A budget that lets every due backup go (the tests count requests themselves)."""
    return HedgeBudget(ratio=1.0, burst=1_000_000, min_per_second=0)


def busy_connections(inner: httpx.AsyncHTTPTransport) -> list[str]:
    """The pool's connections that are neither idle nor closed, as httpcore names them."""
    return [c.info() for c in inner._pool.connections if not (c.is_idle() or c.is_closed())]


def count_tasks(backend: str) -> int:
    """Tasks alive on the running loop (trio: but the hedge timer, kept for the run)."""
    if backend == "trio":
        import trio

        def count(task: Any) -> int:
            own = 0 if task.name == "hedgeclient-timer" else 1
            return own + sum(count(t) for n in task.child_nurseries for t in n.child_tasks)

        return count(trio.lowlevel.current_root_task())
    import asyncio

    return len(asyncio.all_tasks())


@asynccontextmanager
async def sdk(
    svc: FakeService,
    *,
    decide_on: DecideOn = "first_byte",
    max_retries: int = 0,
    budget: HedgeBudget | None = None,
    delay: float = 0.100,
) -> AsyncIterator[tuple[AsyncOpenAI, httpx.AsyncHTTPTransport, HedgedTransport]]:
    """An AsyncOpenAI client whose http_client hedges ``http://llm`` over ``svc``."""
    inner = httpx.AsyncHTTPTransport()
    transport = HedgedTransport(
        inner,
        replicas={LLM: svc.origins},
        routes=[chat_route(decide_on)],
        delay=FixedDelay(delay),
        selector=FirstReplica(),
        budget=budget or generous(),
        metrics=False,
    )
    async with httpx.AsyncClient(transport=transport) as http_client:
        client = AsyncOpenAI(
            api_key="test", base_url=f"{LLM}/v1", http_client=http_client, max_retries=max_retries
        )
        yield client, inner, transport


def slow_first(slow: float = 2.0) -> dict[int, ReplicaConfig]:
    """Replica 0 takes ``slow`` seconds to its first token; the others are fast."""
    return {0: ReplicaConfig(latency=slow)}


async def settled(svc: FakeService, request_id: str, visits: int) -> ServiceStats:
    """The stats once every visit of ``request_id`` has ended (a loser's disconnect
    reaches the server a few ms after the caller has its answer; bounded at 5 s, then
    an assertion error that shows the visits seen)."""
    with anyio.move_on_after(5.0):
        return await svc.wait_stats(
            lambda s: (
                len(v := s.visits(request_id)) == visits
                and all(x.outcome != "in_flight" for x in v)
            )
        )
    seen = svc.stats().visits(request_id)
    msg = f"{request_id}: {visits} visit(s) ended expected in 5 s, saw {seen}"
    raise AssertionError(msg)


async def test_streamed_call_wins_on_the_backup_first_token(anyio_backend_name: str) -> None:
    """stream=True: the primary's headers come at once but its first token in 2 s; the
    backup's first token wins, the primary is cancelled before generating any, and the
    text the SDK assembles is byte-identical to the winner's."""
    async with (
        FakeService(
            replicas=2, latency=0.010, generation=GENERATION, replica_overrides=slow_first()
        ) as svc,
        sdk(svc) as (client, inner, _),
    ):
        tasks = count_tasks(anyio_backend_name)
        raw = await client.chat.completions.with_raw_response.create(
            model="fake", messages=MESSAGES, stream=True, extra_headers={"x-request-id": "s1"}
        )
        info = raw.http_response.extensions["hedge"]
        ids, text = set(), ""
        async for chunk in raw.parse():
            ids.add(chunk.id)
            text += chunk.choices[0].delta.content or ""
        stats = await settled(svc, "s1", 2)
        assert busy_connections(inner) == []
        assert count_tasks(anyio_backend_name) == tasks
        backup = svc.origins[1]
    assert (info.attempt, info.attempts, info.replica) == (2, 2, backup)
    loser, winner = stats.visits("s1")
    assert (loser.replica, loser.outcome, loser.tokens) == (0, "abandoned", 0)
    assert (winner.replica, winner.outcome, winner.tokens) == (1, "completed", 12)
    assert hashlib.sha256(text.encode()).hexdigest() == winner.text_sha256
    assert len(ids) == 1
    assert ids.pop().startswith("chatcmpl-1-")


async def test_whole_call_wins_on_the_backup(anyio_backend_name: str) -> None:
    """stream=False: the whole JSON of the backup wins; the primary is abandoned."""
    async with (
        FakeService(
            replicas=2, latency=0.010, generation=GENERATION, replica_overrides=slow_first()
        ) as svc,
        sdk(svc) as (client, inner, _),
    ):
        tasks = count_tasks(anyio_backend_name)
        raw = await client.chat.completions.with_raw_response.create(
            model="fake", messages=MESSAGES, extra_headers={"x-request-id": "w1"}
        )
        completion = raw.parse()
        stats = await settled(svc, "w1", 2)
        assert busy_connections(inner) == []
        assert count_tasks(anyio_backend_name) == tasks
    assert raw.http_response.extensions["hedge"].attempt == 2
    loser, winner = stats.visits("w1")
    assert (loser.outcome, winner.outcome) == ("abandoned", "completed")
    text = completion.choices[0].message.content or ""
    assert hashlib.sha256(text.encode()).hexdigest() == winner.text_sha256
    assert completion.usage is not None
    assert completion.usage.completion_tokens == 12


# Decided on headers, the response's stream is the transport's own: the SDK's `break`
# leaves httpcore's generators unexhausted too, as with plain httpx, and the one that
# hedgeclient's response guard iterates them with, in place of httpx's own
# (`_compat.pool.ReclaimingStream`: a message for a read after the client closed).
@pytest.mark.filterwarnings(
    "ignore:Async generator 'httpcore\\..*' was garbage collected:ResourceWarning",
    "ignore:Async generator 'httpx\\._transports\\..*' was garbage collected:ResourceWarning",
    "ignore:Async generator 'hedgeclient\\._compat\\.pool\\.ReclaimingStream\\._iterate' "
    "was garbage collected:ResourceWarning",
)
async def test_streamed_call_decided_on_headers_is_not_hedged() -> None:
    """The contrast: decided on headers, the slow replica's headers (at once) win, and
    the caller waits out its slow first token (1 s, past the 0.5 s delay, where a race
    decided on the first byte would hedge); no backup is sent. The delay leaves the
    headers half a second, on a busy machine too (at 0.1 s, CI's once did not)."""
    async with (
        FakeService(
            replicas=2, latency=0.010, generation=GENERATION, replica_overrides=slow_first(1.0)
        ) as svc,
        sdk(svc, decide_on="headers", delay=0.5) as (client, _, _),
    ):
        raw = await client.chat.completions.with_raw_response.create(
            model="fake", messages=MESSAGES, stream=True, extra_headers={"x-request-id": "h1"}
        )
        async for _ in raw.parse():
            pass
        assert raw.http_response.extensions["hedge"].attempts == 1
        stats = await settled(svc, "h1", 1)
    (visit,) = stats.visits("h1")
    assert (visit.replica, visit.outcome) == (0, "completed")


async def test_caller_stopping_mid_stream_frees_the_connection(anyio_backend_name: str) -> None:
    """The caller stops after two chunks and closes the SDK stream: the server sees the
    disconnect (the tokens it generated are wasted), and no connection stays busy."""
    generation = Generation(tokens_per_second=20, tokens=100)
    service = FakeService(replicas=2, latency=0.010, generation=generation)
    # No backup is the subject: a delay no first token misses (its first token comes at
    # ~60 ms; on a loaded machine the default 100 ms was missed and a backup went).
    async with service as svc, sdk(svc, delay=5.0) as (client, inner, _):
        tasks = count_tasks(anyio_backend_name)
        stream = await client.chat.completions.create(
            model="fake", messages=MESSAGES, stream=True, extra_headers={"x-request-id": "c1"}
        )
        seen = 0
        with anyio.CancelScope() as scope:  # a cancel unwinds the SDK's generators
            async for _ in stream:
                seen += 1
                if seen == 2:
                    scope.cancel()
        await stream.close()
        stats = await settled(svc, "c1", 1)
        assert busy_connections(inner) == []
        assert count_tasks(anyio_backend_name) == tasks
    (visit,) = stats.visits("c1")
    assert visit.outcome == "abandoned"
    assert stats.wasted_tokens == visit.tokens >= 2


async def test_worst_case_is_sdk_tries_times_attempts() -> None:
    """Every replica answers 503: each of the SDK's 1 + 2 tries is a race of a primary
    and one backup sent at once, so one call costs (1 + 2) * (1 + 1) = 6 requests."""
    async with FakeService(
        replicas=2, latency=0.001, generation=GENERATION, fault=ErrorStatus(503)
    ) as svc:
        async with sdk(svc, max_retries=2) as (client, _, _):
            with pytest.raises(InternalServerError):
                await client.chat.completions.create(model="fake", messages=MESSAGES)
        stats = svc.stats()
    assert stats.received == 6


async def test_recommended_settings_bound_an_outage() -> None:
    """The recommended settings (SDK max_retries=1, the budget's ratio 0.1) in an outage:
    10 calls make 20 tries; backups are held by the budget to burst + 0.1 * 20."""
    budget = HedgeBudget(ratio=0.1, burst=2, min_per_second=0)
    async with FakeService(
        replicas=2, latency=0.001, generation=GENERATION, fault=ErrorStatus(503)
    ) as svc:
        async with sdk(svc, max_retries=1, budget=budget) as (client, _, _):

            async def call() -> None:
                with pytest.raises(InternalServerError):
                    await client.chat.completions.create(model="fake", messages=MESSAGES)

            async with anyio.create_task_group() as tg:
                for _ in range(10):
                    tg.start_soon(call)
        stats = svc.stats()
    backups = budget.statistics().withdrawals
    assert stats.received == 20 + backups
    assert backups <= 2 + 0.1 * 20


async def test_rate_limited_calls_are_never_hedged() -> None:
    """A 429 ends the race (it is not a non-fatal status): each SDK try is one request."""
    async with FakeService(
        replicas=2, latency=0.001, generation=GENERATION, fault=ErrorStatus(429)
    ) as svc:
        async with sdk(svc, max_retries=1) as (client, _, _):
            with pytest.raises(RateLimitError):
                await client.chat.completions.create(model="fake", messages=MESSAGES)
        stats = svc.stats()
    assert stats.received == 2
