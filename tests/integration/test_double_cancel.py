"""A streamed body whose reader is cancelled twice gives its connection back.

``task.cancel()`` twice while reading the winner's streamed body (asyncio) interrupts
httpcore's own clean-up, which leaves the connection counted active forever
(encode/httpcore#1115, encode/httpx#3782): ten of them fill a ten-connection pool in
plain httpx. hedgeclient reclaims them (``hedgeclient._compat.pool.ReclaimingStream``).
Native double cancellation is asyncio's; trio's cancel scopes cannot be interrupted so.
"""

from __future__ import annotations

import asyncio
import contextlib

import httpx
import pytest

from hedgeclient import HedgedTransport
from hedgeclient.testing import FakeService

pytestmark = pytest.mark.slow

SERVICE = "http://svc"


async def consume(client: httpx.AsyncClient) -> None:
    """Stream a large body slowly, until cancelled."""
    async with client.stream("GET", "/large?bytes=50000000") as response:
        async for _ in response.aiter_bytes():
            await asyncio.sleep(0.001)


def busy(inner: httpx.AsyncHTTPTransport) -> list[str]:
    """The pool's connections that are neither idle nor closed."""
    return [c.info() for c in inner._pool.connections if not (c.is_idle() or c.is_closed())]


def test_reader_cancelled_twice_leaves_no_connection_active() -> None:
    """12 streamed reads, each cancelled twice mid-body, on a 10-connection pool: every
    connection is reclaimed, and the next request gets one at once."""

    async def main() -> tuple[list[str], int, int]:
        with FakeService(replicas=2, latency=0.001) as svc:
            inner = httpx.AsyncHTTPTransport(limits=httpx.Limits(max_connections=10))
            transport = HedgedTransport(inner, replicas={SERVICE: svc.origins}, metrics=False)
            async with httpx.AsyncClient(transport=transport, base_url=SERVICE) as client:
                for _ in range(12):
                    task = asyncio.create_task(consume(client))
                    await asyncio.sleep(0.05)  # reading the body by now
                    task.cancel()
                    await asyncio.sleep(0)
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
                # The reclaim runs in a detached task: give it the loop for a moment
                # (milliseconds; up to 10 s only stops a hang on a loaded machine).
                for _ in range(1000):
                    if not busy(inner):
                        break
                    await asyncio.sleep(0.01)
                left = busy(inner)
                response = await client.get("/", timeout=httpx.Timeout(5.0, pool=1.0))
                return left, response.status_code, len(inner._pool.connections)

    left, status, connections = asyncio.run(main())
    assert left == []
    assert status == 200
    assert connections <= 10
