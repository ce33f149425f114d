"""Every way of opening and closing a client works, on asyncio and on trio.

Nothing in ``HedgedTransport`` depends on ``__aenter__`` having run in the caller's task:
a client built at module level and never entered, entered in one task and closed in
another (as Starlette's startup and shutdown events do), several clients closed in any
order, one client shared by many tasks, and ``aclose()`` while requests are in flight.

The module-level client runs on in-process replicas (``httpx.MockTransport``); the
others over loopback (``FakeService``), whose replica 0 answers in 10 s and the
others in 1 ms: with ``FirstReplica`` every primary goes to replica 0 and its backup, sent at
the 10 ms hedge delay, wins (on any machine: it has 10 s to). Real clock: outcomes and
orders are asserted, not timings.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import httpx
import pytest
import trio

from hedgeclient import (
    HedgeBudget,
    HedgedTransport,
    RequestRecord,
    TransportClosedError,
)
from hedgeclient.testing import FakeService, FirstReplica, ReplicaConfig

SERVICE = "http://svc"
CLOSED = r"^Cannot send a request, as the HedgedTransport has been closed\.$"


def generous() -> HedgeBudget:
    """A budget that lets every due backup go."""
    return HedgeBudget(ratio=1.0, burst=1_000_000, min_per_second=0)


# -- a client built at module level, never entered ------------------------------------


async def _module_handler(request: httpx.Request) -> httpx.Response:
    """Replica a answers in 10 s, b in 1 ms (in the loop that sends the request): a's
    attempt loses to the backup (sent at 10 ms) on any machine, and is cancelled."""
    await anyio.sleep(10.0 if request.url.host == "a" else 0.001)
    return httpx.Response(200, text=request.url.host)


_MODULE_RECORDS: list[RequestRecord] = []
MODULE_CLIENT = httpx.AsyncClient(
    transport=HedgedTransport(
        httpx.MockTransport(_module_handler),
        replicas={SERVICE: ["http://a", "http://b"]},
        delay=0.010,
        selector=FirstReplica(),
        budget=generous(),
        hooks=[_MODULE_RECORDS.append],
        metrics=False,
    ),
    base_url=SERVICE,
)


def test_module_level_client_never_entered_hedges_on_every_loop() -> None:
    """A client built at import, never entered, hedges on plain ``asyncio.run``, then
    on ``trio.run``, then on a new asyncio loop: the backup wins each time, and no task
    of it is left when each loop ends."""

    async def one() -> tuple[str, int]:
        response = await MODULE_CLIENT.get("/")
        return response.text, response.extensions["hedge"].attempt

    async def on_asyncio() -> tuple[str, int, int]:
        text, attempt = await one()
        others = asyncio.all_tasks() - {asyncio.current_task()}
        return text, attempt, len(others)

    async def on_trio() -> tuple[str, int, int]:
        text, attempt = await one()
        root = trio.lowlevel.current_root_task()
        assert root is not None
        backups = [
            t for n in root.child_nurseries for t in n.child_tasks if t.name == "hedgeclient-backup"
        ]
        return text, attempt, len(backups)

    before = len(_MODULE_RECORDS)
    # An empty context: no sniffio variable set by a runner, as under uvicorn.
    results = [
        contextvars.Context().run(asyncio.run, on_asyncio()),
        trio.run(on_trio),
        contextvars.Context().run(asyncio.run, on_asyncio()),
    ]
    assert results == [("b", 2, 0)] * 3
    assert [(r.hedged, r.backup_won) for r in _MODULE_RECORDS[before:]] == [(True, True)] * 3


# -- over loopback -------------------------------------------------------------------


@pytest.fixture(scope="module")
def service() -> Iterator[FakeService]:
    """Three replicas: replica 0 answers in 10 s, replicas 1 and 2 in 1 ms.

    (Replica 0 answered in 200 ms once; beside two CPU burners a backup sent at 10 ms
    then lost the race to it. Its attempts are cancelled, so its 10 s costs nothing.)
    """
    slow = {0: ReplicaConfig(latency=10.0)}
    with FakeService(replicas=3, latency=0.001, replica_overrides=slow) as svc:
        yield svc


class Tracking(httpx.AsyncHTTPTransport):
    """The real httpx transport, counting attempts still running, and noting the busy
    pool connections at the moment it is closed (before the pool closes them)."""

    def __init__(self) -> None:
        super().__init__()
        self.running = 0
        self.busy_at_close: list[str] | None = None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.running += 1
        try:
            return await super().handle_async_request(request)
        finally:
            self.running -= 1

    def busy(self) -> list[str]:
        """The pool's connections that are neither idle nor closed."""
        return [c.info() for c in self._pool.connections if not (c.is_idle() or c.is_closed())]

    async def aclose(self) -> None:
        self.busy_at_close = self.busy()
        await super().aclose()


class Made:
    """A client over the service, with its transports and records."""

    def __init__(self, svc: FakeService, **kwargs: Any) -> None:
        kwargs.setdefault("selector", FirstReplica())
        self.inner = Tracking()
        self.records: list[RequestRecord] = []
        self.transport = HedgedTransport(
            self.inner,
            replicas={SERVICE: svc.origins},
            budget=generous(),
            hooks=[self.records.append],
            metrics=False,
            **{"delay": 0.010, **kwargs},
        )
        self.client = httpx.AsyncClient(transport=self.transport, base_url=SERVICE)

    async def assert_closed(self) -> None:
        """The transport refuses requests: it was closed."""
        with pytest.raises(RuntimeError, match=CLOSED):
            await self.transport.handle_async_request(httpx.Request("GET", f"{SERVICE}/"))


@pytest.mark.anyio
@pytest.mark.slow
async def test_entered_in_one_task_closed_in_another(
    service: FakeService, count_tasks: Callable[[], int]
) -> None:
    """Entered by a startup task, used by request tasks, closed by a shutdown task (as
    Starlette's lifespan events do): every request hedged and answered, no error."""
    tasks = count_tasks()
    made = Made(service)
    statuses: list[tuple[int, str]] = []

    async def startup() -> None:
        await made.client.__aenter__()
        statuses.append(((r := await made.client.get("/warm-up")).status_code, r.text))

    async def handle(index: int) -> None:
        response = await made.client.get(f"/{index}")
        statuses.append((response.status_code, response.headers["x-replica"]))

    async def shutdown() -> None:
        await made.client.__aexit__(None, None, None)

    async with anyio.create_task_group() as tg:
        tg.start_soon(startup)
    # Replica 0 lost the warm-up in its silence: new primaries avoid it for as long again
    # as that primary waited (the memory of a freeze, issue 24); then they go back to it.
    await anyio.sleep(0.050)
    async with anyio.create_task_group() as tg:
        for index in range(8):
            tg.start_soon(handle, index)
    async with anyio.create_task_group() as tg:
        tg.start_soon(shutdown)
    assert [status for status, _ in statuses] == [200] * 9
    assert [replica for _, replica in statuses[1:]] == ["1"] * 8
    assert [(r.hedged, r.backup_won) for r in made.records] == [(True, True)] * 9
    assert made.inner.busy_at_close == []
    await made.assert_closed()
    assert count_tasks() == tasks


@pytest.mark.anyio
@pytest.mark.slow
@pytest.mark.parametrize(
    "order",
    list(itertools.permutations(range(3))),
    ids=lambda order: "-".join(map(str, order)),
)
async def test_clients_closed_in_any_order(
    order: tuple[int, ...], service: FakeService, count_tasks: Callable[[], int]
) -> None:
    """Three clients entered in order 0, 1, 2 inside the user's own task group, used
    concurrently, then closed in ``order`` (0-1-2: the order they were opened): no
    error, every request hedged and answered by its backup, every client closed."""
    tasks = count_tasks()
    made = [Made(service, name=f"client-{i}") for i in range(3)]
    answered: list[tuple[str, str]] = []

    async def use(m: Made) -> None:
        response = await m.client.get("/")
        answered.append((m.transport.name, response.headers["x-replica"]))

    async with anyio.create_task_group() as tg:
        for m in made:
            await m.client.__aenter__()
        for m in made:
            tg.start_soon(use, m)
    for index in order:
        await made[index].client.aclose()
    assert sorted(answered) == [("client-0", "1"), ("client-1", "1"), ("client-2", "1")]
    for m in made:
        assert [r.backup_won for r in m.records] == [True]
        assert m.inner.busy_at_close == []
        await m.assert_closed()
    assert count_tasks() == tasks


@pytest.mark.anyio
@pytest.mark.slow
async def test_one_client_shared_by_many_tasks(
    service: FakeService, count_tasks: Callable[[], int]
) -> None:
    """32 tasks send 5 requests each on one client, every fourth slow on every replica:
    each gets its own answer, the slow ones are hedged, nothing is left busy."""
    tasks = count_tasks()
    made = Made(service, selector=None)  # the default: PowerOfTwoChoices
    mismatched: list[str] = []

    async def worker(w: int) -> None:
        for i in range(5):
            rid = f"{w}-{i}"
            path = "/delay/0.100" if (w * 5 + i) % 4 == 0 else f"/{rid}"
            response = await made.client.get(path, headers={"x-request-id": rid})
            if (response.status_code, response.json()["request_id"]) != (200, rid):
                mismatched.append(rid)

    async with made.client:
        async with anyio.create_task_group() as tg:
            for w in range(32):
                tg.start_soon(worker, w)
        busy = made.inner.busy()
    assert mismatched == []
    assert len(made.records) == 160
    # The 40 requests to /delay/0.100 have no answer by the 10 ms delay, and primaries
    # sent to replica 0 (10 s) none either: at least 40 hedged.
    assert sum(r.hedged for r in made.records) >= 40
    assert busy == []
    assert made.transport.budget.statistics().backups_in_flight == 0
    assert count_tasks() == tasks


@pytest.mark.anyio
@pytest.mark.slow
@pytest.mark.parametrize(
    ("delay", "attempts"),
    [
        pytest.param(1.0, 1, id="primaries-only"),
        pytest.param(0.010, 3, id="backups-in-flight"),
    ],
)
async def test_aclose_with_requests_in_flight(
    delay: float,
    attempts: int,
    service: FakeService,
    count_tasks: Callable[[], int],
    backup_tasks: Callable[[], int],
) -> None:
    """``aclose()`` from another task while 6 requests wait on hanging replicas: each
    ends with TransportClosedError, and before ``aclose()`` returns every attempt is
    unwound: no attempt running, no backup task, no busy pool connection. The server
    then sees every attempt abandoned."""
    with anyio.fail_after(5):  # earlier tests' cancelled attempts reach the server first
        await service.wait_stats(lambda s: sum(r.in_flight for r in s.replicas) == 0)
    service.reset_stats()
    tasks = count_tasks()
    made = Made(service, delay=delay, max_hedges=2)
    errors: list[BaseException] = []
    at_return: dict[str, Any] = {}

    # Closed once every attempt there will be is on the wire (its request headers
    # written: an httpcore trace event), not after a fixed time, which a loaded machine
    # could reach before the backups (due at 10 and 20 ms) were sent. With the 1 s delay
    # that is the 6 primaries, long before a backup is due.
    written = 0
    all_written = anyio.Event()

    async def trace(name: str, info: dict[str, Any]) -> None:
        nonlocal written
        if name == "http11.send_request_headers.complete":
            written += 1
            if written == 6 * attempts:
                all_written.set()

    async def call(index: int) -> None:
        try:
            await made.client.get(f"/delay/2?{index}", extensions={"trace": trace})
        except TransportClosedError as exc:
            errors.append(exc)

    async def close() -> None:
        await made.transport.aclose()
        at_return.update(running=made.inner.running, backups=backup_tasks())

    async with anyio.create_task_group() as tg:
        for index in range(6):
            tg.start_soon(call, index)
        with anyio.fail_after(10.0):  # milliseconds; the bound only stops a hang
            await all_written.wait()
        tg.start_soon(close)
    assert at_return == {"running": 0, "backups": 0}
    assert made.inner.busy_at_close == []
    assert [str(e) for e in errors] == [
        "The HedgedTransport was closed while the request was in flight."
    ] * 6
    assert [len(r.attempts) for r in made.records] == [attempts] * 6
    assert all(r.cancelled_by_caller and r.outcome == "error" for r in made.records)
    with anyio.fail_after(5):  # the server sees each disconnect within milliseconds
        stats = await service.wait_stats(lambda s: s.abandoned == 6 * attempts)
    assert (stats.received, stats.completed) == (6 * attempts, 0)
    await made.assert_closed()
    assert count_tasks() == tasks


@pytest.mark.anyio
async def test_concurrent_aclose_calls_all_wait_for_the_unwinding(
    backup_tasks: Callable[[], int],
) -> None:
    """Two tasks call ``aclose()`` at once while attempts close slowly (shielded, as a
    connection does): each call returns only once every attempt has ended
    (regression: the second call returned at once)."""
    running = Counter[str]()

    async def handler(request: httpx.Request) -> httpx.Response:
        running[request.url.host] += 1
        try:
            await anyio.sleep(10)
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.sleep(0.050)
            running[request.url.host] -= 1
        return httpx.Response(200)  # pragma: no cover - every attempt is cancelled

    transport = HedgedTransport(
        httpx.MockTransport(handler),
        replicas={SERVICE: ["http://a", "http://b"]},
        delay=0.010,
        selector=FirstReplica(),
        budget=generous(),
        metrics=False,
    )
    client = httpx.AsyncClient(transport=transport, base_url=SERVICE)
    returned: list[tuple[int, int]] = []
    errors: list[type[BaseException]] = []

    async def call() -> None:
        try:
            await client.get("/")
        except TransportClosedError as exc:
            errors.append(type(exc))

    async def close() -> None:
        await transport.aclose()
        returned.append((sum(running.values()), backup_tasks()))

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        tg.start_soon(call)
        # Both hedged: four attempts hang (backups at 10 ms; waited for, not assumed
        # sent by a fixed instant, which a loaded machine could reach first).
        with anyio.fail_after(10.0):  # milliseconds; the bound only stops a hang
            while running != Counter(a=2, b=2):  # noqa: ASYNC110 - the handlers' own count
                await anyio.sleep(0.001)
        tg.start_soon(close)
        tg.start_soon(close)
    assert returned == [(0, 0), (0, 0)]
    assert errors == [TransportClosedError] * 2
