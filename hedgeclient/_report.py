"""What each request reports: its OpenTelemetry trace (begun before the race), and as
it ends ``HedgeInfo`` on the response and one event: its ``RequestRecord``, handed to
every consumer (the caller's hooks, the OpenTelemetry metrics, the trace's end and,
inside a ``RequestEnd``, the Prometheus metrics). The delay policy's sample is the
request path's (``_request``).

The record is built once per request, and only when something reads it: the
Prometheus metrics count a request whose primary alone answered (most) from the
``RequestEnd``'s few facts, so with metrics on and no hook or trace such a request
builds no record; with no consumer at all, nothing is built (``HedgeInfo`` is read
from the race itself).

The Prometheus consumer is off the request path: the ``RequestEnd`` goes to its
client's buffer (``deque.append``, a C-level call; no Python function of
``instrumentation``), counted in order when the counts are read, when the buffer is
full (``PENDING_EVENTS``), for a traced request and when the transport closes
(``instrumentation._hook``). The hooks and the OpenTelemetry metrics (a hook, once a
provider is configured) stay synchronous: they run only when configured.

Strictly private.
"""

from __future__ import annotations

import logging
import math
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Literal, ParamSpec, TypeVar, final

import httpx

from hedgeclient._attempt import crossed_zone_of, records
from hedgeclient._checks import shown
from hedgeclient._compat.otel import METRICS_MODULE, TRACE_MODULE
from hedgeclient._events import (
    HedgeHook,
    HedgeInfo,
    RequestEnd,
    RequestRecord,
    SampleLeftOut,
    SuppressReason,
)
from hedgeclient._otel_gate import OtelGate
from hedgeclient._policy.eligibility import LAG_SUPPRESS
from hedgeclient._timer import now as loop_now

if TYPE_CHECKING:
    from collections import deque

    from prometheus_client import CollectorRegistry

    from hedgeclient._discovery import DiscoveryStatistics
    from hedgeclient._policy.budget import HedgeBudget
    from hedgeclient._policy.delay import DelayPolicy
    from hedgeclient._race.race import Race
    from hedgeclient._timer import HedgeTimer, LoopLag
    from hedgeclient.instrumentation._hook import Hook
    from hedgeclient.instrumentation._otel_request import RequestTrace

logger = logging.getLogger("hedgeclient")

LAG_WARN_EVERY = 60.0
"""Seconds between two warnings that a client's event loop runs late, and between two
tracebacks of a failing backup hook."""

_P = ParamSpec("_P")
_R = TypeVar("_R")


@final
class Reporter:
    """Ends each request of one transport. Strictly private.

    Args:
        name: the transport's name (the records' ``client``).
        hooks: the caller's hooks, checked.
        metrics: ``HedgedTransport(metrics=...)``.
        opentelemetry: ``HedgedTransport(opentelemetry=...)``.
        delay_policy: the transport's (its snapshots feed the delay gauge).
        budget: the transport's hedge budget (its balance is a gauge).
        replicas: reads each service's replica set (the replica gauges), or ``None``.
        selector: the transport's replica selector (its ``statistics()``, if it has
            one, feeds the ejection gauges).
        non_fatal: the transport's non-fatal statuses (an attempt's outcome).
        route_budgets: the routes' own hedge budgets, by route label (a gauge each).

    Raises:
        TypeError: ``metrics`` is neither a bool nor a ``CollectorRegistry``, or
            ``opentelemetry`` neither a bool nor an ``OpenTelemetry``.
    """

    __slots__ = (
        "__weakref__", "_drain", "_full", "_hook_unlogged", "_hook_warned", "_lag_warned",
        "_loop", "_name", "_non_fatal", "_pending", "_policy", "hooks", "otel",
    )  # fmt: skip

    def __init__(
        self,
        name: str,
        hooks: tuple[HedgeHook, ...],
        metrics: bool | CollectorRegistry,
        opentelemetry: object,
        delay_policy: DelayPolicy,
        budget: HedgeBudget,
        replicas: Callable[[], Mapping[str, DiscoveryStatistics]] | None = None,
        selector: object = None,
        non_fatal: frozenset[int] = frozenset(),
        route_budgets: Mapping[str, HedgeBudget] | None = None,
    ) -> None:
        self._name = name
        self._non_fatal = non_fatal
        self._policy = delay_policy
        self._lag_warned = self._hook_warned = -math.inf
        self._hook_unlogged = 0  # hook failures since the last one logged
        self._loop: _LastLoop | None = None  # the loop lag gauge's, with metrics on
        # The consumers of each request's event: those that read its record at once (the
        # hooks, the OpenTelemetry metrics from when a provider is configured), and the
        # Prometheus metrics' buffer of events, which that side drains.
        self.hooks = hooks
        self._pending: deque[RequestEnd] | None = None
        self._drain: Callable[[], object] = tuple  # no buffer: a no-op (tuple() is ())
        self._full = 0
        self.otel = OtelGate(opentelemetry) if opentelemetry is not False else None
        if self.otel is not None and self.otel.telemetry is not None:
            self.hooks += self.otel.telemetry.hooks()
        if metrics is not False:
            self._loop = loop = _LastLoop()
            parts = (loop, budget, replicas, selector, route_budgets)
            hook, self._full = self._prometheus(metrics, *parts)
            self._pending, self._drain = hook.pending, hook.drain

    def warn_lag(self, lag: float, delay: float, route: str, now: float) -> None:
        """Warn that the client's loop runs ``lag`` seconds late, ``delay`` being the
        hedge delay of ``route``; once per :data:`LAG_WARN_EVERY` seconds at most."""
        if now < self._lag_warned + LAG_WARN_EVERY:
            return
        self._lag_warned = now
        logger.warning(
            "hedgeclient: client %r runs late by %.1f ms (its event loop, or a sync "
            "client's timer thread), %.0f %% of the hedge delay of route %r (%.1f ms): its "
            "latency samples are left out until it catches up, and from a lag of %.0f %% "
            "of the delay, backups are held back too (reason client_lag). The client is "
            "short of CPU, or blocks its loop or holds the GIL "
            "(hedgeclient_event_loop_lag_seconds shows it).",
            self._name,
            lag * 1e3,
            100 * lag / delay,
            route,
            delay * 1e3,
            100 * LAG_SUPPRESS,
        )

    def logged_hook(self, prepare: Callable[_P, _R]) -> Callable[_P, _R]:
        """``prepare`` (the backup hook's step, ``AttemptSender.prepare``), its failures
        logged with their traceback once per :data:`LAG_WARN_EVERY` seconds at most, the
        next one logged giving the count of the others: a hook that fails on every
        backup must not flood the log. Each failure still raises, so the race counts
        every one (``hook_error``)."""

        def logged(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            try:
                return prepare(*args, **kwargs)
            except Exception:
                now = loop_now()  # called on the request's loop
                if now < self._hook_warned + LAG_WARN_EVERY:
                    self._hook_unlogged += 1
                    raise
                more, self._hook_warned, self._hook_unlogged = self._hook_unlogged, now, 0
                message = "hedgeclient: the backup hook (on_backup) failed; no backup"
                if more:
                    message += f" ({more} more failure(s) of client {self._name!r} not logged)"
                logger.warning(message, exc_info=True)
                raise

        return logged

    def begin(
        self,
        request: httpx.Request,
        route: str,
        delay: float | None,
        start: float,
    ) -> RequestTrace | None:
        """Start the request's OpenTelemetry trace (its span becomes current until
        :meth:`finish`); ``None`` when it is not traced. Never raises for a tracing bug."""
        otel = self.otel
        if otel is None or (
            otel.telemetry is None
            and TRACE_MODULE not in sys.modules
            and METRICS_MODULE not in sys.modules
        ):
            return None  # opentelemetry not even imported: no provider can be configured
        try:
            telemetry = otel.telemetry
            if telemetry is None:  # until a provider is configured: the cheap check
                telemetry = otel.ready()
                if telemetry is None:
                    return None
                self.hooks += tuple(h for h in telemetry.hooks() if h not in self.hooks)
            return telemetry.begin(
                request, client=self._name, route=route, delay=delay, start=start
            )
        except Exception:  # tracing must never fail a request
            logger.warning("hedgeclient: starting the OpenTelemetry trace failed", exc_info=True)
            return None

    def finish(
        self,
        race: Race,
        route: str,
        delay: float | None,
        response: httpx.Response | None,
        timer: HedgeTimer,
        *,
        method: str = "",
        origin: str = "",
        trace: RequestTrace | None = None,
        left_out: SampleLeftOut | None = None,
    ) -> None:
        """Set ``HedgeInfo`` on ``response``, then hand the request's event to the
        trace's end and every consumer; the race is only read (its suppress reason is
        settled before, ``_policy.eligibility``). Never raises for a hook or tracing bug.
        Called from the transport's ``finally``: an exception on its way out of the
        request is ``sys.exc_info()``. ``timer`` is the request's loop's (its lag goes in
        the event and the gauge); ``left_out`` says why the request path gave the delay
        policy no sample (:attr:`RequestRecord.sample_left_out`).
        """
        attempts, service, winner = race.attempts, race.service, race.winner  # read, no call
        single = service is None or service.single  # one address, or an origin not configured
        zones = None if service is None else service.zones
        if response is not None:
            won = winner or next(a for a in attempts if a.response is response)
            crossed = None
            if len(attempts) > 1 and zones:
                crossed = crossed_zone_of(attempts, zones)
            response.extensions["hedge"] = _hedge_info(
                won.number, won.replica, len(attempts), delay, race.suppressed, single, crossed
            )
        hooks, pending = self.hooks, self._pending
        if not hooks and pending is None and trace is None:
            return
        lag = timer.lag
        if self._loop is not None:
            self._loop.lag = lag
        try:
            trace_id = span_id = None
            if trace is not None and (hooks or pending is not None):  # the ids: exemplars
                trace_id, span_id = trace.ids()
            end = winner.ended if winner is not None else timer.time()
            sole = None  # set when the primary alone answered, with no exemplar: most
            if response is not None and winner is not None and len(attempts) == 1:
                answer = winner.response
                status = answer.status_code if answer is not None else None
                seconds = max(0.0, winner.ended - winner.started)  # its duration, no call
                sole = None if trace_id is not None else (winner.replica, status, seconds)
            outcome: Literal["ok", "error"] = "ok" if response is not None else "error"
            duration = max(0.0, end - race.start)
            record = None
            if hooks or trace is not None or sole is None:
                record = RequestRecord(  # positional: a frozen dataclass's keywords cost more
                    self._name,  # client
                    route,
                    outcome,
                    duration,
                    delay,
                    records(attempts, race.start, winner, self._non_fatal, zones),
                    race.suppressed,
                    race.cancelled_by_caller,
                    method,
                    origin,
                    trace_id,
                    span_id,
                    single,  # single_address
                    left_out,  # sample_left_out
                    # event_loop_lag: what left the sample out, else typical (0: no call)
                    lag.during(attempts[0].on_wire, attempts[0].ended)
                    if left_out == "client_lag"
                    else lag.recent(end)
                    if lag.typical
                    else 0.0,
                )
            if trace is not None and record is not None:
                _end_trace(trace, record, response, race.aborted)
            if record is not None:
                for hook in hooks:
                    try:
                        hook(record)
                    except Exception:  # a hook must never fail a request
                        logger.warning("hedgeclient: hook %r failed", hook, exc_info=True)
            if pending is not None:  # the Prometheus side counts it (instrumentation._hook)
                pending.append(  # positional, as the record; a C-level call
                    RequestEnd(
                        self._name, route, outcome, duration, delay, race.suppressed,
                        left_out, sole, record,
                    )
                )  # fmt: skip
                if len(pending) >= self._full or trace_id is not None:
                    self._drain()  # bounded memory; an exemplar's own time. Never raises
        finally:
            if trace is not None:
                trace.close()

    def flush(self) -> None:
        """Count the Prometheus metrics' buffered events now (the transport closes: its
        final counts complete). Never raises."""
        self._drain()

    def _prometheus(
        self,
        metrics: bool | CollectorRegistry,
        loop: _LastLoop,
        budget: HedgeBudget,
        replicas: Callable[[], Mapping[str, DiscoveryStatistics]] | None,
        selector: object,
        route_budgets: Mapping[str, HedgeBudget] | None,
    ) -> tuple[Hook, int]:
        """The Prometheus consumer of ``metrics`` (``True``: the default registry), its
        buffer's bound (events); its gauges read callables of the parts, never the
        transport, while this reporter lives."""
        from prometheus_client import CollectorRegistry  # lazy: only when metrics are on

        from hedgeclient.instrumentation._prometheus import hook_for
        from hedgeclient.instrumentation._readers import gauge_readers
        from hedgeclient.instrumentation._series import PENDING_EVENTS

        if metrics is not True and not isinstance(metrics, CollectorRegistry):
            msg = f"`metrics` must be a bool or a CollectorRegistry, got {shown(metrics)}"
            raise TypeError(msg)
        readers = gauge_readers(
            self._name,
            budget,
            self._policy,
            event_loop_lag=loop.typical,
            replicas=replicas,
            selector=selector,
            route_budgets=route_budgets,
        )
        return hook_for(None if metrics is True else metrics, self, readers), PENDING_EVENTS


@final
class _LastLoop:
    """The loop of the transport's latest request, for the loop lag gauge. Strictly
    private.

    Written on the event loop (a reference replaced whole), read from the scrape thread.
    """

    __slots__ = ("lag",)

    def __init__(self) -> None:
        self.lag: LoopLag | None = None

    def typical(self) -> float:
        """How late that loop typically runs lately, in seconds (0.0 before a request)."""
        lag = self.lag
        return 0.0 if lag is None else lag.typical


_infos: dict[tuple[object, ...], HedgeInfo] = {}  # the frozen HedgeInfos seen lately


def _hedge_info(
    attempt: int,
    replica: str,
    attempts: int,
    delay: float | None,
    suppressed: SuppressReason | None,
    single: bool,
    crossed: bool | None,
) -> HedgeInfo:
    """A :class:`HedgeInfo` with these fields; the same (immutable) object as a recent
    request's with the same fields, as most are (a fixed delay, a few replicas)."""
    key = (attempt, replica, attempts, delay, suppressed, single, crossed)
    info = _infos.get(key)
    if info is None:
        if len(_infos) >= 256:  # an adaptive delay makes every key new: keep a few
            _infos.clear()
        info = _infos[key] = HedgeInfo(
            attempt=attempt,
            replica=replica,
            attempts=attempts,
            delay=delay,
            suppressed=suppressed,
            single_address=single,
            crossed_zone=crossed,
        )
    return info


def _end_trace(
    trace: RequestTrace, record: RequestRecord, response: httpx.Response | None, aborted: bool
) -> None:
    """End the request's spans; log, never raise, on a tracing bug."""
    try:
        status = response.status_code if response is not None else None
        trace.end(record, status, aborted, None if response is not None else sys.exc_info()[1])
    except Exception:  # tracing must never fail a request
        logger.warning("hedgeclient: ending the OpenTelemetry spans failed", exc_info=True)
