"""Nothing lost, nothing doubled: non-idempotent requests under every fault.

A POST, PATCH, PUT or DELETE (PUT and DELETE are idempotent, but not allow-listed by
default) is sent once, whatever the replica does: the fake service applies a write
when it has read a request's whole body, and its ledger is compared with the calls,
request id by request id, body hash by body hash.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import anyio
import anyio.lowlevel
import anyio.to_thread
import httpx
import pytest

from hedgeclient import HedgeBudget, HedgedTransport, RequestRecord, TransportClosedError
from hedgeclient.testing import (
    CloseMidBody,
    Down,
    ErrorStatus,
    FakeService,
    LargeBody,
    Reset,
    SlowBody,
)

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SERVICE = "http://svc"
METHODS = ("POST", "PATCH", "PUT", "DELETE")
CALLS_PER_METHOD = 2


@pytest.fixture(scope="module")
def service() -> Iterator[FakeService]:
    """Three replicas shared by the module; each test sets replica 0's fault."""
    with FakeService(replicas=3, latency=0.020) as svc:  # 20 ms: a GET would hedge
        yield svc


@pytest.fixture
def svc(service: FakeService) -> Iterator[FakeService]:
    """The shared service with clean accounting, healthy again after the test."""
    service.reset_stats()
    yield service
    service.set_fault(None)
    service.set_latency(0.020)


def hedged(svc: FakeService, selector: Any, **kwargs: Any) -> HedgedTransport:
    """A transport that would hedge any eligible request after 10 ms, budget unbounded."""
    kwargs.setdefault("budget", HedgeBudget(ratio=1.0, burst=1_000_000, min_per_second=0))
    kwargs.setdefault("max_hedges", 2)
    return HedgedTransport(
        replicas={SERVICE: svc.origins},
        delay=0.010,
        selector=selector,
        metrics=False,
        **kwargs,
    )


FAULTS = [
    pytest.param(None, id="slow-primary"),
    pytest.param(Down(), id="down"),
    pytest.param(Reset(), id="reset"),
    pytest.param(ErrorStatus(503), id="503"),
    pytest.param(SlowBody(duration=0.050), id="slow-body"),
    pytest.param(CloseMidBody(), id="close-mid-body"),
    pytest.param(LargeBody(262_144), id="large-body"),
]


@pytest.mark.parametrize("fault", FAULTS)
async def test_writes_applied_exactly_once(
    svc: FakeService, fault: Any, first_replica: Callable[[], Any], tally: Any
) -> None:
    """Every write method meeting a faulty primary is applied once, or not at all if refused."""
    svc.set_latency(0.030, replicas=0)  # the primary is slower: a GET would hedge
    svc.set_fault(fault, replicas=0)
    records: list[RequestRecord] = []
    outcomes: dict[str, str] = {}
    bodies: dict[str, bytes] = {}
    transport = hedged(svc, first_replica(), hooks=[records.append])
    async with httpx.AsyncClient(transport=transport, base_url=SERVICE) as client:
        for method in METHODS:
            for n in range(CALLS_PER_METHOD):
                rid = f"{method}-{n}"
                bodies[rid] = f"{rid}:{'x' * 100}".encode()
                try:
                    response = await client.request(
                        method, f"/w/{rid}", content=bodies[rid], headers={"x-request-id": rid}
                    )
                    outcomes[rid] = str(response.status_code)
                except httpx.HTTPError as exc:
                    outcomes[rid] = type(exc).__name__
    stats = await anyio.to_thread.run_sync(svc.stats)
    refused = {rid for rid, outcome in outcomes.items() if outcome == "ConnectError"}
    for rid, body in bodies.items():
        writes = stats.writes_for(rid)
        assert len(writes) == (0 if rid in refused else 1), (rid, outcomes[rid])
        assert all(w.sha256 == hashlib.sha256(body).hexdigest() for w in writes)
    assert all(len(r.attempts) == 1 for r in records)  # never a second attempt
    assert {r.suppressed for r in records} <= {None, "not_idempotent"}
    assert len(refused) == (len(bodies) if isinstance(fault, Down) else 0)
    tally(
        "N10 writes under faults",
        faults=len(bodies),
        requests=len(bodies),
        lost_writes=sum(abs(len(stats.writes_for(r)) - (r not in refused)) for r in bodies),
    )


async def test_streaming_body_sent_once_even_opted_in(
    svc: FakeService, first_replica: Callable[[], Any], tally: Any
) -> None:
    """A POST/PUT with an async-generator body and hedge=True: one attempt, body intact."""
    svc.set_latency(0.100, replicas=0)
    transport = hedged(svc, first_replica())
    parts = [b"part-%d," % i for i in range(50)]
    expected = hashlib.sha256(b"".join(parts)).hexdigest()

    async def body() -> AsyncIterator[bytes]:
        for part in parts:
            yield part
            await anyio.lowlevel.checkpoint()

    async with httpx.AsyncClient(transport=transport, base_url=SERVICE) as client:
        for method in ("POST", "PUT"):
            response = await client.request(
                method,
                f"/stream/{method}",
                content=body(),
                headers={"x-request-id": method},
                extensions={"hedge": True},
            )
            assert response.status_code == 200
            assert response.extensions["hedge"].attempts == 1
    stats = await anyio.to_thread.run_sync(svc.stats)
    assert [(w.request_id, w.sha256) for w in stats.writes] == [
        ("POST", expected),
        ("PUT", expected),
    ]
    tally("N10 streaming body never sent twice", requests=2, lost_writes=0)


async def test_cancelled_and_closed_writes_applied_at_most_once(
    svc: FakeService, first_replica: Callable[[], Any], tally: Any
) -> None:
    """POSTs cut off by the caller or by aclose() are applied once each (the body had arrived).

    Each is cut off once its body is written (an httpcore trace event), not after a
    fixed time, which a loaded machine could reach before the body left."""
    svc.set_latency(1.0)
    transport = hedged(svc, first_replica())

    def once_written(then: Callable[[], None]) -> Any:
        async def trace(name: str, info: dict[str, Any]) -> None:
            if name == "http11.send_request_body.complete":
                then()

        return {"trace": trace}

    async def cut_off(client: httpx.AsyncClient, n: int) -> None:
        """POST under fail_after, its deadline moved to now once the body is written."""
        with anyio.fail_after(30.0) as scope:

            def now() -> None:
                scope.deadline = anyio.current_time()

            rid = {"x-request-id": f"c{n}"}
            await client.post(f"/c{n}", content=b"c", headers=rid, extensions=once_written(now))

    async with httpx.AsyncClient(transport=transport, base_url=SERVICE) as client:
        for n in range(3):
            with pytest.raises(TimeoutError):
                await cut_off(client, n)
        errors: list[BaseException] = []
        written = [anyio.Event() for _ in range(3)]

        async def call(n: int) -> None:
            try:
                rid = {"x-request-id": f"a{n}"}
                ext = once_written(written[n].set)
                await client.post(f"/a{n}", content=b"a", headers=rid, extensions=ext)
            except httpx.HTTPError as exc:
                errors.append(exc)

        async with anyio.create_task_group() as tg:
            for n in range(3):
                tg.start_soon(call, n)
            with anyio.fail_after(10.0):  # milliseconds; the bound only stops a hang
                for event in written:
                    await event.wait()
            await transport.aclose()
    assert [type(e) for e in errors] == [TransportClosedError] * 3
    ids = [f"c{n}" for n in range(3)] + [f"a{n}" for n in range(3)]
    with anyio.fail_after(10.0):  # the server reads the bodies it was sent, at once
        stats = await svc.wait_stats(lambda s: len(s.writes) >= len(ids))
    assert sorted(w.request_id or "" for w in stats.writes) == sorted(ids)
    tally("N10 writes cut off by caller or aclose", requests=6, lost_writes=0)


async def test_allow_listed_put_is_hedged(
    svc: FakeService, first_replica: Callable[[], Any]
) -> None:
    """The allow-list is the switch: with PUT listed, a slow PUT gets a backup (2 writes)."""
    svc.set_latency(0.200, replicas=0)
    transport = hedged(svc, first_replica(), methods={"GET", "PUT"}, max_hedges=1)
    async with httpx.AsyncClient(transport=transport, base_url=SERVICE) as client:
        response = await client.put("/p", content=b"v", headers={"x-request-id": "p"})
        assert response.extensions["hedge"].attempts == 2
        await anyio.sleep(0.250)  # let the slow primary finish reading (it has already)
    stats = await anyio.to_thread.run_sync(svc.stats)
    assert [w.replica for w in stats.writes_for("p")] == [0, 1]
