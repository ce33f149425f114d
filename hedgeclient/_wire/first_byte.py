"""Ending an attempt at its first body byte: the decision point of streaming calls.

A model-serving API sends ``200 OK`` and its headers at once and its first token when
it is ready; what is slow, and heavy-tailed, is the time to that first token. A race
that ends at the headers hedges nothing there. :func:`read_first_byte` lets an
attempt's ``send`` return only once the first body bytes arrived (or the body ended,
which counts as its first byte): the race engine then judges attempts at that instant
without knowing why, and cancels the others at once.

The response keeps its connection: its stream is replaced by a :class:`FirstByteStream`
that yields the bytes already read, then goes on with the *same* iterator of the
transport's stream. Nothing is buffered beyond that first chunk, so
``client.stream(...)``, ``aiter_bytes``/``aiter_lines`` and an SDK's server-sent-event
parser see the body unchanged; an error later in the body reaches the caller from that
same iterator (a body is never spliced from two attempts).

An attempt cancelled (or failing) while it waits for its first byte closes its
response, shielded (``_timer.run_shielded``: a native asyncio cancel cannot cut it
short either), before the cancellation (or error) goes on: on HTTP/1.1 the
connection is closed, so the replica sees the disconnect at once. Closing a primed
response (a loser that had its first byte too, or a caller that stops reading)
closes the transport's stream and then runs its iterator out, so that none of the
transport's async generators is left for the garbage collector.

Strictly private.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import final

import httpx

from hedgeclient._timer import current_timer, run_shielded, shield

__all__ = ["FirstByteStream", "read_first_byte"]


@final
class FirstByteStream(httpx.AsyncByteStream):
    """A response stream that yields the first chunk already read, then the rest of
    the same iterator; closing it closes the transport's stream, then ends that
    iterator (:func:`_finish`).

    Attributes:
        inner: the transport's own stream (what the httpcore repairs look through).
    """

    __slots__ = ("_first", "_iterator", "_more", "inner")

    def __init__(
        self,
        first: bytes,
        iterator: AsyncIterator[bytes],
        inner: httpx.AsyncByteStream,
        *,
        more: bool,
    ) -> None:
        self._first = first
        self._iterator = iterator
        self._more = more
        self.inner = inner

    def __aiter__(self) -> AsyncIterator[bytes]:
        # Itself, not an async generator: no generator frame per chunk, and nothing
        # for the garbage collector to finalize when a caller stops early.
        return self

    async def __anext__(self) -> bytes:
        first = self._first
        if first:
            self._first = b""
            return first
        if not self._more:
            raise StopAsyncIteration
        try:
            return await self._iterator.__anext__()
        except BaseException:  # the end, an error or a cancellation: it is over
            self._more = False
            raise

    async def aclose(self) -> None:
        self._first = b""
        try:
            await self.inner.aclose()
        finally:
            if self._more:
                self._more = False
                await _finish(self._iterator)


_MAX_LEFTOVER_CHUNKS = 1024
"""Chunks :func:`_finish` reads at most from a closed stream (data it had buffered)."""


async def _finish(iterator: AsyncIterator[bytes]) -> None:
    """Run the iterator of a closed stream to its end; never raises but cancellation.

    A transport's stream iterates through nested async generators (httpx's, then
    httpcore's). Closing the outermost generator leaves the inner ones suspended, for
    the garbage collector to finalize (trio warns as it does). Its stream being closed,
    the iterator ends at once instead, by an error or at its first checkpoint inside
    this cancelled scope, and the exception unwinds every generator of the chain.
    Data already buffered may still come out first: at most
    :data:`_MAX_LEFTOVER_CHUNKS` chunks, then the iterator is closed as a generator.
    """
    # The timer's scope: on asyncio its cancel builds no task repr (``_timer._asyncio``),
    # which anyio's would on every close of a primed response.
    with current_timer().cancel_scope() as scope:
        scope.cancel()
        for _ in range(_MAX_LEFTOVER_CHUNKS):
            try:
                await iterator.__anext__()
            except Exception:  # StopAsyncIteration, or the closed stream's own error
                return
    close = getattr(iterator, "aclose", None)  # an async generator's
    if close is not None and not scope.cancelled_caught:
        with shield():
            await close()


async def read_first_byte(response: httpx.Response) -> None:
    """Wait until ``response``'s body has delivered its first bytes, or ended.

    On return ``response.stream`` is a :class:`FirstByteStream` that starts with those
    bytes. Empty chunks do not count as a first byte. A response whose stream is not
    an ``httpx.AsyncByteStream`` is left as it is.

    Raises:
        httpx.HTTPError: reading the body failed (the response is closed first).
        Exception: whatever the inner stream raised (the response is closed first).
    """
    stream = response.stream
    if not isinstance(stream, httpx.AsyncByteStream):
        return
    iterator = stream.__aiter__()
    first = b""
    more = True
    try:
        while not first:
            try:
                first = await iterator.__anext__()
            except StopAsyncIteration:
                more = False
                break
    except BaseException:
        await run_shielded(FirstByteStream(b"", iterator, stream, more=False).aclose)
        raise
    response.stream = FirstByteStream(first, iterator, stream, more=more)
