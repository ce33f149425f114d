"""``HedgedTransport``: an httpx transport that hedges idempotent requests.

It wraps another ``httpx.AsyncBaseTransport`` (the middleware shape the httpx docs
recommend). This module is its construction and lifecycle: the arguments are checked
(``_options``, ``_components``) and wired into the replica side (``_fleet``), the
httpcore repairs (``_compat``), what each request reports (``_report``) and the
request path (``_sending``: routing, eligibility, the race of ``_race.race``), whose
attempts ``_wire.send`` builds and sends.

Prior art: Dean & Barroso, "The Tail at Scale", CACM 56(2), 2013 (hedged requests
after the 95th-percentile latency); tower's ``hedge`` middleware; Finagle's backup
requests.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Literal, NoReturn, final

import anyio
import httpx

from hedgeclient._compat import repairs_for
from hedgeclient._components import (
    check_budget,
    check_delay_policy,
    check_selector,
    check_tied,
    check_transport,
)
from hedgeclient._discovery import DiscoveryStatistics
from hedgeclient._events import HedgeHook, SampleLeftOut
from hedgeclient._fleet import DiscoveryFailedError, Fleet
from hedgeclient._options import (
    check_attempt_header,
    check_bool,
    check_hooks,
    check_name,
    check_other_origins,
    check_route_key,
    max_hedges_for,
    parse_methods,
    parse_statuses,
)
from hedgeclient._policy.budget import HedgeBudget
from hedgeclient._policy.delay import DelayPolicy
from hedgeclient._policy.eligibility import DEFAULT_METHODS, DEFAULT_NON_FATAL_STATUSES
from hedgeclient._policy.routes import Route, check_routes
from hedgeclient._policy.tied import TiedRequests
from hedgeclient._replicas.choice import BackupZone
from hedgeclient._replicas.selector import ReplicaSelector
from hedgeclient._report import Reporter
from hedgeclient._sending import RequestPath, TransportClosedError
from hedgeclient._timer import wait_shielded
from hedgeclient._wire.send import AttemptSender

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from hedgeclient.instrumentation import OpenTelemetry

__all__ = [
    "DEFAULT_METHODS",
    "DEFAULT_NON_FATAL_STATUSES",
    "DiscoveryFailedError",
    "HedgedTransport",
    "TransportClosedError",
]

logger = logging.getLogger("hedgeclient")

_NOT_SYNC: Final = (
    "HedgedTransport is an async transport (an httpx.AsyncBaseTransport): use it with "
    "httpx.AsyncClient; httpx.Client needs a sync transport, and hedgeclient has no "
    "sync path yet"
)
"""What ``httpx.Client(transport=HedgedTransport())`` raises at ``with client:``, at its
first request and at ``client.close()``: httpx calls nothing on a transport at the
client's construction, so those are the earliest points."""


@final
class HedgedTransport(httpx.AsyncBaseTransport):
    """An httpx transport that sends hedged requests.

    Each idempotent request goes to one replica; if no response headers have arrived
    by the hedge delay, a backup request goes to a *different* replica; the first
    answer wins and the other attempt is cancelled (for HTTP/1.1 its connection is
    closed, so the replica sees a disconnect). Backups are capped by a token-bucket
    hedge budget. All times are in seconds. No ``async with`` is needed: a client
    built at module level, entered in one task and closed in another, or shared by
    many tasks, works the same, on asyncio and on trio. It is an async transport,
    for ``httpx.AsyncClient``: under ``httpx.Client`` it raises ``TypeError`` at
    ``with client:``, at the first request and at ``close()``.

    Example usage::

        transport = HedgedTransport(
            replicas={"http://catalog": ["http://10.0.0.7:8080", "http://10.0.0.8:8080"]},
        )
        async with httpx.AsyncClient(transport=transport, base_url="http://catalog") as c:
            response = await c.get("/items/42")
            response.extensions["hedge"]  # HedgeInfo(attempt=1, replica=..., ...)

    Per request, ``extensions={"hedge": False}`` turns hedging off and
    ``extensions={"hedge": True}`` opts a request in whatever its method (only do that
    for requests that are safe to apply twice); ``extensions={"hedge_decide_on":
    "first_byte"}`` ends its race at the first body byte instead of the headers (see
    ``routes`` for requests built by an SDK). A request whose body is a stream
    (an async iterator) is never sent twice. A request's latency runs from when it
    leaves the client's own connection-pool queue (httpcore's ``trace`` extension),
    so a client queueing for its own connections does not inflate its hedge delay.

    Args:
        transport: the inner transport every attempt is sent through; default
            ``httpx.AsyncHTTPTransport()``. Closed by :meth:`aclose`.
        replicas: logical origin -> its replicas: a list of replica origins, e.g.
            ``{"http://catalog": ["http://10.0.0.7:8080", ...]}``, or a source that
            finds them and follows their changes (:class:`~hedgeclient.DnsReplicas`,
            :class:`~hedgeclient.SrvReplicas`, :class:`~hedgeclient.WatchedReplicas`,
            or an async callable returning the current set; see
            ``docs/replicas.md``). A request to a logical origin is sent
            to a replica with its path and query kept; its ``Host`` header stays the
            logical host (unless ``preserve_host=False``), and for https the
            ``sni_hostname`` extension is set to the logical host so certificates
            verify against the service name. Default: none.
        other_origins: what happens to a request for an origin not named in
            ``replicas``: ``"pass"`` sends it to the inner transport unchanged (no
            backup, no attempt header, no metrics); ``"hedge"`` hedges it, the backup
            going to that same origin (independent only if the origin balances
            attempts over replicas; ``AttemptRecord.replica`` shows it). Default
            (``None``): ``"pass"`` when ``replicas`` names any origin, so third-party
            calls on a shared client are never doubled; ``"hedge"`` when it names
            none.
        delay: the hedge delay: a float in seconds (finite, ≥ 0, at most 5 s: a
            larger figure is almost always milliseconds) for a fixed delay, or a
            :class:`~hedgeclient.DelayPolicy`; default
            :class:`~hedgeclient.AdaptiveDelay()` (the p95 of a rolling window).
        max_hedges: backups per request, int in [0, 4]. Backup k + 1 goes out one
            hedge delay after backup k, or at once when an attempt failed. When
            every service is a static list of two or more replicas, at most the
            largest replica count minus one (each backup needs another replica); a
            service with a single address sends its backups to it over other
            connections, and a discovered one may grow, so 4 bounds those.
            Default (``None``): 1.
        methods: the idempotency allow-list, default ``{"GET", "HEAD", "OPTIONS"}``
            (case-insensitive; RFC 9110 method names).
        non_fatal_statuses: statuses that do not end the race while another attempt
            may answer: error statuses, ints in [400, 599] but 429; default
            ``{502, 503, 504}``. A 429 or a ``Retry-After`` header stops further
            backups for the request (pushback), so 429 is refused here.
        budget: the :class:`~hedgeclient.HedgeBudget` backups are drawn from; may be
            shared by several transports; default (``None``) a new ``HedgeBudget()``:
            10% extra load, a burst of 10 and 1 backup per second for quiet clients.
        selector: the :class:`~hedgeclient.ReplicaSelector`, default
            :class:`~hedgeclient.PowerOfTwoChoices()`.
        route_key: ``request -> str`` naming the route a request's latency is
            tracked under (its hedge delay and metric label); default
            ``"<METHOD> <logical origin>"``. Keep its values few (a path template,
            not a path).
        attempt_header: request header naming the attempt (``1`` for the primary
            attempt, ``2`` for the first backup, ...), or ``None`` to send none;
            default ``"Hedge-Attempt"``. Sent only on a request that is eligible for
            hedging (an idempotent method or ``extensions={"hedge": True}``, not opted
            out, a body that can be sent again, ``max_hedges`` > 0), which may have a
            twin: ``hedgeclient.server.HedgeMiddleware`` cancels a handler whose
            request carries it when its client goes away, which must never stop a
            write sent once half-way. A request sent once goes without it (a caller's
            own header of that name is passed on unchanged). Not a header HTTP or the
            request relies on (``Host``, ``Content-Length``, ``Authorization``,
            ``Idempotency-Key``, ``X-Request-Id``, conditional headers, ...).
        preserve_host: keep the logical ``Host`` header on replica requests; default
            true.
        hooks: plain (synchronous) callables given a :class:`~hedgeclient.RequestRecord`
            as each request ends (metrics, logging); a coroutine function is refused.
            A hook that raises is logged, never fatal.
        metrics: export Prometheus metrics (see :mod:`hedgeclient.instrumentation`):
            ``True`` (default) to prometheus-client's default registry, a
            ``CollectorRegistry`` to that one, ``False`` for none (nothing then runs
            on the request path for metrics).
        opentelemetry: OpenTelemetry traces and metrics (see
            :class:`~hedgeclient.instrumentation.OpenTelemetry`): ``True`` (default)
            uses the global tracer and meter providers when ``opentelemetry-api`` is
            installed (the ``otel`` extra) and a provider is configured, and does
            nothing otherwise; an ``OpenTelemetry(...)`` to choose providers or
            signals; ``False`` for none.
        name: this client's name, the ``client`` label of its metrics; default
            ``"default"``.
        routes: :class:`~hedgeclient.Route` settings for the requests a caller cannot
            tag with extensions (those an SDK builds): the first route a request
            matches may opt it in or out and choose where its race ends,
            ``decide_on="headers"`` or ``"first_byte"`` (an attempt whose headers
            arrived keeps racing until its first body bytes do; the winner's body
            starts with them and continues from the same connection). Default: none.
        zone: the caller's zone (a non-empty str), or ``None`` (default): primaries
            then prefer replicas of that zone, falling back to any other when none
            there is healthy.
        zones: each replica's zone: a mapping of replica origin to zone, or a
            function of the origin returning its zone or ``None``; default none. A
            zone a source gives (``Replica(origin, zone=...)``) wins over this one.
        backup_zone: ``"other"`` (default): a backup prefers a replica of another
            zone than its primary's, falling back to the same zone; ``"any"``: zones
            play no part in choosing backups.
        tied: send each eligible request to a configured service as two tied copies
            (:class:`~hedgeclient.TiedRequests`: Dean & Barroso's tied requests, for
            replicas that serve through :class:`hedgeclient.server.HedgeMiddleware`
            with ties on); default ``None``: no ties. Per request,
            ``extensions={"tie": False}`` sends it untied.
        allow_plaintext: let an ``https://`` logical origin have ``http://``
            replicas, for TLS that ends before them (a sidecar proxy, a service
            mesh). Default false: such a static list is refused here with a
            ``ValueError`` naming the origin and the replica, and such a discovered
            set is refused as ``invalid`` (the last good set stays), since a request
            the caller addressed to ``https://`` would otherwise leave in plaintext.

    Deadlines: no backup is sent that could not answer before the caller stops
    waiting (the enclosing anyio/trio cancel scope's deadline, or the request's httpx
    read timeout counted from the start of the request): such a backup is suppressed
    with reason ``deadline``. Backups get the time left as their httpx timeouts while
    they wait for their response headers, so attempts that all time out cost the
    caller one timeout, not one per attempt; a backup's body is read with the caller's
    own timeouts (in a race decided on the first byte, that byte too).

    Raises:
        TypeError: a parameter has the wrong type.
        ValueError: a parameter is out of range (the message names it and the range),
            or an ``https://`` logical origin lists an ``http://`` replica without
            ``allow_plaintext``.

    .. versionadded:: 0.1.0
    """

    def __init__(
        self,
        transport: httpx.AsyncBaseTransport | None = None,
        *,
        replicas: Mapping[str, Any] | None = None,
        other_origins: Literal["pass", "hedge"] | None = None,
        delay: float | DelayPolicy | None = None,
        max_hedges: int | None = None,
        methods: Collection[str] = DEFAULT_METHODS,
        non_fatal_statuses: Collection[int] = DEFAULT_NON_FATAL_STATUSES,
        budget: HedgeBudget | None = None,
        selector: ReplicaSelector | None = None,
        route_key: Callable[[httpx.Request], str] | None = None,
        attempt_header: str | None = "Hedge-Attempt",
        preserve_host: bool = True,
        hooks: Sequence[HedgeHook] = (),
        metrics: bool | CollectorRegistry = True,
        opentelemetry: bool | OpenTelemetry = True,
        name: str = "default",
        routes: Sequence[Route] = (),
        tied: TiedRequests | None = None,
        zone: str | None = None,
        zones: Mapping[str, str] | Callable[[str], str | None] | None = None,
        backup_zone: BackupZone = "other",
        allow_plaintext: bool = False,
    ) -> None:
        self._inner = check_transport(transport)
        self._methods = parse_methods(methods)
        self._non_fatal = parse_statuses(non_fatal_statuses)
        self._delay = check_delay_policy(delay)
        self._budget = check_budget(budget)
        self._selector = check_selector(selector)
        self._fleet = Fleet(
            replicas=replicas,
            zones=zones,
            zone=zone,
            backup_zone=backup_zone,
            selector=self._selector,
            inner=self._inner,
            allow_plaintext=check_bool("allow_plaintext", allow_plaintext),
        )
        self._services = self._fleet.services
        self._pass_others = check_other_origins(other_origins, bool(self._services))
        self._max_hedges = max_hedges_for(max_hedges, self._services.values(), self._fleet)
        self._route_key = check_route_key(route_key)
        self._attempt_header = check_attempt_header(attempt_header)
        self._preserve_host = check_bool("preserve_host", preserve_host)
        self.name = check_name(name)
        self._routes = check_routes(routes)
        self._tied = check_tied(tied)
        self._report = Reporter(self, check_hooks(hooks), metrics, opentelemetry)
        self._repairs = repairs_for(self._inner)
        self._path = RequestPath(
            inner=self._inner,
            fleet=self._fleet,
            sender=AttemptSender(
                inner=self._inner,
                repairs=self._repairs,
                lane=self._fleet.lane,
                lane_repairs=self._fleet.lane_repairs,
                non_fatal=self._non_fatal,
                attempt_header=self._attempt_header,
                preserve_host=self._preserve_host,
            ),
            delay=self._delay,
            budget=self._budget,
            methods=self._methods,
            non_fatal=self._non_fatal,
            max_hedges=self._max_hedges,
            pass_others=self._pass_others,
            route_key=self._route_key,
            routes=self._routes,
            tied=self._tied,
            report=self._report,
            repairs=self._repairs,
            name=self.name,
        )
        self._shut: anyio.Event | None = None  # set once aclose() has finished

    # -- introspection ----------------------------------------------------------------

    @property
    def delay_policy(self) -> DelayPolicy:
        """The hedge-delay policy in force."""
        return self._delay

    @property
    def budget(self) -> HedgeBudget:
        """The hedge budget backups are drawn from."""
        return self._budget

    @property
    def selector(self) -> ReplicaSelector:
        """The replica selector in force."""
        return self._selector

    @property
    def inner(self) -> httpx.AsyncBaseTransport:
        """The wrapped transport."""
        return self._inner

    @property
    def event_loop_lag(self) -> float:
        """How late, in seconds (≥ 0), the event loop of this transport's latest request
        typically serves its hedge deadlines lately: the client's own lag, as the hedge
        timer measures it (a weighted mean over the deadlines served, 0.0 until four
        have been served since the loop was idle, and before the first request). It
        holds its value while the client sends nothing. Safe to read from any thread.

        A late loop is in every latency the client measures and in every backup it
        would start: from a tenth of a route's hedge delay (and at least 1 ms), that
        route's samples are left out of the delay (:attr:`samples_left_out`); from half
        the delay, its backups by delay are suppressed with the reason ``client_lag``
        (see ``docs/choosing-the-delay.md``). The ``hedgeclient_event_loop_lag_seconds``
        gauge reports it.
        """
        timer = self._path.timer
        return 0.0 if timer is None else timer.lag.typical

    @property
    def samples_left_out(self) -> dict[SampleLeftOut, int]:
        """Primaries whose latency the delay policy was not given, by reason
        (``queued``, ``replica_silent``, ``client_lag``: see
        :attr:`RequestRecord.sample_left_out <hedgeclient.RequestRecord.sample_left_out>`),
        since the transport was built. A copy. The
        ``hedgeclient_delay_samples_left_out_total`` counter reports them, by route."""
        return dict(self._path.left_out)

    def replica_statistics(self) -> dict[str, DiscoveryStatistics]:
        """Each configured service's source and replicas now, by logical origin
        (``"http://catalog"``): static lists and discovered sets alike."""
        return self._fleet.statistics()

    async def refresh_replicas(self) -> None:
        """Resolve every discovered service now, in the calling task (watches excepted).

        Call it at start-up to fail early when a name does not resolve (rather than at
        the first request), and in tests. A service that fails keeps its last good
        set, as in the background; the others take their new sets. Static lists have
        nothing to resolve.

        Raises:
            DiscoveryFailedError: one or more services got no replica set; its message
                names each logical origin, its source and why, and its ``failures``
                maps each to the reason.
        """
        await self._fleet.refresh_now()

    # -- the request path -------------------------------------------------------------

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request``, hedged when it is eligible; return the winner's response.

        The response's body stream is untouched (``client.stream(...)`` works), and
        ``response.extensions["hedge"]`` holds a :class:`~hedgeclient.HedgeInfo`
        (not for an origin passed through, see ``other_origins``).

        Raises:
            RuntimeError: the transport is closed.
            TypeError: ``route_key`` returned something other than a str, the delay
                policy's ``hedge_delay()`` something other than a number or None, or
                ``extensions["hedge"]`` is not True, False or None.
            ValueError: the delay policy returned a negative, NaN or infinite delay,
                ``extensions["hedge_decide_on"]`` is not ``"headers"`` or
                ``"first_byte"``, or an extension key nearly spells one of ours
                (``"hedged"`` for ``"hedge"``, ``"ties"`` for ``"tie"``); nothing is
                sent then. Other keys (httpx's, other libraries') pass untouched.
            TransportClosedError: the transport was closed while this request was in
                flight.
            httpx.HTTPError: when every attempt failed without a response, the last
                attempt's own exception (for example ``httpx.ConnectError``), with a
                note (PEP 678) naming each attempt's replica and error; never an
                ``ExceptionGroup``.
        """
        return await self._path.handle(request)

    # -- lifecycle ----------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the transport: stop the requests in flight, then close the inner one.

        Requests in flight end with :class:`TransportClosedError`, every attempt of
        theirs unwound before this returns; a request sent after this raises
        ``RuntimeError``. Idempotent; may be called from any task, and a call made
        while another is closing returns when that one does.
        """
        if self._path.closed:
            if self._shut is not None:
                await wait_shielded(self._shut)
            return
        self._shut = anyio.Event()
        try:
            await self._path.stop()
            await self._fleet.aclose()
            await self._inner.aclose()
        finally:
            self._shut.set()

    async def __aenter__(self) -> HedgedTransport:
        """Enter the inner transport (``httpx.AsyncClient`` does this on its own entry)."""
        await self._inner.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: TracebackType | None = None,
    ) -> None:
        """Close the transport (:meth:`aclose`); from any task, in any order."""
        await self.aclose()

    # -- not a sync transport -----------------------------------------------------------

    def handle_request(self, request: httpx.Request) -> NoReturn:
        """Refuse a request from a sync ``httpx.Client``.

        Raises:
            TypeError: always; use ``httpx.AsyncClient``.
        """
        raise TypeError(_NOT_SYNC)

    def __enter__(self) -> NoReturn:
        """Refuse ``with httpx.Client(transport=...)``: ``httpx.Client`` enters its
        transport as a sync context manager.

        Raises:
            TypeError: always; use ``httpx.AsyncClient``.
        """
        raise TypeError(_NOT_SYNC)

    def close(self) -> NoReturn:
        """Refuse ``httpx.Client.close()``; :meth:`aclose` closes this transport.

        Raises:
            TypeError: always; use ``httpx.AsyncClient`` (or ``await aclose()``).
        """
        raise TypeError(_NOT_SYNC)

    def __repr__(self) -> str:
        services = {s.route_suffix: list(s.replicas) for s in self._services.values()}
        return (
            f"HedgedTransport(name={self.name!r}, replicas={services!r}, "
            f"other_origins={'pass' if self._pass_others else 'hedge'!r}, "
            f"delay={self._delay!r}, max_hedges={self._max_hedges})"
        )
