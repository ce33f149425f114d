"""``HedgedTransport(extra_load=...)``: one knob that sets the delay's quantile and the
budget's ratio (Finagle's ``maxExtraLoad``), and its errors beside ``delay``/``budget``."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from hedgeclient import AdaptiveDelay, FixedDelay, HedgeBudget, HedgedTransport
from hedgeclient._checks.transport import DEFAULT_EXTRA_LOAD, MAX_EXTRA_LOAD, MIN_EXTRA_LOAD


def build(**kwargs: Any) -> HedgedTransport:
    """A transport with nothing exported, built without an event loop."""
    return HedgedTransport(metrics=False, opentelemetry=False, **kwargs)


def test_the_defaults_are_an_extra_load_of_five_percent() -> None:
    """No argument gives the p95 and a 10 % budget, as ``extra_load=0.05`` does, and as
    the parts' own defaults do: the knob changed no default."""
    plain, knob = build(), build(extra_load=DEFAULT_EXTRA_LOAD)
    for transport in (plain, knob):
        policy = transport.delay_policy
        assert isinstance(policy, AdaptiveDelay)
        assert policy.quantile == 0.95
        assert transport.budget.ratio == 0.1
    assert DEFAULT_EXTRA_LOAD == 0.05
    assert AdaptiveDelay().quantile == 1 - DEFAULT_EXTRA_LOAD
    assert HedgeBudget().ratio == 2 * DEFAULT_EXTRA_LOAD


@pytest.mark.parametrize(
    ("extra_load", "quantile", "ratio"),
    [(0.01, 0.99, 0.02), (0.05, 0.95, 0.1), (0.1, 0.9, 0.2), (MAX_EXTRA_LOAD, 0.5, 1.0)],
)
def test_extra_load_sets_the_quantile_and_the_ratio(
    extra_load: float, quantile: float, ratio: float
) -> None:
    """The delay hedges at the ``1 - extra_load`` quantile and the budget earns twice
    ``extra_load`` per request."""
    transport = build(extra_load=extra_load)
    policy = transport.delay_policy
    assert isinstance(policy, AdaptiveDelay)
    assert policy.quantile == pytest.approx(quantile, abs=1e-12)
    assert transport.budget.ratio == pytest.approx(ratio, abs=1e-12)


@pytest.mark.parametrize("bad", [0, 0.0, -0.1, 0.51, 1, math.nan, math.inf])
def test_extra_load_out_of_range_is_refused(bad: float) -> None:
    """Outside (0, 0.5]: a ValueError naming the parameter and the range."""
    with pytest.raises(ValueError, match=r"^`extra_load` must be in \(0, 0\.5\] or None, got "):
        build(extra_load=bad)


@pytest.mark.parametrize("bad", [1e-300, 1e-17, 5e-324, 2.0**-54])
def test_an_extra_load_below_its_floor_is_refused_naming_it(bad: float) -> None:
    """In (0, MIN_EXTRA_LOAD): a ValueError naming the parameter and its floor, which
    the range's message leaves out (a new user read 5.551115123125784e-17 there). A tiny
    load (1e-17) was once refused with a message about ``quantile``, which the caller
    never passed: ``1 - 1e-17`` is 1.0 in floats (found by a new user)."""
    with pytest.raises(
        ValueError, match=r"^`extra_load` must be at least 5\.55e-17 \(below it 1 - extra_load"
    ):
        build(extra_load=bad)


def test_the_smallest_extra_load_hedges_below_the_largest_quantile() -> None:
    """At MIN_EXTRA_LOAD (about 5.55e-17) the quantile is the largest float below 1 and
    the budget's ratio is positive; just below it, ``1 - x`` rounds to 1."""
    transport = build(extra_load=MIN_EXTRA_LOAD)
    policy = transport.delay_policy
    assert isinstance(policy, AdaptiveDelay)
    assert policy.quantile == math.nextafter(1.0, 0.0)
    assert transport.budget.ratio == 2 * MIN_EXTRA_LOAD
    assert 1.0 - math.nextafter(MIN_EXTRA_LOAD, 0.0) == 1.0


@pytest.mark.parametrize("bad", ["5%", True, [0.05]])
def test_extra_load_of_the_wrong_type_is_refused(bad: object) -> None:
    """Not a number (a bool is not): a TypeError naming the parameter and the range."""
    with pytest.raises(
        TypeError,
        match=r"^`extra_load` must be a number in \(0, 0\.5\] or None, got ",
    ):
        build(extra_load=bad)


def test_an_adaptive_delay_that_agrees_is_used_as_given() -> None:
    """``delay=AdaptiveDelay(quantile=0.99)`` with ``extra_load=0.01``: the policy given
    is the one in force, and the knob sets the budget."""
    policy = AdaptiveDelay(quantile=0.99, window=30.0)
    transport = build(extra_load=0.01, delay=policy)
    assert transport.delay_policy is policy
    assert transport.budget.ratio == 0.02


def test_an_adaptive_delay_that_disagrees_is_refused() -> None:
    """``AdaptiveDelay(window=30)`` keeps its own p95: beside ``extra_load=0.01`` the two
    contradict each other, and the message gives the value that would agree."""
    with pytest.raises(
        ValueError,
        match=(
            r"^`extra_load` must be 0\.05 \(1 - quantile\) with "
            r"delay=AdaptiveDelay\(quantile=0\.95\), or None, got 0\.01: for that extra "
            r"load, give AdaptiveDelay\(quantile=0\.99\)$"
        ),
    ):
        build(extra_load=0.01, delay=AdaptiveDelay(window=30.0))


@pytest.mark.parametrize("delay", [0.030, FixedDelay(0.030)])
def test_a_fixed_delay_takes_its_budget_from_extra_load(delay: object) -> None:
    """A fixed delay's extra load depends on the latencies, unknown here: the knob sets
    the budget that caps it."""
    transport = build(extra_load=0.05, delay=delay)
    assert isinstance(transport.delay_policy, FixedDelay)
    assert transport.budget.ratio == 0.1


def test_a_budget_given_is_shared_and_the_knob_sets_the_delay() -> None:
    """A shared budget stays the one in force; the knob sets the delay's quantile, up to
    the budget's own ratio."""
    shared = HedgeBudget(ratio=0.1)
    for extra_load, quantile in ((0.05, 0.95), (0.1, 0.9)):
        transport = build(extra_load=extra_load, budget=shared)
        assert transport.budget is shared
        policy = transport.delay_policy
        assert isinstance(policy, AdaptiveDelay)
        assert policy.quantile == pytest.approx(quantile, abs=1e-12)


def test_an_extra_load_above_the_budget_given_is_refused() -> None:
    """A delay set to spend more than the budget earns would find it empty."""
    with pytest.raises(
        ValueError,
        match=(
            r"^`extra_load` must be in \(0, 0\.1\] \(the ratio\) with "
            r"budget=HedgeBudget\(ratio=0\.1\), or None, got 0\.2: a delay set to spend "
            r"more than the budget earns would find it empty$"
        ),
    ):
        build(extra_load=0.2, budget=HedgeBudget(ratio=0.1))


def test_extra_load_beside_both_parts_is_refused() -> None:
    """With ``delay`` and ``budget`` both given, the knob would set nothing."""
    with pytest.raises(
        ValueError,
        match=(
            r"^`extra_load` must be None when both `delay` and `budget` are given \(it "
            r"sets the delay's quantile and the budget's ratio, so it would set "
            r"neither\), got 0\.05$"
        ),
    ):
        build(extra_load=0.05, delay=0.030, budget=HedgeBudget())


def _refusals(ratio_per_load: float, extra_load: float = 0.05) -> tuple[int, int]:
    """Backups a stationary log-normal law asks for after a warm-up, and those the
    budget refuses, with the budget's ratio at ``ratio_per_load * extra_load``.

    100 requests a second for 400 s on a fake clock (the median 12 ms, the p95 30 ms);
    a backup that wins records its primary censored, as the transport does.
    """
    rng = random.Random(7)
    now = [0.0]

    def clock() -> float:
        return now[0]

    delay = AdaptiveDelay(quantile=1 - extra_load, clock=clock)
    budget = HedgeBudget(ratio=ratio_per_load * extra_load, clock=clock)
    mu, sigma = math.log(0.012), (math.log(0.030) - math.log(0.012)) / 1.645
    wanted = refused = 0
    while now[0] < 400.0:
        now[0] += rng.expovariate(100.0)
        budget.deposit()
        d = delay.hedge_delay("GET http://catalog")
        latency = rng.lognormvariate(mu, sigma)
        if d is not None and latency > d:
            counted = now[0] > 100.0  # past the warm-up of the window
            wanted += counted
            if budget.try_withdraw():
                backup = d + rng.lognormvariate(mu, sigma)
                if backup < latency:
                    delay.record("GET http://catalog", backup, censored=True)
                    continue
            else:
                refused += counted
        delay.record("GET http://catalog", latency, censored=False)
    return wanted, refused


def test_the_split_leaves_the_budget_idle_on_a_stationary_law() -> None:
    """Why the budget's ratio is twice the extra load: at Finagle's split (ratio =
    extra load) a 10-token bucket refuses some of the backups the rolling p95 asks for
    on a law that never changes, whenever the estimate sits a little low; at twice, it
    refuses none, and binds only when latency shifts (``docs/budget.md``)."""
    wanted, refused = _refusals(2.0)
    assert wanted > 1000  # about 5 % of 30,000 requests
    assert refused == 0
    finagle_wanted, finagle_refused = _refusals(1.0)
    assert finagle_refused >= 0.005 * finagle_wanted
