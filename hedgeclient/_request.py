"""The request path of a ``HedgedTransport``: one request from the caller to its answer.

:class:`RequestPath` routes a request (``_replicas.services``, ``_policy.routes``),
decides whether it may be sent twice (``_policy.eligibility``), asks the delay policy for
its hedge delay, runs its race (``_race.race``) with the attempts sent by ``_wire.send``,
repairs the pool after a race that cancelled an attempt (``_compat``), and reports
(``_report``). The
transport (``_transport``) builds one from its checked arguments and closes it.

Strictly private.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
from collections.abc import Callable, Mapping
from typing import final

import anyio
import httpx

from hedgeclient._checks.transport import checked_delay
from hedgeclient._compat import Repairs
from hedgeclient._events import SampleLeftOut
from hedgeclient._extensions import check_extensions
from hedgeclient._fleet import Fleet
from hedgeclient._policy.budget import HedgeBudget
from hedgeclient._policy.delay import DelayPolicy, FixedDelay
from hedgeclient._policy.eligibility import LAG_FLOOR, LAG_LEAVE_OUT, LAG_SUPPRESS, ineligible
from hedgeclient._policy.routes import (
    DECIDE_ON_EXTENSION,
    FIRST_BYTE_KEY,
    Route,
    decision_point,
    match_route,
)
from hedgeclient._policy.tied import TiedRequests
from hedgeclient._race.race import Race
from hedgeclient._replicas.services import Origin, Service, origin_of, origin_str
from hedgeclient._report import Reporter
from hedgeclient._timer import HedgeTimer, current_timer, run_shielded, wait_shielded
from hedgeclient._wire.send import AttemptSender

__all__ = ["LAG_WARN_EVERY", "RequestPath", "TransportClosedError"]

logger = logging.getLogger("hedgeclient")

LAG_WARN_EVERY = 60.0
"""Seconds between two warnings that a client's event loop runs late."""


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
        sender: sends each attempt.
        delay: the delay policy.
        budget: the hedge budget.
        methods: the idempotency allow-list (upper case).
        non_fatal: statuses that do not end a race.
        max_hedges: backups per request.
        pass_others: send requests for origins not configured unchanged.
        route_key: names a request's route, or ``None`` for ``"<METHOD> <origin>"``.
        routes: the transport's routes.
        tied: tied requests, or ``None``.
        report: what each request reports.
        repairs: the inner transport's httpcore repairs.
        name: the transport's name.
    """

    __slots__ = (
        "_budget",
        "_delay",
        "_fleet",
        "_idle",
        "_inner",
        "_lag_warned",
        "_learns",
        "_max_hedges",
        "_methods",
        "_non_fatal",
        "_origins",
        "_pass_others",
        "_repairing",
        "_repairs",
        "_report",
        "_route_key",
        "_routes",
        "_send",
        "_services",
        "_tied",
        "active",
        "closed",
        "left_out",
        "name",
        "timer",
    )

    def __init__(
        self,
        *,
        inner: httpx.AsyncBaseTransport,
        fleet: Fleet,
        sender: AttemptSender,
        delay: DelayPolicy,
        budget: HedgeBudget,
        methods: frozenset[str],
        non_fatal: frozenset[int],
        max_hedges: int,
        pass_others: bool,
        route_key: Callable[[httpx.Request], str] | None,
        routes: tuple[Route, ...],
        tied: TiedRequests | None,
        report: Reporter,
        repairs: Repairs,
        name: str,
    ) -> None:
        self._inner = inner
        self._fleet = fleet
        self._services: Mapping[Origin, Service] = fleet.services
        self._send = sender.send
        self._delay = delay
        self._learns = type(delay) is not FixedDelay  # a fixed delay ignores samples
        self._budget = budget
        self._methods = methods
        self._non_fatal = non_fatal
        self._max_hedges = max_hedges
        self._pass_others = pass_others
        self._route_key = route_key
        self._routes = routes
        self._tied = tied
        self._report = report
        self._repairs = repairs
        lane = fleet.lane_repairs
        self._repairing = repairs.active or (lane is not None and lane.active)
        self.name = name
        self.closed = False
        # (scheme, host, port) as written -> origin, service
        self._origins: dict[object, tuple[Origin, Service | None]] = {}
        self.active: set[Race] = set()
        self._idle: anyio.Event | None = None
        self.left_out: dict[SampleLeftOut, int] = {}  # samples left out, by reason
        self.timer: HedgeTimer | None = None  # the last loop's timer: its lag, for a gauge
        self._lag_warned = -math.inf

    async def handle(self, request: httpx.Request) -> httpx.Response:
        """``HedgedTransport.handle_async_request`` (its docstring has the contract)."""
        if self.closed:
            msg = "Cannot send a request, as the HedgedTransport has been closed."
            raise RuntimeError(msg)
        timer = self.timer = current_timer()  # the backend, looked up once per request
        start = timer.time()
        url = request.url
        key = (url.scheme, url.host, url.port)  # cheap: not normalised (a cache key)
        found = self._origins.get(key)
        if found is None:
            if len(self._origins) >= 256:  # a client sending to many origins: keep a few
                self._origins.clear()
            origin = origin_of(url)
            found = self._origins[key] = (origin, self._services.get(origin))
        origin, service = found
        if service is None and self._pass_others:
            return await self._pass_through(request)
        extensions = request.extensions
        if len(extensions) > 1 or "timeout" not in extensions:  # httpx's only key
            check_extensions(extensions)  # a misspelt "hedge": refused before any send
        fleet = self._fleet
        if service is not None and fleet.discovered:
            await fleet.ensure(service, request)  # waits only for a first set
        origin_text = service.route_suffix if service is not None else origin_str(origin)
        matched = match_route(self._routes, request) if self._routes else None
        if matched is not None and matched.name is not None:
            route = matched.name
        elif self._route_key is None:
            route = f"{request.method} {origin_text}"
        elif not isinstance(route := self._route_key(request), str):
            msg = f"`route_key` must return a str, got {route!r}"
            raise TypeError(msg)
        first_byte = False
        if matched is not None or DECIDE_ON_EXTENSION in extensions:
            first_byte = decision_point(request, matched) == "first_byte"
            if first_byte:
                route += FIRST_BYTE_KEY  # times to the first byte, apart from header latencies
        opted = None if matched is None else matched.hedge
        reason = ineligible(request, self._methods, self._max_hedges, opted)
        delay: float | None = None
        timeout_at = deadline = math.inf
        if reason is None:
            delay = self._delay.hedge_delay(route)
            if delay is not None and not (type(delay) is float and 0.0 <= delay < math.inf):
                delay = checked_delay(self._delay, delay, route)  # never a NaN in a race
            self._budget.deposit()
            timeout = extensions.get("timeout")
            read = timeout.get("read") if timeout else None
            if read is not None:
                timeout_at = start + read
            deadline = min(timeout_at, timer.deadline())
        report = self._report
        trace = None if report.otel is None else report.begin(request, route, delay, start)
        send = functools.partial(
            self._send,
            request,
            service,
            None if reason is not None else request.content,
            timeout_at,
            trace,
            first_byte,
        )
        race = Race(
            send,
            service=service,
            origin=origin_text,
            delay=delay,
            max_backups=self._max_hedges,
            ineligible=reason,
            choice=fleet.choice,
            budget=self._budget,
            non_fatal=self._non_fatal,
            start=start,
            deadline=deadline,
            tie_offset=None if self._tied is None else self._tie_offset(request, service, reason),
            timer=timer,
        )
        if reason is None and delay is None:
            race.suppressed = "cutoff"
        self.active.add(race)
        response: httpx.Response | None = None
        try:
            response = await race.run()
        finally:
            try:
                if race.needs_cleanup and self._repairing:
                    await self._repair()
            except BaseException:
                if response is not None:  # won, but the caller is gone: nobody else closes it
                    race.cancelled_by_caller = True
                    with contextlib.suppress(BaseException):  # the first exception goes on
                        await run_shielded(response.aclose)
                    response = None
                raise
            finally:  # only now may aclose() close the pool under the repair
                self.active.discard(race)
                if service is not None and race.connect_failures:
                    fleet.after(service, connect_failed=True)
                if self._idle is not None and not self.active:
                    self._idle.set()
                left_out = None
                if reason is None and self._learns and not race.cancelled_by_caller:
                    left_out = self._learn(route, race, timer)
                report.finish(
                    race, route, delay, reason, response, timer,
                    method=request.method, origin=origin_text, trace=trace,
                    left_out=left_out,
                )  # fmt: skip
        if response is None:  # aclose() stopped the race
            msg = "The HedgedTransport was closed while the request was in flight."
            raise TransportClosedError(msg, request=request)
        if self._repairs.active:
            self._repairs.guard(response)
        return response

    def _learn(self, route: str, race: Race, timer: HedgeTimer) -> SampleLeftOut | None:
        """Give the delay policy the primary's latency on the wire (censored if it was
        cancelled because a backup won): the one place the delay learns. Return why
        no sample was given, if one was due but left out (counted for the metrics).

        A sample must be the replica's own latency (issue 24). Left out:

        - ``queued``: the primary never left the client's own pool queue;
        - ``replica_silent``: it ended in a silence of its replica that held it and
          another attempt (``_replicas.avoidance``): what a freeze does, which is steered
          around, and which counted would lift every request's delay above the stalls;
        - ``client_lag``: the client's own event loop typically ran late by
          :data:`~hedgeclient._policy.eligibility.LAG_LEAVE_OUT` of the hedge delay or more (and
          at least :data:`~hedgeclient._policy.eligibility.LAG_FLOOR`) as the primary ended (a
          burst, a CPU-bound client): what was measured is partly the client's own
          time.
        """
        primary = race.attempts[0] if race.attempts else None
        if primary is None:
            return None
        ok = race.is_ok(primary)
        if not ok and not race.was_cancelled(primary):
            return None  # a failure: no latency to learn
        left_out: SampleLeftOut | None = None
        delay = race.delay
        lag = timer.lag.recent(primary.ended)
        if math.isnan(primary.on_wire):
            left_out = "queued"
        elif delay is not None and lag >= LAG_FLOOR and lag >= LAG_LEAVE_OUT * delay:
            # first: a late client makes every replica look silent too
            left_out = "client_lag"
            self._warn_lag(lag, delay, route, primary.ended)
        elif race.primary_stalled:
            left_out = "replica_silent"
        if left_out is not None:
            self.left_out[left_out] = self.left_out.get(left_out, 0) + 1
            return left_out
        try:
            self._delay.record(route, primary.latency, censored=not ok)
        except Exception:  # a delay policy must never fail a request
            logger.warning("hedgeclient: delay policy record() failed", exc_info=True)
        return None

    def _warn_lag(self, lag: float, delay: float, route: str, now: float) -> None:
        """One warning per :data:`LAG_WARN_EVERY` seconds at most: the loop is late."""
        if now < self._lag_warned + LAG_WARN_EVERY:
            return
        self._lag_warned = now
        logger.warning(
            "hedgeclient: the event loop of client %r runs late by %.1f ms, %.0f %% of "
            "the hedge delay of route %r (%.1f ms): latency samples are left out, and "
            "backups are suppressed (reason client_lag) from %.0f %% of the delay, until "
            "it catches up. The client is short of CPU, or blocks its loop "
            "(hedgeclient_event_loop_lag_seconds shows it).",
            self.name,
            lag * 1e3,
            100 * lag / delay,
            route,
            delay * 1e3,
            100 * LAG_SUPPRESS,
        )

    async def _repair(self) -> None:
        """After a race that cancelled an attempt or closed a loser; shielded."""
        if self._repairs.active:
            await run_shielded(self._repairs.after_race)
        lane = self._fleet.lane_repairs
        if lane is not None and lane.active:
            await run_shielded(lane.after_race)

    def _tie_offset(
        self, request: httpx.Request, service: Service | None, reason: object
    ) -> float | None:
        """The twin's offset in seconds if ``request`` goes tied, else ``None``."""
        if self._tied is None or service is None or reason is not None:
            return None
        return None if request.extensions.get("tie") is False else self._tied.offset

    async def _pass_through(self, request: httpx.Request) -> httpx.Response:
        """Send a request for an origin not in ``replicas`` unchanged (``other_origins``)."""
        try:
            return await self._inner.handle_async_request(request)
        except httpx.ConnectError as exc:
            logical = ", ".join(repr(s.route_suffix) for s in self._services.values())
            hint = (
                f"hedgeclient: {origin_str(origin_of(request.url))!r} is not one of the "
                f"logical origins in replicas= ({logical}); it was sent unchanged"
            )
            if hasattr(exc, "add_note"):  # Python 3.11+
                exc.add_note(hint)
            logger.info(hint)
            raise

    # -- closing ------------------------------------------------------------------------

    async def stop(self) -> None:
        """Refuse new requests; stop those in flight and wait until every one has
        unwound (shielded)."""
        self.closed = True
        self._repairs.closed = True
        if self.active:
            self._idle = anyio.Event()
            for race in list(self.active):
                race.cancel()
            await wait_shielded(self._idle)
