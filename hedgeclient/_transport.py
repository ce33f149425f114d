"""``HedgedTransport``: an httpx transport that hedges idempotent requests.

It wraps another ``httpx.AsyncBaseTransport`` (the middleware shape the httpx docs
recommend). This module is its construction and lifecycle: the arguments are checked
(``_checks``) and wired into the replica side (``_fleet``), the httpcore repairs
(``_compat``), the reports (``_report``) and the request path (``_request``).

Prior art: Dean & Barroso, "The Tail at Scale", CACM 56(2), 2013 (backups after the
p95); tower's ``hedge`` middleware; Finagle's backup requests.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Literal, NoReturn, final

import httpx

from hedgeclient._checks import transport as args
from hedgeclient._compat import repairs_for
from hedgeclient._discovery import DiscoveryStatistics
from hedgeclient._events import HedgeHook, SampleLeftOut
from hedgeclient._fleet import DiscoveryFailedError, Fleet
from hedgeclient._policy.budget import HedgeBudget
from hedgeclient._policy.delay import DelayPolicy
from hedgeclient._policy.eligibility import DEFAULT_METHODS, DEFAULT_NON_FATAL_STATUSES
from hedgeclient._policy.overrides import BackupHook
from hedgeclient._policy.routes import Route
from hedgeclient._policy.tied import TiedRequests
from hedgeclient._replicas.choice import BackupZone
from hedgeclient._replicas.selector import ReplicaSelector
from hedgeclient._report import Reporter
from hedgeclient._request import RequestPath, TransportClosedError
from hedgeclient._timer import Flag, current_timer, wait_shielded

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from hedgeclient.instrumentation import OpenTelemetry

__all__ = [
    "DEFAULT_METHODS", "DEFAULT_NON_FATAL_STATUSES", "DiscoveryFailedError", "HedgedTransport",
    "TransportClosedError",
]  # fmt: skip

# What httpx.Client(transport=HedgedTransport()) raises at `with client:`, its first
# request and close(): httpx calls nothing on a transport at the client's construction.
_NOT_SYNC: Final = (
    "HedgedTransport is an async transport (an httpx.AsyncBaseTransport): use it with "
    "httpx.AsyncClient; with httpx.Client use SyncHedgedTransport, which takes the "
    "same arguments"
)


@final
class HedgedTransport(httpx.AsyncBaseTransport):
    """An httpx transport that sends hedged requests.

    Each idempotent request goes to one replica; if no response headers have arrived
    by the hedge delay, a backup request goes to a *different* replica; the first
    answer wins and the other attempt is cancelled (for HTTP/1.1 its connection is
    closed, so the replica sees a disconnect). Backups are capped by a token-bucket
    hedge budget. All times are in seconds. No ``async with`` is needed, on asyncio
    and on trio. Under ``httpx.Client`` use :class:`~hedgeclient.SyncHedgedTransport`.

    Example usage::

        transport = HedgedTransport(
            replicas={"http://catalog": ["http://10.0.0.7:8080", "http://10.0.0.8:8080"]},
            extra_load=0.05,  # the default: hedge at the p95, a 10 % budget
        )
        async with httpx.AsyncClient(transport=transport, base_url="http://catalog") as c:
            response = await c.get("/items/42")
            response.extensions["hedge"]  # HedgeInfo(attempt=1, replica=..., ...)

    Per request, ``extensions={"hedge": False}`` turns hedging off, ``{"hedge": True}``
    opts a request in whatever its method, ``{"hedge": HedgePolicy(...)}`` (or a dict)
    sets its own delay, bounds, ``max_hedges``, budget or backup hook (over its route's,
    over the transport's), and ``{"hedge_decide_on": "first_byte"}`` ends its race at the
    first body byte (``docs/streaming.md``). A streamed body is never sent twice. No
    backup is sent that could not answer before the caller stops waiting. Every
    parameter has a default that works (``docs/api.md`` groups them and says why each
    is here); ``extra_load`` is the one to reach for first.

    Args:
        transport: the inner transport every attempt goes through, for its connection
            settings (HTTP/2, TLS, limits, proxies); default
            ``httpx.AsyncHTTPTransport()``. Closed by :meth:`aclose`.
        replicas: where a backup can go, since it buys latency only from a *different*
            replica: logical origin -> a list of replica origins
            (``{"http://catalog": ["http://10.0.0.7:8080", ...]}``) or a source that
            follows them (:class:`~hedgeclient.DnsReplicas`, ``SrvReplicas``,
            ``PolledReplicas``, ``WatchedReplicas``; ``docs/replicas.md``). Path and
            query are kept, ``Host`` and TLS's server name stay the logical host.
        other_origins: what a shared client does with an origin not in ``replicas``:
            ``"pass"`` sends it unchanged, so third-party calls are never doubled;
            ``"hedge"`` hedges it to that same origin (a load balancer's). Default
            (``None``): ``"pass"`` when ``replicas`` names an origin, else ``"hedge"``.
        extra_load: the trade in one number, as Finagle's ``maxExtraLoad``: the
            fraction of requests that send a backup, in [5.55e-17, 0.5] (below, ``1 -
            extra_load`` is 1.0). It sets the delay, ``AdaptiveDelay(quantile=1 -
            extra_load)`` (a delay ``d`` costs ``P(X > d)`` backups per request), and the
            budget, ``HedgeBudget(ratio=2 * extra_load)``, which binds only when latency
            shifts faster than the delay follows (``docs/budget.md``). Default (``None``):
            0.05. Beside ``delay`` or ``budget``, it sets the other and must agree.
        delay: the hedge delay, to fix it (an SLO, a test) or to tune or replace the
            adaptive one: float seconds (finite, ≥ 0, at most 5 s: a larger figure is
            almost always milliseconds), or a :class:`~hedgeclient.DelayPolicy`;
            default ``AdaptiveDelay(quantile=1 - extra_load)``.
        budget: the :class:`~hedgeclient.HedgeBudget` backups are drawn from, to share
            one cap between transports or tune its burst, floor and in-flight cap;
            default ``HedgeBudget(ratio=2 * extra_load)``.
        max_hedges: backups per request, an int in [0, 4]: more than one for a deep
            tail, 0 for none; with static lists, at most the largest replica count
            minus one. Default (``None``): 1.
        methods: the idempotency allow-list, which only the application knows (RFC
            9110 names, case-insensitive); default ``{"GET", "HEAD", "OPTIONS"}``.
        non_fatal_statuses: error statuses after which another attempt may still win
            (one replica's 503 while another answers 200): ints in [400, 599] but 429
            (pushback); default ``{502, 503, 504}``.
        routes: :class:`~hedgeclient.Route` settings for requests a caller cannot tag
            (those an SDK builds): opt in or out, where the race ends, and each route's
            own delay, quantile, ``max_hedges``, budget and methods. Default: none.
        tied: tied requests, the paper's other technique, for replicas behind
            :class:`hedgeclient.server.HedgeMiddleware` with ties on: a
            :class:`~hedgeclient.TiedRequests`, or ``None`` (default) for none.
        selector: how a replica is chosen, to tune or replace the choice (cache
            affinity, weights): a :class:`~hedgeclient.ReplicaSelector`; default
            :class:`~hedgeclient.PowerOfTwoChoices()`.
        zone: the caller's zone (1 to 128 characters), to keep primaries local while a
            replica there is healthy. Default ``None``.
        zones: replica zones a source does not give (DNS answers bare addresses): a
            mapping of replica origin to zone, or a function of the origin; a source's
            ``Replica(origin, zone=...)`` wins. Default none.
        backup_zone: ``"other"`` (default): a backup prefers another zone than its
            primary's, which does not share a zone-wide slowness; ``"any"``: zones play
            no part, for zones so far apart (regions) that a backup there could not win.
        allow_plaintext: let an ``https://`` logical origin have ``http://`` replicas,
            for TLS that ends before them (a sidecar, a mesh). Default false: such
            replicas are refused (``ValueError``, or a discovered set ``invalid``).
        attempt_header: the header naming the attempt (``1`` for the primary, ``2``
            for the first backup, ...), by which replicas tell backups apart
            (``HedgeMiddleware`` reads it), or ``None`` for none (a strict proxy);
            default ``"Hedge-Attempt"``. Sent only on requests eligible for hedging;
            never a header HTTP or the request relies on (``Host``, ``Authorization``).
        preserve_host: keep the logical ``Host`` header on replica requests, which
            virtual hosting needs; ``False`` for replicas that route by their own host
            names (a public endpoint per region). Default true.
        route_key: ``request -> str`` naming the route a request's latency is tracked
            under, so that endpoints of different speeds get their own hedge delay and
            metric label; default ``"<METHOD> <logical origin>"``. Keep its values few.
        name: this client's name, the ``client`` label of its metrics, to tell clients
            apart; default ``"default"``.
        hooks: plain callables given a :class:`~hedgeclient.RequestRecord` as each
            request ends, for logs or one's own metrics; one that raises is logged.
        metrics: Prometheus metrics (:mod:`hedgeclient.instrumentation`): ``True``
            (default) in the default registry, a ``CollectorRegistry``, or ``False``.
        opentelemetry: traces and metrics
            (:class:`~hedgeclient.instrumentation.OpenTelemetry`): ``True`` (default)
            uses the global providers when one is configured; an ``OpenTelemetry(...)``
            to choose; ``False`` for none.
        on_backup: ``request -> request | None``, a plain function (not ``async``),
            given each backup about to go (no token spent yet): it returns the request,
            changed or not (a header, query or path; never its replica), or another;
            ``None`` vetoes it (``vetoed``). Never called for a request sent once; one
            that raises or returns anything else is logged, no backup (``hook_error``).

    Raises:
        TypeError: a parameter has the wrong type.
        ValueError: a parameter is out of range (the message names it and the range),
            ``extra_load`` disagrees with a ``delay`` or ``budget`` beside it, or an
            ``https://`` origin lists an ``http://`` replica without
            ``allow_plaintext``.

    .. versionadded:: 0.1.0
    """

    def __init__(  # the public API's width: docs/api.md says why each parameter is here
        self,
        transport: httpx.AsyncBaseTransport | None = None,
        *,
        replicas: Mapping[str, Any] | None = None,
        other_origins: Literal["pass", "hedge"] | None = None,
        extra_load: float | None = None,
        delay: float | DelayPolicy | None = None,
        budget: HedgeBudget | None = None,
        max_hedges: int | None = None,
        methods: Collection[str] = DEFAULT_METHODS,
        non_fatal_statuses: Collection[int] = DEFAULT_NON_FATAL_STATUSES,
        routes: Sequence[Route] = (),
        tied: TiedRequests | None = None,
        selector: ReplicaSelector | None = None,
        zone: str | None = None,
        zones: Mapping[str, str] | Callable[[str], str | None] | None = None,
        backup_zone: BackupZone = "other",
        allow_plaintext: bool = False,
        attempt_header: str | None = "Hedge-Attempt",
        preserve_host: bool = True,
        route_key: Callable[[httpx.Request], str] | None = None,
        name: str = "default",
        hooks: Sequence[HedgeHook] = (),
        metrics: bool | CollectorRegistry = True,
        opentelemetry: bool | OpenTelemetry = True,
        on_backup: BackupHook | None = None,
    ) -> None:
        self._inner = args.check_transport(transport)
        self._methods = args.parse_methods(methods)
        self._non_fatal = args.parse_statuses(non_fatal_statuses)
        self._delay, self._budget = args.delay_and_budget(extra_load, delay, budget)
        self._selector = args.check_selector(selector)
        self._fleet = fleet = Fleet(
            replicas=replicas,
            zones=zones,
            zone=args.check_zone(zone),
            backup_zone=args.check_backup_zone(backup_zone),
            selector=self._selector,
            non_fatal=self._non_fatal,
            inner=self._inner,
            allow_plaintext=args.check_bool("allow_plaintext", allow_plaintext),
        )
        self._services = self._fleet.services
        self._pass_others = args.check_other_origins(other_origins, bool(self._services))
        self._max_hedges = args.max_hedges_for(max_hedges, self._services.values(), self._fleet)
        self._route_key = args.check_route_key(route_key)
        self._attempt_header = args.check_attempt_header(attempt_header)
        self._preserve_host = args.check_bool("preserve_host", preserve_host)
        self.name = args.check_name(name)
        policy, self._routes, limit, delays = args.policies(
            self._delay, self._budget, self._max_hedges, self._methods, on_backup, routes, fleet
        )
        self._tied = args.check_tied(tied)
        own = {r.name or r.label: p.budget for r, p in self._routes if p.budget is not self._budget}
        parts = (delays, self._budget, self._fleet.statistics, self._selector, self._non_fatal, own)
        self._report = Reporter(self.name, args.check_hooks(hooks), metrics, opentelemetry, *parts)
        self._repairs = repairs_for(self._inner)
        self._path = RequestPath(
            inner=self._inner,
            fleet=self._fleet,
            attempt_header=self._attempt_header,
            preserve_host=self._preserve_host,
            policy=policy,
            non_fatal=self._non_fatal,
            hedges_limit=limit,
            pass_others=self._pass_others,
            route_key=self._route_key,
            routes=self._routes,
            tied=self._tied,
            report=self._report,
            repairs=self._repairs,
            name=self.name,
        )
        if type(self) is HedgedTransport:  # httpx calls the path itself: a frame less
            self.handle_async_request = self._path.handle  # type: ignore[method-assign]
        self._shut: Flag | None = None  # set once aclose() has finished

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
        typically serves its hedge deadlines: the client's own lag, a weighted mean
        over the deadlines served (0.0 until four have been served since the loop was
        idle); any thread may read it. From a tenth of a route's hedge delay its samples
        are left out, from half its backups wait (``docs/choosing-the-delay.md``)."""
        timer = self._path.timer
        return 0.0 if timer is None else timer.lag.typical

    @property
    def samples_left_out(self) -> dict[SampleLeftOut, int]:
        """Primaries whose latency the delay policy was not given since the transport
        was built, by reason (:attr:`RequestRecord.sample_left_out
        <hedgeclient.RequestRecord.sample_left_out>`); a copy."""
        return dict(self._path.left_out)

    def replica_statistics(self) -> dict[str, DiscoveryStatistics]:
        """Each configured service's source and replicas now, by logical origin
        (``"http://catalog"``): static lists and discovered sets alike."""
        return self._fleet.statistics()

    async def refresh_replicas(self) -> None:
        """Resolve every discovered service now, in the calling task (watches excepted).

        Call it at start-up to fail early when a name does not resolve, and in tests. A
        service that fails keeps its last good set; the others take their new sets.

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
                ``extensions["hedge"]`` is not True, False, None, a ``HedgePolicy`` or
                a mapping of its fields (or has a field of the wrong type).
            ValueError: the delay policy returned a negative, NaN or infinite delay,
                ``extensions["hedge_decide_on"]`` is neither ``"headers"`` nor
                ``"first_byte"``, ``extensions["hedge"]`` has an unknown key or a
                field out of range, or an extension key nearly spells one of ours
                (``"hedged"``, ``"ties"``); nothing is sent then.
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
        theirs unwound before this returns; a request sent after raises
        ``RuntimeError``. Idempotent, from any task; a second call waits for the first.
        """
        if self._path.closed:
            if self._shut is not None:
                await wait_shielded(self._shut)
            return
        self._shut = current_timer().event()
        try:
            await self._path.stop()
            await self._fleet.aclose()
            await self._inner.aclose()
        finally:
            self._report.flush()  # every request has ended: its final counts complete
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

    def handle_request(self, request: httpx.Request) -> NoReturn:
        """Refuse a request from a sync ``httpx.Client``: raise ``TypeError``."""
        raise TypeError(_NOT_SYNC)

    def __enter__(self) -> NoReturn:
        """Refuse ``with httpx.Client(transport=...)``: raise ``TypeError``."""
        raise TypeError(_NOT_SYNC)

    def close(self) -> NoReturn:
        """Refuse ``httpx.Client.close()`` (:meth:`aclose` closes this transport): raise
        ``TypeError``."""
        raise TypeError(_NOT_SYNC)

    def __repr__(self) -> str:
        services = {s.route_suffix: list(s.replicas) for s in self._services.values()}
        return (
            f"HedgedTransport(name={self.name!r}, replicas={services!r}, "
            f"other_origins={'pass' if self._pass_others else 'hedge'!r}, "
            f"delay={self._delay!r}, max_hedges={self._max_hedges})"
        )
