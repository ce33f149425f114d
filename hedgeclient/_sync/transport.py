"""``SyncHedgedTransport``: hedged requests for a sync ``httpx.Client``.

The sync transport is the async engine run on one private event-loop thread
(``loop``): each request is handed to a :class:`~hedgeclient.HedgedTransport` (an
``httpx.AsyncHTTPTransport`` inside) through anyio's blocking portal while the caller's
thread waits. So there is one set of policy objects (delay, budget, selector, health,
discovery, reports), touched by one thread only, and a losing attempt is cancelled by
the engine as on the async path: its connection is closed and its replica sees it
leave. Attempts on a pool of threads could not stop a thread blocked in a read: the
loser would hold its connection and its thread until its replica answered.
``docs/how-it-works.md`` ("The sync client") gives the measured costs.

Prior art: httpx's own sync/async pair (``HTTPTransport``, ``AsyncHTTPTransport``);
anyio's ``start_blocking_portal``.

Strictly private but for :class:`SyncHedgedTransport`.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, NoReturn, final

import httpx

from hedgeclient._checks import shown
from hedgeclient._discovery import DiscoveryStatistics
from hedgeclient._events import SampleLeftOut
from hedgeclient._policy.budget import HedgeBudget
from hedgeclient._policy.delay import DelayPolicy
from hedgeclient._policy.overrides import HedgePolicy
from hedgeclient._replicas.selector import ReplicaSelector
from hedgeclient._sync.bodies import PortalStream, read_small, with_async_body
from hedgeclient._sync.loop import Backend, LoopThread
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

# Binds budgets to loop threads one at a time: two SyncHedgedTransports given the same
# budget by requests in two threads at once must not both take it (HedgeBudget.bind_home).
_BINDING: Final = threading.Lock()


@final
class SyncHedgedTransport(httpx.BaseTransport):
    """A sync httpx transport that sends hedged requests: ``HedgedTransport`` for
    ``httpx.Client``.

    It takes the keyword arguments of :class:`~hedgeclient.HedgedTransport` and behaves
    the same way (replicas, hedge delay, hedge budget, selector, health, discovery,
    routes, metrics, OpenTelemetry, hooks, idempotency rules, and a
    :class:`~hedgeclient.HedgeInfo` in ``response.extensions["hedge"]``): it runs that
    transport on a private event-loop thread of its own (one per
    ``SyncHedgedTransport``, named ``hedgeclient-loop-<name>``), started by the first
    request: share one client between threads rather than make one each. A losing
    attempt is cancelled there and its connection closed, so its replica sees it leave
    and no thread or pool slot stays on it. One client may be shared by many threads.

    The caller's ``httpx.Timeout`` applies as with plain ``httpx.Client`` and raises the
    same exception types (a timeout's message ``"timed out"``, as a socket's). Under
    ``httpx.AsyncClient`` it raises ``TypeError`` naming ``HedgedTransport``. A
    ``KeyboardInterrupt`` (or any exception a signal handler raises) while a request
    waits cancels that request on the loop and propagates. A client made before a fork
    (gunicorn's ``--preload``, Celery's prefork pool) starts its own loop thread and
    connection pool in the child; see ``transport`` for the one case a child refuses.

    Example usage::

        transport = SyncHedgedTransport(
            replicas={"http://catalog": ["http://10.0.0.7:8080", "http://10.0.0.8:8080"]},
        )
        with httpx.Client(transport=transport, base_url="http://catalog") as client:
            response = client.get("/items/42")
            response.extensions["hedge"]  # HedgeInfo(attempt=1, replica=..., ...)

    Args:
        transport: the inner *async* transport every attempt goes through, for its
            connection settings (``httpx.AsyncHTTPTransport(http2=True, limits=...)``);
            default ``httpx.AsyncHTTPTransport()``. Closed by :meth:`close`. A forked
            child of a process that sent requests through the transport rebuilds the
            default one (its pool holds the parent's connections), but cannot rebuild
            one given here: its requests raise ``RuntimeError`` saying so.
        backend: the event loop of the private thread, ``"asyncio"`` (default) or
            ``"trio"``.
        **options: the keyword arguments of :class:`~hedgeclient.HedgedTransport`
            (``replicas``, ``extra_load``, ``delay``, ``budget``, ...), forwarded as
            they are.

    Raises:
        TypeError: ``transport`` is a sync transport (``httpx.HTTPTransport``: pass an
            ``httpx.AsyncHTTPTransport`` with the same settings), or an option has the
            wrong type (as ``HedgedTransport`` raises).
        ValueError: ``backend`` is neither ``"asyncio"`` nor ``"trio"``, an option is
            out of range (as ``HedgedTransport`` raises), or a ``HedgeBudget`` given
            (``budget``, a route's) already serves another open ``SyncHedgedTransport``
            (a budget lives on one event loop; a request's own, in
            ``extensions["hedge"]``, is bound to this one's loop as it is sent).

    .. versionadded:: 0.2.0
    """

    def __init__(
        self,
        transport: httpx.AsyncBaseTransport | None = None,
        *,
        backend: Backend = "asyncio",
        **options: Unpack[HedgeOptions],
    ) -> None:
        if isinstance(transport, httpx.BaseTransport) and not isinstance(
            transport, httpx.AsyncBaseTransport
        ):  # (httpx.MockTransport is both)
            msg = (
                "`transport` must be an httpx.AsyncBaseTransport (the attempts run on an "
                "event loop): pass an httpx.AsyncHTTPTransport with the same settings, "
                f"got {shown(transport)}"
            )
            raise TypeError(msg)
        if backend not in ("asyncio", "trio"):
            msg = f"`backend` must be 'asyncio' or 'trio', got {shown(backend)}"
            raise ValueError(msg)
        self._given_inner = transport is not None
        self._options = options
        try:
            self._engine = HedgedTransport(transport, **options)
        except TypeError as exc:  # an unknown option: named as this class's, not the engine's
            if "HedgedTransport.__init__()" not in str(exc):
                raise
            msg = str(exc).replace("HedgedTransport.__init__()", "SyncHedgedTransport()")
            raise TypeError(msg) from None
        self._loop = LoopThread(backend, self._engine.name, self._after_fork)
        # A retry library draws on the budgets from the callers' threads: on the loop's.
        self._budgets = [(self._engine.budget, "budget")]
        for i, route in enumerate(options.get("routes", ())):
            if route.budget is not None:
                self._budgets.append((route.budget, f"routes[{i}].budget"))
        with _BINDING:
            for budget, given in self._budgets:
                budget.bind_home(self._loop, given)  # ValueError: another's

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
        (``HedgedTransport.refresh_replicas`` on the loop thread).

        Raises:
            DiscoveryFailedError: one or more services got no replica set.
            RuntimeError: the transport is closed.
        """
        self._loop.call(self._engine.refresh_replicas)

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
            self._bind_own(own)
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

    def _bind_own(self, own: object) -> None:
        """Bind a request's own budget (``extensions["hedge"]``'s) to the loop thread, as
        the transport's and its routes' are: its backups draw on the loop thread, and a
        retry library's ``try_retry`` from a caller's thread then runs there too.

        Bound, not refused: a user who gives a budget per request expects it to work as
        one given to the transport (shared with retries, ``docs/budget.md``). It stays
        bound after the transport closes (not listed: a budget made per request would
        pile up), which frees it for another (``bind_home`` skips a closed loop).

        Raises:
            ValueError: another open ``SyncHedgedTransport`` holds the budget.
        """
        if isinstance(own, HedgePolicy):
            budget, given = own.budget, "extensions['hedge'].budget"
        elif isinstance(own, Mapping):
            budget, given = own.get("budget"), "extensions['hedge']['budget']"
        else:  # the engine refuses it, naming it
            return
        if isinstance(budget, HedgeBudget):
            with _BINDING:
                budget.bind_home(self._loop, given)

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
        old = self._engine
        options: dict[str, Any] = dict(self._options)
        options.pop("extra_load", None)  # it set the delay and the budget given below
        options.update(delay=old.delay_policy, budget=old.budget, selector=old.selector)
        self._engine = HedgedTransport(**options)
        return None

    # -- lifecycle ----------------------------------------------------------------------

    def close(self) -> None:
        """Close the transport: stop the requests in flight (they raise
        :class:`~hedgeclient.TransportClosedError`), close the inner transport, then
        stop and join the loop thread, so no thread is left. Idempotent, from any
        thread but the loop thread; a request sent after raises ``RuntimeError``. Its
        budgets may then serve another transport.

        Raises:
            RuntimeError: called on the transport's own loop thread (from a hook it
                runs); nothing is closed then.
        """
        self._loop.stop(self._engine.aclose)
        for budget, _ in self._budgets:
            budget.unbind_home(self._loop)

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
