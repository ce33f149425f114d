"""AdaptiveDelay: recovery from the cut-off after a burst, published snapshots, bad clocks."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from hedgeclient import AdaptiveDelay, FixedDelay
from hedgeclient._policy.delay import DelaySnapshot, SnapshotDelayPolicy

# A steady law, deterministic: 10-30 ms, p95 of the cycle 0.030 (the lab's p95).
STEADY = (
    [0.010, 0.012, 0.015, 0.010, 0.020, 0.012, 0.010, 0.015, 0.012, 0.010] * 9
    + [0.030] * 5
    + [0.050] * 5
)
BURST_SECONDS = 8.0  # above the default max_delay of 5 s


class FakeClock:
    """A settable clock, in seconds."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def feed(
    policy: AdaptiveDelay, clock: FakeClock, values: list[float], step: float, route: str = "r"
) -> list[tuple[float, float | None]]:
    """Record ``values`` ``step`` seconds apart; return (instant, delay after) per sample."""
    seen = []
    for value in values:
        clock.now += step
        policy.record(route, value, censored=False)
        seen.append((clock.now, policy.hedge_delay(route)))
    return seen


def burst_then_suspended(policy: AdaptiveDelay, clock: FakeClock) -> None:
    """300 steady requests (3 s), then 400 of 8 s in 0.4 s: the route is suspended."""
    feed(policy, clock, STEADY * 3, 0.010)
    assert policy.hedge_delay("r") == pytest.approx(0.030, rel=1 / 128)
    feed(policy, clock, [BURST_SECONDS] * 400, 0.001)
    clock.now += 1.0  # the next sample refreshes (refresh_interval 1 s)
    policy.record("r", BURST_SECONDS, censored=False)
    assert policy.hedge_delay("r") is None


def test_burst_then_normal_latencies_resume_hedging_within_a_second() -> None:
    """After a burst suspends a route, 30 normal samples (0.3 s) resume hedging, not 60 s."""
    clock = FakeClock()
    policy = AdaptiveDelay(clock=clock)
    burst_then_suspended(policy, clock)
    burst_over = clock.now
    seen = feed(policy, clock, STEADY[:40], 0.010)
    resumed = next(i for i, (_, delay) in enumerate(seen) if delay is not None)
    assert resumed == 29  # the 30th normal sample: recovery_samples
    assert seen[resumed][0] - burst_over == pytest.approx(0.300)
    assert all(delay is not None for _, delay in seen[resumed:])
    provisional = seen[resumed][1]
    assert provisional is not None
    assert 0.010 <= provisional <= 0.050  # the recent samples' p95, far below max_delay
    stats = policy.statistics().routes["r"]
    assert (stats.recoveries, stats.warming_up, stats.samples) == (1, True, 40)


def test_after_recovery_the_window_holds_only_recent_samples() -> None:
    """Once min_samples normal samples follow, the delay is their p95; the burst is gone."""
    clock = FakeClock()
    policy = AdaptiveDelay(clock=clock)
    burst_then_suspended(policy, clock)
    feed(policy, clock, STEADY * 2, 0.010)
    assert policy.hedge_delay("r") == pytest.approx(0.030, rel=1 / 128)
    stats = policy.statistics().routes["r"]
    assert (stats.warming_up, stats.samples, stats.recoveries) == (False, 200, 1)
    assert stats.recorded == 300 + 401 + 200  # lifetime counts keep every sample


def test_a_route_slow_for_good_stays_suspended() -> None:
    """When latencies stay above max_delay, no recovery: the route stays suspended."""
    clock = FakeClock()
    policy = AdaptiveDelay(clock=clock)
    burst_then_suspended(policy, clock)
    seen = feed(policy, clock, [6.0, 4.0] * 500, 0.010)  # p95 of recent samples: 6 s
    assert {delay for _, delay in seen} == {None}
    assert policy.statistics().routes["r"].recoveries == 0


@pytest.mark.parametrize(("stragglers", "resumed"), [(1, True), (2, False)])
def test_recovery_tolerates_one_straggler_in_thirty(stragglers: int, resumed: bool) -> None:
    """At q=0.95, 30 recent samples resume hedging with one slow among them, not two."""
    clock = FakeClock()
    policy = AdaptiveDelay(clock=clock)
    burst_then_suspended(policy, clock)
    feed(policy, clock, [0.010] * (30 - stragglers) + [BURST_SECONDS] * stragglers, 0.010)
    assert (policy.hedge_delay("r") is not None) is resumed


def test_recovery_with_many_recent_samples_refreshes_from_the_window() -> None:
    """With recovery_samples >= min_samples, the recovered delay is the window's quantile.

    The burst's last sample suspends the route here (the refresh falls there: one a
    second, the first at 0.4 s, when the warm-up's samples were judged again), so the
    50 recent samples are the 50 normal ones: the 50th resumes hedging, and the window
    then holds those 50 (the burst is gone; at q=0.95 two slow ones among them would
    have been tolerated, ``test_recovery_tolerates_one_straggler_in_thirty``).
    """
    clock = FakeClock()
    policy = AdaptiveDelay(clock=clock, min_samples=20, recovery_samples=50)
    burst_then_suspended(policy, clock)
    seen = feed(policy, clock, [0.020] * 50, 0.010)
    assert [delay is None for _, delay in seen].index(False) == 49
    stats = policy.statistics().routes["r"]
    assert (stats.warming_up, stats.samples, stats.recoveries) == (False, 50, 1)
    assert policy.hedge_delay("r") == pytest.approx(0.020, rel=1 / 128)


def test_nan_and_negative_samples_while_suspended() -> None:
    """While suspended, NaN is not a recent sample and a negative one counts as 0."""
    clock = FakeClock()
    policy = AdaptiveDelay(clock=clock, min_delay=0.002)
    burst_then_suspended(policy, clock)
    feed(policy, clock, [math.nan] * 40, 0.010)
    assert policy.hedge_delay("r") is None
    feed(policy, clock, [-0.5] * 30, 0.010)
    assert policy.hedge_delay("r") == 0.002  # 0 s, floored at min_delay


def test_negative_latencies_are_taken_as_zero() -> None:
    """Negative samples (a clock that stepped back) count as 0: delay min_delay, clamped."""
    policy = AdaptiveDelay(clock=FakeClock(), min_delay=0.002)
    for _ in range(100):
        policy.record("r", -0.5, censored=False)
    stats = policy.statistics().routes["r"]
    assert (policy.hedge_delay("r"), stats.clamped, stats.samples) == (0.002, 100, 100)


def test_snapshot_agrees_with_hedge_delay_and_is_never_mutated() -> None:
    """After every sample, the snapshot gives each route's hedge_delay; old ones stay put."""
    clock = FakeClock()
    policy = AdaptiveDelay(
        clock=clock, min_samples=5, refresh_samples=7, max_delay=0.5, max_routes=3
    )
    rng = random.Random(5)
    routes = ["a", "b", "c", "d", "e"]
    kept: list[tuple[DelaySnapshot, dict[str, float | None]]] = []
    for _ in range(3000):
        clock.now += rng.choice([0.001, 0.01, 0.3])
        latency = rng.choice([0.001, 0.010, 0.100, 2.0])
        policy.record(rng.choice(routes), latency, censored=False)
        snapshot = policy.delay_snapshot()
        for route in [*routes, "unknown"]:
            assert snapshot.delay(route) == policy.hedge_delay(route), route
        if not kept or kept[-1][0] is not snapshot:
            kept.append((snapshot, dict(snapshot.routes)))
    assert len(kept) > 50
    assert all(dict(snapshot.routes) == copy for snapshot, copy in kept)
    assert set(kept[-1][0].routes) <= set(policy.delays())  # evicted routes leave it


def test_snapshot_is_replaced_only_when_a_delay_changes() -> None:
    """Samples that leave every delay as it was publish no new snapshot."""
    clock = FakeClock()
    policy = AdaptiveDelay(clock=clock, min_samples=10)
    assert dict(policy.delay_snapshot().routes) == {}
    feed(policy, clock, [0.020], 0.001)  # a new route is tracked: a new snapshot
    before = policy.delay_snapshot()
    assert dict(before.routes) == {"r": policy.initial_delay}
    feed(policy, clock, [0.020] * 8, 0.001)
    assert policy.delay_snapshot() is before
    policy.record("r", 0.020, censored=False)
    first = policy.delay_snapshot()
    assert first is not before
    assert first.delay("r") == pytest.approx(0.020, rel=1 / 128)
    feed(policy, clock, [0.020] * 2000, 0.001)  # refreshes, same bucket
    assert policy.delay_snapshot() is first


def test_snapshot_lists_exactly_the_tracked_routes() -> None:
    """The snapshot lists every route with a recorded sample, a warming one at
    ``initial_delay``, and no route the policy evicted (``tracks_routes``): the routes
    ``statistics()`` lists, at most ``max_routes``."""
    clock = FakeClock()
    policy = AdaptiveDelay(clock=clock, max_routes=3, initial_delay=0.1)
    assert policy.hedge_delay("asked") == 0.1  # asked, never recorded: not tracked
    for route in ["a", "b", "c", "d", "e"]:
        feed(policy, clock, [0.020], 0.001, route=route)
    snapshot = policy.delay_snapshot()
    assert snapshot.tracks_routes
    assert dict(snapshot.routes) == {"c": 0.1, "d": 0.1, "e": 0.1}
    assert set(policy.statistics().routes) == {"c", "d", "e"}
    assert policy.statistics().evictions == 2
    assert (snapshot.delay("a"), snapshot.delay("asked")) == (0.1, 0.1)
    feed(policy, clock, [0.020] * 100, 0.001, route="d")  # d warmed up: its own delay
    assert dict(policy.delay_snapshot().routes) == pytest.approx(
        {"c": 0.1, "d": 0.020, "e": 0.1}, rel=1 / 128
    )
    assert not FixedDelay(0.030).delay_snapshot().tracks_routes  # one delay for all


def test_snapshot_reads_no_clock() -> None:
    """delay_snapshot() works with no event loop and never reads the clock."""
    calls = itertools.count()

    def clock() -> float:
        next(calls)
        return 0.0

    policy = AdaptiveDelay(clock=clock)
    policy.record("r", 0.010, censored=False)
    before = next(calls)
    assert policy.delay_snapshot().delay("r") == policy.initial_delay
    assert next(calls) == before + 1


def test_built_in_policies_publish_snapshots() -> None:
    """FixedDelay and AdaptiveDelay implement SnapshotDelayPolicy; fixed has one default."""
    fixed = FixedDelay(0.030)
    assert isinstance(fixed, SnapshotDelayPolicy)
    assert isinstance(AdaptiveDelay(), SnapshotDelayPolicy)
    snapshot = fixed.delay_snapshot()
    assert (dict(snapshot.routes), snapshot.default, snapshot.delay("any")) == ({}, 0.030, 0.030)


def test_a_recovery_during_the_warm_up_second_look_keeps_the_burst_out() -> None:
    """A burst that suspends a route just after its warm-up, then a recovery: the window
    holds the recent samples only, and the warm-up's second look (the samples since the
    first delay, burst included) does not come back to suspend it again."""
    clock = FakeClock()
    policy = AdaptiveDelay(clock=clock, min_samples=10, recovery_samples=5, max_delay=1.0,
                           refresh_samples=1)  # fmt: skip
    feed(policy, clock, [0.010] * 10, 0.010)  # warm: the second look starts
    assert policy.hedge_delay("r") == pytest.approx(0.010, rel=1 / 128)
    feed(policy, clock, [BURST_SECONDS] * 4, 0.010)
    assert policy.hedge_delay("r") is None  # suspended by the burst
    seen = feed(policy, clock, [0.010] * 20, 0.010)
    assert [delay is None for _, delay in seen].index(False) == 4  # recovered: 5 normal
    assert all(delay == pytest.approx(0.010, rel=1 / 128) for _, delay in seen[4:])
    stats = policy.statistics().routes["r"]
    assert (stats.recoveries, stats.warming_up, stats.samples) == (1, False, 20)
