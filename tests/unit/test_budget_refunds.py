"""HedgeBudget refunds to the bucket that paid, and the home a sync transport binds it to.

Pure: an injected clock, no loop.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from hedgeclient._policy.budget import BudgetStatistics, HedgeBudget


class FakeClock:
    """A settable clock, in seconds."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


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
