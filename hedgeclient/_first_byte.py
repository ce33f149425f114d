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
response, shielded, before the cancellation (or error) goes on: on HTTP/1.1 the
connection is closed, so the replica sees the disconnect at once.

Strictly private.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import final

import anyio
import httpx

__all__ = ["FirstByteStream", "read_first_byte"]


@final
class FirstByteStream(httpx.AsyncByteStream):
    """A response stream that yields the first chunk already read, then the rest of
    the same iterator; closing it closes that iterator and the transport's stream.

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
        return await self._iterator.__anext__()

    async def aclose(self) -> None:
        try:
            close = getattr(self._iterator, "aclose", None)  # an async generator's
            if close is not None:
                await close()
        finally:
            await self.inner.aclose()


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
        with anyio.CancelScope(shield=True):
            await FirstByteStream(b"", iterator, stream, more=False).aclose()
        raise
    response.stream = FirstByteStream(first, iterator, stream, more=more)
