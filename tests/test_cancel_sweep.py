"""Cancelling the caller anywhere in a race: nothing outlives it, nothing stays open.

The scripted race (``FirstReplica``, hedge delay 0.030 s, two backups):

- t = 0.000: the primary goes to ``a``, which answers 503 at 0.050;
- t = 0.030: the delay passes, a backup goes to ``b``, which is refused at 0.040;
- t = 0.040: the refusal sends the next backup to ``c`` at once, which answers 200 at
  0.060 and wins: ``a``'s 503 is closed unread, the caller gets ``c``'s response.

The sweep cancels the caller at every instant of that timeline (every 5 ms, the
instants of the events included) and, at each instant, after 0 to 5 more scheduler
checkpoints, so the cancellation also lands between the steps of one instant. Under
trio's MockClock (virtual time) every run is a few virtual milliseconds. Each run
asserts, at the moment the caller's await ends: no backup task alive, every attempt's
handler exited, every response but the one returned closed; and after it: no task
left, no backup counted in the budget.

``anyio.fail_after`` around ``client.get`` runs on both backends: every attempt sent
ends before the caller gets its TimeoutError (at the deadline exactly, with the attempts
and outcomes of the script, in virtual time; on asyncio's real clock a loaded machine
may send fewer before the deadline).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, ClassVar

import anyio
import anyio.lowlevel
import httpx
import pytest

from hedgeclient import HedgeBudget, HedgedTransport, RequestRecord
from hedgeclient.testing import FirstReplica

pytestmark = pytest.mark.anyio

SERVICE = "http://svc"
REPLICAS = ["http://a", "http://b", "http://c"]
TIMELINE = [round(i * 0.005, 3) for i in range(14)]  # 0.000 .. 0.065, events included
EXTRA_CHECKPOINTS = range(6)


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    """asyncio in real time; trio with a fresh MockClock (virtual time)."""
    if request.param == "trio":
        from trio.testing import MockClock

        return ("trio", {"clock": MockClock(autojump_threshold=0)})
    return ("asyncio", {})


class Body(httpx.AsyncByteStream):
    """A response body that notes whether it was closed.

    Closing takes a checkpoint first, as closing a connection does: a close attempted
    in a cancelled task that is not shielded fails, and the body stays open.
    """

    def __init__(self, content: bytes) -> None:
        self.content = content
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield self.content

    async def aclose(self) -> None:
        await anyio.lowlevel.checkpoint()
        self.closed = True


class Replicas:
    """The scripted replicas: a 503 at 0.050, b refused at 0.010 after it was sent,
    c 200 after 0.020; logs when each handler is entered and left."""

    SCRIPT: ClassVar[Mapping[str, tuple[float, int | None]]] = {
        "a": (0.050, 503),
        "b": (0.010, None),  # None: refused (httpx.ConnectError)
        "c": (0.020, 200),
    }

    def __init__(self, **script: tuple[float, int | None]) -> None:
        self.script = {**self.SCRIPT, **script}
        self.entered: list[str] = []
        self.exited: list[tuple[str, float]] = []
        self.bodies: list[Body] = []

    async def handler(self, request: httpx.Request) -> httpx.Response:
        host = request.url.host
        self.entered.append(host)
        latency, status = self.script[host]
        try:
            await anyio.sleep(latency)
        finally:
            self.exited.append((host, anyio.current_time()))
        if status is None:
            msg = "refused"
            raise httpx.ConnectError(msg, request=request)
        body = Body(host.encode())
        self.bodies.append(body)
        return httpx.Response(status, stream=body)


async def get_then(client: httpx.AsyncClient, note: Callable[[], None]) -> httpx.Response:
    """``client.get("/")``, calling ``note()`` the instant its await ends, whichever way."""
    try:
        return await client.get("/")
    finally:
        note()


def transport_for(
    replicas: Replicas, budget: HedgeBudget, records: list[RequestRecord]
) -> HedgedTransport:
    """The hedged transport of the scripted race."""
    return HedgedTransport(
        httpx.MockTransport(replicas.handler),
        replicas={SERVICE: REPLICAS},
        delay=0.030,
        max_hedges=2,
        selector=FirstReplica(),
        budget=budget,
        hooks=[records.append],
        metrics=False,
    )


@pytest.mark.parametrize("anyio_backend", ["trio"], indirect=True)
async def test_uncancelled_race_goes_as_scripted() -> None:
    """Virtual: the race the sweep cancels: backups at 0.030 and 0.040, c wins at 0.060."""
    replicas = Replicas()
    records: list[RequestRecord] = []
    budget = HedgeBudget(ratio=1.0, burst=1000, min_per_second=0)
    async with httpx.AsyncClient(
        transport=transport_for(replicas, budget, records), base_url=SERVICE
    ) as client:
        t0 = anyio.current_time()
        response = await client.get("/")
        assert round(anyio.current_time() - t0, 9) == 0.060
    assert (response.status_code, response.text) == (200, "c")
    assert [(h, round(at - t0, 9)) for h, at in replicas.exited] == [
        ("b", 0.040),
        ("a", 0.050),
        ("c", 0.060),
    ]
    assert [(a.replica, a.started, a.outcome) for a in records[0].attempts] == [
        ("http://a", 0.0, "failed"),
        ("http://b", 0.030, "failed"),
        ("http://c", 0.040, "won"),
    ]
    assert [b.closed for b in replicas.bodies] == [True, True]  # a's 503 closed unread


@pytest.mark.parametrize("anyio_backend", ["trio"], indirect=True)
@pytest.mark.parametrize("at", TIMELINE)
async def test_cancel_at_every_checkpoint_leaves_nothing_behind(
    at: float, count_tasks: Callable[[], int], backup_tasks: Callable[[], int]
) -> None:
    """Virtual: the caller cancelled at ``at`` (+ 0..5 checkpoints) returns only after
    every attempt ended, with every response but its own closed, and no task left."""
    budget = HedgeBudget(ratio=1.0, burst=1000, min_per_second=0)
    tasks = count_tasks()
    for extra in EXTRA_CHECKPOINTS:
        replicas = Replicas()
        records: list[RequestRecord] = []
        client = httpx.AsyncClient(
            transport=transport_for(replicas, budget, records), base_url=SERVICE
        )
        scope = anyio.CancelScope()
        at_return: dict[str, Any] = {}
        response: httpx.Response | None = None

        def note(replicas: Replicas = replicas, at_return: dict[str, Any] = at_return) -> None:
            at_return["backup tasks"] = backup_tasks()
            at_return["entered"] = sorted(replicas.entered)
            at_return["exited"] = sorted(h for h, _ in replicas.exited)
            at_return["open"] = [b.content for b in replicas.bodies if not b.closed]
            at_return["now"] = anyio.current_time()

        async def cancel_later(scope: anyio.CancelScope, t0: float, extra: int) -> None:
            await anyio.sleep_until(t0 + at)
            for _ in range(extra):
                await anyio.lowlevel.checkpoint()
            scope.cancel()

        async with client, anyio.create_task_group() as tg:
            tg.start_soon(cancel_later, scope, anyio.current_time(), extra)
            with scope:
                response = await get_then(client, note)
            tg.cancel_scope.cancel()  # the canceller, if the request ended first
        state = f"cancelled at {at} + {extra} checkpoints: {at_return}"
        assert at_return["backup tasks"] == 0, state
        assert at_return["exited"] == at_return["entered"], state
        assert all(exited <= at_return["now"] for _, exited in replicas.exited), state
        (record,) = records
        # Every body the race did not return is closed, shielded, before the caller is
        # back; the one it returned is httpx's to close (unshielded: a cancellation
        # while httpx reads it may leave it open, as with plain httpx).
        returned = [b"c"] if record.outcome == "ok" else []
        assert [b for b in at_return["open"] if b not in returned] == [], state
        if at < 0.060:  # before the answer: cancelled, with the attempts sent by then
            assert response is None, state
            assert scope.cancelled_caught, state
            assert record.cancelled_by_caller, state
            sent = ["a", "b", "c"][: 1 + (at > 0.030) + (at > 0.040)]
            if at not in (0.030, 0.040):  # at those instants, before or after the send
                assert at_return["entered"] == sent, state
        if at > 0.060:  # after the answer: nothing to cancel
            assert response is not None, state
        if response is not None:
            assert (response.status_code, response.text) == (200, "c"), state
            assert not record.cancelled_by_caller, state
        assert budget.statistics().backups_in_flight == 0, state
        assert count_tasks() == tasks, state


async def test_fail_after_stops_every_attempt_at_the_deadline(
    anyio_backend_name: str, backup_tasks: Callable[[], int]
) -> None:
    """``anyio.fail_after(0.100)`` around a request whose three replicas hang, with
    backups at 0.030 and 0.060: every attempt ends at the deadline, before the caller's
    TimeoutError (exactly at 0.100 in virtual time)."""
    ended: list[tuple[str, float]] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        try:
            await anyio.sleep(10)
        finally:
            ended.append((request.url.host, anyio.current_time() - t0))
        return httpx.Response(200)  # pragma: no cover - every attempt is cancelled

    records: list[RequestRecord] = []
    transport = HedgedTransport(
        httpx.MockTransport(handler),
        replicas={SERVICE: REPLICAS},
        delay=0.030,
        max_hedges=2,
        selector=FirstReplica(),
        budget=HedgeBudget(ratio=1.0, burst=1000, min_per_second=0),
        hooks=[records.append],
        metrics=False,
    )
    async with httpx.AsyncClient(transport=transport, base_url=SERVICE) as client:
        t0 = anyio.current_time()
        at_return: dict[str, Any] = {}

        def note() -> None:
            at_return.update(ended=list(ended), backups=backup_tasks())
            at_return["returned"] = anyio.current_time() - t0

        with pytest.raises(TimeoutError), anyio.fail_after(0.100):
            await get_then(client, note)
    ended_at_return, backups_at_return = at_return["ended"], at_return["backups"]
    returned = at_return["returned"]
    sent = [a.replica.removeprefix("http://") for a in records[0].attempts]
    # Every attempt sent had ended when the caller got its TimeoutError.
    assert sorted(h for h, _ in ended_at_return) == sorted(sent)
    assert backups_at_return == 0
    assert all(at <= returned for _, at in ended_at_return)
    if anyio_backend_name == "trio":  # virtual time: exact instants
        assert sent == ["a", "b", "c"]
        assert sorted((h, round(at, 9)) for h, at in ended_at_return) == [
            ("a", 0.100),
            ("b", 0.100),
            ("c", 0.100),
        ]
        assert round(returned, 9) == 0.100
        assert [a.started for a in records[0].attempts] == [0.0, 0.030, 0.060]
    else:  # real clock: a loaded machine's late loop may send fewer before the deadline
        assert sent == ["a", "b", "c"][: len(sent)]
    assert [a.outcome for a in records[0].attempts] == ["cancelled"] * len(sent)
    assert records[0].cancelled_by_caller


async def test_fail_after_during_a_failure_triggered_backup(
    anyio_backend_name: str, backup_tasks: Callable[[], int]
) -> None:
    """The deadline (0.080) passes while the backup sent at once after b's refusal
    (0.040) runs (c slow here: 0.060): it is stopped at the deadline too, a's 503 is
    closed, and the caller gets TimeoutError."""
    replicas = Replicas(c=(0.060, 200))
    records: list[RequestRecord] = []
    budget = HedgeBudget(ratio=1.0, burst=1000, min_per_second=0)
    async with httpx.AsyncClient(
        transport=transport_for(replicas, budget, records), base_url=SERVICE
    ) as client:
        t0 = anyio.current_time()
        at_return: dict[str, Any] = {}

        def note() -> None:
            at_return["exited"] = [(h, at - t0) for h, at in replicas.exited]
            at_return["open"] = [b.content for b in replicas.bodies if not b.closed]
            at_return["backups"] = backup_tasks()

        with pytest.raises(TimeoutError), anyio.fail_after(0.080):
            await get_then(client, note)
    exited_at_return, open_at_return = at_return["exited"], at_return["open"]
    backups_at_return = at_return["backups"]
    sent = [a.replica.removeprefix("http://") for a in records[0].attempts]
    # Every attempt sent had ended, and every body but none was closed, when the caller
    # got its TimeoutError.
    assert sorted(h for h, _ in exited_at_return) == sorted(sent)
    assert open_at_return == []
    assert backups_at_return == 0
    assert budget.statistics().backups_in_flight == 0
    assert records[0].cancelled_by_caller
    outcomes = [(a.replica, a.outcome) for a in records[0].attempts]
    if anyio_backend_name == "asyncio":
        # Real clock: a loaded machine's late loop may reach the deadline before b's
        # refusal or c is sent, or before a's 503: then fewer attempts, or cancelled.
        assert sent == ["a", "b", "c"][: len(sent)]
        assert {outcome for _, outcome in outcomes} <= {"failed", "cancelled"}
    if anyio_backend_name == "trio":  # virtual time: exact outcomes, instants and order
        assert outcomes == [
            ("http://a", "failed"),
            ("http://b", "failed"),
            ("http://c", "cancelled"),
        ]
        assert [(h, round(at, 9)) for h, at in exited_at_return] == [
            ("b", 0.040),
            ("a", 0.050),
            ("c", 0.080),
        ]
        assert [a.started for a in records[0].attempts] == [0.0, 0.030, 0.040]


async def test_a_cancellation_grouped_by_the_inner_transport_reaches_the_caller_alone() -> None:
    """trio's ``open_tcp_stream`` connects in a nursery: cancelled there, httpx raises
    ``BaseExceptionGroup([Cancelled, ...])`` (plain httpx too). The caller gets its
    cancellation itself, never a group, and its cancel scope absorbs it."""
    cancelled = anyio.get_cancelled_exc_class()

    async def connect_in_a_nursery(request: httpx.Request) -> httpx.Response:
        try:
            await anyio.sleep(10)
        except cancelled as exc:
            msg = "connecting"
            raise BaseExceptionGroup(msg, [exc]) from None
        return httpx.Response(200)  # pragma: no cover (never reached)

    transport = HedgedTransport(
        httpx.MockTransport(connect_in_a_nursery),
        replicas={SERVICE: ["http://a", "http://b"]},
        delay=5.0,
        metrics=False,
    )
    seen: list[BaseException] = []
    async with httpx.AsyncClient(transport=transport, base_url=SERVICE) as client:
        with anyio.move_on_after(0.01) as scope:
            try:
                await client.get("/")
            except BaseException as exc:
                seen.append(exc)
                raise
    assert scope.cancelled_caught
    assert [type(e) for e in seen] == [cancelled]


async def test_only_a_group_of_cancellations_is_unwrapped() -> None:
    """A group holding anything but cancellations is raised as it is (an error in it
    must not be lost), and so is every other exception."""
    from hedgeclient._race.verdict import as_raised

    cancelled = anyio.get_cancelled_exc_class()
    with anyio.CancelScope() as scope:
        scope.cancel()
        try:
            await anyio.lowlevel.checkpoint()
        except cancelled as exc:
            one = exc
    error = ValueError("boom")
    mixed = BaseExceptionGroup("mixed", [one, error])
    assert as_raised(BaseExceptionGroup("only", [one])) is one
    assert as_raised(mixed) is mixed
    assert as_raised(error) is error
