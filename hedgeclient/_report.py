"""What each request reports: its OpenTelemetry trace (begun before the race), and as
it ends ``HedgeInfo`` on the response and a ``RequestRecord`` for the hooks (metrics,
logging). The delay policy's sample is the request path's (``_sending``).

Strictly private.
"""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING, Any, cast, final

import anyio
import httpx

from hedgeclient._attempt import crossed_zone_of
from hedgeclient._events import (
    HedgeHook,
    HedgeInfo,
    RequestRecord,
    SampleLeftOut,
    SuppressReason,
    crossed_zone,
)
from hedgeclient._otel_gate import OtelGate
from hedgeclient._race.race import Race

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from hedgeclient._policy.delay import DelayPolicy
    from hedgeclient.instrumentation._hook import Hook
    from hedgeclient.instrumentation._otel_request import RequestTrace

logger = logging.getLogger("hedgeclient")

# The modules ``_otel_gate`` reads the global providers from.
_TRACE_MODULE = "opentelemetry.trace"
_METRICS_MODULE = "opentelemetry.metrics._internal"


@final
class Reporter:
    """Ends each request of one transport. Strictly private.

    Args:
        source: the transport (its ``name``, ``delay_policy`` and ``budget`` are what
            the metrics read).
        hooks: the caller's hooks, checked.
        metrics: ``HedgedTransport(metrics=...)``.
        opentelemetry: ``HedgedTransport(opentelemetry=...)``.
    """

    __slots__ = ("hooks", "metrics", "otel")

    def __init__(
        self,
        source: Any,
        hooks: tuple[HedgeHook, ...],
        metrics: bool | CollectorRegistry,
        opentelemetry: object = False,
    ) -> None:
        self.hooks = hooks  # the hooks given a RequestRecord
        # The Prometheus hooks: given the record when there is one, else only the facts
        # they count (Hook.count), for no RequestRecord is built then.
        self.metrics = _metrics_hooks(source, metrics)
        self.otel = OtelGate(opentelemetry) if opentelemetry is not False else None
        if self.otel is not None and self.otel.telemetry is not None:
            self.hooks += self.otel.telemetry.hooks()

    def begin(
        self,
        request: httpx.Request,
        route: str,
        delay: float | None,
        start: float,
        client: str,
    ) -> RequestTrace | None:
        """Start the request's OpenTelemetry trace (its span becomes current until
        :meth:`finish`); ``None`` when it is not traced. Never raises for a tracing bug."""
        otel = self.otel
        if otel is None or (
            otel.telemetry is None
            and _TRACE_MODULE not in sys.modules
            and _METRICS_MODULE not in sys.modules
        ):
            return None  # opentelemetry not even imported: no provider can be configured
        try:
            telemetry = otel.telemetry
            if telemetry is None:  # until a provider is configured: the cheap check
                telemetry = otel.ready()
                if telemetry is None:
                    return None
                new = tuple(h for h in telemetry.hooks() if h not in self.hooks)
                self.hooks += new
            return telemetry.begin(request, client=client, route=route, delay=delay, start=start)
        except Exception:  # tracing must never fail a request
            logger.warning("hedgeclient: starting the OpenTelemetry trace failed", exc_info=True)
            return None

    def finish(
        self,
        race: Race,
        route: str,
        delay: float | None,
        ineligible: SuppressReason | None,
        response: httpx.Response | None,
        policy: DelayPolicy,
        client: str,
        *,
        method: str = "",
        origin: str = "",
        trace: RequestTrace | None = None,
        left_out: SampleLeftOut | None = None,
    ) -> None:
        """Settle the suppress reason, set ``HedgeInfo`` on ``response``, end the trace
        and call the hooks. Never raises for a hook, tracing or policy bug. Called from
        the transport's ``finally``: an exception on its way out of the request is
        ``sys.exc_info()``. ``left_out`` says why the request path gave the delay
        policy no sample (:attr:`RequestRecord.sample_left_out`).

        A request that may not be hedged (``ineligible``) is counted as a suppressed
        backup only when one would have been due: its primary failed (the race saw
        that), or had no headers by the delay its route has now.
        """
        attempts = race.attempts
        primary = attempts[0] if attempts else None
        if (
            primary is not None
            and not race.cancelled_by_caller
            and ineligible is not None
            and race.suppressed is None
            and _was_due(policy, route, primary.latency)
        ):
            race.note_due()
        single = race.single_address
        records = race.records() if self.hooks or trace is not None else None
        if response is not None:
            winner = race.winner or next(a for a in attempts if a.response is response)
            if len(attempts) == 1:
                crossed = None
            elif records is not None:
                crossed = crossed_zone(records)
            else:
                crossed = crossed_zone_of(attempts, race.zones())
            response.extensions["hedge"] = _hedge_info(
                winner.number,
                winner.replica,
                len(attempts),
                delay,
                race.suppressed,
                single,
                crossed,
            )
        if not self.hooks and trace is None:
            if self.metrics:
                self._count(race, route, delay, response is not None, client, left_out)
            return
        try:
            trace_id = span_id = None
            if trace is not None and (self.hooks or self.metrics):  # the ids: exemplars
                trace_id, span_id = trace.ids()
            end = race.winner.ended if race.winner is not None else anyio.current_time()
            record = RequestRecord(
                client=client,
                route=route,
                outcome="ok" if response is not None else "error",
                duration=max(0.0, end - race.start),
                delay=delay,
                attempts=records if records is not None else race.records(),
                suppressed=race.suppressed,
                cancelled_by_caller=race.cancelled_by_caller,
                method=method,
                origin=origin,
                trace_id=trace_id,
                span_id=span_id,
                single_address=single,
                sample_left_out=left_out,
                event_loop_lag=race.loop_lag(end),
            )
            if trace is not None:
                _end_trace(trace, record, response, race.aborted)
            for hook in self.hooks + self.metrics:
                try:
                    hook(record)
                except Exception:  # a hook must never fail a request
                    logger.warning("hedgeclient: hook %r failed", hook, exc_info=True)
        finally:
            if trace is not None:
                trace.close()

    def _count(
        self,
        race: Race,
        route: str,
        delay: float | None,
        ok: bool,
        client: str,
        left_out: SampleLeftOut | None,
    ) -> None:
        """Give the Prometheus hooks the request's facts, no record built. Never raises
        for a hook bug."""
        winner = race.winner
        end = winner.ended if winner is not None else anyio.current_time()
        duration = max(0.0, end - race.start)
        attempts = race.attempts
        if winner is not None and len(attempts) == 1:  # the common case: the primary won
            response = winner.response
            status = response.status_code if response is not None else None
            for hook in self.metrics:
                try:
                    hook.count_won(
                        client,
                        route,
                        ok,
                        duration,
                        delay,
                        race.suppressed,
                        winner.replica,
                        status,
                        winner.duration,
                        left_out,
                    )
                except Exception:  # a hook must never fail a request
                    logger.warning("hedgeclient: hook %r failed", hook, exc_info=True)
            return
        facts = race.facts()
        for hook in self.metrics:
            try:
                hook.count(
                    client,
                    route,
                    ok,
                    duration,
                    delay,
                    race.suppressed,
                    race.cancelled_by_caller,
                    facts,
                    None,
                    left_out,
                )
            except Exception:  # a hook must never fail a request
                logger.warning("hedgeclient: hook %r failed", hook, exc_info=True)


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


def _was_due(policy: DelayPolicy, route: str, seconds: float) -> bool:
    """True if a backup would have been due after ``seconds`` on ``route``."""
    try:
        due = policy.hedge_delay(route)
        was_due = due is not None and seconds > due
    except Exception:  # reporting must never fail a request
        logger.warning("hedgeclient: delay policy hedge_delay() failed", exc_info=True)
        return False
    return was_due


def _metrics_hooks(source: Any, metrics: bool | CollectorRegistry) -> tuple[Hook, ...]:
    if metrics is False:
        return ()
    from hedgeclient.instrumentation import PrometheusMetrics  # lazy: only when metrics are on

    if metrics is True:
        registry = None
    else:
        from prometheus_client import CollectorRegistry  # lazy: only when metrics are on

        if not isinstance(metrics, CollectorRegistry):
            msg = f"`metrics` must be a bool or a CollectorRegistry, got {metrics!r}"
            raise TypeError(msg)
        registry = metrics
    # bind() returns an instrumentation Hook (typed as any HedgeHook in its public API)
    return (cast("Hook", PrometheusMetrics.for_registry(registry).bind(source)),)
