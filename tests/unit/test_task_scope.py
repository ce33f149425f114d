"""The asyncio timer's cancel scope (``_timer._asyncio._TaskScope``): ``Task.cancel()``
and ``uncancel()`` counted as ``asyncio.timeout`` counts them, beside anyio's scopes.

Each test runs one plain ``asyncio.run`` and records what the code inside saw, in order;
no assertion reads a clock: a task waits for events the test sets, so a busy machine
changes nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import anyio
import pytest

from hedgeclient._timer import Scope, current_timer


def _scope() -> Scope:
    return current_timer().primary_scope()


def _run(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(main())


async def _wait_in(scope: Scope, entered: asyncio.Event) -> None:
    """Enter ``scope``, say so, and wait there until cancelled."""
    with scope:
        entered.set()
        await asyncio.Event().wait()


def test_a_cancel_from_another_task_stops_the_body_and_is_taken_back() -> None:
    seen: list[object] = []

    async def main() -> None:
        scope, entered = _scope(), asyncio.Event()

        async def body() -> None:
            await _wait_in(scope, entered)  # the scope swallows its own cancellation
            task = asyncio.current_task()
            assert task is not None
            seen.append(("after", scope.cancelled_caught, task.cancelling()))  # type: ignore[attr-defined]
            await asyncio.sleep(0)  # no cancellation left pending
            seen.append("slept")

        task = asyncio.get_running_loop().create_task(body())
        await entered.wait()
        scope.cancel()
        await task

    _run(main)
    assert seen == [("after", True, 0), "slept"]


def test_a_cancel_from_its_own_task_waits_for_a_suspension_inside() -> None:
    """Cancelled by the code it runs: the next suspension inside is cancelled; a body
    that ends first leaves no cancellation pending for the code after it."""
    seen: list[object] = []

    async def main() -> None:
        with _scope() as scope:
            scope.cancel()
            seen.append("still running")
            await asyncio.sleep(0)
            seen.append("not cancelled")  # pragma: no cover - a failure
        seen.append(("first", scope.cancelled_caught))  # type: ignore[attr-defined]
        with _scope() as other:
            other.cancel()
        await asyncio.sleep(0)  # after the scope: nothing left to cancel it
        await asyncio.sleep(0)
        seen.append(("second", other.cancelled_caught))  # type: ignore[attr-defined]

    _run(main)
    assert seen == ["still running", ("first", True), ("second", False)]


def test_a_cancel_before_entering_cancels_the_first_suspension() -> None:
    seen: list[object] = []

    async def main() -> None:
        scope = _scope()
        scope.cancel()
        with scope:
            seen.append("entered")
            await asyncio.sleep(0)
            seen.append("not cancelled")  # pragma: no cover - a failure
        seen.append(scope.cancelled_caught)  # type: ignore[attr-defined]

    _run(main)
    assert seen == ["entered", True]


def test_a_cancel_after_leaving_does_nothing() -> None:
    seen: list[object] = []

    async def main() -> None:
        scope = _scope()
        with scope:
            await asyncio.sleep(0)
        scope.cancel()
        await asyncio.sleep(0)
        seen.append(("after", scope.cancelled_caught))  # type: ignore[attr-defined]

    _run(main)
    assert seen == [("after", False)]


def test_another_cancellation_goes_on_even_when_both_land() -> None:
    """``asyncio.timeout`` around it expires in the same pass as the scope's own cancel:
    the scope takes its own back and lets the timeout's through (a ``TimeoutError``)."""
    seen: list[object] = []

    async def main() -> None:
        scope, entered = _scope(), asyncio.Event()
        task: asyncio.Task[None] | None = None

        async def body() -> None:
            try:
                async with asyncio.timeout(None) as timeout:
                    with scope:
                        timeout.reschedule(asyncio.get_running_loop().time())
                        entered.set()
                        await asyncio.Event().wait()
            except TimeoutError:
                seen.append(("timeout", scope.cancelled_caught))  # type: ignore[attr-defined]

        task = asyncio.get_running_loop().create_task(body())
        await entered.wait()
        scope.cancel()  # the timeout's handle runs in this same pass of the loop
        await task
        seen.append(task.cancelling())

    _run(main)
    assert seen == [("timeout", False), 0]


def test_a_foreign_cancellation_is_not_swallowed() -> None:
    seen: list[object] = []

    async def main() -> None:
        scope, entered = _scope(), asyncio.Event()

        task = asyncio.get_running_loop().create_task(_wait_in(scope, entered))
        await entered.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        seen.append(scope.cancelled_caught)  # type: ignore[attr-defined]

    _run(main)
    assert seen == [False]


def test_an_anyio_scope_around_it_is_served_as_ever() -> None:
    """anyio's ``move_on_after`` around the scope: anyio's cancellation goes through it
    to anyio's scope, which catches it."""
    seen: list[object] = []

    async def main() -> None:
        with anyio.move_on_after(0) as outer:
            with _scope() as scope:
                await anyio.sleep(10)
        seen.append((outer.cancelled_caught, scope.cancelled_caught))  # type: ignore[attr-defined]

    anyio.run(main)
    assert seen == [(True, False)]


def test_a_shield_inside_holds_the_cancel_until_it_ends() -> None:
    """httpcore shields its clean-up with anyio: a cancel that comes meanwhile is
    delivered after the shielded part, at the next suspension."""
    seen: list[object] = []

    async def main() -> None:
        scope, shielded, release = _scope(), anyio.Event(), anyio.Event()

        async def body() -> None:
            with scope:
                with anyio.CancelScope(shield=True):
                    shielded.set()
                    await release.wait()
                    seen.append("shielded part done")
                await anyio.sleep(10)
                seen.append("not cancelled")  # pragma: no cover - a failure
            seen.append(("cancelled", scope.cancelled_caught))  # type: ignore[attr-defined]

        async with anyio.create_task_group() as group:
            group.start_soon(body)
            await shielded.wait()
            scope.cancel()
            for _ in range(3):  # a few passes of the loop: the cancel waits
                await anyio.lowlevel.checkpoint()
            release.set()

    anyio.run(main)
    assert seen == ["shielded part done", ("cancelled", True)]


def test_a_shield_around_it_does_not_hold_the_cancel() -> None:
    """A caller in a shielded anyio scope still has its own race's scope cancelled."""
    seen: list[object] = []

    async def main() -> None:
        scope, entered = _scope(), anyio.Event()

        async def body() -> None:
            with anyio.CancelScope(shield=True):
                with scope:
                    entered.set()
                    await anyio.sleep(10)
                seen.append(scope.cancelled_caught)  # type: ignore[attr-defined]

        async with anyio.create_task_group() as group:
            group.start_soon(body)
            await entered.wait()
            scope.cancel()

    anyio.run(main)
    assert seen == [True]


def test_entering_outside_a_task_is_refused() -> None:
    async def main() -> None:
        scope = _scope()
        errors: list[str] = []

        def callback() -> None:
            try:
                scope.__enter__()
            except RuntimeError as exc:
                errors.append(str(exc))

        asyncio.get_running_loop().call_soon(callback)
        await asyncio.sleep(0)
        assert errors == ["a cancel scope is entered in an asyncio task"]

    _run(main)


def test_a_cancel_waiting_for_a_long_shield_lets_the_loop_sleep() -> None:
    """A shield held 0.3 s: the cancel looks again at once for 16 passes, then backs off
    to every 2 ms, so it is delivered soon after the shield ends without spinning the
    loop meanwhile (a pass at a time kept a core busy). A busy machine only makes fewer
    passes."""
    seen: list[object] = []

    async def main() -> None:
        scope, shielded = _scope(), anyio.Event()

        async def body() -> None:
            with scope:
                with anyio.CancelScope(shield=True):
                    shielded.set()
                    await anyio.sleep(0.3)
                await anyio.sleep(10)
            seen.append(scope.cancelled_caught)  # type: ignore[attr-defined]

        async with anyio.create_task_group() as group:
            group.start_soon(body)
            await shielded.wait()
            scope.cancel()
        seen.append(scope._waits)  # type: ignore[attr-defined]

    anyio.run(main)
    cancelled, waits = seen
    assert cancelled is True
    assert 16 < waits <= 16 + 5 + 300 // 2  # at most one look per 2 ms once backed off
