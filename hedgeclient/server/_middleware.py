"""``HedgeMiddleware``: the server's half of hedging, as pure ASGI middleware.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, final

from hedgeclient._checks import check_int
from hedgeclient._options import check_attempt_header, check_name
from hedgeclient._tied import TIE_HEADER, TWIN_HEADER
from hedgeclient.server._admission import WAITING, Admission
from hedgeclient.server._answers import ATTEMPTS, attempt_of, dropped, queue_too_long
from hedgeclient.server._backend import Loop, current_loop, exchange, poll, unpoll
from hedgeclient.server._config import Ties
from hedgeclient.server._exchange import Exchange, Receive, Scope, Send
from hedgeclient.server._stats import _CURRENT, Counters, HedgeAttempt, ServerStatistics
from hedgeclient.server._ties import TieBook, TieCopy, valid_tie

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

__all__ = ["CancelMode", "HedgeMiddleware"]

CancelMode = Literal["hedged", "all", "none"]
"""Which handlers are cancelled when their client goes away: ``hedged`` (requests with
the attempt header), ``all``, or ``none``."""

ASGIApp = Any  # an ASGI 3 application: async (scope, receive, send) -> None
_TIE = TIE_HEADER.encode()
_TWIN = TWIN_HEADER.encode()
_SHARED = len(ATTEMPTS)


@final
class HedgeMiddleware:
    """Pure ASGI middleware for the replicas behind a hedging client.

    - **Stops the loser's work.** When the client goes away (a closed connection, an
      HTTP/2 stream reset) before the response is complete, the handler is cancelled
      (``CancelledError`` on asyncio, ``trio.Cancelled`` on trio, at its next
      ``await``), so a losing attempt's work stops; its ``finally`` blocks and
      ``async with`` exits still run. Under uvicorn, one poll per event loop reads
      uvicorn's own mark of a lost connection every 2.5 ms (up to 50 ms with
      thousands of requests in flight), and the handler gets uvicorn's ``receive``
      and ``send``; under other servers the middleware reads ``receive()`` for the
      handler once the request has run 2.5 to 5 ms. Either way a handler that
      finishes sooner costs no task, no timer and no cancel scope. Code that never
      awaits (CPU work, a blocking call) cannot be cancelled.
    - **Knows the attempts.** Reads the attempt header (``Hedge-Attempt: 1`` for a
      primary, 2 and up for backups) and hands the handler a
      :class:`~hedgeclient.server.HedgeAttempt` through
      :func:`~hedgeclient.server.current_attempt` and ``scope["state"]["hedge"]``
      (``request.state.hedge`` in Starlette and FastAPI; ``None`` for a request
      without the header); counts primaries, backups and abandoned requests
      (:meth:`statistics`, Prometheus).
    - **Admission and pushback** (``max_concurrency``): at most that many requests
      run at once in this process; the rest wait in a queue where backups wait behind
      primaries. A backup that finds ``pushback_queue`` requests waiting is answered
      503 with ``Retry-After`` at once (the client then sends no further backup).
    - **Tied requests** (``ties``): see :class:`~hedgeclient.server.Ties`.

    Wrap the outermost application (``app = HedgeMiddleware(app)``; for Starlette or
    FastAPI, ``app.add_middleware(HedgeMiddleware)`` or wrap the app object). Never a
    ``BaseHTTPMiddleware``: that one runs the handler in a task this middleware could
    not cancel. WebSocket and lifespan traffic passes through untouched, except that
    the lifespan shutdown closes the client that sends tie messages (else call
    :meth:`aclose`).

    Args:
        app: the ASGI 3 application.
        cancel: which handlers are cancelled when their client goes away:
            ``"hedged"`` (default): requests carrying the attempt header, which a
            hedging client sends; ``"all"``: every request; ``"none"``: none.
        attempt_header: the attempt header's name; default ``"Hedge-Attempt"``
            (the same as ``HedgedTransport(attempt_header=...)``).
        max_concurrency: requests that may run at once (>= 1), or ``None`` (default)
            for no admission queue.
        max_queue: requests that may wait (>= 0); one more is answered 503 with
            ``Retry-After``. Default ``None``: no bound. Needs ``max_concurrency``.
        pushback_queue: a backup (attempt >= 2, not a tied copy) that finds this many
            requests waiting (>= 0) is answered 503 with ``Retry-After`` at once;
            ``None``: backups always queue; default ``"auto"``: ``max_concurrency``
            (a backup would wait about one service time). Needs ``max_concurrency``.
        retry_after: the ``Retry-After`` of those 503s, whole seconds in [0, 3600];
            default 1.
        ties: the server side of tied requests (:class:`~hedgeclient.server.Ties`),
            or ``None`` (default): tie headers are ignored.
        metrics: export Prometheus metrics (see :mod:`hedgeclient.server`): ``True``
            (default) to prometheus-client's default registry, a
            ``CollectorRegistry`` to that one, ``False`` for none. They are read from
            the counters at scrape time: nothing runs on the request path for them.
        name: this server's name, the ``server`` label of its metrics; default
            ``"default"``.

    Raises:
        TypeError: an argument of the wrong type.
        ValueError: an argument out of range, or ``max_queue``/``pushback_queue``
            given without ``max_concurrency``.

    .. versionadded:: 0.1.0
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        cancel: CancelMode = "hedged",
        attempt_header: str = "Hedge-Attempt",
        max_concurrency: int | None = None,
        max_queue: int | None = None,
        pushback_queue: int | Literal["auto"] | None = "auto",
        retry_after: int = 1,
        ties: Ties | None = None,
        metrics: bool | CollectorRegistry = True,
        name: str = "default",
    ) -> None:
        if not callable(app):
            msg = f"`app` must be an ASGI application (a callable), got {app!r}"
            raise TypeError(msg)
        if cancel not in ("hedged", "all", "none"):
            msg = f"`cancel` must be 'hedged', 'all' or 'none', got {cancel!r}"
            raise ValueError(msg)
        header = check_attempt_header(attempt_header, optional=False)
        assert header is not None
        self.app = app
        self._cancel = cancel
        self._watch_unmarked = cancel == "all"
        self._watch_marked = cancel != "none"
        self._header = header.lower().encode("latin-1")
        self._counters = Counters()
        self._admission: Admission | None = None
        self._max_queue: int | None = None
        self._pushback: int | None = None
        if max_concurrency is not None:
            self._admission = Admission(check_int("max_concurrency", max_concurrency, 1))
            if max_queue is not None:
                self._max_queue = check_int("max_queue", max_queue, 0)
            if pushback_queue == "auto":
                self._pushback = self._admission.limit
            elif pushback_queue is not None:
                self._pushback = check_int("pushback_queue", pushback_queue, 0)
        elif max_queue is not None or pushback_queue not in ("auto", None):
            msg = "`max_queue` and `pushback_queue` need `max_concurrency` (an admission queue)"
            raise ValueError(msg)
        self._retry_after = str(check_int("retry_after", retry_after, 0, 3600)).encode()
        if ties is not None and not isinstance(ties, Ties):
            msg = f"`ties` must be a Ties or None, got {ties!r}"
            raise TypeError(msg)
        self._book = TieBook(ties, self._counters, self._admission) if ties else None
        self.name = check_name(name)
        if metrics is not False:
            from hedgeclient.server._metrics import bind  # lazy: only with metrics

            bind(self, metrics)

    @property
    def admits(self) -> bool:
        """Whether requests pass an admission queue (``max_concurrency`` was given)."""
        return self._admission is not None

    def statistics(self) -> ServerStatistics:
        """A snapshot of the counters (safe from any thread)."""
        counters = self._counters
        admission = self._admission
        if admission is not None:
            counters.running, counters.queued = admission.running, admission.waiting
        return counters.snapshot()

    async def aclose(self) -> None:
        """Close the HTTP client that sends tie messages (idempotent)."""
        if self._book is not None:
            await self._book.aclose()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan" and self._book is not None:
                await self.app(scope, receive, self._lifespan_send(send))
            else:
                await self.app(scope, receive, send)
            return
        book = self._book
        if book is not None and scope["path"] == book.path:
            await book.endpoint(scope, receive, send)
            return
        number: int | None = None
        tie: str | None = None
        twin: bytes | None = None
        header = self._header
        if book is None:  # one comparison per header
            for key, value in scope["headers"]:
                if key == header:
                    number = int(value) if value.isdigit() and 0 < len(value) < 4 else 0
                    number = number or None  # 1 and up; anything else: as if absent
        else:
            for key, value in scope["headers"]:
                if key == header:
                    number = int(value) if value.isdigit() and 0 < len(value) < 4 else 0
                    number = number or None
                elif key == _TIE:
                    tie = valid_tie(value)
                elif key == _TWIN:
                    twin = value
        counters = self._counters
        if number is None:
            counters.unmarked += 1
            watched = self._watch_unmarked
        else:
            if number == 1:
                counters.primaries += 1
            else:
                counters.backups += 1
            watched = self._watch_marked
        state = scope.get("state")
        if state is None:
            state = scope["state"] = {}
        if self._admission is None and tie is None:
            if number is None:
                info = None
            else:
                info = ATTEMPTS[number - 1] if number <= _SHARED else HedgeAttempt(number)
            state["hedge"] = info
            # A request task made while another request's attempt was current (uvicorn
            # starts a pipelined request from the previous one's send) inherits it:
            # current_attempt() is then set to None for an unmarked request.
            if watched and (task := poll(send)) is not None:  # uvicorn: its cycle polled
                token = None if info is None and _CURRENT.get() is None else _CURRENT.set(info)
                try:
                    await self.app(scope, receive, send)
                except BaseException as exc:
                    left = unpoll(task, exc)
                    if left != 2:  # not the cancellation the poll delivered
                        if left:
                            self._left(number, cancelled=False)
                        raise
                    self._left(number, cancelled=True)
                else:
                    left = unpoll(task, None)
                    if left:
                        self._left(number, cancelled=False)
                finally:
                    if token is not None:
                        _CURRENT.reset(token)
                return
            if watched:  # the watched path: one exchange, no task, no cancel scope
                watching = exchange(receive, send)
                token = None if info is None and _CURRENT.get() is None else _CURRENT.set(info)
                try:
                    handler_send = send if watching.cycle is not None else watching.send
                    await self.app(scope, watching.receive, handler_send)
                except BaseException as exc:
                    if not watching.caught(exc):
                        raise
                finally:
                    if token is not None:
                        _CURRENT.reset(token)
                    if watching.stop():
                        await watching.finish()
                if watching.gone:
                    self._abandoned(watching, number)
                return
            if info is None and _CURRENT.get() is None:  # the fast path
                await self.app(scope, receive, send)
                return
            token = _CURRENT.set(info)
            try:
                await self.app(scope, receive, send)
            finally:
                _CURRENT.reset(token)
            return
        await self._serve(scope, receive, send, number, tie, twin, watched)

    def _abandoned(self, watching: Exchange, number: int | None) -> None:
        self._left(number, cancelled=watching.cancelled)

    def _left(self, number: int | None, *, cancelled: bool) -> None:
        counters = self._counters
        counters.abandoned += 1
        counters.abandoned_backups += number is not None and number > 1
        counters.cancelled += cancelled

    async def _serve(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        number: int | None,
        tie: str | None,
        twin: bytes | None,
        watched: bool,
    ) -> None:
        counters = self._counters
        backup = number is not None and number > 1 and tie is None
        book = self._book
        copy = None
        if tie is not None and book is not None:
            copy = book.arrive(tie)
            if copy is None:  # its follower started elsewhere: dropped before any work
                await dropped(send, tie)
                return
        admission = self._admission
        if admission is not None and (admission.waiting or admission.running >= admission.limit):
            if backup and self._pushback is not None and admission.waiting >= self._pushback:
                counters.rejected_pushback += 1
                await self._refuse(send, copy)
                return
            if self._max_queue is not None and admission.waiting >= self._max_queue:
                counters.rejected_full += 1
                await self._refuse(send, copy)
                return
        loop = current_loop()
        args = (scope, number, copy, twin)
        if not watched:
            try:
                await self._admitted(loop, receive, send, *args)
            finally:
                if copy is not None and book is not None:
                    book.end(copy)
            return
        watching = exchange(receive, send)
        try:
            handler_send = send if watching.cycle is not None else watching.send
            await self._admitted(loop, watching.receive, handler_send, *args)
        except BaseException as exc:
            if not watching.caught(exc):
                raise
        finally:
            if copy is not None and book is not None:
                book.end(copy)
            if watching.stop():
                await watching.finish()
        if watching.gone:
            self._abandoned(watching, number)

    async def _admitted(
        self,
        loop: Loop,
        receive: Receive,
        send: Send,
        scope: Scope,
        number: int | None,
        copy: TieCopy | None,
        twin: bytes | None,
    ) -> None:
        """Wait in the admission queue (if any), start the tied copy (if any), run."""
        admission = self._admission
        book = self._book
        ticket = None
        try:
            queued = 0.0
            if admission is not None:
                backup = number is not None and number > 1 and copy is None
                ticket = admission.arrive(backup=backup)
                if ticket.state == WAITING:
                    if copy is not None:
                        copy.ticket = ticket
                    start = loop.now()
                    admitted = await admission.wait_admitted(ticket)
                    queued = loop.now() - start
                    self._counters.queue_seconds += queued
                    if not admitted and copy is not None:  # its follower started elsewhere
                        await dropped(send, copy.tie)
                        return
            if book is not None and copy is not None:
                if number is not None and number > 1:  # the follower asks its leader's replica
                    if not await book.start_follower(copy, twin):
                        await dropped(send, copy.tie)
                        return
                else:  # the leader starts at once
                    book.start_leader(copy)
            if copy is None and not queued:
                info = None if number is None else attempt_of(number)
            else:
                tie = copy.tie if copy is not None else None
                info = None if number is None else HedgeAttempt(number, tie, queued)
            scope["state"]["hedge"] = info
            token = _CURRENT.set(info)
            try:
                await self.app(scope, receive, send)
            finally:
                _CURRENT.reset(token)
        finally:
            if ticket is not None:
                assert admission is not None
                admission.release(ticket)

    async def _refuse(self, send: Send, copy: TieCopy | None) -> None:
        if copy is not None and self._book is not None:
            self._book.end(copy)
        await queue_too_long(send, self._retry_after)

    def _lifespan_send(self, send: Send) -> Send:
        async def lifespan_send(message: Any) -> None:
            if message["type"] == "lifespan.shutdown.complete":
                await self.aclose()
            await send(message)

        return lifespan_send

    def __repr__(self) -> str:
        limit = self._admission.limit if self._admission is not None else None
        return (
            f"HedgeMiddleware(name={self.name!r}, cancel={self._cancel!r}, "
            f"max_concurrency={limit}, ties={self._book is not None})"
        )
