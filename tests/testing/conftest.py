"""Fixtures of the fake service's own tests."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

from hedgeclient.testing import FakeService

Send = Callable[[dict[str, Any]], Awaitable[Any]]
CancelOnceReceived = Callable[[FakeService, int, Send], Awaitable[None]]


async def _cancel_once_received(svc: FakeService, received: int, send: Send) -> None:
    """Call ``send(extensions)`` (one HTTP/1.1 request to a slow replica), and cancel it
    once the request is written whole and ``svc`` has received ``received`` requests in
    all.

    Not after a fixed time: on a loaded machine a request can take longer than any fixed
    time to reach the replica's app, and one cancelled before is never seen there. Nor
    before its body is written: a request body's async iterator left unfinished is a
    ResourceWarning under trio.
    """
    written = anyio.Event()

    async def trace(name: str, info: dict[str, Any]) -> None:
        if name == "http11.send_request_body.complete":
            written.set()

    async with anyio.create_task_group() as tg:

        async def cancel() -> None:
            with anyio.fail_after(10.0):  # milliseconds; the bound only stops a hang
                await written.wait()
                await svc.wait_stats(lambda s: s.received >= received)
            tg.cancel_scope.cancel()

        tg.start_soon(cancel)
        await send({"trace": trace})


@pytest.fixture
def cancel_once_received() -> CancelOnceReceived:
    """:func:`_cancel_once_received`: cancel a request once the service has it whole."""
    return _cancel_once_received
