"""Bodies across the thread boundary of a ``SyncHedgedTransport``.

A response body small enough to come in one go (a ``Content-Length`` of at most
:data:`READ_AHEAD` bytes) is read on the loop in the trip that brings its headers, so
that a request costs one hand-over between threads; a larger or unsized one is
streamed (:class:`PortalStream`), one trip per chunk, so that ``client.stream(...)``
still streams. A request body given as a sync iterator is pulled on the loop from a
worker thread (:class:`ThreadedBody`): the caller's thread is waiting for the answer.

Strictly private.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any, Final, final

import httpx
from anyio import to_thread

from hedgeclient._sync.loop import LoopThread

__all__ = ["READ_AHEAD", "PortalStream", "ThreadedBody", "read_small"]

READ_AHEAD: Final = 65_536
"""Bytes: a response whose ``Content-Length`` is at most this is read whole in the trip
to the loop that brings its headers (one thread hand-over per request, not three)."""


async def read_small(response: httpx.Response) -> bytes | None:
    """On the loop: the whole raw body of an async transport's ``response`` when its
    ``Content-Length`` is at most :data:`READ_AHEAD` (its stream then closed), else
    ``None`` (the stream untouched)."""
    length = response.headers.get("content-length", "")
    if not (length.isdigit() and int(length) <= READ_AHEAD):
        return None
    stream: Any = response.stream  # an httpx.AsyncByteStream: an async transport's
    try:
        return b"".join([chunk async for chunk in stream])
    finally:
        await stream.aclose()


@final
class PortalStream(httpx.SyncByteStream):
    """A response body read from the caller's thread, one trip to the loop per chunk;
    the trip that meets the end also closes the async stream. Strictly private."""

    __slots__ = ("_iterator", "_loop", "_stream")

    def __init__(self, loop: LoopThread, stream: Any) -> None:
        self._loop = loop
        self._stream: httpx.AsyncByteStream | None = stream
        self._iterator: AsyncIterator[bytes] = stream.__aiter__()

    def __iter__(self) -> Iterator[bytes]:
        while self._stream is not None:
            chunk = self._run(self._next)
            if chunk is None:
                return
            yield chunk

    async def _next(self) -> bytes | None:
        stream = self._stream
        if stream is None:
            return None
        try:
            chunk: bytes = await self._iterator.__anext__()
        except BaseException as exc:  # the end, an error or a cancellation: it is over
            self._stream = None
            await stream.aclose()
            if isinstance(exc, StopAsyncIteration):
                return None
            raise
        return chunk

    async def _aclose(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            await stream.aclose()

    def _run(self, func: Any) -> Any:
        if not self._loop.running:
            self._stream = None
            msg = "the SyncHedgedTransport was closed while this body was being read"
            raise httpx.ReadError(msg)
        return self._loop.call(func)

    def close(self) -> None:
        """Close the async stream on the loop (the winner's connection goes back to the
        pool, or is closed if the body was not read to its end)."""
        if self._stream is not None:
            self._run(self._aclose)


@final
class ThreadedBody(httpx.AsyncByteStream):
    """A sync request body iterated from the loop, a worker thread per chunk. Strictly
    private."""

    __slots__ = ("_stream",)

    def __init__(self, stream: Iterable[bytes]) -> None:
        self._stream = stream

    async def __aiter__(self) -> AsyncIterator[bytes]:
        iterator = iter(self._stream)
        while (chunk := await to_thread.run_sync(next, iterator, None)) is not None:
            yield chunk


def with_async_body(request: httpx.Request) -> httpx.Request:
    """``request``, its sync iterator body readable on the loop (:class:`ThreadedBody`)."""
    body: Any = request.stream  # an httpx.SyncByteStream: httpx.Client's
    return httpx.Request(
        request.method,
        request.url,
        headers=request.headers,
        stream=ThreadedBody(body),
        extensions=request.extensions,
    )
