"""The adaptive hedge delay: a rolling quantile of each route's recent latencies.

:class:`AdaptiveDelay` is the transport's default :class:`~hedgeclient.DelayPolicy`. It
keeps a :class:`~hedgeclient._histogram.RotatingHistogram` per route and hedges at its
``quantile`` (p95 by default): the backup is then sent for about 5 % of requests, the
extra load, and the median is unchanged. A static delay drifts out of date; this one
follows the latency law within a window.

The delay is cached per route, so :meth:`~AdaptiveDelay.hedge_delay` is a dict lookup.
The cache is refreshed (a quantile over the window) from :meth:`~AdaptiveDelay.record`,
when ``refresh_samples`` new samples have arrived or when a new sample arrives
``refresh_interval`` seconds or more after the last refresh. Both conditions need a new
sample, so checking them where samples arrive misses nothing, and an idle route costs
nothing. A refresh costs 50-150 µs (it sorts the window's non-empty buckets, about a
thousand for a wide log-normal law; see ``benchmarks/bench_delay_cost.py``). With the
defaults a route refreshes at most about once a second, or once per 1,000 samples when
it is busier: about 0.1 µs per request amortised at 1,000 requests/s, and at most about
0.01 % of a core per route however quiet.

Prior art: Dean & Barroso, "The Tail at Scale", CACM 56(2), 2013 (hedge after the p95);
tower's ``hedge`` middleware (a rotating histogram per service, no hedging before
``min_data_points``); HdrHistogram (Gil Tene).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import final

from hedgeclient._checks import check_int, check_number
from hedgeclient._clock import check_clock
from hedgeclient._histogram import RotatingHistogram

__all__ = ["AdaptiveDelay", "AdaptiveDelayStatistics", "RouteStatistics"]


@final
@dataclass(frozen=True, slots=True)
class RouteStatistics:
    """A snapshot of one route of an :class:`AdaptiveDelay`.

    Attributes:
        delay: the current hedge delay, in seconds; ``None`` while hedging is suspended
            because the estimate is above ``max_delay``.
        warming_up: whether ``delay`` is ``initial_delay`` because the window holds fewer
            than ``min_samples`` samples.
        samples: samples in the window as of the last recorded sample.
        recorded: samples recorded for the route since it was created (or re-created
            after an eviction), censored ones included.
        censored: the censored part of ``recorded``: primaries cancelled because their
            backup won, recorded at their elapsed time.
        clamped: samples outside 1 µs .. 1 hour, clamped into the histogram.
        refreshes: recomputations of the cached delay.

    .. versionadded:: 0.1.0
    """

    delay: float | None
    warming_up: bool
    samples: int
    recorded: int
    censored: int
    clamped: int
    refreshes: int


@final
@dataclass(frozen=True, slots=True)
class AdaptiveDelayStatistics:
    """A snapshot of an :class:`AdaptiveDelay`.

    Attributes:
        routes: per-route statistics, least recently recorded first.
        evictions: routes dropped because ``max_routes`` was reached.
        recorded: samples recorded for the routes currently tracked.
        censored: the censored part of ``recorded``.
        refreshes: delay recomputations of the routes currently tracked.
        clamped: clamped samples of the routes currently tracked.

    .. versionadded:: 0.1.0
    """

    routes: Mapping[str, RouteStatistics]
    evictions: int
    recorded: int
    censored: int
    refreshes: int
    clamped: int


@final
class _Route:
    """Strictly private: one route's histogram and cached delay."""

    __slots__ = (
        "censored",
        "delay",
        "histogram",
        "pending",
        "recorded",
        "refreshed_at",
        "refreshes",
        "samples",
        "warming_up",
    )

    def __init__(self, histogram: RotatingHistogram, delay: float, now: float) -> None:
        self.histogram = histogram
        self.delay: float | None = delay
        self.warming_up = True
        self.samples = 0
        self.pending = 0  # samples since the last refresh
        self.refreshed_at = now
        self.refreshes = 0
        self.recorded = 0
        self.censored = 0


def _seconds(name: str, value: object, *, allow_inf: bool = False) -> float:
    """Return ``value`` as seconds ≥ 0; finite unless ``allow_inf``."""
    seconds = check_number(name, value)
    if not (seconds >= 0 and (allow_inf or math.isfinite(seconds))):
        kind = "a number" if allow_inf else "a finite number"
        msg = f"`{name}` must be {kind} of seconds >= 0, got {value!r}"
        raise ValueError(msg)
    return seconds


@final
class AdaptiveDelay:
    """Hedge each route after a rolling quantile of its recent latencies.

    The delay of a route is ``max(min_delay, q-quantile of its window)``, or ``None``
    (hedging suspended, the transport's suppressed reason ``cutoff``) when that is above
    ``max_delay``: when everything is that slow a backup buys little and adds load to a
    struggling service. Until the window holds ``min_samples`` samples the delay is
    ``initial_delay``, and it goes back to it when a quiet route's window drains below
    ``min_samples``: a route seeing under ``min_samples / window`` requests per second
    (100 per minute by default) stays on ``initial_delay``.

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

    Recency for ``max_routes`` is by recorded sample: the route recorded least recently
    is evicted first. :meth:`hedge_delay` never mutates anything.

    Single-event-loop state: not thread-safe. :meth:`statistics` and :meth:`delays`
    never read the clock, so they also work outside the event loop.

    Args:
        quantile: the latency quantile to hedge at, in (0, 1). Default 0.95, an extra
            load of about 5 %.
        window: the span of each route's latency window, in seconds; finite and > 0.
            Default 60.
        buckets: slices per window (it slides in ``window / buckets`` steps); an int
            in [1, 1000]. Default 6.
        min_delay: the floor of the delay, in seconds; finite and ≥ 0. Default 0.001.
        max_delay: the cutoff, in seconds; ≥ ``min_delay`` (``math.inf`` for none).
            Above it :meth:`hedge_delay` returns ``None``. Default 5.0.
        initial_delay: the delay while a route warms up, in seconds; finite and in
            [``min_delay``, ``max_delay``]. Default 0.1.
        min_samples: samples a route's window must hold before its quantile is used;
            ≥ 1. Default 100 (a p95 then rests on at least 5 samples above it).
        refresh_samples: refresh the cached delay after this many new samples; ≥ 1.
            Default 1,000.
        refresh_interval: also refresh when a new sample arrives this many seconds
            after the last refresh; ≥ 0 (``math.inf`` to refresh on count only).
            Default 1.0: the window slides by a sixth of itself every 10 s, so a
            fresher delay would not differ measurably, while it bounds the refresh cost
            of a quiet route to about 100 µs per second.
        max_routes: routes tracked at once, the least recently recorded evicted
            beyond; ≥ 1. Default 1,000 (each holds only its non-empty buckets).
        clock: a callable returning the current time in seconds (monotonic); default
            ``anyio.current_time``, looked up at call time. Tests inject a fake clock.

    Raises:
        TypeError: a parameter has the wrong type.
        ValueError: a parameter is out of range; the message names it and the range.

    Example usage::

        policy = AdaptiveDelay(quantile=0.95, max_delay=2.0)
        transport = HedgedTransport(inner, delay=policy)

    .. versionadded:: 0.1.0
    """

    __slots__ = (
        "_buckets",
        "_clock",
        "_evictions",
        "_initial_delay",
        "_max_delay",
        "_max_routes",
        "_min_delay",
        "_min_samples",
        "_quantile",
        "_refresh_interval",
        "_refresh_samples",
        "_routes",
        "_window",
    )

    def __init__(
        self,
        *,
        quantile: float = 0.95,
        window: float = 60.0,
        buckets: int = 6,
        min_delay: float = 0.001,
        max_delay: float = 5.0,
        initial_delay: float = 0.1,
        min_samples: int = 100,
        refresh_samples: int = 1000,
        refresh_interval: float = 1.0,
        max_routes: int = 1000,
        clock: Callable[[], float] | None = None,
    ) -> None:
        if not 0.0 < check_number("quantile", quantile) < 1.0:
            msg = f"`quantile` must be in (0, 1), got {quantile!r}"
            raise ValueError(msg)
        # RotatingHistogram validates window and buckets; build one now to fail early.
        RotatingHistogram(window=window, buckets=buckets, clock=clock)
        min_delay = _seconds("min_delay", min_delay)
        max_delay = _seconds("max_delay", max_delay, allow_inf=True)
        if min_delay > max_delay:
            msg = f"`min_delay` must be <= `max_delay`, got {min_delay!r} > {max_delay!r}"
            raise ValueError(msg)
        initial_delay = _seconds("initial_delay", initial_delay)
        if not min_delay <= initial_delay <= max_delay:
            msg = (
                f"`initial_delay` must be in [min_delay, max_delay] = "
                f"[{min_delay!r}, {max_delay!r}], got {initial_delay!r}"
            )
            raise ValueError(msg)
        refresh_interval = _seconds("refresh_interval", refresh_interval, allow_inf=True)
        self._quantile = float(quantile)
        self._window = float(window)
        self._buckets = buckets
        self._min_delay = min_delay
        self._max_delay = max_delay
        self._initial_delay = initial_delay
        self._min_samples = check_int("min_samples", min_samples, 1)
        self._refresh_samples = check_int("refresh_samples", refresh_samples, 1)
        self._refresh_interval = refresh_interval
        self._max_routes = check_int("max_routes", max_routes, 1)
        self._clock = check_clock(clock)
        self._routes: OrderedDict[str, _Route] = OrderedDict()
        self._evictions = 0

    @property
    def quantile(self) -> float:
        """The latency quantile hedged at, in (0, 1)."""
        return self._quantile

    @property
    def initial_delay(self) -> float:
        """The delay of a route still warming up, in seconds."""
        return self._initial_delay

    def hedge_delay(self, route: str) -> float | None:
        """Return the cached hedge delay of ``route``, in seconds.

        O(1): a dict lookup. An unknown route gets ``initial_delay``.

        Returns:
            The delay in seconds (≥ ``min_delay``), or ``None`` when the route's
            estimate is above ``max_delay`` and hedging is suspended.
        """
        state = self._routes.get(route)
        return self._initial_delay if state is None else state.delay

    def record(self, route: str, seconds: float, *, censored: bool) -> None:
        """Record one primary attempt's time to response headers.

        Never raises for a float ``seconds``: values outside 1 µs .. 1 hour are clamped
        and counted, NaN is counted and ignored. May refresh the route's cached delay
        (see the module docstring for when).

        Args:
            route: the route (a bounded label such as a host or an endpoint name).
            seconds: the attempt's latency, or its elapsed time at cancellation.
            censored: whether the attempt was cancelled because a backup won, so that
                ``seconds`` is a lower bound on its latency.
        """
        now = self._clock()
        routes = self._routes
        state = routes.get(route)
        if state is None:
            state = self._add_route(route, now)
        else:
            routes.move_to_end(route)
        samples = state.histogram.record(seconds, now=now)
        state.samples = samples
        state.recorded += 1
        if censored:
            state.censored += 1
        state.pending += 1
        if state.warming_up:
            if samples >= self._min_samples:
                self._refresh(state, now)
        elif (
            state.pending >= self._refresh_samples
            or now - state.refreshed_at >= self._refresh_interval
        ):
            self._refresh(state, now)

    def delays(self) -> dict[str, float | None]:
        """Return the current delay of every tracked route, in seconds (``None``: cutoff).

        Meant for a gauge of the current delay per route; does not read the clock.
        """
        return {route: state.delay for route, state in self._routes.items()}

    def statistics(self) -> AdaptiveDelayStatistics:
        """Return a snapshot of every tracked route (does not read the clock)."""
        routes = {
            route: RouteStatistics(
                delay=state.delay,
                warming_up=state.warming_up,
                samples=state.samples,
                recorded=state.recorded,
                censored=state.censored,
                clamped=state.histogram.clamped,
                refreshes=state.refreshes,
            )
            for route, state in self._routes.items()
        }
        values = routes.values()
        return AdaptiveDelayStatistics(
            routes=MappingProxyType(routes),
            evictions=self._evictions,
            recorded=sum(r.recorded for r in values),
            censored=sum(r.censored for r in values),
            refreshes=sum(r.refreshes for r in values),
            clamped=sum(r.clamped for r in values),
        )

    def _add_route(self, route: str, now: float) -> _Route:
        histogram = RotatingHistogram(window=self._window, buckets=self._buckets, clock=self._clock)
        state = _Route(histogram, self._initial_delay, now)
        routes = self._routes
        routes[route] = state
        if len(routes) > self._max_routes:
            routes.popitem(last=False)
            self._evictions += 1
        return state

    def _refresh(self, state: _Route, now: float) -> None:
        """Recompute the cached delay of a route from its window."""
        state.pending = 0
        state.refreshed_at = now
        state.refreshes += 1
        estimate = None
        if state.samples >= self._min_samples:
            estimate = state.histogram.quantile(self._quantile, now=now)
        if estimate is None:
            state.warming_up = True
            state.delay = self._initial_delay
            return
        state.warming_up = False
        estimate = max(estimate, self._min_delay)
        state.delay = estimate if estimate <= self._max_delay else None

    def __repr__(self) -> str:
        return (
            f"AdaptiveDelay(quantile={self._quantile!r}, window={self._window!r}, "
            f"max_delay={self._max_delay!r}, routes={len(self._routes)})"
        )
