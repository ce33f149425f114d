"""One route of an :class:`~hedgeclient.AdaptiveDelay`: its window, cached delay and cut-off.

A route's delay is ``max(min_delay, q-quantile of its window)``, cached and refreshed
from :meth:`_Route.record`; ``None`` (hedging suspended) while that is above
``max_delay``; ``initial_delay`` while the window holds fewer than ``min_samples``.

**Recovery from the cut-off.** A burst of very slow responses can lift the window's
quantile above ``max_delay``; the window alone would then keep the route suspended
until the burst has slid out of it (up to ``window`` seconds), however normal the
latencies are again. So while a route is suspended, its newest ``recovery_samples``
latencies are also kept apart. As soon as their own ``q``-quantile (exact, on those
samples) is at or below ``max_delay``, the burst is taken to be over: the window is
refilled with those samples only (:meth:`RotatingHistogram.reseed`) and hedging resumes
at once, at that quantile (floored at ``min_delay``) while the window refills to
``min_samples``, then at the window's quantile as usual. A route that is slow for good
stays suspended: its recent quantile stays above ``max_delay`` too.

**The warm-up's samples.** A route's first delay rests on the ``min_samples`` samples
measured while it hedged at ``initial_delay``, a placeholder, often several times the
route's real quantile. Those samples are the least clean it will get: few backups go at
the placeholder, so a primary held by a frozen replica runs to its end and is recorded
whole, and the rules that leave such samples out (a silence, the client's lag) scale
with the request's delay, so they are blunt there. Counted, they can lift the first
delay off its true place, and a delay too high lets more of them in (a held primary
gets no backup before it): in virtual time (``bench_stalls_virtual.py --warmup 100
--round 1000 --gap 11 --overhead 0.002``, seed 10) the first delay sat above 40 ms for
792 requests, where the lab law's p95 is 30 ms. So once ``min_samples`` more samples
have been recorded at the learned delay, the window is refilled with those alone
(:meth:`RotatingHistogram.reseed`) and the delay is computed again.

Strictly private: :mod:`hedgeclient._policy.adaptive` is the public face.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import final

from hedgeclient._policy.histogram import RotatingHistogram

__all__ = ["AdaptiveDelayStatistics", "RouteStatistics"]

# How far above the route's delay a censored sample is kept (a factor). A censored time
# above the delay is the delay plus the *backup's* latency: its side of the delay is the
# primary replica's own (all the q-quantile needs at its fixed point, AdaptiveDelay's
# docstring), its place above it is another replica's. Kept whole, it set how far the
# delay stepped up whenever the share above the delay rose by chance or by a few samples
# of a frozen replica: on a law with a gap above its p95 (the lab sample, nothing
# between 30 and 50 ms) a step into the gap by a backup's latency, 30 -> 40-45 ms, that
# stuck (bench_stalls_virtual.py --round 1000 --gap 11, seed 2: 2.9 % of requests over
# 60 ms). Capped, a step on censored samples alone is a sixteenth of the delay. The
# factor, measured in virtual time (docs/benchmarks.md, "Censored samples"): just above
# the delay (1/512) pulled the log-normal law's delay 0.7 points of extra load low, 1/64
# 0.34, 1/16 0.08; 1/8 left it in place, but the estimator alone on the lab law
# (test_adaptive.py's simulation) climbed to 43 ms in one seed of four: a step
# compounds, the next is an eighth above the last.
_CENSORED_ABOVE = 1.0 + 1.0 / 16


@final
@dataclass(frozen=True, slots=True)
class RouteStatistics:
    """A snapshot of one route of an :class:`~hedgeclient.AdaptiveDelay`.

    Attributes:
        delay: the current hedge delay, in seconds; ``None`` while hedging is suspended
            because the estimate is above ``max_delay``.
        warming_up: whether the window holds fewer than ``min_samples`` samples, so
            that ``delay`` is ``initial_delay`` (or, just after a recovery from the
            cut-off, the recent samples' quantile).
        samples: samples in the window as of the last recorded sample.
        recorded: samples recorded for the route since it was created (or re-created
            after an eviction), censored ones included.
        censored: the censored part of ``recorded``: primaries cut short (their backup
            won, or their caller left) above the delay (while suspended, above
            ``max_delay``), recorded at their elapsed time, or a sixteenth above the delay
            when that was higher (see :class:`~hedgeclient.AdaptiveDelay`).
        clamped: samples outside 1 µs .. 1 hour, clamped into the histogram (negative
            ones, taken as 0, included).
        refreshes: recomputations of the cached delay.
        recoveries: times hedging resumed after the cut-off on recent samples alone,
            before the slow ones had left the window.

    .. versionadded:: 0.1.0
    """

    delay: float | None
    warming_up: bool
    samples: int
    recorded: int
    censored: int
    clamped: int
    refreshes: int
    recoveries: int = 0


@final
@dataclass(frozen=True, slots=True)
class AdaptiveDelayStatistics:
    """A snapshot of an :class:`AdaptiveDelay`.

    Attributes:
        routes: per-route statistics of the tracked routes (those with a recorded
            sample, at most ``max_routes``), least recently recorded first. A route
            asked for its delay but given no sample yet is not listed: it gets
            ``initial_delay`` (:attr:`~hedgeclient.AdaptiveDelay.initial_delay`).
        evictions: routes dropped because ``max_routes`` was reached.
        recorded: samples recorded for the routes currently tracked.
        censored: the censored part of ``recorded``.
        refreshes: delay recomputations of the routes currently tracked.
        clamped: clamped samples of the routes currently tracked.
        recoveries: early recoveries from the cut-off of the routes currently tracked.

    .. versionadded:: 0.1.0
    """

    routes: Mapping[str, RouteStatistics]
    evictions: int
    recorded: int
    censored: int
    refreshes: int
    clamped: int
    recoveries: int = 0


@final
@dataclass(frozen=True, slots=True)
class _Settings:
    """The validated knobs every route of one policy shares. Strictly private."""

    quantile: float
    window: float
    buckets: int
    min_delay: float
    max_delay: float
    initial_delay: float
    min_samples: int
    refresh_samples: int
    refresh_interval: float
    recovery_samples: int


def _exact_quantile(samples: deque[float], q: float) -> float:
    """The smallest sample ``v`` with ``P(X > v) <= 1 - q`` (docs/how-it-works.md)."""
    ranked = sorted(samples)
    return ranked[max(1, math.ceil(q * len(ranked) - 1e-9)) - 1]


@final
class _Route:
    """Strictly private: one route's histogram, cached delay and recovery samples."""

    __slots__ = (
        "censored",
        "delay",
        "histogram",
        "pending",
        "placeholder",
        "recent",
        "recorded",
        "recoveries",
        "refreshed_at",
        "refreshes",
        "samples",
        "second",
        "settings",
        "warming_up",
    )

    def __init__(self, settings: _Settings, histogram: RotatingHistogram, now: float) -> None:
        self.settings = settings
        self.histogram = histogram
        self.delay: float | None = settings.initial_delay
        self.warming_up = True
        self.samples = 0
        self.pending = 0  # samples since the last refresh
        self.refreshed_at = now
        self.refreshes = 0
        self.recorded = 0
        self.censored = 0
        self.recoveries = 0
        # The newest samples while suspended; built on the first suspension.
        self.recent: deque[float] | None = None
        # The samples since the delay was learned from a warm-up at initial_delay (see
        # the module doc), and whether the route hedges at that placeholder now.
        self.second: list[float] | None = None
        self.placeholder = True

    def record(self, seconds: float, now: float, *, censored: bool) -> bool:
        """Record one sample; return True if the cached delay was recomputed."""
        settings = self.settings
        if censored:
            delay = self.delay
            # At or below the threshold (the delay; while suspended, the cut-off) a censored
            # time says nothing of the side its latency lies on: counted as a fast one, a
            # caller's deadline below the cut-off resumed a route half of whose requests
            # took 150 ms (found by a new user). Not recorded.
            if seconds <= (settings.max_delay if delay is None else delay):
                return False
            self.censored += 1
            if delay is not None:  # see _CENSORED_ABOVE
                seconds = min(seconds, delay * _CENSORED_ABOVE)
        self.recorded += 1
        samples = self.samples = self.histogram.record(seconds, now=now)
        second = self.second
        if second is not None:
            second.append(seconds)
            if len(second) >= settings.min_samples:  # the warm-up's samples leave
                self.second = None
                self.samples = self.histogram.reseed(second, now=now)
                self.refresh(now)
                return True
        self.pending += 1
        if self.delay is None and self._try_recover(seconds, now):
            return True
        if self.warming_up:
            if samples >= settings.min_samples:
                self.refresh(now)
                return True
            return False
        if (
            self.pending >= settings.refresh_samples
            or now - self.refreshed_at >= settings.refresh_interval
        ):
            self.refresh(now)
            return True
        return False

    def refresh(self, now: float) -> None:
        """Recompute the cached delay from the window."""
        settings = self.settings
        self.pending = 0
        self.refreshed_at = now
        self.refreshes += 1
        estimate = None
        if self.samples >= settings.min_samples:
            estimate = self.histogram.quantile(settings.quantile, now=now)
        if estimate is None:
            self.warming_up = True
            self.delay = settings.initial_delay
            self.second = None
            self.placeholder = True
        else:
            if self.placeholder:  # learned at the placeholder: judged again on later samples
                self.second = []
                self.placeholder = False
            self.warming_up = False
            estimate = max(estimate, settings.min_delay)
            self.delay = estimate if estimate <= settings.max_delay else None
        if self.delay is not None and self.recent:  # resumed: the next suspension starts afresh
            self.recent.clear()

    def _try_recover(self, seconds: float, now: float) -> bool:
        """Keep ``seconds`` apart while suspended; resume if the recent ones are normal."""
        settings = self.settings
        recent = self.recent
        if recent is None:
            recent = self.recent = deque(maxlen=settings.recovery_samples)
        if seconds >= 0.0:
            recent.append(seconds)
        elif seconds < 0.0:  # a clock that stepped back: taken as 0, as the histogram does
            recent.append(0.0)
        if len(recent) < settings.recovery_samples:  # NaN is not appended
            return False
        estimate = _exact_quantile(recent, settings.quantile)
        if estimate > settings.max_delay:
            return False
        self.samples = self.histogram.reseed(recent, now=now)
        self.recoveries += 1
        # Hedging resumes at the recent samples' quantile, the window refilled with them:
        # a warm-up's samples judged again would bring the burst back.
        self.placeholder, self.second = False, None
        recent.clear()
        if self.samples >= settings.min_samples:
            self.refresh(now)
            return True
        self.pending = 0
        self.refreshed_at = now
        self.refreshes += 1
        self.warming_up = True
        self.delay = max(estimate, settings.min_delay)
        return True

    def statistics(self) -> RouteStatistics:
        """A snapshot of the route (does not read the clock)."""
        return RouteStatistics(
            delay=self.delay,
            warming_up=self.warming_up,
            samples=self.samples,
            recorded=self.recorded,
            censored=self.censored,
            clamped=self.histogram.clamped,
            refreshes=self.refreshes,
            recoveries=self.recoveries,
        )
