"""HedgeBudget: token bucket, floor for quiet clients, in-flight cap, validation; refunds
to the bucket that paid, and the home a sync transport binds it to. Pure: an injected
clock, no loop."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hedgeclient._policy.budget import BudgetStatistics, HedgeBudget


class FakeClock:
    """A settable clock, in seconds."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def drain(budget: HedgeBudget) -> int:
    """Withdraw until refused; return how many were allowed."""
    allowed = 0
    while budget.try_withdraw():
        allowed += 1
    return allowed


def test_starts_full_at_burst() -> None:
    """A new budget allows `burst` backups straight away, then refuses."""
    budget = HedgeBudget(burst=10, min_per_second=0.0)
    assert budget.tokens == 10.0
    assert drain(budget) == 10
    assert budget.try_withdraw() is False


def test_each_request_earns_ratio_tokens() -> None:
    """Ten requests at ratio 0.1 earn exactly one backup, despite float rounding."""
    budget = HedgeBudget(ratio=0.1, burst=1, min_per_second=0.0)
    assert drain(budget) == 1
    for _ in range(9):
        budget.deposit()
    assert budget.try_withdraw() is False
    budget.deposit()
    assert budget.try_withdraw() is True
    assert budget.try_withdraw() is False


def test_balance_is_capped_at_burst() -> None:
    """Deposits beyond a full bucket are lost."""
    budget = HedgeBudget(ratio=1.0, burst=3, min_per_second=0.0)
    for _ in range(100):
        budget.deposit()
    assert budget.tokens == 3.0
    assert drain(budget) == 3


def test_refusal_spends_nothing_and_is_counted() -> None:
    """A refused withdrawal leaves the balance alone and counts a refusal."""
    budget = HedgeBudget(ratio=0.5, burst=1, min_per_second=0.0)
    drain(budget)
    budget.deposit()
    assert budget.try_withdraw() is False
    assert budget.tokens == 0.5
    assert budget.statistics().refusals == 2


def test_floor_starts_empty_and_accrues_min_per_second() -> None:
    """The floor bucket starts empty, fills at min_per_second and caps at max(1, rate)."""
    clock = FakeClock(1000.0)
    budget = HedgeBudget(burst=1, min_per_second=2.0, clock=clock)
    assert drain(budget) == 1  # the main bucket; the floor has nothing yet
    clock.now += 0.5
    assert drain(budget) == 1  # 2/s for 0.5 s
    clock.now += 0.25
    assert drain(budget) == 0  # half a token only
    clock.now += 60.0
    assert drain(budget) == 2  # capped at max(1, 2) = 2, not 120
    assert budget.statistics().floor_withdrawals == 3


def test_slow_floor_caps_at_one_token() -> None:
    """With min_per_second below 1 the floor still holds one whole token at most."""
    clock = FakeClock()
    budget = HedgeBudget(burst=1, min_per_second=0.25, clock=clock)
    drain(budget)
    clock.now += 3.0
    assert drain(budget) == 0
    clock.now += 1.0
    assert drain(budget) == 1
    clock.now += 3600.0
    assert drain(budget) == 1


def test_floor_clock_starts_at_first_request() -> None:
    """Time before the budget is first used earns the floor nothing."""
    clock = FakeClock()
    budget = HedgeBudget(burst=1, min_per_second=1.0, clock=clock)
    clock.now = 500.0
    budget.deposit()
    drain(budget)
    assert budget.statistics().floor_withdrawals == 0
    clock.now = 501.0
    assert drain(budget) == 1


def test_no_floor_never_reads_the_clock() -> None:
    """min_per_second = 0 disables the floor, and the clock is never consulted."""

    def clock() -> float:
        raise AssertionError

    budget = HedgeBudget(burst=1, min_per_second=0.0, clock=clock)
    budget.deposit()
    assert drain(budget) == 1


# One step of a schedule: a request, a backup attempt, or time passing (seconds).
STEP = st.one_of(
    st.just(("deposit", 0.0)),
    st.just(("withdraw", 0.0)),
    st.tuples(st.just("advance"), st.floats(min_value=0.0, max_value=5.0)),
)


@given(
    ratio=st.floats(min_value=0.001, max_value=1.0),
    burst=st.floats(min_value=1.0, max_value=20.0),
    min_per_second=st.floats(min_value=0.0, max_value=10.0),
    schedule=st.lists(STEP, max_size=300),
)
def test_backups_never_exceed_the_guarantee(
    ratio: float, burst: float, min_per_second: float, schedule: list[tuple[str, float]]
) -> None:
    """backups <= ratio * requests + burst + min_per_second * elapsed at every step."""
    clock = FakeClock(10.0)
    budget = HedgeBudget(ratio=ratio, burst=burst, min_per_second=min_per_second, clock=clock)
    requests = backups = 0
    for kind, dt in schedule:
        if kind == "deposit":
            budget.deposit()
            requests += 1
        elif kind == "withdraw":
            backups += budget.try_withdraw()
        else:
            clock.now += dt
        bound = ratio * requests + burst + min_per_second * (clock.now - 10.0)
        # 1e-6: float rounding of the bound itself and the budget's 1e-9 token tolerance.
        assert backups <= bound + 1e-6


def test_in_flight_cap() -> None:
    """in_flight_full turns true at max_in_flight and false when a backup finishes."""
    budget = HedgeBudget(max_in_flight=2)
    assert budget.in_flight_full is False
    budget.backup_started()
    budget.backup_started()
    assert budget.backups_in_flight == 2
    assert budget.in_flight_full is True
    budget.backup_finished()
    assert budget.in_flight_full is False


def test_no_in_flight_cap_by_default() -> None:
    """max_in_flight=None never reports full."""
    budget = HedgeBudget()
    for _ in range(1000):
        budget.backup_started()
    assert budget.in_flight_full is False


def test_a_backup_that_never_left_gives_its_token_back() -> None:
    """``backup_finished(unsent=True)``: no replica saw it, so its token returns to the
    main bucket, never above ``burst``; a backup that was sent keeps its token spent."""
    budget = HedgeBudget(ratio=0.5, burst=3, min_per_second=0)
    assert [budget.try_withdraw(), budget.try_withdraw()] == [True, True]
    budget.backup_started()
    budget.backup_finished()  # sent: spent
    assert budget.tokens == 1.0
    budget.backup_started()
    budget.backup_finished(unsent=True)
    assert budget.tokens == 2.0
    budget.deposit()
    budget.deposit()  # 3.0: full
    budget.backup_started()
    budget.backup_finished(unsent=True)
    assert (budget.tokens, budget.backups_in_flight) == (3.0, 0)


def test_unbalanced_backup_finished_raises() -> None:
    """Finishing a backup that never started is a caller bug and raises."""
    with pytest.raises(
        RuntimeError, match=r"^backup_finished\(\) called with no backup in flight$"
    ):
        HedgeBudget().backup_finished()


def test_statistics_snapshot() -> None:
    """statistics() reports balances, counters and the in-flight gauge."""
    budget = HedgeBudget(ratio=0.5, burst=1, min_per_second=0.0, max_in_flight=3)
    budget.try_withdraw()
    budget.try_withdraw()
    budget.deposit()
    budget.backup_started()
    assert budget.statistics() == BudgetStatistics(
        tokens=0.5,
        floor_tokens=0.0,
        deposits=1,
        withdrawals=1,
        floor_withdrawals=0,
        refusals=1,
        backups_in_flight=1,
        max_in_flight=3,
    )


def test_defaults() -> None:
    """The defaults: ratio 0.1, burst 10, one backup per second floor, no in-flight cap."""
    budget = HedgeBudget()
    assert (budget.ratio, budget.burst, budget.min_per_second, budget.max_in_flight) == (
        0.1,
        10.0,
        1.0,
        None,
    )


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"ratio": 0}, ValueError, r"^`ratio` must be in \(0, 1\], got 0$"),
        ({"ratio": 1.5}, ValueError, r"^`ratio` must be in \(0, 1\], got 1\.5$"),
        ({"ratio": -0.1}, ValueError, r"^`ratio` must be in \(0, 1\], got -0\.1$"),
        ({"ratio": math.nan}, ValueError, r"^`ratio` must be in \(0, 1\], got nan$"),
        ({"ratio": "0.1"}, TypeError, r"^`ratio` must be a number in \(0, 1\], got '0\.1'$"),
        ({"ratio": True}, TypeError, r"^`ratio` must be a number in \(0, 1\], got True$"),
        ({"burst": 0.5}, ValueError, r"^`burst` must be a finite number >= 1, got 0\.5$"),
        ({"burst": math.inf}, ValueError, r"^`burst` must be a finite number >= 1, got inf$"),
        ({"burst": math.nan}, ValueError, r"^`burst` must be a finite number >= 1, got nan$"),
        ({"burst": None}, TypeError, r"^`burst` must be a number >= 1, got None$"),
        (
            {"min_per_second": -1},
            ValueError,
            r"^`min_per_second` must be a finite number >= 0, got -1$",
        ),
        (
            {"min_per_second": math.inf},
            ValueError,
            r"^`min_per_second` must be a finite number >= 0, got inf$",
        ),
        ({"max_in_flight": 0}, ValueError, r"^`max_in_flight` must be >= 1 or None, got 0$"),
        (
            {"max_in_flight": 1.5},
            TypeError,
            r"^`max_in_flight` must be an int >= 1 or None, got 1\.5$",
        ),
        ({"clock": "now"}, TypeError, r"^`clock` must be a callable .*, got 'now'$"),
    ],
)
def test_invalid_parameters_are_rejected(
    kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    """Bad arguments raise, naming the parameter, the bad value and the allowed range."""
    with pytest.raises(error, match=message):
        HedgeBudget(**kwargs)


@given(
    st.sampled_from([0.1, 0.25, 0.3, 1.0]),
    st.lists(st.tuples(st.integers(0, 40), st.integers(0, 3)), max_size=20),
)
def test_tallied_requests_earn_as_deposits_do(ratio: float, rounds: list[tuple[int, int]]) -> None:
    """Requests counted in the tally (the request path's deposit, no call) earn exactly
    what as many deposit() calls earn: the same balance to the last bit, the same
    grants, capped alike; read before any draw, the balance already includes them."""
    eager = HedgeBudget(ratio=ratio, burst=3, min_per_second=0.0)
    lazy = HedgeBudget(ratio=ratio, burst=3, min_per_second=0.0)
    lazy.deposit()  # the first request deposits by a call (it starts the floor's clock)
    eager.deposit()
    for requests, draws in rounds:
        for _ in range(requests):
            eager.deposit()
        lazy._tally.requests += requests
        assert lazy.tokens == eager.tokens
        assert lazy.statistics() == eager.statistics()
        assert [lazy.try_withdraw() for _ in range(draws)] == [
            eager.try_withdraw() for _ in range(draws)
        ]
    assert lazy.statistics() == eager.statistics()


def test_many_requests_settle_at_once() -> None:
    """Past 64 requests counted since the last draw, the budget earns on them in one
    product (a settlement stays O(1), whatever the ratio): the balance a deposit per
    request gives, to within float rounding (the sum of 12,345 deposits strays 1.4e-12
    from the product), and the same grants."""
    eager = HedgeBudget(ratio=0.001, burst=50, min_per_second=0.0)
    lazy = HedgeBudget(ratio=0.001, burst=50, min_per_second=0.0)
    assert drain(eager) == drain(lazy) == 50
    for _ in range(12_345):
        eager.deposit()
    lazy._tally.requests += 12_345
    assert lazy.tokens == pytest.approx(eager.tokens, abs=1e-9)  # _ONE's tolerance
    assert lazy.statistics().deposits == eager.statistics().deposits == 12_345
    assert drain(lazy) == drain(eager) == 12
    lazy._tally.requests += 10**9  # far past the cap: capped, at once
    assert lazy.tokens == 50.0


@pytest.mark.parametrize("deposits", ["no", 0, None])
def test_try_retry_refuses_a_deposits_that_is_not_a_bool(deposits: object) -> None:
    """A truthy ``"no"`` must not pass as ``True`` (a new user's report): refused, with
    the parameter named, and nothing spent."""
    budget = HedgeBudget(clock=lambda: 0.0)
    with pytest.raises(TypeError, match=r"^`deposits` must be a bool, got "):
        budget.try_retry(deposits=deposits)  # type: ignore[arg-type]
    assert budget.statistics().retries == 0
    assert budget.tokens == 10.0


# -- refunds, and the home a sync transport binds the budget to --------------------------


def quiet(clock: FakeClock) -> HedgeBudget:
    """A quiet client's budget at t=1: its main bucket spent (0.5 earned since), its
    floor holding its one token (1 per second, capped at 1, started at t=0)."""
    budget = HedgeBudget(ratio=0.5, burst=1, min_per_second=1.0, clock=clock)
    assert budget.draw() == "main"
    budget.deposit()  # t=0: the floor's clock starts
    clock.now = 1.0
    return budget


def test_draw_says_which_bucket_paid() -> None:
    """``draw()`` is ``try_withdraw()`` naming the payer: the main bucket while it holds
    a whole token, then the floor, then ``None`` (refused); both count as withdrawals."""
    clock = FakeClock()
    budget = quiet(clock)
    assert [budget.draw(), budget.draw()] == ["floor", None]
    stats = budget.statistics()
    assert (stats.withdrawals, stats.floor_withdrawals, stats.refusals) == (2, 1, 1)


def test_an_unsent_backup_the_floor_paid_gives_its_token_back_to_the_floor() -> None:
    """A backup the floor paid that never left the client: the floor gets its token back,
    and the main bucket stays as it was (it got it, one more than if never tried, and the
    floor's cap was bypassed once). Then the budget is exactly one that never tried it."""
    clock, never_clock = FakeClock(), FakeClock()
    tried, never = quiet(clock), quiet(never_clock)
    assert tried.draw() == "floor"
    tried.backup_started()
    tried.backup_finished(unsent=True, payer="floor")
    assert (tried.tokens, tried.statistics().floor_tokens) == (0.5, 1.0)
    stats = tried.statistics()
    assert (stats.withdrawals, stats.floor_withdrawals) == (2, 1)  # every draw, counted
    assert (stats.refunds, stats.floor_refunds, stats.backups_in_flight) == (1, 1, 0)
    for now in (1.5, 3.0, 3.2, 5.0):  # the floor accrues from its last use, capped at 1
        clock.now = never_clock.now = now
        assert [tried.draw(), tried.draw()] == [never.draw(), never.draw()]
        assert (tried.tokens, tried.statistics().floor_tokens) == (
            never.tokens,
            never.statistics().floor_tokens,
        )


def test_an_unsent_backup_the_main_bucket_paid_gives_its_token_back_there() -> None:
    """The main bucket paid: its token goes back there (up to ``burst``); the floor is
    untouched."""
    budget = HedgeBudget(ratio=0.5, burst=2, min_per_second=1.0, clock=FakeClock())
    assert budget.draw() == "main"
    budget.backup_started()
    budget.backup_finished(unsent=True, payer="main")
    assert (budget.tokens, budget.statistics().floor_tokens) == (2.0, 0.0)
    assert (budget.statistics().refunds, budget.statistics().floor_refunds) == (1, 0)


def test_a_refund_never_lifts_a_bucket_above_its_cap() -> None:
    """A floor already refilled to its cap (``max(1, min_per_second)``) by the time the
    refund comes stays at the cap, as if the backup had never been tried."""
    clock = FakeClock()
    budget = HedgeBudget(ratio=0.1, burst=1, min_per_second=2.0, clock=clock)
    assert budget.draw() == "main"
    budget.deposit()
    clock.now = 1.0
    assert budget.draw() == "floor"  # 2 accrued (the cap), 1 left
    budget.refund("floor")
    assert budget.statistics().floor_tokens == 2.0
    budget.refund("floor")  # (a second refund: still the cap)
    assert budget.statistics().floor_tokens == 2.0


def test_statistics_count_refunds_apart_from_withdrawals() -> None:
    """``withdrawals`` and ``floor_withdrawals`` count every draw, refunded or not;
    ``refunds`` and ``floor_refunds`` the part given back: ``withdrawals - refunds``
    backups cost a token."""
    clock = FakeClock()
    budget = quiet(clock)
    assert budget.draw() == "floor"
    budget.refund("floor")
    budget.deposit()  # 1.0: a whole token again
    assert budget.draw() == "main"
    budget.refund("main")
    assert budget.statistics() == BudgetStatistics(
        tokens=1.0,
        floor_tokens=1.0,
        deposits=2,
        withdrawals=3,
        floor_withdrawals=1,
        refusals=0,
        backups_in_flight=0,
        max_in_flight=None,
        refunds=2,
        floor_refunds=1,
    )


class FakeHome:
    """A loop thread a budget may live on: runs what it is given, counting it."""

    def __init__(self, *, elsewhere: bool = True) -> None:
        self.closed = False
        self.ran = 0
        self._elsewhere = elsewhere

    def elsewhere(self) -> bool:
        return self._elsewhere

    def run(self, func: Callable[[], bool]) -> bool:
        self.ran += 1
        self._elsewhere = False  # (as on the loop thread)
        try:
            return func()
        finally:
            self._elsewhere = True


def test_a_budget_lives_on_one_home_at_a_time() -> None:
    """``bind_home`` makes a sync transport's loop thread the budget's (``try_retry`` from
    another thread runs there); the same again is a no-op; another open one is refused,
    naming the parameter; a closed one, or one unbound, frees it."""
    budget = HedgeBudget(ratio=0.5, burst=3, min_per_second=0)
    first, second = FakeHome(), FakeHome()
    budget.bind_home(first)
    budget.bind_home(first)
    assert budget.try_retry() is True
    assert (first.ran, budget.statistics().retries) == (1, 1)
    with pytest.raises(ValueError, match=r"^`routes\[0\]\.budget`: HedgeBudget\(ratio=0\.5, ") as e:
        budget.bind_home(second, "routes[0].budget")
    assert str(e.value).endswith(
        "already serves another SyncHedgedTransport: a budget lives on one event loop, and "
        "each SyncHedgedTransport has its own; give each its own HedgeBudget, or share one "
        "SyncHedgedTransport"
    )
    budget.unbind_home(second)  # not its home: nothing changes
    first.closed = True
    budget.bind_home(second)  # the first closed: free
    assert budget.try_retry(deposits=False) is True
    assert (first.ran, second.ran) == (1, 1)
    budget.unbind_home(second)
    assert budget.try_retry(deposits=False) is False  # drawn here: 3 - 1.5 - 1 < 1
    assert (first.ran, second.ran, budget.statistics().retry_refusals) == (1, 1, 1)
