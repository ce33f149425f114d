"""The entered transport's backup scheduler: no task per request, context, lifecycle.

The race's timings are asserted both ways in ``test_race.py``; this module checks what
only the scheduler does: a request answered before its hedge delay starts no task, a
backup runs in a copy of the caller's context, the scheduler's task ends with the
client, including when the client is exited in another task than it was entered in.
"""

from __future__ import annotations

import contextvars
from typing import Any

import anyio
import anyio.lowlevel
import httpx
import pytest

from hedgeclient import HedgeBudget, HedgedTransport, RequestRecord
from hedgeclient.testing import FirstReplica, Reply, ScriptedReplicas

pytestmark = pytest.mark.anyio

SERVICE = "http://svc"
REPLICAS = {SERVICE: ["http://a", "http://b"]}
CALLER = contextvars.ContextVar[str]("CALLER", default="unset")


def make(handler: Any, **kwargs: Any) -> HedgedTransport:
    kwargs.setdefault("budget", HedgeBudget(ratio=1.0, burst=1000, min_per_second=0))
    kwargs.setdefault("replicas", REPLICAS)
    kwargs.setdefault("scheduler_task", True)
    return HedgedTransport(
        httpx.MockTransport(handler),
        delay=0.030,
        selector=FirstReplica(),
        metrics=False,
        **kwargs,
    )


async def a_is_slow(request: httpx.Request) -> httpx.Response:
    """Replica ``a`` answers in 0.100 s, any other at once: the backup to ``b`` wins."""
    if request.url.host == "a":
        await anyio.sleep(0.100)
    return httpx.Response(200)


def task_count() -> int:
    return len(anyio.get_running_tasks())


async def test_request_answered_before_delay_starts_no_task() -> None:
    """The primary runs in the caller's task; a backup adds its driver and its attempt."""
    during: dict[str, int] = {}

    async def handler(request: httpx.Request) -> httpx.Response:
        during[request.url.host] = task_count()
        await anyio.sleep(0.100 if request.url.host == "a" and "slow" in request.url.path else 0)
        return httpx.Response(200)

    outside = task_count()
    async with httpx.AsyncClient(transport=make(handler), base_url=SERVICE) as client:
        inside = task_count()
        await client.get("/fast")
        assert during == {"a": inside}
        await client.get("/slow")
        assert during == {"a": inside, "b": inside + 2}  # driver task + backup attempt task
    assert inside == outside + 1  # the scheduler's task, while the client is entered
    await anyio.lowlevel.checkpoint()
    assert task_count() == outside


async def test_backup_runs_in_the_callers_context() -> None:
    """A context variable the caller set is seen by the backup attempt's inner transport."""
    seen: list[tuple[str, str]] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.url.host, CALLER.get()))
        if request.url.host == "a":
            await anyio.sleep(0.100)
        return httpx.Response(200)

    async with httpx.AsyncClient(transport=make(handler), base_url=SERVICE) as client:
        token = CALLER.set("request-42")
        try:
            response = await client.get("/x")
        finally:
            CALLER.reset(token)
    assert response.extensions["hedge"].attempt == 2
    assert seen == [("a", "request-42"), ("b", "request-42")]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_exit_in_another_task_than_entered() -> None:
    """Set-up and tear-down in different asyncio tasks (as pytest-asyncio runs an async
    fixture's two halves): no error, no task left.

    Only plain asyncio tasks: trio and anyio's task groups forbid a task to end inside
    a task group it opened (use ``scheduler_task=False`` there).
    """
    import asyncio  # the scenario is asyncio's own tasks; the library uses anyio only

    records: list[RequestRecord] = []
    client = httpx.AsyncClient(transport=make(a_is_slow, hooks=[records.append]), base_url=SERVICE)
    outside = task_count()
    await asyncio.create_task(client.__aenter__())  # entered by a task that then ends
    response = await client.get("/x")
    await client.__aexit__(None, None, None)
    await anyio.lowlevel.checkpoint()
    assert response.extensions["hedge"].attempt == 2
    assert [a.outcome for a in records[0].attempts] == ["cancelled", "won"]
    assert task_count() == outside


async def test_stopped_scheduler_falls_back_to_a_task_group() -> None:
    """If the scheduler's task is gone, requests still hedge (one task group each)."""
    script = ScriptedReplicas({"a": [0.100], "b": [0.010]})
    transport = make(script.handler)
    async with httpx.AsyncClient(transport=transport, base_url=SERVICE) as client:
        assert transport._scheduler is not None
        transport._scheduler.stop()
        await anyio.lowlevel.checkpoint()
        response = await client.get("/x")
    assert response.extensions["hedge"].attempt == 2
    assert response.text == "b"


async def test_scheduler_task_false_starts_no_task() -> None:
    """``scheduler_task=False``: entering starts no task; a hedge uses a task group."""

    outside = task_count()
    transport = make(a_is_slow, scheduler_task=False)
    async with httpx.AsyncClient(transport=transport, base_url=SERVICE) as client:
        assert task_count() == outside
        response = await client.get("/x")
    assert response.extensions["hedge"].attempt == 2


def test_scheduler_task_must_be_bool() -> None:
    with pytest.raises(TypeError, match=r"^`scheduler_task` must be a bool, got 1$"):
        HedgedTransport(scheduler_task=1)  # type: ignore[arg-type]


# -- aclose() at every stage of a scheduled race (found by review; both ways must agree) --


async def closed_during(
    script: ScriptedReplicas,
    at: float,
    closed_at: list[float],
    *,
    scheduler_task: bool,
    **kwargs: Any,
) -> tuple[str, list[RequestRecord]]:
    """Send one request, close the transport at ``at`` s (the instant is appended to
    ``closed_at``); return what the caller got and the records."""
    records: list[RequestRecord] = []
    transport = make(
        script.handler, scheduler_task=scheduler_task, hooks=[records.append], **kwargs
    )
    outcome: list[str] = []
    async with httpx.AsyncClient(transport=transport, base_url=SERVICE) as client:

        async def call() -> None:
            try:
                response = await client.get("/x")
                outcome.append(f"{response.status_code} {response.text}")
            except httpx.HTTPError as exc:
                outcome.append(type(exc).__name__)

        async with anyio.create_task_group() as tg:
            script.start_clock()
            tg.start_soon(call)
            await anyio.sleep(at)
            closed_at.append(anyio.current_time() - script.t0)
            await transport.aclose()
    return outcome[0], records


@pytest.mark.parametrize("scheduler_task", [True, False])
@pytest.mark.parametrize(
    ("replies", "at", "max_hedges"),
    [
        # the primary failed before the delay; its immediate backup is in flight
        ({"a": [Reply(0.010, status=503)], "b": [1.0]}, 0.020, 1),
        # a backup driver runs, the primary has failed, a third replica is still to come
        (
            {"a": [Reply(0.040, error=httpx.ConnectError)], "b": [1.0], "c": [1.0]},
            0.050,
            2,
        ),
        # the primary is pending, the backup already answered 503
        ({"a": [1.0], "b": [Reply(0.010, status=503)]}, 0.050, 1),
    ],
    ids=["failed-primary-settling", "driver-after-primary-failed", "backup-503-kept"],
)
async def test_aclose_ends_the_request_at_every_stage(
    replies: dict[str, list[Any]], at: float, max_hedges: int, scheduler_task: bool
) -> None:
    """TransportClosedError, nothing sent after the close, every response closed."""
    script = ScriptedReplicas(replies)
    replicas = {SERVICE: [f"http://{name}" for name in replies]}
    closed_at: list[float] = []
    outcome, records = await closed_during(
        script,
        at,
        closed_at,
        scheduler_task=scheduler_task,
        max_hedges=max_hedges,
        replicas=replicas,
    )
    assert outcome == "TransportClosedError"
    assert all(a.started <= closed_at[0] for a in records[0].attempts)  # none begun after
    assert len(script.sent()) == len(records[0].attempts)
    assert records[0].cancelled_by_caller
    assert records[0].outcome == "error"


# -- misuse of the entered scheduler: our own messages, not anyio's or trio's -------------


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_clients_exited_out_of_order_get_a_clear_error() -> None:
    """Two clients with the scheduler, exited first-in first-out: hedgeclient says why.

    In a plain asyncio task of its own: the misuse leaves the first client's task group
    open in the task that entered it (on trio the same misuse also gets hedgeclient's
    error, and leaves trio's nursery bookkeeping corrupted for the rest of the run).
    """
    import asyncio  # the scenario is asyncio's own tasks; the library uses anyio only

    async def misuse() -> BaseException | None:
        first = httpx.AsyncClient(transport=make(a_is_slow), base_url=SERVICE)
        second = httpx.AsyncClient(transport=make(a_is_slow), base_url=SERVICE)
        await first.__aenter__()
        await second.__aenter__()
        try:
            await first.__aexit__(None, None, None)
        except RuntimeError as exc:
            error: BaseException | None = exc
        else:
            error = None
        await second.__aexit__(None, None, None)
        return error

    error = await asyncio.create_task(misuse())
    assert isinstance(error, RuntimeError)
    assert "exited out of nesting order" in str(error)
    assert error.__cause__ is not None  # anyio's own check, kept as the cause


async def test_entered_and_only_closed_warns_when_collected(anyio_backend_name: str) -> None:
    """``__aenter__()`` then only ``aclose()``: a ResourceWarning when the transport is
    collected (the task group is still open); a transport exited with ``async with``, or
    by ``aclose()`` then ``__aexit__``, gives none.

    In a plain asyncio task of its own, as the misuse leaves that task's scope stack
    behind (on trio it also corrupts the nursery stack for the rest of the run).
    """
    if anyio_backend_name != "asyncio":
        pytest.skip("the misuse corrupts trio's nursery stack for the rest of the run")
    import asyncio  # the scenario is asyncio's own tasks; the library uses anyio only
    import gc
    import warnings

    async def misuse() -> None:
        transport = make(a_is_slow)
        await transport.__aenter__()
        await transport.aclose()

    async def proper() -> None:
        transport = make(a_is_slow)
        async with transport:
            await transport.aclose()  # inside `async with`: legitimate

    async def collect() -> None:
        for _ in range(5):  # let the cancelled timer task end and drop the scheduler
            await anyio.lowlevel.checkpoint()
        gc.collect()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        await asyncio.create_task(proper())
        await collect()
        assert [w for w in caught if w.category is ResourceWarning] == []
        await asyncio.create_task(misuse())
        await collect()
    messages = [str(w.message) for w in caught if w.category is ResourceWarning]
    assert messages == [
        "hedgeclient: a HedgedTransport(scheduler_task=True) was entered but never exited: "
        "its task group is still open in the task that entered it. Close the client with "
        "`async with` (aclose() alone does not exit it), or build the transport with "
        "scheduler_task=False"
    ]
