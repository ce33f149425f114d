"""The adaptive hedge delay: a rolling quantile of each route's recent latencies.

:class:`AdaptiveDelay` is the transport's default :class:`~hedgeclient.DelayPolicy`. It
keeps a :class:`~hedgeclient._policy.histogram.RotatingHistogram` per route and hedges at its
``quantile`` (p95 by default): the backup is then sent for about 5 % of requests, the
extra load, and the median is unchanged. A static delay drifts out of date; this one
follows the latency law within a window.

The delay is cached per route, so :meth:`~AdaptiveDelay.hedge_delay` is a dict lookup
(the request path makes it without a Python call). The cache is refreshed (a quantile
over the window) from :meth:`~AdaptiveDelay.record`, when ``refresh_samples`` new samples
have arrived or one arrives ``refresh_interval`` seconds or more after the last refresh:
both need a new sample, so an idle route costs nothing. With the defaults a route
refreshes at most about once a second, or once per 1,000 samples when it is busier
(``benchmarks/bench_delay_cost.py`` measures the cost).

A sample waits in its route's queue until the cached delay may change: a refresh due
(by count or by time), a warming route whose window may reach ``min_samples``, a
suspended route (each sample may end the suspension); or until 64 wait. Then the queue
is folded into the route's window (``_policy.window``), each sample at its own time and
in the order it came, which is what recording each one as it came would have left; so
a request that changes no delay (most) touches this module only (``statistics`` folds).

Each change of a cached delay publishes a copy of the route -> delay mapping (O(routes));
a route added or evicted changes a set under a lock (O(1)); ``delay_snapshot`` joins the
two on the metrics' scrape thread, never touching the event loop's state.

Prior art: Dean & Barroso, "The Tail at Scale", CACM 56(2), 2013 (hedge after the p95);
tower's ``hedge`` middleware (a rotating histogram per service, no hedging before
``min_data_points``); HdrHistogram (Gil Tene).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from types import MappingProxyType
from typing import final

from hedgeclient._checks import as_seconds, check_clock, check_int, check_number, check_seconds
from hedgeclient._clock import default_clock
from hedgeclient._policy.delay import MAX_DELAY, Delays, DelaySnapshot, FixedDelay
from hedgeclient._policy.histogram import RotatingHistogram, check_window
from hedgeclient._policy.window import AdaptiveDelayStatistics, RouteStatistics, _Route, _Settings

__all__ = [
    "AdaptiveDelay", "AdaptiveDelayStatistics", "RouteStatistics", "derive", "shortest_delay",
]  # fmt: skip

_Queue = list[tuple[float, float, bool]]  # samples not folded yet: (seconds, at, censored)
_QUEUED = 64  # a queue this long is folded anyway: memory per route stays small


@final
class AdaptiveDelay:
    """Hedge each route after a rolling quantile of its recent latencies.

    The delay of a route is ``max(min_delay, q-quantile of its window)``, or ``None``
    (hedging suspended, the transport's suppressed reason ``cutoff``) when that is above
    ``max_delay``: when everything is that slow a backup buys little and adds load to a
    struggling service. A suspended route resumes as soon as its newest
    ``recovery_samples`` latencies are back below ``max_delay``, without waiting for the
    slow ones to leave the window (``hedgeclient._policy.window`` gives the rule).
    Until the window holds ``min_samples`` samples the delay is ``initial_delay``, and
    it goes back to it when a quiet route's window drains below ``min_samples``: a route
    seeing under ``min_samples / window`` requests per second (100 per minute by
    default) stays on ``initial_delay``. Once ``min_samples`` more samples have been
    recorded at the delay a warm-up learned, the window keeps those alone: the warm-up's
    were measured at a placeholder (``hedgeclient._policy.window`` says why).

    **Censored samples.** A primary cancelled because its backup won is recorded at its
    elapsed time ``c`` (``censored=True``), a lower bound on its true latency ``X``. With
    ``d`` the current delay, a backup is only sent when ``X > d``, so ``d < c < X``: a
    censored value lies on the same side of ``d`` as the true one. Counts on either side
    of ``d`` are therefore exactly those of the uncensored law, and when ``d`` is the
    ``q``-quantile the recorded ``q``-quantile is still ``d``: the estimate is unbiased
    at its own fixed point (only quantiles above ``q`` are compressed). Recording only
    winners (dropping the cancelled primaries) instead removes samples from above ``d``
    only, which pulls the estimated quantile below ``d``; a lower delay hedges more
    requests, which removes more samples from above it: a feedback loop that settles
    well below the true quantile (the unit tests measure it).

    A censored value is kept at most a sixteenth above the route's delay: past the delay
    it is the *backup's* latency, which kept whole stepped the delay into a gap of the
    law (``hedgeclient._policy.window``, ``docs/benchmarks.md``, "Censored samples"); at
    or below the delay (suspended: ``max_delay``) it tells no side, and is not recorded.

    A route is tracked from its first recorded sample; recency for ``max_routes`` is by
    recorded sample: the route recorded least recently is evicted first.
    :meth:`hedge_delay` never mutates anything, so a route asked for its delay whose
    primaries gave no sample yet (or only samples left out) is not tracked.

    Single-event-loop state: not thread-safe, except :meth:`delay_snapshot`, which any
    thread may call. :meth:`statistics` and :meth:`delays` never read the clock.

    Args:
        quantile: the latency quantile to hedge at, in (0, 1). Default 0.95, an extra
            load of about 5 %.
        window: the span of each route's latency window, in seconds; in (0, 3600].
            Default 60.
        buckets: slices per window (it slides in ``window / buckets`` steps, at least
            1 µs); an int in [1, 1000]. Default 6.
        min_delay: the floor of the delay, in seconds; in [0, 3600]. Default 0.001.
        max_delay: the cut-off, in seconds; in [``min_delay``, 3600], or ``math.inf``
            for none. Above it :meth:`hedge_delay` returns ``None``. Default 5.0.
        initial_delay: the delay while a route warms up, in seconds; in
            [``min_delay``, ``max_delay``] and at most 3600. Default 0.1.
        min_samples: samples a route's window must hold before its quantile is used;
            ≥ 1. Default 100 (a p95 then rests on at least 5 samples above it).
        refresh_samples: refresh the cached delay after this many new samples; ≥ 1.
            Default 1,000.
        refresh_interval: also refresh when a new sample arrives this many seconds
            after the last refresh; in [0, 3600], or ``math.inf`` to refresh on count
            only. Default 1.0: the window slides by a sixth of itself every 10 s, so a
            fresher delay would not differ measurably.
        recovery_samples: recent samples that, while a route is suspended, must have
            their ``quantile`` at or below ``max_delay`` for hedging to resume; an int
            in [1, 10000]. Default 30: at the default quantile one straggler of 30 is
            tolerated, two keep the route suspended.
        max_routes: routes tracked at once, the least recently recorded evicted
            beyond; ≥ 1. Default 1,000 (each holds only its non-empty buckets).
        clock: a callable returning the current time in seconds (monotonic); default
            ``anyio.current_time``, looked up at call time. Tests inject a fake clock.

    Raises:
        TypeError: a parameter has the wrong type.
        ValueError: a parameter is out of range; the message names it, its unit and
            the range.

    Example usage::

        policy = AdaptiveDelay(quantile=0.95, max_delay=2.0)
        transport = HedgedTransport(inner, delay=policy)

    .. versionadded:: 0.1.0
    """

    __slots__ = (
        "_built", "_clock", "_delays", "_evictions", "_lock", "_loop_clock", "_max_routes",
        "_routes", "_settings", "_snapshot", "_tracked",
    )  # fmt: skip

    def __init__(
        self,
        *,
        quantile: float = 0.95,
        window: float = 60.0,
        buckets: int = 6,
        min_delay: float = 0.001,
        max_delay: float = MAX_DELAY,
        initial_delay: float = 0.1,
        min_samples: int = 100,
        refresh_samples: int = 1000,
        refresh_interval: float = 1.0,
        recovery_samples: int = 30,
        max_routes: int = 1000,
        clock: Callable[[], float] | None = None,
    ) -> None:
        q = check_number("quantile", quantile, low=0.0, high=1.0, low_open=True, high_open=True)
        window_seconds, buckets = check_window(window, buckets)
        min_delay = check_seconds("min_delay", min_delay)
        max_delay = check_seconds("max_delay", max_delay, allow_inf=True)
        if min_delay > max_delay:
            msg = f"`min_delay` must be <= `max_delay`, got {min_delay!r} > {max_delay!r}"
            raise ValueError(msg)
        default = " (its default: give one in that range)" if initial_delay == 0.1 else ""
        initial_delay = check_seconds("initial_delay", initial_delay)
        if not min_delay <= initial_delay <= max_delay:
            msg = f"`initial_delay` must be in [min_delay, max_delay] = [{min_delay!r}, "
            msg += f"{max_delay!r}], got {initial_delay!r}{default}"
            raise ValueError(msg)
        self._settings = _Settings(
            quantile=q,
            window=window_seconds,
            buckets=buckets,
            min_delay=min_delay,
            max_delay=max_delay,
            initial_delay=initial_delay,
            min_samples=check_int("min_samples", min_samples, 1),
            refresh_samples=check_int("refresh_samples", refresh_samples, 1),
            refresh_interval=check_seconds("refresh_interval", refresh_interval, allow_inf=True),
            recovery_samples=check_int("recovery_samples", recovery_samples, 1, 10_000),
        )
        self._max_routes = check_int("max_routes", max_routes, 1)
        self._clock = check_clock(clock)
        # Whether the clock is the event loop's (the default): then the request path
        # hands each sample the loop's time it already has (``_record_at``).
        self._loop_clock = self._clock is default_clock
        self._routes: OrderedDict[str, tuple[_Route, _Queue]] = OrderedDict()
        # Each route's delay (``_fold``): hedge_delay's answer, asked with no Python call.
        self._delays = Delays(initial_delay)
        self._evictions = 0
        # The delays recomputed (copy-on-write), and the routes tracked (changed under
        # the lock): the scrape thread joins them (delay_snapshot), never `_routes`.
        self._snapshot = DelaySnapshot(MappingProxyType({}), initial_delay, tracks_routes=True)
        self._tracked: set[str] = set()
        self._lock = threading.Lock()
        self._built: tuple[DelaySnapshot, DelaySnapshot] | None = None  # (from, built)

    @property
    def quantile(self) -> float:
        """The latency quantile hedged at, in (0, 1)."""
        return self._settings.quantile

    @property
    def initial_delay(self) -> float:
        """The delay of a route still warming up, in seconds."""
        return self._settings.initial_delay

    def hedge_delay(self, route: str) -> float | None:
        """Return the cached hedge delay of ``route``, in seconds.

        O(1): a dict lookup. An unknown route gets ``initial_delay``.

        Returns:
            The delay in seconds (≥ ``min_delay``), or ``None`` when the route's
            estimate is above ``max_delay`` and hedging is suspended.
        """
        return self._delays[route]

    def record(self, route: str, seconds: float, *, censored: bool) -> None:
        """Record one primary attempt's time to response headers.

        Never raises for a float ``seconds``: values outside 1 µs .. 1 hour are clamped
        and counted, a negative value (a clock that stepped back) is taken as 0 (and
        counted as clamped), NaN is counted and ignored. May refresh the route's cached
        delay (see the module docstring for when) and publish a new snapshot.

        Args:
            route: the route (a bounded label such as a host or an endpoint name).
            seconds: the attempt's latency, or its elapsed time at cancellation: any
                real number but a bool (``int``, ``float``, numpy's scalars).
            censored: whether the attempt was cut short (its backup won, or its caller
                left after the delay), so that ``seconds`` is a lower bound on its latency.

        Raises:
            TypeError: ``seconds`` is not a real number (``"0.01"``, ``None``, a bool),
                checked first: queued, it would break every later refresh of the route.
        """
        if type(seconds) is not float:  # the transport's own samples are floats
            as_float = as_seconds(seconds)
            if as_float is None:
                msg = f"`seconds` must be a real number of seconds, got {seconds!r}"
                raise TypeError(msg)
            seconds = as_float
        self._record_at(route, seconds, censored, self._clock())

    def _record_at(self, route: str, seconds: float, censored: bool, now: float) -> None:
        """:meth:`record` at ``now``, the clock's reading in seconds (the request path's,
        with the time its primary ended, for a policy on the loop's clock). The sample
        waits in the route's queue unless the cached delay may change now (see the
        module doc). Strictly private."""
        routes = self._routes
        found = routes.get(route)
        if found is None:
            found = self._add_route(route, now)
        else:
            routes.move_to_end(route)
        state, queue = found
        queue.append((seconds, now, censored))
        settings, queued = self._settings, len(queue)
        if state.delay is not None and queued < _QUEUED:  # (suspended: each may end it)
            if state.warming_up:  # the window holds at most samples + the queue
                if state.samples + queued < settings.min_samples:
                    return
            elif (
                state.pending + queued < settings.refresh_samples
                and now - state.refreshed_at < settings.refresh_interval
                and (state.second is None or len(state.second) + queued < settings.min_samples)
            ):
                return
        self._fold(route, state, queue)

    def _fold(self, route: str, state: _Route, queue: _Queue) -> None:
        """Record the route's queued samples in its window, in order, each at its own
        time; publish the delay if it was recomputed (at the last one only: the queue
        waits for no sample before that could)."""
        refreshed = False
        for seconds, at, censored in queue:
            refreshed = state.record(seconds, at, censored=censored) or refreshed
        queue.clear()
        if refreshed:
            self._delays[route] = state.delay
            self._publish(route, state.delay)

    def delays(self) -> dict[str, float | None]:
        """Return the current delay of every tracked route, in seconds (``None``: cutoff).

        Least recently recorded first; does not read the clock. On the event loop only:
        another thread reads :meth:`delay_snapshot` instead.
        """
        return {route: state.delay for route, (state, _) in self._routes.items()}

    def delay_snapshot(self) -> DelaySnapshot:
        """Return a :class:`~hedgeclient.DelaySnapshot` of every tracked route.

        Thread-safe: built from the published delays and the tracked set (copied under
        a lock), so the Prometheus collector calls it from its scrape thread. Its
        ``routes`` are the routes :meth:`statistics` lists (``tracks_routes``), each at
        :meth:`hedge_delay`'s value as of the last :meth:`record`.
        """
        with self._lock:  # the same object until a delay or the tracked set changes
            published, built = self._snapshot, self._built
            if built is None or built[0] is not published:
                default, get = published.default, published.routes.get
                routes = MappingProxyType({route: get(route, default) for route in self._tracked})
                snapshot = DelaySnapshot(routes, default, tracks_routes=True)
                built = self._built = (published, snapshot)
        return built[1]

    def statistics(self) -> AdaptiveDelayStatistics:
        """Return a snapshot of every tracked route (does not read the clock)."""
        for route, (state, queue) in self._routes.items():
            if queue:  # no delay changes here: a sample that would change it was folded
                self._fold(route, state, queue)
        routes = {route: state.statistics() for route, (state, _) in self._routes.items()}
        values = routes.values()
        return AdaptiveDelayStatistics(
            routes=MappingProxyType(routes),
            evictions=self._evictions,
            recorded=sum(r.recorded for r in values),
            censored=sum(r.censored for r in values),
            refreshes=sum(r.refreshes for r in values),
            clamped=sum(r.clamped for r in values),
            recoveries=sum(r.recoveries for r in values),
        )

    def _add_route(self, route: str, now: float) -> tuple[_Route, _Queue]:
        settings = self._settings
        histogram = RotatingHistogram(
            window=settings.window, buckets=settings.buckets, clock=self._clock
        )
        routes = self._routes
        found = routes[route] = (_Route(settings, histogram, now), [])
        self._delays[route] = found[0].delay  # asked with no __missing__ call from now on
        with self._lock:  # O(1): a new route at each request must stay cheap
            self._tracked.add(route)
            self._built = None
            if len(routes) > self._max_routes:
                evicted, _ = routes.popitem(last=False)
                self._delays.pop(evicted, None)
                self._evictions += 1
                self._tracked.discard(evicted)
                if evicted in self._snapshot.routes:
                    published = dict(self._snapshot.routes)
                    del published[evicted]
                    self._publish_routes(published)
        return found

    def _publish(self, route: str, delay: float | None) -> None:
        """Replace the snapshot if ``route``'s delay changed (copy-on-write, O(routes))."""
        snapshot = self._snapshot
        if route in snapshot.routes and snapshot.routes[route] == delay:
            return
        published = dict(snapshot.routes)
        published[route] = delay
        self._publish_routes(published)

    def _publish_routes(self, published: dict[str, float | None]) -> None:
        self._snapshot = DelaySnapshot(
            MappingProxyType(published), self._settings.initial_delay, tracks_routes=True
        )

    def __repr__(self) -> str:
        s = self._settings
        return (
            f"{type(self).__name__}(quantile={s.quantile!r}, window={s.window!r}, "
            f"max_delay={s.max_delay!r}, routes={len(self._routes)})"
        )


def derive(model: AdaptiveDelay, quantile: float) -> AdaptiveDelay:
    """A new :class:`AdaptiveDelay` with ``model``'s settings (window, bounds, warm-up,
    refresh, recovery, ``max_routes``, clock) at another ``quantile`` in (0, 1): a
    route's own delay (``Route(quantile=...)``), learned apart from the others."""
    s = model._settings
    return AdaptiveDelay(
        quantile=quantile,
        window=s.window,
        buckets=s.buckets,
        min_delay=s.min_delay,
        max_delay=s.max_delay,
        initial_delay=s.initial_delay,
        min_samples=s.min_samples,
        refresh_samples=s.refresh_samples,
        refresh_interval=s.refresh_interval,
        recovery_samples=s.recovery_samples,
        max_routes=model._max_routes,
        clock=model._clock,
    )


def shortest_delay(policy: object) -> float:
    """The shortest hedge delay ``policy`` can give, in seconds: a
    :class:`~hedgeclient.FixedDelay`'s, an :class:`AdaptiveDelay`'s ``min_delay``, else
    0.0 (a policy of the caller's own, whose floor is unknown)."""
    if isinstance(policy, AdaptiveDelay):
        return policy._settings.min_delay
    return policy.seconds if isinstance(policy, FixedDelay) else 0.0
