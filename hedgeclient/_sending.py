"""The request path of a ``HedgedTransport``: one request from the caller to its answer.

:class:`RequestPath` routes a request (``_routing``, ``_routes``), decides whether it
may be sent twice (``_policy``), asks the delay policy for its hedge delay, runs its
race (``_race``) with the attempts sent by ``_attempt_send``, repairs the pool after
a race that cancelled an attempt (``_compat``), and reports (``_report``). The
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

from hedgeclient._attempt_send import AttemptSender
from hedgeclient._budget import HedgeBudget
from hedgeclient._compat import Repairs
from hedgeclient._components import checked_delay
from hedgeclient._delay import DelayPolicy, FixedDelay
from hedgeclient._extensions import check_extensions
from hedgeclient._fleet import Fleet
from hedgeclient._policy import ineligible
from hedgeclient._race import Race
from hedgeclient._report import Reporter
from hedgeclient._routes import (
    DECIDE_ON_EXTENSION,
    FIRST_BYTE_KEY,
    Route,
    decision_point,
    match_route,
)
from hedgeclient._routing import Origin, Service, origin_of, origin_str
from hedgeclient._tied import TiedRequests
from hedgeclient._timer import current_timer, run_shielded, wait_shielded
from hedgeclient._urls import origin_key

__all__ = ["RequestPath", "TransportClosedError"]

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
        "name",
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
        self._origins: dict[object, tuple[Origin, Service | None]] = {}  # origin_key -> ...
        self.active: set[Race] = set()
        self._idle: anyio.Event | None = None

    async def handle(self, request: httpx.Request) -> httpx.Response:
        """``HedgedTransport.handle_async_request`` (its docstring has the contract)."""
        if self.closed:
            msg = "Cannot send a request, as the HedgedTransport has been closed."
            raise RuntimeError(msg)
        timer = current_timer()  # the backend, looked up once for the whole request
        start = timer.time()
        url = request.url
        key = origin_key(url)
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
        reason = ineligible(request, service, self._methods, self._max_hedges, opted)
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
        trace = (
            None if report.otel is None else report.begin(request, route, delay, start, self.name)
        )
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
                report.finish(
                    race, route, delay, reason, response, self._delay, self.name,
                    method=request.method, origin=origin_text, trace=trace,
                    learns=self._learns,
                )  # fmt: skip
        if response is None:  # aclose() stopped the race
            msg = "The HedgedTransport was closed while the request was in flight."
            raise TransportClosedError(msg, request=request)
        if self._repairs.active:
            self._repairs.guard(response)
        return response

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
