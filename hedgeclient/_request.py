"""The request path of a ``HedgedTransport``: one request from the caller to its answer.

:meth:`RequestPath.handle` is the path in six steps: route the request (``_policy.routes``),
ask whether it may be sent twice (``_policy.eligibility``), ask the delay policy for its
hedge delay, race its attempts (``_race``; ``_wire.send`` sends them, ``_compat`` repairs
the pool after), give the delay what the race learnt (the one place it learns), and
report (``_report``, which only reads the race). httpx calls :meth:`RequestPath.handle`
itself (``HedgedTransport`` binds it). Strictly private.
"""

from __future__ import annotations

import functools
import logging
import math
import sys
from collections.abc import Callable, Mapping
from typing import final

import httpx

from hedgeclient._attempt import CANCELLED
from hedgeclient._checks.transport import shown
from hedgeclient._compat import Repairs
from hedgeclient._compat.otel import METRICS_MODULE, TRACE_MODULE
from hedgeclient._events import SampleLeftOut, SuppressReason
from hedgeclient._extensions import check_extensions
from hedgeclient._fleet import Fleet
from hedgeclient._policy.eligibility import LAG_FLOOR, LAG_LEAVE_OUT, ineligible
from hedgeclient._policy.overrides import Effective, for_request
from hedgeclient._policy.routes import (
    DECIDE_ON_EXTENSION,
    FIRST_BYTE_KEY,
    Route,
    decision_point,
    match_route,
)
from hedgeclient._policy.tied import TiedRequests
from hedgeclient._race.race import Race
from hedgeclient._race.rules import RaceRules
from hedgeclient._replicas.services import Origin, Service, origin_of, origin_str
from hedgeclient._report import Reporter
from hedgeclient._timer import Flag, HedgeTimer, current_timer, run_shielded, wait_shielded
from hedgeclient._wire.send import AttemptSender

__all__ = ["RequestPath", "TransportClosedError"]

_Reasons = dict[str, SuppressReason | None]  # by method (``_eligibility``)
_Lane = tuple[Effective, RaceRules, _Reasons | None]  # settings, rules, reasons (a route's)

logger = logging.getLogger("hedgeclient")


class TransportClosedError(httpx.TransportError):
    """A request was in flight when its :class:`~hedgeclient.HedgedTransport` was closed.

    .. versionadded:: 0.1.0
    """


@final
class RequestPath:
    """Sends the requests of one transport; stops them when it closes. Strictly private.

    Args:
        inner: the inner transport (requests for origins passed through go there).
        fleet: services, replica choice and inner transports.
        attempt_header: header naming each attempt's number, or ``None``.
        preserve_host: keep the logical ``Host`` header on replica requests.
        policy: the transport's own hedging settings (delay, budget, methods,
            ``max_hedges``), for requests that match no route.
        non_fatal: statuses that do not end a race.
        hedges_limit: the most backups per request the replicas allow.
        pass_others: send requests for origins not configured unchanged.
        route_key: names a request's route, or ``None`` for ``"<METHOD> <origin>"``.
        routes: the transport's routes, each with its settings merged with the
            transport's (``_policy.overrides.for_route``).
        tied: tied requests, or ``None``.
        report: what each request reports.
        repairs: the inner transport's httpcore repairs.
        name: the transport's name.
    """

    __slots__ = (
        "_fleet", "_idle", "_inner", "_lane", "_limit", "_origins", "_pass_others", "_prepare",
        "_repairs", "_report", "_route_key", "_routes", "_send", "_services", "_tied", "active",
        "closed", "left_out", "name", "timer",
    )  # fmt: skip

    def __init__(
        self,
        *,
        inner: httpx.AsyncBaseTransport,
        fleet: Fleet,
        attempt_header: str | None,
        preserve_host: bool,
        policy: Effective,
        non_fatal: frozenset[int],
        hedges_limit: int,
        pass_others: bool,
        route_key: Callable[[httpx.Request], str] | None,
        routes: tuple[tuple[Route, Effective], ...],
        tied: TiedRequests | None,
        report: Reporter,
        repairs: Repairs,
        name: str,
    ) -> None:
        self._inner = inner
        self._fleet = fleet
        self._services: Mapping[Origin, Service] = fleet.services
        sender = AttemptSender(
            inner=inner, repairs=repairs, lane=fleet.lane, lane_repairs=fleet.lane_repairs,
            non_fatal=non_fatal, attempt_header=attempt_header, preserve_host=preserve_host,
            choice=fleet.choice,
        )  # fmt: skip
        self._send, self._prepare = sender.send, report.logged_hook(sender.prepare)
        self._pass_others = pass_others
        self._route_key = route_key
        self._tied = tied
        self._report = report
        self._repairs = repairs
        self._limit = hedges_limit
        lane = fleet.lane_repairs
        repairing = repairs.active or (lane is not None and lane.active)
        # One RaceRules per policy, built now: a request's path only picks its lane.
        base = RaceRules(
            choice=fleet.choice,
            budget=policy.budget,
            non_fatal=non_fatal,
            max_backups=policy.max_hedges,
            repair=self._repair if repairing else None,
        )
        self._lane: _Lane = (policy, base, {})
        self._routes: tuple[tuple[Route, _Lane], ...] = tuple(
            (route, (p, base.but(p.budget, p.max_hedges), {})) for route, p in routes
        )
        self.name = name
        self.closed = False
        # (scheme, host, port) as written -> origin, service
        self._origins: dict[object, tuple[Origin, Service | None]] = {}
        self.active: set[Race] = set()
        self._idle: Flag | None = None
        self.left_out: dict[SampleLeftOut, int] = {}  # samples left out, by reason
        self.timer: HedgeTimer | None = None  # the last loop's timer: its lag, for a gauge

    async def handle(self, request: httpx.Request) -> httpx.Response:
        """``HedgedTransport.handle_async_request`` (its docstring has the contract): route
        the request, ask whether it may be sent twice, ask the delay policy for its hedge
        delay, race its attempts, give the delay what the race learnt, and report."""
        if self.closed:
            msg = "Cannot send a request, as the HedgedTransport has been closed."
            raise RuntimeError(msg)
        timer = self.timer = current_timer()  # the backend, looked up once per request
        start = timer.time()
        origin, service = self._origin_of(request.url)
        if service is None and self._pass_others:
            return await self._fleet.pass_through(request)
        route, origin_text, first_byte, (policy, rules, reasons), opted = self._route(
            request, origin, service
        )
        if service is not None and self._fleet.discovered:
            await self._fleet.ensure(service, request)  # waits only for a first set
        reason, body = _eligibility(request, policy, opted, reasons)
        delay, timeout_at, deadline = self._delay_for(request, route, reason, start, timer, policy)
        report = self._report
        otel, trace, tied, tie = report.otel, None, self._tied, None
        modules = sys.modules  # OpenTelemetry imported: a provider may be configured
        if otel is not None and (  # (Reporter.begin's cheap test, read here: no call)
            otel.telemetry is not None or TRACE_MODULE in modules or METRICS_MODULE in modules
        ):
            trace = report.begin(request, route, delay, start)
        if tied is not None and service is not None and reason is None:  # the twin's offset
            tie = None if request.extensions.get("tie") is False else tied.offset
        hook = policy.on_backup
        race = Race(
            functools.partial(self._send, request, service, body, timeout_at, trace, first_byte),
            rules, service=service, origin=origin_text, delay=delay, ineligible=reason,
            start=start, deadline=deadline, tie_offset=tie, timer=timer,
            vet=None if hook is None or body is None else functools.partial(
                self._prepare, request, service, body, hook
            ),
        )  # fmt: skip
        self.active.add(race)
        response: httpx.Response | None = None
        try:
            response = await race.run()
        finally:
            self._race_ended(race, service)  # only now may aclose() close the pool
            left_out = self._learn(route, race, reason, response, timer, policy)
            report.finish(
                race, route, delay, response, timer,
                method=request.method, origin=origin_text, trace=trace, left_out=left_out,
            )  # fmt: skip
        if response is None:  # aclose() stopped the race
            msg = "The HedgedTransport was closed while the request was in flight."
            raise TransportClosedError(msg, request=request)
        if self._repairs.active:
            self._repairs.guard(response)
        return response

    def _origin_of(self, url: httpx.URL) -> tuple[Origin, Service | None]:
        """The request's origin, and its service (``None``: an origin not configured)."""
        key = (url.scheme, url.host, url.port)  # cheap: not normalised (a cache key)
        found = self._origins.get(key)
        if found is None:
            if len(self._origins) >= 256:  # a client sending to many origins: keep a few
                self._origins.clear()
            origin = origin_of(url)
            found = self._origins[key] = (origin, self._services.get(origin))
        return found

    def _route(
        self, request: httpx.Request, origin: Origin, service: Service | None
    ) -> tuple[str, str, bool, _Lane, bool | None]:
        """Route the request: its route's name, its origin as routes name it, whether the
        race is decided at the first body byte, its lane (settings with every precedence
        applied, ``_policy.overrides``) and ``hedge`` flag (the request's, else its route's).

        Raises:
            ValueError: a misspelt extension (``check_extensions``), or a request's own
                setting out of range (``for_request``).
            TypeError: ``route_key`` returned something else than a ``str``, or
                ``extensions["hedge"]`` is of the wrong type.
        """
        extensions = request.extensions
        found = match_route(self._routes, request) if self._routes else None
        matched, lane = (None, self._lane) if found is None else found
        opted, decide = lane[0].hedge, None
        if extensions and (len(extensions) > 1 or "timeout" not in extensions):  # httpx's
            check_extensions(extensions)  # a misspelt "hedge": refused before any send
            own = extensions.get("hedge")
            if type(own) is bool:
                opted = own
            elif own is not None:  # a request's own settings, over its route's
                policy = for_request(own, lane[0], self._limit)
                rules = lane[1].but(policy.budget, policy.max_hedges)
                lane, opted, decide = (policy, rules, None), policy.hedge, policy.decide_on
            if own is not None:  # its own flag: not its lane's cached reasons
                lane = (lane[0], lane[1], None)
        origin_text = service.route_suffix if service is not None else origin_str(origin)
        if matched is not None and matched.name is not None:
            route = matched.name
        elif self._route_key is None:
            route = f"{request.method} {origin_text}"
        elif not isinstance(route := self._route_key(request), str) or not route:
            msg = f"`route_key` must return a non-empty str, got {shown(route)}"
            raise (ValueError if isinstance(route, str) else TypeError)(msg)
        first_byte = False
        if matched is not None or decide is not None or DECIDE_ON_EXTENSION in extensions:
            point = decision_point(request, matched)
            if decide is not None and DECIDE_ON_EXTENSION not in extensions:
                point = decide
            first_byte = point == "first_byte"
            if first_byte:
                route += FIRST_BYTE_KEY  # times to the first byte, apart from header latencies
        return route, origin_text, first_byte, lane, opted

    def _delay_for(
        self, request: httpx.Request, route: str, reason: SuppressReason | None, start: float,
        timer: HedgeTimer, policy: Effective,
    ) -> tuple[float | None, float, float]:  # fmt: skip
        """The hedge delay of a request that may be hedged (``reason`` is ``None``), when
        its read timeout expires, and when its caller stops waiting (seconds, the loop's
        clock; ``math.inf``: never). Every request deposits into its hedge budget (a
        share of the traffic, which retries of POSTs draw on too, issue 27): counted in
        its ``Tally``, no call but the first's (``_policy.budget``)."""
        tally = policy.tally
        if tally.requests:
            tally.requests += 1
        else:
            policy.budget.deposit()
        if reason is not None:
            return None, math.inf, math.inf
        delay = policy.ask(route)  # its hedge_delay, checked (``Effective.ask``)
        if policy.bounded and delay is not None:  # a route's or request's bounds
            delay = None if delay > policy.max_delay else max(delay, policy.min_delay)
        timeout = request.extensions.get("timeout")
        read = timeout.get("read") if timeout else None
        timeout_at = math.inf if read is None else start + read
        eager = timer.deadline  # None: the race reads it when a backup is due
        return delay, timeout_at, timeout_at if eager is None else min(timeout_at, eager())

    def _race_ended(self, race: Race, service: Service | None) -> None:
        """The race is over: its connection failures to the fleet; :meth:`stop` may end."""
        self.active.discard(race)
        if service is not None and race.connect_failures:
            self._fleet.after(service, connect_failed=True)
        if self._idle is not None and not self.active:
            self._idle.set()

    def _learn(
        self, route: str, race: Race, reason: SuppressReason | None,
        response: httpx.Response | None, timer: HedgeTimer, policy: Effective,
    ) -> SampleLeftOut | None:  # fmt: skip
        """What the delay learns from the race: the one place it learns.

        A request that may be hedged gives the delay policy its primary's latency on the
        wire (censored if a backup won, or if its caller left after the delay, by its
        own read timeout too: dropped, callers' deadlines pulled the delay below the
        tail; sooner, nothing); returned: why a due sample was left out (counted). One
        that may not be hedged and answered asks its route's delay now whether a backup
        would have been due (the race records its reason). A sample must be the
        replica's own latency (issue 24):

        - ``queued``: the primary never left the client's own pool queue;
        - ``replica_silent``: it ended in a silence of its replica that held it and
          another attempt (``_replicas.avoidance``): a freeze, steered around, which
          counted would lift every request's delay above the stalls;
        - ``client_lag``: the client's loop ran late by ``LAG_LEAVE_OUT`` of the delay or
          more (and ``LAG_FLOOR``, ``_policy.eligibility``) while the primary was on the
          wire, or typically as it ended (``LoopLag.during``): partly the client's time.
        """
        if reason is not None:
            if response is not None:  # the race returned: its caller did not cancel
                race.settle_ineligible(functools.partial(self._due, policy, route))
            return None
        learn, delay, loop = policy.learn, race.delay, timer.lag
        if learn is None or race.aborted or not race.attempts:
            return None
        primary = race.attempts[0]
        ok, wire = primary.ok, primary.on_wire
        waited = primary.ended - wire  # on the wire (NaN: still queued)
        if not ok and (race.cancelled_by_caller or primary.state != CANCELLED):  # no backup won
            left = primary.state == CANCELLED or isinstance(primary.error, httpx.ReadTimeout)
            if not (left and (delay is None or waited >= delay)):  # the caller's deadline
                return None  # a failure, or a caller that left before the delay: no sample
        left_out: SampleLeftOut | None = None
        floor = 0.0 if delay is None else max(LAG_FLOOR, LAG_LEAVE_OUT * delay)
        if math.isnan(wire):
            left_out = "queued"
        elif (  # first: a late client makes every replica look silent too
            delay is not None
            and (loop.typical >= floor or loop.marked >= wire)  # else during() < floor
            and (lag := loop.during(wire, primary.ended)) >= floor
        ):
            left_out = "client_lag"
            self._report.warn_lag(lag, delay, route, primary.ended)
        elif race.primary_stalled:
            left_out = "replica_silent"
        if left_out is not None:
            self.left_out[left_out] = self.left_out.get(left_out, 0) + 1
            return left_out
        try:
            learn(route, max(0.0, waited), not ok, primary.ended)  # Attempt.latency, no call
        except Exception:  # a delay policy must never fail a request
            logger.warning("hedgeclient: delay policy record() failed", exc_info=True)
        return None

    def _due(self, policy: Effective, route: str) -> float | None:
        """``route``'s hedge delay now (after a request that may not be hedged: was a
        backup due?); ``None`` when the policy fails (logged)."""
        try:
            due = policy.delay.hedge_delay(route)
            return None if due is None else float(due)
        except Exception:  # a delay policy must never fail a request
            logger.warning("hedgeclient: delay policy hedge_delay() failed", exc_info=True)
            return None

    async def _repair(self) -> None:
        """After a race that cancelled an attempt or closed a loser; shielded."""
        if self._repairs.active:
            await run_shielded(self._repairs.after_race)
        lane = self._fleet.lane_repairs
        if lane is not None and lane.active:
            await run_shielded(lane.after_race)

    async def stop(self) -> None:
        """Refuse new requests; stop those in flight, wait until all unwound (shielded)."""
        self.closed = True
        self._repairs.closed = True
        if self.active:
            self._idle = current_timer().event()
            for race in list(self.active):
                race.cancel()
            await wait_shielded(self._idle)


def _eligibility(
    request: httpx.Request, policy: Effective, opted: bool | None, reasons: _Reasons | None
) -> tuple[SuppressReason | None, bytes | None]:
    """Why ``request`` may not be sent twice (``ineligible``, where every reason is
    chosen), or ``None``; and then its body (each attempt sends it again). A request with
    a read body and no setting of its own takes its lane's answer for its method
    (``reasons``, ``ineligible``'s on first use): nothing else of it changes the answer."""
    try:
        content: bytes | None = request.content
    except httpx.RequestNotRead:  # a stream: ineligible says so (after an opt-out)
        content = reasons = None
    method = request.method
    if reasons is None or method not in reasons:
        reason = ineligible(request, policy.methods, policy.max_hedges, opted)
        if reasons is not None:
            if len(reasons) >= 32:  # any string is a method: keep a few
                reasons.clear()
            reasons[method] = reason
    else:
        reason = reasons[method]
    return reason, (content if reason is None else None)
