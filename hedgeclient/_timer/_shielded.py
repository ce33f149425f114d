"""Waits and clean-up that no cancellation can cut short, on asyncio as on trio.

anyio's shield stops anyio's and trio's cancellation, but not a native
``task.cancel()`` on asyncio (``asyncio.timeout``, a second cancel while a first one
unwinds): there each such cancellation is absorbed until the work is done, and the last
one is raised then, so the caller still gets its cancellation, only later.

Strictly private.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import anyio
import sniffio

from hedgeclient._timer._types import Flag

__all__ = ["run_shielded", "wait_shielded"]


async def wait_shielded(event: Flag) -> None:
    """Wait for ``event`` even if the caller is cancelled meanwhile; then re-raise.

    On asyncio each native cancellation is absorbed until ``event`` is set, and the
    last one is raised then (see the module doc).
    """
    with anyio.CancelScope(shield=True):
        if sniffio.current_async_library() != "asyncio":
            await event.wait()
            return
        cancelled: BaseException | None = None
        while not event.is_set():
            try:
                await event.wait()
            except asyncio.CancelledError as exc:
                cancelled = exc
        if cancelled is not None:
            raise cancelled


async def run_shielded(fn: Callable[[], Awaitable[None]]) -> None:
    """Run ``fn()`` to its end even if the caller is cancelled meanwhile; then re-raise.

    Clean-up (closing a loser's response, repairing the pool) must not stop half-way.
    On trio (and for anyio's own cancellation) a shielded scope is enough; a native
    asyncio cancellation goes through shields, so there ``fn()`` runs in a task of
    its own that the caller waits for, absorbing each native cancellation meanwhile.

    Raises:
        Exception: what ``fn()`` raised.
    """
    if sniffio.current_async_library() != "asyncio":
        with anyio.CancelScope(shield=True):
            await fn()
        return

    async def run() -> None:
        await fn()

    task = asyncio.get_running_loop().create_task(run())
    with anyio.CancelScope(shield=True):
        cancelled: BaseException | None = None
        while not task.done():
            try:
                await asyncio.wait({task})
            except asyncio.CancelledError as exc:
                cancelled = exc
    if cancelled is not None:
        raise cancelled
    task.result()
