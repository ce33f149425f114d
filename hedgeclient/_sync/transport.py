"""``SyncHedgedTransport``: hedged requests for a sync ``httpx.Client``.

The sync transport runs the async engine, a :class:`~hedgeclient.HedgedTransport` (one
request path, one race, one set of policy objects), in one of two ways:

- ``backend="threads"`` (the default): on the callers' own threads, with no event loop
  (``threads``, ``_timer._threads``): the primary attempt on the caller's thread through
  a sync ``httpx.HTTPTransport``, a backup on a worker thread, a loser stopped by
  shutting its socket down (its replica sees it leave), the engine's state guarded by
  one lock that a thread lets go of while it blocks;
- ``backend="asyncio"`` or ``"trio"``: on one private event-loop thread (``loop``), each
  request handed to it while the caller's thread waits, its attempts on an async
  transport. Discovered replicas (DNS) need it: their resolver runs on the loop.

``docs/how-it-works.md`` ("The sync client") gives the measured costs of both.

Prior art: httpx's own sync/async pair (``HTTPTransport``, ``AsyncHTTPTransport``);
anyio's ``start_blocking_portal``.

Strictly private but for :class:`SyncHedgedTransport`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Literal, NoReturn, final

import httpx

from hedgeclient._discovery import DiscoveryStatistics
from hedgeclient._events import SampleLeftOut
from hedgeclient._policy.budget import HedgeBudget
from hedgeclient._policy.delay import DelayPolicy
from hedgeclient._replicas.selector import ReplicaSelector
from hedgeclient._sync.bodies import PortalStream, read_small, with_async_body
from hedgeclient._sync.loop import LoopThread
from hedgeclient._sync.options import BINDING, Backend, backend_of, bind_own
from hedgeclient._sync.threads import ThreadEngine
from hedgeclient._transport import HedgedTransport

if TYPE_CHECKING:
    from typing import Unpack

    from hedgeclient._sync.options import HedgeOptions


__all__ = ["SyncHedgedTransport"]

# What httpx.AsyncClient(transport=SyncHedgedTransport()) raises at `async with client:`,
# its first request and aclose(), as HedgedTransport's _NOT_SYNC under httpx.Client.
_NOT_ASYNC: Final = (
    "SyncHedgedTransport is a sync transport (an httpx.BaseTransport): use it with "
    "httpx.Client; with httpx.AsyncClient use HedgedTransport, which takes the same "
    "arguments"
)


_CLOSED: Final = "the SyncHedgedTransport is closed: make a new one"  # as the loop's


@final
class SyncHedgedTransport(httpx.BaseTransport):
    """A sync httpx transport that sends hedged requests: ``HedgedTransport`` for
    ``httpx.Client``.

    It takes the keyword arguments of :class:`~hedgeclient.HedgedTransport` and behaves
    the same way (replicas, hedge delay, hedge budget, selector, health, discovery,
    routes, metrics, OpenTelemetry, hooks, idempotency rules, and a
    :class:`~hedgeclient.HedgeInfo` in ``response.extensions["hedge"]``): it runs that
    transport's engine. One client may be shared by many threads (share one rather
    than make one per thread).

    By default (``backend="threads"``) the engine runs on the callers' own threads: a
    request's primary attempt on the caller's thread through a sync transport, a backup
    on a worker thread (``hedgeclient-backup-<name>``, at most 16, started as backups
    need them), its hedge deadline kept by one timer thread (``hedgeclient-timer-<name>``).
    A losing attempt is stopped by shutting its socket down: its replica sees it leave,
    its pool slot is freed and its thread goes on. Discovered replicas
    (``DnsReplicas``, ...) need an event loop: with them the default is ``"asyncio"``,
    one private event-loop thread (``hedgeclient-loop-<name>``, started by the first
    request) that every request is handed to, its attempts on an async transport.

    The caller's ``httpx.Timeout`` applies as with plain ``httpx.Client`` and raises the
    same exception types. Under ``httpx.AsyncClient`` it raises ``TypeError`` naming
    ``HedgedTransport``. A ``KeyboardInterrupt`` (or any exception a signal handler
    raises) while a request waits stops that request's attempts and propagates. A client
    made before a fork (gunicorn's ``--preload``, Celery's prefork pool) rebuilds its
    threads and connection pool in the child; see ``transport`` for the one case a child
    refuses.

    Example usage::

        transport = SyncHedgedTransport(
            replicas={"http://catalog": ["http://10.0.0.7:8080", "http://10.0.0.8:8080"]},
        )
        with httpx.Client(transport=transport, base_url="http://catalog") as client:
            response = client.get("/items/42")
            response.extensions["hedge"]  # HedgeInfo(attempt=1, replica=..., ...)

    Args:
        transport: the inner transport every attempt goes through, for its connection
            settings: a sync one with ``backend="threads"`` (``httpx.HTTPTransport(
            limits=...)``, HTTP/1.1; default ``httpx.HTTPTransport()``), an async one on a loop
            (``httpx.AsyncHTTPTransport(http2=True)``; default
            ``httpx.AsyncHTTPTransport()``). Closed by :meth:`close`. A forked child of
            a process that sent requests through the transport rebuilds the default one
            (its pool holds the parent's connections), but cannot rebuild one given
            here: its requests raise ``RuntimeError`` saying so.
        backend: where the engine runs: ``"threads"`` (the callers' threads), or an
            event loop on a private thread, ``"asyncio"`` or ``"trio"``. Default
            ``None``: ``"asyncio"`` when ``transport`` is an async transport only or a
            service's replicas are discovered, else ``"threads"``.
        **options: the keyword arguments of :class:`~hedgeclient.HedgedTransport`
            (``replicas``, ``extra_load``, ``delay``, ``budget``, ...), forwarded as
            they are.

    Raises:
        TypeError: ``transport`` is no httpx transport, async with ``backend="threads"``
            or sync with an event loop, or an option has the wrong type (as
            ``HedgedTransport`` raises).
        ValueError: ``backend`` is not one of the three; on threads, discovered
            replicas or a sync ``transport`` that speaks HTTP/2 (httpx's sync HTTP/2 is
            not thread-safe: an async one serves it, ``backend="asyncio"``); an option
            is out of range (as ``HedgedTransport`` raises), or a
            ``HedgeBudget`` given (``budget``, a route's) already serves another open
            ``SyncHedgedTransport`` (a budget lives with one engine; a request's own,
            in ``extensions["hedge"]``, is bound to this one's as it is sent).

    .. versionadded:: 0.2.0
    """

    def __init__(
        self,
        transport: httpx.BaseTransport | httpx.AsyncBaseTransport | None = None,
        *,
        backend: Backend | None = None,
        **options: Unpack[HedgeOptions],
    ) -> None:
        self._backend = backend_of(transport, backend, options)
        self._given_inner = transport is not None
        self._options = options
        self._pid = os.getpid()
        self._threads: ThreadEngine | None = None
        self._loop: LoopThread | None = None
        try:
            if self._backend == "threads":
                self._threads = self._thread_engine(transport, options)
                self._engine: HedgedTransport = self._threads.engine
            else:
                self._engine = HedgedTransport(transport, **options)  # type: ignore[arg-type]
        except TypeError as exc:  # an unknown option: named as this class's, not the engine's
            if "HedgedTransport.__init__()" not in str(exc):
                raise
            msg = str(exc).replace("HedgedTransport.__init__()", "SyncHedgedTransport()")
            raise TypeError(msg) from None
        if self._threads is None:
            loop: Literal["asyncio", "trio"] = "trio" if self._backend == "trio" else "asyncio"
            self._loop = LoopThread(loop, self._engine.name, self._after_fork)
        self._home: ThreadEngine | LoopThread = self._threads or self._loop  # type: ignore[assignment]
        # A retry library draws on the budgets from the callers' threads: the engine's.
        self._budgets = [(self._engine.budget, "budget")]
        for i, route in enumerate(options.get("routes", ())):
            if route.budget is not None:
                self._budgets.append((route.budget, f"routes[{i}].budget"))
        with BINDING:
            for budget, given in self._budgets:
                budget.bind_home(self._home, given)  # ValueError: another's

    @staticmethod
    def _thread_engine(transport: object, options: Mapping[str, Any]) -> ThreadEngine:
        sync = transport if isinstance(transport, httpx.BaseTransport) else httpx.HTTPTransport()
        name = options.get("name", "default")
        return ThreadEngine(lambda inner: HedgedTransport(inner, **options), sync, str(name))

    # -- introspection ----------------------------------------------------------------

    @property
    def engine(self) -> HedgedTransport:
        """The async :class:`~hedgeclient.HedgedTransport` that sends the attempts (a new
        one in a forked child)."""
        return self._engine

    @property
    def name(self) -> str:
        """This client's name, the ``client`` label of its metrics."""
        return self._engine.name

    @property
    def delay_policy(self) -> DelayPolicy:
        """The hedge-delay policy in force."""
        return self._engine.delay_policy

    @property
    def budget(self) -> HedgeBudget:
        """The hedge budget backups are drawn from."""
        return self._engine.budget

    @property
    def selector(self) -> ReplicaSelector:
        """The replica selector in force."""
        return self._engine.selector

    @property
    def event_loop_lag(self) -> float:
        """How late, in seconds (≥ 0), this transport's own event-loop thread typically
        serves its hedge deadlines (:attr:`HedgedTransport.event_loop_lag
        <hedgeclient.HedgedTransport.event_loop_lag>`): in a sync client, what the
        process's other threads (the GIL) leave it; any thread may read it."""
        return self._engine.event_loop_lag

    @property
    def samples_left_out(self) -> dict[SampleLeftOut, int]:
        """Primaries whose latency the delay policy was not given, by reason
        (:attr:`HedgedTransport.samples_left_out
        <hedgeclient.HedgedTransport.samples_left_out>`); a copy."""
        return self._engine.samples_left_out

    def replica_statistics(self) -> dict[str, DiscoveryStatistics]:
        """Each configured service's source and replicas now, by logical origin."""
        return self._engine.replica_statistics()

    def refresh_replicas(self) -> None:
        """Resolve every discovered service now, blocking the calling thread until done
        (``HedgedTransport.refresh_replicas`` on the loop thread; nothing to resolve on
        threads, which serve listed replicas only).

        Raises:
            DiscoveryFailedError: one or more services got no replica set.
            RuntimeError: the transport is closed.
        """
        if self._loop is not None:
            self._loop.call(self._engine.refresh_replicas)
        elif self._threads is not None and self._threads.closed:
            raise RuntimeError(_CLOSED)

    # -- the request path -------------------------------------------------------------

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request``, hedged when it is eligible; return the winner's response.

        The body is the winner's; ``response.extensions["hedge"]`` holds a
        :class:`~hedgeclient.HedgeInfo` (not for an origin passed through).

        Raises:
            RuntimeError: the transport is closed, or a forked child cannot send (see
                ``transport``).
            TransportClosedError: the transport was closed while this request was in
                flight.
            ValueError: a negative timeout (as ``httpx.Client`` raises), or the request's
                own ``HedgeBudget`` (``extensions["hedge"]``)
                serves another open ``SyncHedgedTransport``; nothing was sent.
            httpx.HTTPError: when every attempt failed, the last attempt's own exception
                (``httpx.ConnectError``, ``httpx.ReadTimeout``, ...), as
                ``HedgedTransport`` raises it.
        """
        timeout = request.extensions.get("timeout")
        if timeout and any(v is not None and v < 0 for v in timeout.values()):
            msg = f"Timeout value out of range: {timeout!r} (httpx.Client refuses it too)"
            raise ValueError(msg)  # the async engine would time out at once instead
        own = request.extensions.get("hedge")
        if own is not None and type(own) is not bool:  # a request's own budget, maybe
            bind_own(own, self._home)
        threads = self._threads
        if threads is not None:  # the engine on this thread (``threads``)
            if threads.closed:
                raise RuntimeError(_CLOSED)
            if self._pid != os.getpid():
                threads = self._forked()
            return threads.send(request)
        assert self._loop is not None
        if not isinstance(request.stream, httpx.AsyncByteStream):  # a sync iterator body
            request = with_async_body(request)
        try:
            response, body = self._loop.call(self._send, request)
        except httpx.TimeoutException as error:
            # On the loop, httpcore's timeouts are anyio's TimeoutError, without a
            # message; httpx.Client's (a socket's) say "timed out": say it too.
            if not str(error):
                error.args = ("timed out",)
            raise
        stream: httpx.SyncByteStream
        if body is None:
            stream = PortalStream(self._loop, response.stream)
        else:
            stream = httpx.ByteStream(body)
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=stream,
            extensions=response.extensions,
        )

    async def _send(self, request: httpx.Request) -> tuple[httpx.Response, bytes | None]:
        """On the loop: the engine's response, and its whole body when it is small."""
        response = await self._engine.handle_async_request(request)
        return response, await read_small(response)

    def _after_fork(self, used: bool) -> str | None:
        """In a forked child, before its first request: if the parent sent requests,
        its connection pool holds sockets the parent still uses, so the engine is
        rebuilt with the same options and the parent's policy objects (the child's
        copies, with what they had learnt); or why it cannot be."""
        if not used:
            return None
        if self._given_inner:
            return (
                "this SyncHedgedTransport sent requests before the process forked, and "
                "its inner transport (given as `transport=`) holds the parent's "
                "connections, which a child must not share: make the client in the "
                "child, or let SyncHedgedTransport build its inner transport"
            )
        self._engine = HedgedTransport(**self._options_after_fork())
        return None

    def _options_after_fork(self) -> dict[str, Any]:
        """The options, with the parent's policy objects (what they had learnt)."""
        old = self._engine
        options: dict[str, Any] = dict(self._options)
        options.pop("extra_load", None)  # it set the delay and the budget given below
        options.update(delay=old.delay_policy, budget=old.budget, selector=old.selector)
        return options

    def _forked(self) -> ThreadEngine:
        """In a forked child, before its first request on threads: a new engine (the
        parent's lock, threads and connections are not the child's), with the
        parent's policy objects; or ``RuntimeError`` (see ``transport``)."""
        with BINDING:  # one thread of the child rebuilds it
            if self._pid != os.getpid():
                old = self._threads
                assert old is not None
                if old.used and self._given_inner:
                    raise RuntimeError(self._after_fork(used=True))
                options = self._options_after_fork()
                self._threads = self._thread_engine(None if old.used else old.inner.sync, options)
                self._engine = self._threads.engine
                self._home = self._threads
                for budget, given in self._budgets:
                    budget.unbind_home(old)
                    budget.bind_home(self._threads, given)
                self._pid = os.getpid()
        assert self._threads is not None
        return self._threads

    # -- lifecycle ----------------------------------------------------------------------

    def close(self) -> None:
        """Close the transport: stop the requests in flight (they raise
        :class:`~hedgeclient.TransportClosedError`), close the inner transport, then
        stop and join its threads (the loop thread; or the timer and backup threads),
        so no thread is left. Idempotent, from any
        thread but the loop thread; a request sent after raises ``RuntimeError``. Its
        budgets may then serve another transport.

        Raises:
            RuntimeError: called on the transport's own loop thread, or by code its
                engine runs (a hook); nothing is closed then.
        """
        if self._threads is not None and self._pid != os.getpid():
            self._threads.abandon()  # a forked child's copy of the parent's: not its own
        elif self._threads is not None:
            if not self._threads.elsewhere():
                msg = "SyncHedgedTransport.close() was called by code its engine runs (a hook)"
                raise RuntimeError(msg)
            self._threads.close()
        else:
            assert self._loop is not None
            self._loop.stop(self._engine.aclose)
        for budget, _ in self._budgets:
            budget.unbind_home(self._home)

    def __enter__(self) -> SyncHedgedTransport:
        """Return the transport (``httpx.Client`` enters it on its own entry)."""
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: TracebackType | None = None,
    ) -> None:
        """Close the transport (:meth:`close`)."""
        self.close()

    async def handle_async_request(self, request: httpx.Request) -> NoReturn:
        """Refuse a request from an ``httpx.AsyncClient``: raise ``TypeError``."""
        raise TypeError(_NOT_ASYNC)

    async def __aenter__(self) -> NoReturn:
        """Refuse ``async with httpx.AsyncClient(transport=...)``: raise ``TypeError``."""
        raise TypeError(_NOT_ASYNC)

    async def aclose(self) -> NoReturn:
        """Refuse ``httpx.AsyncClient.aclose()`` (:meth:`close` closes this transport):
        raise ``TypeError``."""
        raise TypeError(_NOT_ASYNC)

    def __repr__(self) -> str:
        return f"Sync{self._engine!r}"
