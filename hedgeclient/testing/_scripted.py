"""Scripted replicas in process: an ``httpx.MockTransport`` handler for virtual time.

For deterministic tests of hedging: each replica answers after a scripted latency,
with a scripted status or error, and the handler logs when each attempt was sent,
answered or cancelled, in the event loop's clock. A reply may stream its body in
scripted chunks (``chunks``), optionally failing after them (``body_error``); the
handler then also logs when that body was read to its end, failed, or was closed
before its end (a cancelled loser, or a caller that stopped reading). Run under trio's
``MockClock(autojump_threshold=0)`` the instants are exact ("the backup was sent at
t = 0.030"); under asyncio they are real and approximate.

Example usage::

    replicas = ScriptedReplicas({"a": [0.100], "b": [0.010]})
    transport = HedgedTransport(
        httpx.MockTransport(replicas.handler),
        replicas={"http://svc": ["http://a", "http://b"]},
        delay=0.030,
    )

.. versionadded:: 0.1.0
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, final

import anyio
import httpx

from hedgeclient._checks import check_number

__all__ = ["Reply", "ScriptedEvent", "ScriptedReplicas"]


@dataclass(frozen=True, slots=True)
class Reply:
    """One scripted answer of a replica.

    Attributes:
        latency: seconds before the answer (or the error), finite and ≥ 0 (an int or
            a float).
        status: the HTTP status returned, default 200.
        error: an exception class (``httpx.ConnectError``, ...) raised instead of
            answering, or ``None``.
        headers: extra response headers.
        chunks: ``None`` (default) for a body that is the replica's host name, sent
            with the headers; else the body as ``(delay, data)`` pairs: each chunk of
            bytes is sent ``delay`` seconds (finite, ≥ 0) after the previous one (the
            first after the headers). ``[]`` is an empty body.
        body_error: an exception class raised after the last chunk instead of ending
            the body (a failure mid-stream), or ``None``; needs ``chunks``.

    Raises:
        TypeError: a latency or chunk delay that is not a number, or chunk data that
            is not bytes.
        ValueError: a negative or non-finite latency or chunk delay, or a
            ``body_error`` without ``chunks``.
    """

    latency: float
    status: int = 200
    error: type[Exception] | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    chunks: Sequence[tuple[float, bytes]] | None = None
    body_error: type[Exception] | None = None

    def __post_init__(self) -> None:
        check_number("latency", self.latency, low=0.0, unit="seconds", plain=True)
        for delay, data in self.chunks or ():
            check_number("chunks[].delay", delay, low=0.0, unit="seconds", plain=True)
            if not isinstance(data, bytes):
                msg = f"`chunks[].data` must be bytes, got {data!r}"
                raise TypeError(msg)
        if self.body_error is not None and self.chunks is None:
            msg = "`body_error` needs `chunks` (a streamed body), got chunks=None"
            raise ValueError(msg)


@dataclass(frozen=True, slots=True)
class ScriptedEvent:
    """What happened to one attempt at a replica, at virtual time ``at`` (seconds)."""

    at: float
    replica: str
    attempt: str | None
    event: Literal[
        "sent", "answered", "failed", "cancelled", "body_ended", "body_failed", "body_closed"
    ]
    method: str = "GET"
    body: bytes = b""


@final
class ScriptedReplicas:
    """Replicas keyed by host name, each answering from its own list of replies.

    Args:
        script: host -> the replies it gives in order; a float is shorthand for
            ``Reply(latency)``. When a replica's list runs out, its last reply repeats.
        attempt_header: the request header naming the attempt, logged with each event.

    Raises:
        ValueError: a replica has an empty script.
    """

    def __init__(
        self,
        script: Mapping[str, Sequence[float | Reply]],
        *,
        attempt_header: str = "Hedge-Attempt",
    ) -> None:
        self._script: dict[str, list[Reply]] = {}
        for host, replies in script.items():
            if not replies:
                msg = f"`script[{host!r}]` must list at least one reply, got []"
                raise ValueError(msg)
            self._script[host] = [r if isinstance(r, Reply) else Reply(r) for r in replies]
        self._served: dict[str, int] = dict.fromkeys(self._script, 0)
        self._attempt_header = attempt_header
        self.events: list[ScriptedEvent] = []
        self.t0 = 0.0

    def start_clock(self) -> None:
        """Take "now" as t = 0 for the instants in :attr:`events`."""
        self.t0 = anyio.current_time()

    def _next_reply(self, host: str) -> Reply:
        replies = self._script[host]
        served = self._served[host]
        self._served[host] = served + 1
        return replies[min(served, len(replies) - 1)]

    def _log(self, request: httpx.Request, event: str, body: bytes = b"") -> None:
        self.events.append(
            ScriptedEvent(
                at=round(anyio.current_time() - self.t0, 9),
                replica=request.url.host,
                attempt=request.headers.get(self._attempt_header),
                event=event,  # type: ignore[arg-type]
                method=request.method,
                body=body,
            )
        )

    async def handler(self, request: httpx.Request) -> httpx.Response:
        """The ``httpx.MockTransport`` handler: answer as scripted for the host."""
        body = await request.aread()
        self._log(request, "sent", body)
        reply = self._next_reply(request.url.host)
        try:
            await anyio.sleep(reply.latency)
        except anyio.get_cancelled_exc_class():
            self._log(request, "cancelled")
            raise
        if reply.error is not None:
            self._log(request, "failed")
            msg = "scripted failure"
            raise reply.error(msg, request=request)  # type: ignore[call-arg]
        self._log(request, "answered")
        headers = {"x-replica": request.url.host, **reply.headers}
        if reply.chunks is not None:
            return httpx.Response(reply.status, headers=headers, stream=_Body(self, request, reply))
        return httpx.Response(reply.status, headers=headers, content=request.url.host.encode())

    def sent(self) -> list[tuple[float, str, str | None]]:
        """``(instant, replica, attempt)`` of every attempt sent, in order."""
        return [(e.at, e.replica, e.attempt) for e in self.events if e.event == "sent"]

    def of(self, event: str) -> list[tuple[float, str]]:
        """``(instant, replica)`` of every event of one kind, in order."""
        return [(e.at, e.replica) for e in self.events if e.event == event]


@final
class _Body(httpx.AsyncByteStream):
    """Strictly private: a scripted streamed body that logs how it ended."""

    def __init__(self, replicas: ScriptedReplicas, request: httpx.Request, reply: Reply) -> None:
        self._replicas = replicas
        self._request = request
        self._reply = reply
        self._ended = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for delay, data in self._reply.chunks or ():
            await anyio.sleep(delay)
            yield data
        self._ended = True
        error = self._reply.body_error
        if error is not None:
            self._replicas._log(self._request, "body_failed")
            msg = "scripted failure mid-body"
            raise error(msg, request=self._request)  # type: ignore[call-arg]
        self._replicas._log(self._request, "body_ended")

    async def aclose(self) -> None:
        if not self._ended:
            self._ended = True
            self._replicas._log(self._request, "body_closed")
