"""The fake service over real loopback sockets: latencies, accounting, faults, runtime changes.

Every test runs on asyncio and on trio (the service itself runs in a thread of its own).
Latencies are kept to a few milliseconds; tolerances on timings are commented.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import httpx
import pytest

from hedgeclient.testing import (
    CloseMidBody,
    Down,
    ErrorStatus,
    FakeService,
    LargeBody,
    ReplicaConfig,
    Reset,
    SlowBody,
    Stall,
    large_body_sha256,
)

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

Factory = Callable[..., FakeService]
CancelOnceReceived = Callable[[FakeService, int, Callable[..., Awaitable[Any]]], Awaitable[None]]


async def test_response_names_replica_and_latency(fake_service: Factory) -> None:
    """Headers and body say which replica answered and the latency drawn."""
    svc = fake_service(replicas=2, latency=0.005)
    async with httpx.AsyncClient() as client:
        response = await client.get(svc.origins[1] + "/items?id=3", headers={"x-request-id": "r1"})
    assert response.status_code == 200
    assert response.headers["x-replica"] == "1"
    assert response.headers["x-latency"] == "0.005000"
    assert response.json() == {"replica": 1, "latency": 0.005, "request_id": "r1", "attempt": None}
    stats = svc.stats()
    assert (stats.replicas[1].received, stats.replicas[1].completed) == (1, 1)
    assert stats.replicas[0].received == 0
    assert stats.replicas[1].latencies[0] >= 0.005  # measured by the server: never early
    (visit,) = stats.visits("r1")
    assert (visit.replica, visit.outcome, visit.status, visit.latency) == (
        1,
        "completed",
        200,
        0.005,
    )
    assert visit.measured == stats.replicas[1].latencies[0]


async def test_request_owned_latency_is_the_same_on_every_replica(fake_service: Factory) -> None:
    """Request-owned slowness: one path, one latency, on all replicas; paths differ."""
    law = "empirical:0.001=1,0.002=1,0.003=1,0.004=1,0.005=1,0.006=1,0.007=1,0.008=1"
    svc = fake_service(replicas=3, latency=law, slowness="request-owned", seed=4)
    async with httpx.AsyncClient() as client:
        by_path = {}
        for path in [f"/q?key={k}" for k in range(8)]:
            seen = {(await client.get(o + path)).headers["x-latency"] for o in svc.origins}
            assert len(seen) == 1, path
            by_path[path] = seen.pop()
    assert len(set(by_path.values())) > 1  # 8 keys over 8 values: not all equal


async def test_server_owned_latency_is_drawn_per_attempt(fake_service: Factory) -> None:
    """Server-owned slowness: the same request gets independent draws."""
    law = "empirical:0.001=1,0.002=1,0.003=1,0.004=1,0.005=1,0.006=1,0.007=1,0.008=1"
    svc = fake_service(replicas=1, latency=law)
    async with httpx.AsyncClient() as client:
        seen = {(await client.get(svc.origins[0] + "/same")).headers["x-latency"] for _ in range(8)}
    assert len(seen) > 1


async def test_key_header_keys_request_owned_latency(fake_service: Factory) -> None:
    """With ``key_header``, requests sharing the header value share the latency."""
    law = "lognormal:median=0.002,sigma=0.5"
    svc = fake_service(replicas=2, latency=law, slowness="request-owned", key_header="x-key")
    async with httpx.AsyncClient() as client:
        first = await client.get(svc.origins[0] + "/a", headers={"x-key": "k1"})
        second = await client.get(svc.origins[1] + "/b", headers={"x-key": "k1"})
    assert first.headers["x-latency"] == second.headers["x-latency"]


async def test_cancelled_request_is_counted_abandoned(
    fake_service: Factory, cancel_once_received: CancelOnceReceived
) -> None:
    """A client that cancels mid-sleep is counted as abandoned at once; nothing completes."""
    svc = fake_service(replicas=1, latency=5.0)
    async with httpx.AsyncClient() as client:
        headers = {"x-request-id": "r", "hedge-attempt": "1"}
        await cancel_once_received(
            svc, 1, lambda ext: client.get(svc.origins[0], headers=headers, extensions=ext)
        )
        with anyio.fail_after(2.0):  # a few ms are enough; 2 s bounds a hang
            stats = await svc.wait_stats(lambda s: s.abandoned == 1)
    replica = stats.replicas[0]
    assert (replica.completed, replica.in_flight, replica.max_in_flight) == (0, 0, 1)
    (visit,) = stats.visits("r")
    assert (visit.outcome, visit.attempt, visit.status) == ("abandoned", "1", None)
    # At once: the handler stopped as the client left, in its 5 s sleep, not at its end.
    # (How many milliseconds that takes is the machine's load, not the service's.)
    assert visit.worked < 5.0


async def test_hedged_pair_is_traced_per_request_id(
    fake_service: Factory, cancel_once_received: CancelOnceReceived
) -> None:
    """Both attempts of one request id are recorded, each with its replica and outcome."""
    svc = fake_service(replicas=2, replica_overrides={0: ReplicaConfig(latency=5.0)})
    async with httpx.AsyncClient() as client:
        headers = {"x-request-id": "req-1"}
        first = {**headers, "hedge-attempt": "0"}
        await cancel_once_received(
            svc, 1, lambda ext: client.get(svc.origins[0], headers=first, extensions=ext)
        )
        await client.get(svc.origins[1], headers={**headers, "hedge-attempt": "1"})
    with anyio.fail_after(2.0):  # a few ms are enough; 2 s bounds a hang
        stats = await svc.wait_stats(lambda s: s.abandoned == 1)
    assert [(v.replica, v.attempt, v.outcome) for v in stats.visits("req-1")] == [
        (0, "0", "abandoned"),
        (1, "1", "completed"),
    ]


async def test_write_is_applied_once_per_request(fake_service: Factory) -> None:
    """Each POST/PUT/DELETE counts once with its body's hash; a GET never counts."""
    svc = fake_service(replicas=2, latency=0.001)
    body = b'{"amount": 10}'
    async with httpx.AsyncClient() as client:
        await client.post(svc.origins[0] + "/pay", content=body, headers={"x-request-id": "w1"})
        await client.put(svc.origins[1] + "/pay", content=b"x", headers={"x-request-id": "w2"})
        await client.delete(svc.origins[1] + "/pay")
        await client.get(svc.origins[0] + "/pay", headers={"x-request-id": "w1"})
    stats = svc.stats()
    (write,) = stats.writes_for("w1")
    assert (write.replica, write.method, write.path, write.length) == (0, "POST", "/pay", len(body))
    assert write.sha256 == hashlib.sha256(body).hexdigest()
    assert [w.method for w in stats.writes] == ["POST", "PUT", "DELETE"]
    assert [r.writes for r in stats.replicas] == [1, 2]


async def test_abandoned_write_still_counts_once(
    fake_service: Factory, cancel_once_received: CancelOnceReceived
) -> None:
    """A write whose client gave up during the latency was still applied, once."""
    svc = fake_service(replicas=1, latency=5.0)
    async with httpx.AsyncClient() as client:
        headers = {"x-request-id": "w"}
        await cancel_once_received(
            svc,
            1,
            lambda ext: client.post(
                svc.origins[0], content=b"once", headers=headers, extensions=ext
            ),
        )
    with anyio.fail_after(2.0):  # a few ms are enough; 2 s bounds a hang
        stats = await svc.wait_stats(lambda s: s.abandoned == 1)
    assert [w.length for w in stats.writes_for("w")] == [4]


async def test_down_replica_refuses_connections(fake_service: Factory) -> None:
    """A down replica's port is reserved but refuses: httpx raises ConnectError."""
    svc = fake_service(replicas=2, replica_overrides={1: ReplicaConfig(fault=Down())})
    async with httpx.AsyncClient() as client:
        assert (await client.get(svc.origins[0])).status_code == 200
        with pytest.raises(httpx.ConnectError):
            await client.get(svc.origins[1])
    assert svc.stats().replicas[1].received == 0


async def test_error_status_with_probability_one_and_zero(fake_service: Factory) -> None:
    """ErrorStatus(p=1) always answers its status; p=0 never does."""
    overrides = {0: ReplicaConfig(fault=ErrorStatus(503, p=1.0))}
    overrides[1] = ReplicaConfig(fault=ErrorStatus(503, p=0.0))
    svc = fake_service(replicas=2, replica_overrides=overrides)
    async with httpx.AsyncClient() as client:
        assert [(await client.get(svc.origins[0])).status_code for _ in range(3)] == [503] * 3
        assert [(await client.get(svc.origins[1])).status_code for _ in range(3)] == [200] * 3
    assert svc.stats().replicas[0].completed == 3


async def test_special_paths(fake_service: Factory) -> None:
    """/status/<code> and /delay/<seconds> are obeyed; a bad argument gets 400."""
    svc = fake_service(replicas=1, latency=5.0)
    async with httpx.AsyncClient() as client:
        assert (await client.get(svc.origins[0] + "/delay/0.001/status")).status_code == 400
        response = await client.get(svc.origins[0] + "/delay/0.002")
        assert (response.status_code, response.headers["x-latency"]) == (200, "0.002000")
        svc.set_latency(0.001)
        assert (await client.get(svc.origins[0] + "/status/429")).status_code == 429
        assert (await client.get(svc.origins[0] + "/status/42")).status_code == 400
        assert (await client.get(svc.origins[0] + "/large?bytes=-1")).status_code == 400


@pytest.mark.parametrize("server", ["uvicorn", "hypercorn"])
@pytest.mark.parametrize("status", [204, 304])
async def test_no_content_statuses_keep_the_connection_usable(
    fake_service: Factory, server: str, status: int
) -> None:
    """/status/204 and /status/304 carry no body (RFC 9110): the keep-alive connection
    serves the next request on it (a stray body used to poison it)."""
    svc = fake_service(replicas=1, latency=0.001, server=server)
    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=1)) as client:
        response = await client.get(svc.origins[0] + f"/status/{status}")
        assert (response.status_code, response.content) == (status, b"")
        assert "content-length" not in response.headers
        response = await client.get(svc.origins[0] + "/x")
        assert response.status_code == 200
        assert response.json()["replica"] == 0


async def test_large_body_hash_matches(fake_service: Factory) -> None:
    """/large?bytes=N and the LargeBody fault send N bytes with the published hash."""
    size = 3_000_001
    svc = fake_service(replicas=2, replica_overrides={1: ReplicaConfig(fault=LargeBody(1000))})
    async with httpx.AsyncClient() as client:
        response = await client.get(svc.origins[0] + f"/large?bytes={size}")
        assert hashlib.sha256(response.content).hexdigest() == large_body_sha256(size)
        response = await client.get(svc.origins[1])
        assert hashlib.sha256(response.content).hexdigest() == large_body_sha256(1000)


async def test_close_mid_body_truncates_the_response(fake_service: Factory) -> None:
    """CloseMidBody sends half the announced body, then closes: a protocol error."""
    svc = fake_service(replicas=1, fault=CloseMidBody())
    async with httpx.AsyncClient() as client:
        with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
            await client.get(svc.origins[0])
    with anyio.fail_after(2.0):  # a few ms are enough; 2 s bounds a hang
        stats = await svc.wait_stats(lambda s: s.failed == 1)
    assert stats.completed == 0


async def test_reset_drops_the_connection(fake_service: Factory) -> None:
    """Reset answers with a TCP RST instead of a response."""
    svc = fake_service(replicas=1, fault=Reset())
    async with httpx.AsyncClient() as client:
        with pytest.raises((httpx.ReadError, httpx.RemoteProtocolError)):
            await client.get(svc.origins[0])
    with anyio.fail_after(2.0):  # a few ms are enough; 2 s bounds a hang
        stats = await svc.wait_stats(lambda s: s.failed == 1)
    assert stats.replicas[0].latencies == ()  # no response ever started


async def test_slow_body_sends_headers_first(fake_service: Factory) -> None:
    """SlowBody: the headers come after the latency, the body over the next 0.2 s."""
    svc = fake_service(replicas=1, fault=SlowBody(duration=0.2, chunks=4))
    headers = {"x-request-id": "slow"}
    async with httpx.AsyncClient() as client:
        sent = anyio.current_time()
        async with client.stream("GET", svc.origins[0], headers=headers) as response:
            body = await response.aread()
        took = anyio.current_time() - sent
        large = await client.get(svc.origins[0] + "/large?bytes=5000")
    assert json.loads(body)["replica"] == 0
    assert hashlib.sha256(large.content).hexdigest() == large_body_sha256(5000)
    stats = svc.stats()
    assert stats.completed == 2
    # The server sent the headers, then spread the body over the next 0.2 s: its handler
    # ran at least 0.2 s past its response's start (a late timer only adds), and the
    # client had the whole body no sooner than that after sending the request. (Timed
    # on the client, how long after the headers the body ended is the client's own
    # scheduling: a loaded machine may read the headers late.)
    (visit,) = stats.visits("slow")
    assert visit.worked - visit.measured >= 0.2 - 1e-6
    assert took >= 0.2


async def test_stall_freezes_requests(fake_service: Factory) -> None:
    """A replica that starts stalled holds its first request until the stall ends.

    Stalls can be moved at runtime (here: out of the way).
    """
    before = time.monotonic()  # the service's loop clock: its stall windows start later
    svc = fake_service(replicas=1, latency=0.001, stall=Stall(every=100.0, duration=2.0))
    async with httpx.AsyncClient() as client:
        await client.get(svc.origins[0])
        held_until = time.monotonic()
        await client.get(svc.origins[0])
        svc.set_stall(Stall(every=100.0, duration=2.0, offset=50.0))  # next stall in 50 s
        await client.get(svc.origins[0])
    first, second, third = svc.stats().replicas[0].latencies
    # The first request was held until the window that began at start-up ended: never
    # answered before 2 s after it, whatever the load.
    assert held_until - before >= 2.0
    # Sent milliseconds after start-up, it waited most of those 2 s (a second of slack
    # for a late start or a late timer: on a loaded machine, 0.2 s of start-up is seen);
    # the next two, outside any window, did 1 ms of work (the stall arithmetic itself is
    # exact in tests/testing/test_config.py).
    assert 1.0 < first < 3.0
    assert second < 1.0
    assert third < 1.0


async def test_slowdown_and_recovery_at_runtime(fake_service: Factory) -> None:
    """slowdown(10) multiplies every latency drawn; slowdown(1) recovers."""
    svc = fake_service(replicas=2, latency=0.002)
    async with httpx.AsyncClient() as client:
        svc.slowdown(10.0)
        assert [(await client.get(o)).headers["x-latency"] for o in svc.origins] == ["0.020000"] * 2
        svc.slowdown(1.0, replicas=[1])
        assert [(await client.get(o)).headers["x-latency"] for o in svc.origins] == [
            "0.020000",
            "0.002000",
        ]
    assert svc.replica_config(0).slowdown == 10.0


async def test_replica_goes_down_and_comes_back(fake_service: Factory) -> None:
    """set_fault(Down()) refuses connections on the same port; set_fault(None) serves again."""
    svc = fake_service(replicas=1, latency=0.001)
    async with httpx.AsyncClient() as client:
        assert (await client.get(svc.origins[0])).status_code == 200
        svc.set_fault(Down())
        with pytest.raises(httpx.ConnectError):
            await client.get(svc.origins[0])
        svc.set_fault(None)
        assert (await client.get(svc.origins[0])).status_code == 200


async def test_max_in_flight_and_reset(fake_service: Factory) -> None:
    """Five concurrent requests are five in flight at once; reset_stats zeroes the counts."""
    svc = fake_service(replicas=1, latency=5.0)
    async with httpx.AsyncClient() as client, anyio.create_task_group() as tg:
        for _ in range(5):
            tg.start_soon(client.get, svc.origins[0])
        with anyio.fail_after(2.0):  # a few ms are enough; 2 s bounds a hang
            stats = await svc.wait_stats(lambda s: s.replicas[0].in_flight == 5)
        tg.cancel_scope.cancel()
    assert (stats.received, stats.replicas[0].max_in_flight) == (5, 5)
    with anyio.fail_after(2.0):  # a few ms are enough; 2 s bounds a hang
        stats = await svc.wait_stats(lambda s: s.abandoned == 5)
    assert (stats.replicas[0].in_flight, stats.completed) == (0, 0)
    svc.reset_stats()
    stats = svc.stats()
    assert (stats.received, stats.replicas[0].max_in_flight, stats.requests) == (0, 0, {})


async def test_async_context_manager(anyio_backend: object) -> None:
    """``async with`` starts the service off the event loop and stops it on exit."""
    async with FakeService(replicas=1, latency=0.001) as svc, httpx.AsyncClient() as client:
        assert (await client.get(svc.origins[0])).status_code == 200
    with pytest.raises(RuntimeError, match=r"^the FakeService is not running"):
        svc.stats()
