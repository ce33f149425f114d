"""``HedgeMiddleware``: the server's half of hedging, as pure ASGI middleware.

Here are the short paths every request takes: the attempt header read, the counters,
the handler run as it is, polled (uvicorn: ``_poll``, inlined) or watched through an
exchange (``_backend``). The admission queue and tied copies go through ``_gate``.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

from asyncio.events import _get_running_loop
from collections.abc import Collection
from typing import TYPE_CHECKING, Any, Literal, final

from hedgeclient._checks import check_name
from hedgeclient._policy.tied import TIE_HEADER, TWIN_HEADER
from hedgeclient.server._answers import ATTEMPTS, BY_VALUE, parse_attempt
from hedgeclient.server._backend import exchange
from hedgeclient.server._config import Ties, check_arguments
from hedgeclient.server._exchange import Receive, Scope, Send
from hedgeclient.server._gate import Gate
from hedgeclient.server._poll import LAST as LAST_POLLER
from hedgeclient.server._poll import Poller, current_task, poller_of
from hedgeclient.server._stats import _CURRENT, Counters, HedgeAttempt, ServerStatistics
from hedgeclient.server._ties import TieBook, valid_tie
from hedgeclient.server._uvicorn import CYCLES, UVICORN, disconnected, learn_cycle

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

__all__ = ["CancelMode", "HedgeMiddleware"]

CancelMode = Literal["hedged", "all", "none"]
"""Which handlers are cancelled when their client goes away: ``hedged`` (requests with
the attempt header), ``all``, or ``none``."""

ASGIApp = Any  # an ASGI 3 application: async (scope, receive, send) -> None
_TIE = TIE_HEADER.encode()
_TWIN = TWIN_HEADER.encode()
_PRIMARY = ATTEMPTS[0]
_current = _CURRENT.get


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
            hedging client sends only on a request it may send twice (never on a
            write sent once); ``"all"``: every request; ``"none"``: none.
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
        unqueued_paths: paths whose requests skip the admission queue, each with the
            paths under it (``/metrics`` covers ``/metrics`` and ``/metrics/app``, not
            ``/metricsx``), such as ``("/metrics", "/healthz")``: a scrape or a health
            check answered 503, or left waiting, when the replica is busy would make it
            look dead. Not ``/``. Default none. Needs ``max_concurrency``.
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
        ValueError: an argument out of range, or ``max_queue``/``pushback_queue``/
            ``unqueued_paths`` given without ``max_concurrency``.

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
        unqueued_paths: Collection[str] = (),
        ties: Ties | None = None,
        metrics: bool | CollectorRegistry = True,
        name: str = "default",
    ) -> None:
        args = check_arguments(
            app,
            cancel,
            attempt_header,
            max_concurrency,
            max_queue,
            pushback_queue,
            retry_after,
            unqueued_paths,
        )
        if ties is not None and not isinstance(ties, Ties):
            msg = f"`ties` must be a Ties or None, got {ties!r}"
            raise TypeError(msg)
        self.app = app
        self.name = check_name(name)
        self._cancel = cancel
        self._watch_unmarked = cancel == "all"
        self._watch_marked = cancel != "none"
        self._header = args.header
        self._counters = Counters()
        self._admission = args.admission
        self._queue = args.admission is not None
        self._unqueued = args.unqueued
        self._book = TieBook(ties, self._counters, args.admission) if ties else None
        self._gate: Gate | None = None
        if self._queue or self._book is not None:
            self._gate = Gate(
                self._counters,
                args.admission,
                self._book,
                args.max_queue,
                args.pushback,
                args.retry_after,
            )
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
        """Serve one ASGI request (``http``; ``lifespan`` and ``websocket`` pass)."""
        if scope["type"] != "http":
            if scope["type"] == "lifespan" and self._book is not None:
                await self.app(scope, receive, self._lifespan_send(send))
            else:
                await self.app(scope, receive, send)
            return
        info: HedgeAttempt | None = None  # the attempt header's
        marks = 0  # attempt headers seen: a repeated one names no attempt (RFC 9110 5.3)
        tie: str | None = None
        twin: bytes | None = None
        header = self._header
        book = self._book
        if book is None:  # one comparison per header
            for key, value in scope["headers"]:
                if key == header:  # b"1" to b"8": one look-up
                    info = BY_VALUE.get(value) or parse_attempt(value)
                    marks += 1
        elif scope["path"] == book.path:
            await book.endpoint(scope, receive, send)
            return
        else:
            for key, value in scope["headers"]:
                if key == header:
                    info = BY_VALUE.get(value) or parse_attempt(value)
                    marks += 1
                elif key == _TIE:
                    tie = valid_tie(value)
                elif key == _TWIN:
                    twin = value
        if marks > 1:
            info = None
        counters = self._counters
        if info is None:
            counters.unmarked += 1
            watched = self._watch_unmarked
        else:
            if info is _PRIMARY:
                counters.primaries += 1
            else:
                counters.backups += 1
            watched = self._watch_marked
        try:
            scope["state"]["hedge"] = info
        except (KeyError, TypeError):  # no state (or None): this request's own
            scope["state"] = {"hedge": info}
        if tie is not None or (
            self._queue and not (self._unqueued[1] and _unqueued(scope["path"], self._unqueued))
        ):  # the admission queue, a tied copy
            gate = self._gate
            assert gate is not None
            number = None if info is None else info.number
            await gate.serve(self.app, scope, receive, send, number, tie, twin, watched)
            return
        # The attempt goes into the context only when it is not there already: a
        # request task made while another request's attempt was current (uvicorn starts
        # a pipelined request from the previous one's send) inherits that attempt.
        if watched:
            owner: Any = getattr(send, "__self__", None)
            if type(owner) in UVICORN or (type(owner) not in CYCLES and learn_cycle(owner)):
                # uvicorn: the request's task polled (_poll), the handler given
                # uvicorn's own receive and send; a dict insert and pop per request
                loop = _get_running_loop()
                last = LAST_POLLER
                poller: Poller = last[1] if last[0] is loop else poller_of(loop)
                task = current_task(loop)
                polled = poller.polled
                polled[task] = owner
                if not poller.armed:
                    poller.arm()
                token = None if _current() is info else _CURRENT.set(info)
                try:
                    await self.app(scope, receive, send)
                except BaseException as exc:
                    if polled.pop(task, None) is not None and not disconnected(owner):
                        raise
                    left = poller.left(task, owner, exc)
                    if left != 2:  # not the cancellation the poll delivered
                        if left:
                            self._left(info, cancelled=False)
                        raise
                    self._left(info, cancelled=True)
                else:
                    rare = polled.pop(task, None) is None or disconnected(owner)
                    if rare and poller.left(task, owner, None):
                        self._left(info, cancelled=False)
                finally:
                    if token is not None:
                        _CURRENT.reset(token)
                return
            # other servers: one exchange, read once the watch list reaches it
            watching = exchange(receive, send)
            token = None if _current() is info else _CURRENT.set(info)
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
                self._left(info, cancelled=watching.cancelled)
            return
        if _current() is info:  # the fast path: unmarked (or an inherited attempt)
            await self.app(scope, receive, send)
            return
        token = _CURRENT.set(info)
        try:
            await self.app(scope, receive, send)
        finally:
            _CURRENT.reset(token)

    def _left(self, info: HedgeAttempt | None, *, cancelled: bool) -> None:
        counters = self._counters
        counters.abandoned += 1
        counters.abandoned_backups += info is not None and info.number > 1
        counters.cancelled += cancelled

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


def _unqueued(path: str, paths: tuple[frozenset[str], tuple[str, ...]]) -> bool:
    """Whether ``path`` is one of ``unqueued_paths`` or under one (whole segments)."""
    exact, prefixes = paths
    return path in exact or path.startswith(prefixes)
