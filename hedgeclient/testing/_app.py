"""The ASGI application of one replica: draw a latency, wait it, answer, account.

Raw ASGI 3, no framework. A request is read in full (a POST, PUT, PATCH or DELETE then
counts as a write), its latency is drawn, and the app waits until it is due while it
watches ``receive()`` for ``http.disconnect``: a client that goes away is counted as
``abandoned`` at once and the wait is cut short. Every response carries the headers
``x-replica: <index>`` and ``x-latency: <seconds drawn>``.

Paths (any method):

- ``/delay/<seconds>``: the latency is ``<seconds>`` instead of a draw (a slowdown
  and stalls still apply);
- ``/status/<code>``: answer with status ``<code>`` (200-599; 204 and 304 with no body);
- ``/large?bytes=N``: answer with N bytes of :func:`large_body` content;
- ``POST .../chat/completions``: the fake model (``_llm``), OpenAI-compatible, whose
  latency drawn is the time to the first token (request-owned: keyed by the body);
- anything else: a small JSON body ``{"replica", "latency", "request_id", "attempt"}``.

A bad ``<seconds>``, ``<code>``, ``N`` or chat request is answered at once with 400.

With ``watch=False`` the app works like a framework handler: it never reads
``receive()`` while it works, so a client that goes away goes unnoticed unless
middleware (:class:`~hedgeclient.server.HedgeMiddleware`) cancels it; a cancelled
request is ``abandoned``. Each visit records the seconds its handler ran (``worked``)
and waited in the middleware's admission queue (``queued``).

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import asyncio
import json
import random
from urllib.parse import parse_qs

from hedgeclient.testing._asgi import (
    Message,
    Receive,
    Scope,
    Send,
    Wake,
    _answer,
    _BadRequest,
    _drop,
    _forget,
    _parse,
    _trickle,
)
from hedgeclient.testing._body import iter_large_body
from hedgeclient.testing._config import (
    BlackHole,
    CloseMidBody,
    Down,
    ErrorStatus,
    Fault,
    LargeBody,
    ReplicaConfig,
    Reset,
    SlowBody,
)
from hedgeclient.testing._generation import Generation
from hedgeclient.testing._ledger import _Attempt, _Ledger
from hedgeclient.testing._llm import error_body, is_chat, serve_chat
from hedgeclient.testing._stats import WRITE_METHODS, Outcome

_NO_BODY = frozenset({204, 304})  # statuses that carry no content (RFC 9110 6.4.1)


class _ReplicaApp:
    """Strictly private: the ASGI app of replica ``index``; lives on the server loop."""

    def __init__(
        self,
        *,
        index: int,
        config: ReplicaConfig,
        ledger: _Ledger,
        seed: int,
        key_header: str | None,
        watch: bool = True,
    ) -> None:
        self.index = index
        self._watch = watch
        self.config = config
        self.origin = 0.0  # when the replica started, on the loop's clock (Stall phase)
        self._ledger = ledger
        self._seed = seed
        self._rng = random.Random(f"{seed}:{index}")
        self._key_header = key_header.lower().encode("latin-1") if key_header else None
        self._replica_header = str(index).encode()
        self._halted: asyncio.Future[None] | None = None
        self._completions = 0

    def start(self) -> None:
        """Accept requests (again); call on the server loop."""
        loop = asyncio.get_running_loop()
        self.origin = loop.time()
        self._halted = loop.create_future()

    def halt(self) -> None:
        """Cut every waiting request short: its connection is dropped, it is ``failed``."""
        if self._halted is not None and not self._halted.done():
            self._halted.set_result(None)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["type"] != "http":
            return
        loop = asyncio.get_running_loop()
        start = loop.time()
        request_id = attempt = traceparent = None
        key = None
        for name, value in scope["headers"]:
            if name == b"x-request-id":
                request_id = value.decode("latin-1")
            elif name == b"hedge-attempt":
                attempt = value.decode("latin-1")
            elif name == b"traceparent":
                traceparent = value.decode("latin-1")
            elif name == self._key_header:
                key = value
        client = scope.get("client")
        connection = f"{client[0]}:{client[1]}" if client else None
        visit = self._ledger.begin(
            self.index,
            request_id,
            attempt,
            scope["method"],
            scope["path"],
            traceparent=traceparent,
            connection=connection,
        )
        hedge = scope.get("state", {}).get("hedge")
        visit.queued = hedge.queued if hedge is not None else 0.0
        outcome: Outcome = "failed"
        try:
            body = await self._read(scope, receive, request_id)
            if body is None:
                outcome = "abandoned"
            elif is_chat(scope):
                outcome = await self._chat(receive, send, visit, start, key, body)
            else:
                outcome = await self._respond(scope, receive, send, visit, start, key)
        except _BadRequest as exc:
            visit.status = 400
            if is_chat(scope):
                kind = [(b"content-type", b"application/json")]
                await _answer(send, 400, kind, error_body(str(exc), "invalid_request_error"))
            else:
                await _answer(send, 400, [], str(exc).encode())
            outcome = "completed"
        except asyncio.CancelledError:  # middleware cancelled us: the client went away
            outcome = "abandoned"
            raise
        finally:
            self._ledger.end(visit, outcome, loop.time() - start)

    async def _read(self, scope: Scope, receive: Receive, request_id: str | None) -> bytes | None:
        """Read the request body (a write is applied then, but a chat completion is
        no write); return it (empty but for writes), or None on a disconnect."""
        method: str = scope["method"]
        chunks: list[bytes] = []
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            if method in WRITE_METHODS:
                chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        if method in WRITE_METHODS and not is_chat(scope):
            self._ledger.write(self.index, request_id, method, scope["path"], body)
        return body

    async def _chat(
        self,
        receive: Receive,
        send: Send,
        visit: _Attempt,
        start: float,
        key: bytes | None,
        body: bytes,
    ) -> Outcome:
        """Answer a chat completion (``_llm``): the latency drawn is the time to the
        first token; request-owned, it is keyed by the body (or the key header)."""
        config = self.config
        self._completions += 1
        visit.latency = work = self._latency(body if key is None else key) * config.slowdown
        headers = [(b"x-replica", self._replica_header), (b"x-latency", f"{work:.6f}".encode())]
        watcher = asyncio.ensure_future(receive())  # completes on http.disconnect
        try:
            return await serve_chat(
                body, ident=f"chatcmpl-{self.index}-{self._completions}", seed=self._seed,
                replica=self.index, generation=config.generation or Generation(), send=send,
                watcher=watcher, wait=self._wait, visit=visit, ledger=self._ledger,
                start=start, due=self._due(start, work), fault=self._draw(config.fault),
                headers=headers,
            )  # fmt: skip
        finally:
            _forget(watcher)

    def _due(self, start: float, work: float) -> float:
        """When ``work`` seconds begun at ``start`` end, stalls included (loop clock)."""
        stall = self.config.stall
        return start + work if stall is None else stall.finish(start, work, self.origin)

    async def _respond(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        visit: _Attempt,
        start: float,
        key: bytes | None,
    ) -> Outcome:
        config = self.config
        work, status, size = self._plan(scope, config, key)
        fault = self._draw(config.fault)
        if isinstance(fault, ErrorStatus):
            status = fault.status
        elif isinstance(fault, LargeBody):
            size = fault.size
        work *= config.slowdown
        visit.latency = work
        due = self._due(start, work)
        loop = asyncio.get_running_loop()
        # completes on http.disconnect; never, for a handler that does not watch
        watcher = asyncio.ensure_future(receive()) if self._watch else loop.create_future()
        try:
            wake = await self._wait(watcher, due)
            if wake == "disconnect":
                return "abandoned"
            if wake == "halt" or isinstance(fault, Reset):
                dropped = await _drop(send, watcher, reset=True, started=False)
                return "failed" if dropped else "abandoned"
            if size is None:
                info = {"replica": self.index, "latency": work, "request_id": visit.request_id}
                body = json.dumps({**info, "attempt": visit.attempt}).encode()
                length, kind = len(body), b"application/json"
            else:
                body, length, kind = b"", size, b"application/octet-stream"
            headers = [
                (b"content-type", kind),
                (b"content-length", str(length).encode()),
                (b"x-replica", self._replica_header),
                (b"x-latency", f"{work:.6f}".encode()),
            ]
            if status in _NO_BODY:  # RFC 9110 6.4.1: these carry no content
                body, size, headers = b"", None, headers[2:]
            self._ledger.started(visit, loop.time() - start)
            visit.status = status
            await send({"type": "http.response.start", "status": status, "headers": headers})
            if isinstance(fault, CloseMidBody):
                half = body[: length // 2] if size is None else b"".join(iter_large_body(size // 2))
                await send({"type": "http.response.body", "body": half, "more_body": True})
                dropped = await _drop(send, watcher, reset=False, started=True)
                return "failed" if dropped else "abandoned"
            if isinstance(fault, SlowBody):
                whole = body if size is None else b"".join(iter_large_body(size))
                return await _trickle(send, watcher, whole, fault, self._wait)
            for piece in iter_large_body(size or 0):
                if watcher.done():
                    return "abandoned"
                await send({"type": "http.response.body", "body": piece, "more_body": True})
            await send({"type": "http.response.body", "body": body})
            return "completed"
        finally:
            _forget(watcher)

    def _plan(
        self, scope: Scope, config: ReplicaConfig, key: bytes | None
    ) -> tuple[float, int, int | None]:
        """Return the latency drawn (seconds), the status and a large body's size."""
        path: str = scope["path"]
        status, size = 200, None
        if path.startswith("/delay/"):
            work = _parse(path[7:], float, "/delay/<seconds>")
            if not 0.0 <= work < float("inf"):
                msg = "/delay/<seconds> must be finite and ≥ 0"
                raise _BadRequest(msg)
            return work, status, size
        if path.startswith("/status/"):
            status = _parse(path[8:], int, "/status/<code>")
            if not 200 <= status <= 599:
                msg = "/status/<code> must be in [200, 599]"
                raise _BadRequest(msg)
        elif path == "/large":
            query = parse_qs(scope["query_string"].decode("latin-1"))
            size = _parse(query.get("bytes", ["0"])[-1], int, "/large?bytes=N")
            if size < 0:
                msg = "/large?bytes=N must be ≥ 0"
                raise _BadRequest(msg)
        if key is None:
            key = path.encode() + b"?" + scope["query_string"]
        return self._latency(key), status, size

    def _latency(self, key: bytes) -> float:
        """Draw a latency (seconds): afresh, or from ``key`` when request-owned."""
        law = self.config.latency
        if law is None:  # pragma: no cover - the service resolves every law
            return 0.0
        if self.config.slowness != "request-owned":
            return law.sample(self._rng)
        # A str/bytes seed is hashed with SHA-512: the same on every replica and process.
        return law.sample(random.Random(b"%d\x00%s" % (self._seed, key)))

    def _draw(self, fault: Fault | None) -> Fault | None:
        """Return the fault if it strikes this request (probability ``p``), else None."""
        if fault is None or isinstance(fault, (Down, BlackHole)):
            return None
        return fault if fault.p >= 1.0 or self._rng.random() < fault.p else None

    async def _wait(self, watcher: asyncio.Future[Message], due: float) -> Wake:
        """Wait until ``due`` (loop clock), a disconnect, or a halt, whichever is first."""
        halted = self._halted
        assert halted is not None, "start() before serving"
        delay = due - asyncio.get_running_loop().time()
        if delay > 0.0 and not (watcher.done() or halted.done()):
            await asyncio.wait(
                (watcher, halted), timeout=delay, return_when=asyncio.FIRST_COMPLETED
            )
        if watcher.done():
            return "disconnect"
        return "halt" if halted.done() else "due"
