"""``HedgedTransport``: an httpx transport that hedges idempotent requests.

It wraps another ``httpx.AsyncBaseTransport`` (the middleware shape the httpx docs
recommend) and wires the pieces: argument checks (``_options``), replica routing
(``_routing``), the race (``_race``, ``_scheduler``), the hedge delay (``_delay``,
``_adaptive``), the hedge budget (``_budget``), replica choice (``_replicas``) and
hooks (``_events``).

Prior art: Dean & Barroso, "The Tail at Scale", CACM 56(2), 2013 (hedged requests
after the 95th-percentile latency); tower's ``hedge`` middleware; Finagle's backup
requests.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Collection, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, final

import anyio
import httpx

from hedgeclient import _h2_guard, _pool_guard
from hedgeclient._adaptive import AdaptiveDelay
from hedgeclient._budget import HedgeBudget
from hedgeclient._delay import DelayPolicy, FixedDelay, check_delay
from hedgeclient._events import HedgeHook, HedgeInfo, RequestRecord, SuppressReason
from hedgeclient._options import (
    check_attempt_header,
    check_bool,
    check_hooks,
    check_name,
    check_route_key,
    max_hedges_for,
    parse_methods,
    parse_statuses,
)
from hedgeclient._race import Cancellable, Race
from hedgeclient._replicas import PowerOfTwoChoices, ReplicaSelector
from hedgeclient._routing import Service, attempt_request, origin_of, origin_str, parse_replicas
from hedgeclient._scheduler import BackupScheduler

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

__all__ = ["DEFAULT_METHODS", "DEFAULT_NON_FATAL_STATUSES", "HedgedTransport"]

logger = logging.getLogger("hedgeclient")

DEFAULT_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
"""Methods hedged by default: the safe methods of RFC 9110, section 9.2.1. PUT and
DELETE are idempotent (section 9.2.2) but are not hedged by default: a late copy of
a PUT can overwrite a newer write made in between."""

DEFAULT_NON_FATAL_STATUSES = frozenset({502, 503, 504})
"""Statuses that do not end the race while another attempt may still answer."""


@final
class HedgedTransport(httpx.AsyncBaseTransport):
    """An httpx transport that sends hedged requests.

    Each idempotent request goes to one replica; if no response headers have arrived
    by the hedge delay, a backup request goes to a *different* replica; the first
    answer wins and the other attempt is cancelled (for HTTP/1.1 its connection is
    closed, so the replica sees a disconnect). Backups are capped by a token-bucket
    hedge budget. All times are in seconds.

    Example usage::

        transport = HedgedTransport(
            replicas={"http://catalog": ["http://10.0.0.7:8080", "http://10.0.0.8:8080"]},
        )
        async with httpx.AsyncClient(transport=transport, base_url="http://catalog") as c:
            response = await c.get("/items/42")
            response.extensions["hedge"]  # HedgeInfo(attempt=1, replica=..., ...)

    Per request, ``extensions={"hedge": False}`` turns hedging off and
    ``extensions={"hedge": True}`` opts a request in whatever its method (only do that
    for requests that are safe to apply twice). A request whose body is a stream
    (an async iterator) is never sent twice.

    Args:
        transport: the inner transport every attempt is sent through; default
            ``httpx.AsyncHTTPTransport()``. Closed by :meth:`aclose`.
        replicas: logical origin -> replica origins, e.g. ``{"http://catalog":
            ["http://10.0.0.7:8080", ...]}``. A request to a logical origin is sent
            to a replica with its path and query kept; its ``Host`` header stays the
            logical host (unless ``preserve_host=False``), and for https the
            ``sni_hostname`` extension is set to the logical host so certificates
            verify against the service name. A request to any other origin is sent
            unchanged, and its backup goes to that same origin (so its slowness may
            not be independent; ``AttemptRecord.replica`` shows it). Default: none.
        delay: the hedge delay: a float in seconds (finite, ≥ 0) for a fixed delay,
            or a :class:`~hedgeclient.DelayPolicy`; default
            :class:`~hedgeclient.AdaptiveDelay()` (the p95 of a rolling window).
        max_hedges: backups per request, int in [0, 4]. Backup k + 1 goes out one
            hedge delay after backup k, or at once when an attempt failed. With
            ``replicas``, at most the largest replica count minus one. Default
            (``None``): 1, or 0 when every configured service has a single replica.
        methods: the idempotency allow-list, default ``{"GET", "HEAD", "OPTIONS"}``
            (case-insensitive; RFC 9110 method names).
        non_fatal_statuses: statuses that do not end the race while another attempt
            may answer: error statuses, ints in [400, 599]; default
            ``{502, 503, 504}``. A 429 or a ``Retry-After`` header stops further
            backups for the request.
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
            default ``"Hedge-Attempt"``. Not a header HTTP or the request relies on
            (``Host``, ``Content-Length``, ``Authorization``, ``Idempotency-Key``,
            ``X-Request-Id``, conditional headers, ...).
        preserve_host: keep the logical ``Host`` header on replica requests; default
            true.
        hooks: callables given a :class:`~hedgeclient.RequestRecord` as each request
            ends (metrics, logging). A hook that raises is logged, never fatal.
        metrics: export Prometheus metrics (see :mod:`hedgeclient.instrumentation`):
            ``True`` (default) to prometheus-client's default registry, a
            ``CollectorRegistry`` to that one, ``False`` for none (nothing then runs
            on the request path for metrics).
        name: this client's name, the ``client`` label of its metrics; default
            ``"default"``.
        scheduler_task: opt in to the *backup scheduler*: when the transport is
            entered (``async with``, which ``httpx.AsyncClient`` does), start one
            long-lived task; a request answered before its hedge delay then runs in
            the caller's task and starts no task of its own (in-process, 1.4-1.5x the
            CPU of a bare httpx request instead of 2.1-2.5x; ``docs/benchmarks.md``).
            Its task group opens in ``__aenter__``: open and close the client with
            ``async with`` in one task, and close several such clients in the reverse
            order they were opened (see ``docs/how-it-works.md``, "Where the race
            runs"). Default false: one task group per hedged request, and no
            constraint on how the client is closed.

    Raises:
        TypeError: a parameter has the wrong type.
        ValueError: a parameter is out of range (the message names it and the range).

    .. versionadded:: 0.1.0
    """

    def __init__(
        self,
        transport: httpx.AsyncBaseTransport | None = None,
        *,
        replicas: Mapping[str, Sequence[str]] | None = None,
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
        name: str = "default",
        scheduler_task: bool = False,
    ) -> None:
        if transport is not None and not isinstance(transport, httpx.AsyncBaseTransport):
            msg = f"`transport` must be an httpx.AsyncBaseTransport, got {transport!r}"
            raise TypeError(msg)
        self._services = parse_replicas(replicas)
        self._max_hedges = max_hedges_for(max_hedges, self._services.values())
        self._methods = parse_methods(methods)
        self._non_fatal = parse_statuses(non_fatal_statuses)
        if delay is None:
            delay = AdaptiveDelay()
        elif not isinstance(delay, DelayPolicy):
            delay = FixedDelay(check_delay(delay, "delay", "a number of seconds or a DelayPolicy"))
        self._delay: DelayPolicy = delay
        if budget is not None and not isinstance(budget, HedgeBudget):
            msg = f"`budget` must be a HedgeBudget or None, got {budget!r}"
            raise TypeError(msg)
        self._budget = budget if budget is not None else HedgeBudget()
        if selector is not None and not isinstance(selector, ReplicaSelector):
            msg = f"`selector` must implement ReplicaSelector, got {selector!r}"
            raise TypeError(msg)
        self._selector: ReplicaSelector = selector or PowerOfTwoChoices()
        self._route_key = check_route_key(route_key)
        self._attempt_header = check_attempt_header(attempt_header)
        self._preserve_host = check_bool("preserve_host", preserve_host)
        self.name = check_name(name)
        self._scheduler_task = check_bool("scheduler_task", scheduler_task)
        self._hooks = check_hooks(hooks) + self._metrics_hooks(metrics)
        self._inner = transport if transport is not None else httpx.AsyncHTTPTransport()
        self._guard_pool = _pool_guard.has_pool(self._inner)
        _h2_guard.make_writes_cancel_safe(self._inner)
        self._closed = False
        self._active: set[Cancellable] = set()
        self._scheduler: BackupScheduler | None = None

    # -- configuration parsing ------------------------------------------------------

    def _metrics_hooks(self, metrics: bool | CollectorRegistry) -> tuple[HedgeHook, ...]:
        if metrics is False:
            return ()
        from hedgeclient.instrumentation import PrometheusMetrics  # lazy: only when metrics are on

        if metrics is True:
            return (PrometheusMetrics.for_registry(None).bind(self),)
        from prometheus_client import CollectorRegistry  # lazy: only when metrics are on

        if not isinstance(metrics, CollectorRegistry):
            msg = f"`metrics` must be a bool or a CollectorRegistry, got {metrics!r}"
            raise TypeError(msg)
        return (PrometheusMetrics.for_registry(metrics).bind(self),)

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
    def inner(self) -> httpx.AsyncBaseTransport:
        """The wrapped transport."""
        return self._inner

    # -- the request path -------------------------------------------------------------

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request``, hedged when it is eligible; return the winner's response.

        The response's body stream is untouched (``client.stream(...)`` works), and
        ``response.extensions["hedge"]`` holds a :class:`~hedgeclient.HedgeInfo`.

        Raises:
            RuntimeError: the transport is closed.
            TypeError: ``route_key`` returned something other than a str, or the delay
                policy's ``hedge_delay()`` something other than a number or None.
            ValueError: the delay policy returned a negative, NaN or infinite delay.
            TransportClosedError: the transport was closed while this request was in
                flight.
            httpx.HTTPError: when every attempt failed without a response, the last
                attempt's own exception (for example ``httpx.ConnectError``); never an
                ``ExceptionGroup``.
        """
        if self._closed:
            msg = "Cannot send a request, as the HedgedTransport has been closed."
            raise RuntimeError(msg)
        origin = origin_of(request.url)
        service = self._services.get(origin)
        origin_text = service.route_suffix if service is not None else origin_str(origin)
        method = request.method
        if self._route_key is None:
            route = f"{method} {origin_text}"
        elif not isinstance(route := self._route_key(request), str):
            msg = f"`route_key` must return a str, got {route!r}"
            raise TypeError(msg)
        ineligible = self._ineligible(request, service)
        body = None if ineligible is not None else request.content
        delay: float | None = None
        if ineligible is None:
            delay = self._delay.hedge_delay(route)
            if delay is not None and not (type(delay) is float and 0.0 <= delay < math.inf):
                delay = self._checked_delay(delay, route)  # never a NaN inside the race
            self._budget.deposit()
        race = Race(
            self,
            request,
            service=service,
            origin=origin_text,
            body=body,
            delay=delay,
            max_backups=self._max_hedges if ineligible is None else 0,
            selector=self._selector,
            budget=self._budget,
            non_fatal=self._non_fatal,
            start=anyio.current_time(),
        )
        if ineligible is None and delay is None and self._max_hedges:
            race.suppressed = "cutoff"
        response: httpx.Response | None = None
        scheduler = self._scheduler
        try:
            if delay is not None and scheduler is not None and scheduler.running:
                response = await race.run_scheduled(scheduler, self._active)
            else:  # not entered: a task group per hedged request (Race.run)
                scope = anyio.CancelScope()
                self._active.add(scope)
                try:
                    with scope:
                        response = await race.run()
                finally:
                    self._active.discard(scope)
        finally:
            if race.needs_pool_cleanup and self._guard_pool:
                await _pool_guard.evict_orphans(self._inner)
                await _h2_guard.reset_orphaned_streams(self._inner)
            self._finish(race, route, delay, ineligible, response)
        if response is None:  # our scope was cancelled by aclose()
            msg = "The HedgedTransport was closed while the request was in flight."
            raise TransportClosedError(msg, request=request)
        # No winner (every attempt failed): name the attempt whose response is returned.
        winner = race.winner or next(a for a in race.attempts if a.response is response)
        response.extensions["hedge"] = HedgeInfo(
            attempt=winner.number,
            replica=winner.replica,
            attempts=len(race.attempts),
            delay=delay,
            suppressed=race.suppressed,
        )
        return response

    async def _send_attempt(self, race: Race, number: int, replica: str) -> httpx.Response:
        """Send attempt ``number`` of ``race.request`` to ``replica`` (:class:`AttemptSender`)."""
        attempt = attempt_request(
            race.request,
            race.service,
            replica,
            number,
            race.body,
            attempt_header=self._attempt_header,
            preserve_host=self._preserve_host,
        )
        try:
            return await self._inner.handle_async_request(attempt)
        except anyio.get_cancelled_exc_class():
            if self._guard_pool:  # synchronously, before the next checkpoint
                _h2_guard.repair_after_cancel(self._inner)
            raise

    def _checked_delay(self, delay: object, route: str) -> float:
        """Return the policy's ``delay`` as float seconds (:func:`check_delay`), or raise
        the same error type naming the policy."""
        try:
            return check_delay(delay, "delay", "a number of seconds")
        except (TypeError, ValueError) as exc:
            msg = (
                f"{self._delay!r}.hedge_delay({route!r}) returned {delay!r}; a DelayPolicy "
                "must return a finite number of seconds >= 0, or None"
            )
            raise type(exc)(msg) from None

    def _ineligible(self, request: httpx.Request, service: Service | None) -> SuppressReason | None:
        """Why ``request`` may not be sent twice, or None when it may."""
        flag = request.extensions.get("hedge")
        if flag is False:
            return "opted_out"
        if flag is not True and request.method not in self._methods:
            return "not_idempotent"
        try:
            request.content  # noqa: B018 - raises when the body is a stream
        except httpx.RequestNotRead:
            return "unreplayable_body"
        if service is not None and len(service.replicas) < 2:
            return "no_other_replica"
        if self._max_hedges == 0:
            return "opted_out"
        return None

    def _finish(
        self,
        race: Race,
        route: str,
        delay: float | None,
        ineligible: SuppressReason | None,
        response: httpx.Response | None,
    ) -> None:
        """Record the primary's latency, settle ``race.suppressed``, and call the hooks.

        A request that may not be hedged (``ineligible``) is counted as a suppressed
        backup only when one would have been due: its primary failed, or had no
        headers by the delay its route has now. ``HedgeInfo`` and ``RequestRecord``
        then give the same reason.
        """
        attempts = race.attempts
        primary = attempts[0] if attempts else None
        if primary is not None and not race.cancelled_by_caller and ineligible is None:
            try:
                if race.is_ok(primary):
                    self._delay.record(route, primary.duration, censored=False)
                elif race.outcome_of(primary) == "cancelled":
                    self._delay.record(route, primary.duration, censored=True)
            except Exception:  # a delay policy must never fail a request
                logger.warning("hedgeclient: delay policy record() failed", exc_info=True)
        if (
            race.suppressed is None
            and ineligible is not None
            and primary is not None
            and (not race.is_ok(primary) or self._was_due(route, primary.duration))
        ):
            race.suppressed = ineligible
        if not self._hooks:
            return
        now = anyio.current_time()
        suppressed = race.suppressed
        record = RequestRecord(
            client=self.name,
            route=route,
            outcome="ok" if response is not None else "error",
            duration=(race.winner.ended if race.winner is not None else now) - race.start,
            delay=delay,
            attempts=race.records(),
            suppressed=suppressed,
            cancelled_by_caller=race.cancelled_by_caller,
        )
        for hook in self._hooks:
            try:
                hook(record)
            except Exception:  # a hook must never fail a request
                logger.warning("hedgeclient: hook %r failed", hook, exc_info=True)

    def _was_due(self, route: str, seconds: float) -> bool:
        """True if a backup would have been due after ``seconds`` on ``route``."""
        try:
            due = self._delay.hedge_delay(route)
            was_due = due is not None and seconds > due
        except Exception:  # reporting must never fail a request
            logger.warning("hedgeclient: delay policy hedge_delay() failed", exc_info=True)
            return False
        return was_due

    # -- lifecycle ----------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the transport: cancel requests in flight, then close the inner one.

        Requests in flight end with :class:`TransportClosedError`; a request sent
        after this raises ``RuntimeError``. Idempotent.
        """
        if self._closed:
            return
        self._closed = True
        if self._scheduler is not None:
            self._scheduler.stop()
        for request in list(self._active):
            request.cancel()
        await self._inner.aclose()

    async def __aenter__(self) -> HedgedTransport:
        """Enter the inner transport and start the backup scheduler's task.

        ``httpx.AsyncClient`` enters its transport in its own ``async with``. With
        ``scheduler_task=True``, a request answered before its hedge delay then runs
        no task of its own; otherwise (or when the transport is not entered) each
        hedged request has a task group of its own, with the same results. With the
        scheduler, exit in the task that entered, and clients in the reverse order they
        were entered (as ``async with`` does).
        """
        await self._inner.__aenter__()
        if self._scheduler_task and self._scheduler is None and not self._closed:
            scheduler = BackupScheduler()
            await scheduler.open()
            self._scheduler = scheduler
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: TracebackType | None = None,
    ) -> None:
        """Close the transport (:meth:`aclose`), then stop the backup scheduler.

        Raises:
            RuntimeError: with ``scheduler_task=True``, exited out of nesting order
                (after a client entered later, or inside a scope entered since).
        """
        try:
            await self.aclose()
        finally:
            if self._scheduler is not None:
                await self._scheduler.aclose()

    def __repr__(self) -> str:
        services = {s.route_suffix: list(s.replicas) for s in self._services.values()}
        return (
            f"HedgedTransport(name={self.name!r}, replicas={services!r}, "
            f"delay={self._delay!r}, max_hedges={self._max_hedges}, "
            f"scheduler_task={self._scheduler_task})"
        )


class TransportClosedError(httpx.TransportError):
    """A request was in flight when its :class:`HedgedTransport` was closed.

    .. versionadded:: 0.1.0
    """
