"""HedgeBudget.try_retry: a retry library's draw on the hedge budget (issue 27)."""

from __future__ import annotations

import pytest

from hedgeclient._policy.budget import HedgeBudget


class FakeClock:
    """A settable clock, in seconds."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_a_retry_spends_one_token_and_the_deposit_its_resend_makes() -> None:
    """By default a retry withdraws 1 + ratio: the retried request deposits again."""
    budget = HedgeBudget(ratio=0.1, burst=2, min_per_second=0.0)
    assert budget.try_retry() is True
    assert budget.tokens == pytest.approx(0.9)
    budget.deposit()  # the retried request, sent through the transport
    assert budget.tokens == pytest.approx(1.0)  # it earned nothing in all


def test_a_retry_that_does_not_deposit_spends_one_token() -> None:
    """``deposits=False``: a retry through a client that does not deposit costs one."""
    budget = HedgeBudget(ratio=0.1, burst=2, min_per_second=0.0)
    assert budget.try_retry(deposits=False) is True
    assert budget.tokens == 1.0


def test_a_refused_retry_spends_nothing_and_is_counted() -> None:
    """A budget short of 1 + ratio refuses the retry, keeps its balance, counts it."""
    budget = HedgeBudget(ratio=0.5, burst=1, min_per_second=0.0)
    assert budget.try_retry() is False
    assert budget.tokens == 1.0
    stats = budget.statistics()
    assert (stats.retries, stats.retry_refusals, stats.withdrawals, stats.refusals) == (0, 1, 0, 0)


def test_retries_and_backups_draw_on_the_same_tokens() -> None:
    """Ten tokens: a backup and a retry each take theirs, the rest is refused."""
    budget = HedgeBudget(ratio=0.1, burst=10, min_per_second=0.0)
    spent = 0
    for i in range(20):
        ok = budget.try_withdraw() if i % 2 else budget.try_retry(deposits=False)
        spent += ok
    assert spent == 10
    stats = budget.statistics()
    assert (stats.withdrawals, stats.retries) == (5, 5)
    assert (stats.refusals, stats.retry_refusals) == (5, 5)


def test_the_floor_pays_a_retry_for_a_quiet_client() -> None:
    """An empty main bucket: the floor bucket, filled by clock time, pays a retry."""
    clock = FakeClock()
    budget = HedgeBudget(ratio=0.1, burst=1, min_per_second=1.0, clock=clock)
    assert budget.try_withdraw() is True  # the main bucket is empty now
    budget.deposit()  # starts the floor's clock
    assert budget.try_retry() is False
    clock.now = 1.0
    assert budget.try_retry() is True
    assert budget.statistics().retries == 1


def test_retries_and_backups_stay_within_ratio_of_the_callers_requests() -> None:
    """An all-failing service: each call deposits, asks a backup and two retries (each
    resend deposits again); the extra attempts stay within ratio x calls + burst."""
    ratio, burst, calls = 0.1, 10.0, 10_000
    budget = HedgeBudget(ratio=ratio, burst=burst, min_per_second=0.0)
    sent = 0
    for _ in range(calls):
        for attempt in range(3):  # stamina's attempts=3
            if attempt and not budget.try_retry():
                break
            budget.deposit()  # the transport deposits for every request it is sent
            sent += 1
            sent += budget.try_withdraw()  # the backup after the primary's 503
    extra = sent - calls
    assert extra <= ratio * calls + burst
    assert extra >= ratio * calls - 1  # and the budget is used, not wasted
