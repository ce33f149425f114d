"""Every suppress reason, decided in ``_policy.eligibility``: pure functions, no loop."""

from __future__ import annotations

import math
from typing import Any

import pytest

from hedgeclient import HedgeBudget
from hedgeclient._events import SuppressReason
from hedgeclient._policy.eligibility import (
    LAG_DEFER,
    LAG_SUPPRESS,
    no_delay_reason,
    selector_failed,
    unsent_reason,
    veto_backup,
)

DELAY = 0.030


def empty() -> HedgeBudget:
    """A budget whose one token is spent, on a clock that stands still."""
    budget = HedgeBudget(ratio=0.1, burst=1, min_per_second=0, clock=lambda: 0.0)
    assert budget.try_withdraw()
    return budget


def full() -> HedgeBudget:
    """A budget with tokens, whose one backup in flight is out."""
    budget = HedgeBudget(ratio=1.0, burst=10, max_in_flight=1, clock=lambda: 0.0)
    budget.backup_started()
    return budget


def veto(**given: Any) -> tuple[SuppressReason | None, str | None]:
    """``veto_backup`` of a request that may send a backup now, but for ``given``; a
    backup that goes is then begun as the race begins it (``Race.begin_backup``):
    ``begin`` gets the replica and what the hook prepared, and one that raises gives
    ``selector_failed()`` (and refunds its token to the bucket that paid). The default
    ``begin`` returns the replica, marked as begun."""
    begin = given.pop("begin", lambda replica, prepared: f"begun {replica}")
    args: dict[str, Any] = {
        "ineligible": None,
        "allowed": True,
        "pushback": False,
        "time_left": math.inf,
        "expected": DELAY,
        "choose": lambda: "http://b",
        "budget": HedgeBudget(ratio=1.0, burst=10, clock=lambda: 0.0),
        "delay": DELAY,
    }
    args |= given
    reason, go = veto_backup(**args)
    if go is None:
        return reason, None
    replica, prepared, payer = go
    try:
        return None, begin(replica, prepared)
    except Exception:  # as the race: a selector's bug while the backup starts
        if payer is not None:
            args["budget"].refund(payer)
        return selector_failed(), None


def test_a_route_with_no_delay_reports_cutoff_unless_ineligible() -> None:
    """No hedge delay (the policy's cut-off): ``cutoff`` from the start for a request that
    may be hedged; one that may not keeps its own reason for when a backup is due."""
    assert no_delay_reason(None) == "cutoff"
    assert no_delay_reason("not_idempotent") is None


def test_an_ineligible_request_counts_only_when_a_backup_would_have_been_due() -> None:
    """Its reason when its primary waited past the delay its route has now, else none."""
    assert unsent_reason("not_idempotent", 0.031, DELAY) == "not_idempotent"
    assert unsent_reason("not_idempotent", 0.030, DELAY) is None  # exactly: not past
    assert unsent_reason("opted_out", 5.0, None) is None  # no delay: never due


def test_a_due_backup_goes_and_is_begun() -> None:
    """Nothing stands in the way: the backup goes to the replica chosen."""
    assert veto() == (None, "begun http://b")


@pytest.mark.parametrize(
    ("given", "reason"),
    [
        ({"ineligible": "not_idempotent"}, "not_idempotent"),
        ({"pushback": True}, "pushback"),
        ({"time_left": 0.030}, "deadline"),
        ({"lag": 0.015, "waited": 0.030}, "client_lag"),
        ({"choose": lambda: None}, "no_other_replica"),
        ({"budget": full()}, "max_in_flight"),
        ({"budget": empty()}, "budget"),
    ],
)
def test_each_reason_a_due_backup_is_suppressed(
    given: dict[str, Any], reason: SuppressReason
) -> None:
    """Each rule, alone, suppresses the backup with its own reason."""
    assert veto(**given) == (reason, None)


def test_every_backup_already_sent_is_no_suppression() -> None:
    """A request with no backup left reports nothing: none was refused."""
    assert veto(allowed=False) == (None, None)
    assert veto(allowed=False, ineligible="opted_out") == ("opted_out", None)


def test_a_backup_held_back_by_the_lag_goes_once_the_primary_waited_long_enough() -> None:
    """A late loop holds the backup back until the primary has waited its delay plus
    LAG_DEFER lags; a loop late by less than LAG_SUPPRESS of the delay holds nothing."""
    lag = LAG_SUPPRESS * DELAY
    assert veto(lag=lag, waited=DELAY + LAG_DEFER * lag - 0.001) == ("client_lag", None)
    assert veto(lag=lag, waited=DELAY + LAG_DEFER * lag) == (None, "begun http://b")
    assert veto(lag=lag - 0.001, waited=DELAY) == (None, "begun http://b")


def test_a_twin_goes_to_its_replica_whatever_the_deadline_and_budget() -> None:
    """A tied request's twin was chosen with its first copy: it goes there, and draws
    nothing from the budget."""
    assert veto(twin="http://c", time_left=0.0, budget=empty()) == (None, "begun http://c")
    assert veto(twin="http://c", budget=full()) == (None, "begun http://c")


def test_a_selector_that_raises_costs_the_backup_never_the_request(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A custom ReplicaSelector that raises while the backup is chosen or begun gives
    ``selector_error``, logged."""

    def broken(*args: object) -> str:
        msg = "a selector's bug"
        raise RuntimeError(msg)

    assert veto(choose=broken) == ("selector_error", None)
    assert veto(begin=broken) == ("selector_error", None)
    assert veto(twin="http://c", begin=broken) == ("selector_error", None)
    assert [r.getMessage() for r in caplog.records] == [
        "hedgeclient: the replica selector failed; no backup"
    ] * 3
