"""A backup that never leaves the client gives its budget token back to the bucket that
paid it: one still in the client's own pool queue when the race is won (``unsent``), and
one whose custom selector raised as it began (``selector_error``).

The race is driven with a scripted ``send`` (as ``tests/test_queued.py`` does), on
asyncio and trio with the real clock: each step waits for the one before it (events,
not timings), so the outcome holds on a busy machine.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import anyio
import httpx
import pytest

from hedgeclient import HedgeBudget
from hedgeclient._attempt import CANCELLED, Attempt
from hedgeclient._events import Payer
from hedgeclient._race.race import Race
from hedgeclient._race.rules import RaceRules
from hedgeclient._replicas.choice import Choice
from hedgeclient._replicas.services import Service
from hedgeclient._timer import current_timer
from hedgeclient.testing import FirstReplica

pytestmark = pytest.mark.anyio

A, B = "http://a", "http://b"
SERVICE = Service(("http", "svc", 80), [("http", r[7:], 80) for r in (A, B)])
NON_FATAL = frozenset({502, 503, 504})


class FakeClock:
    """The floor bucket's clock, in seconds, set by the test (the race never reads it)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def budget_paid_by(payer: Payer) -> HedgeBudget:
    """A budget whose next backup ``payer``'s bucket pays: ``"main"``, 2 tokens and no
    floor; ``"floor"``, the main bucket spent (0.5 earned since) and the floor holding
    its one token (1 per second, started a second ago)."""
    if payer == "main":
        return HedgeBudget(ratio=0.5, burst=2, min_per_second=0)
    clock = FakeClock()
    budget = HedgeBudget(ratio=0.5, burst=1, min_per_second=1.0, clock=clock)
    assert budget.try_withdraw()
    budget.deposit()  # the floor's clock starts
    clock.now = 1.0
    return budget


REFUNDED = {"main": (2.0, 0.0, 1, 0, 0), "floor": (0.5, 1.0, 1, 1, 0)}
"""The balances (:func:`balances`) once the backup's token is back: as they were, the
floor holding the token it had accrued by then (it accrues as it is used)."""


def race(send: Callable[[Attempt], Any], choice: Choice, budget: HedgeBudget) -> Race:
    """One race over ``SERVICE``: one backup allowed, a 5 ms hedge delay."""
    rules = RaceRules(choice=choice, budget=budget, non_fatal=NON_FATAL, max_backups=1)
    return Race(
        send,
        rules,
        service=SERVICE,
        origin="http://svc",
        delay=0.005,
        ineligible=None,
        start=anyio.current_time(),
        timer=current_timer(),
    )


def balances(budget: HedgeBudget) -> tuple[float, float, int, int, int]:
    """The main and floor balances, the refunds (and the floor's), backups in flight."""
    stats = budget.statistics()
    return (
        stats.tokens,
        stats.floor_tokens,
        stats.refunds,
        stats.floor_refunds,
        stats.backups_in_flight,
    )


@pytest.mark.parametrize("payer", ["main", "floor"])
async def test_an_unsent_backup_gives_its_token_back_to_the_bucket_that_paid(
    payer: Payer,
) -> None:
    """The backup waits in the client's own pool queue (``on_wire`` NaN) until the
    primary answers: it is cancelled unsent, and its token goes back to the bucket that
    paid it. The floor's had gone to the main bucket (one token more than if never
    tried, past the floor's cap) and left the floor empty."""
    budget = budget_paid_by(payer)
    queued = anyio.Event()

    async def send(attempt: Attempt) -> httpx.Response:
        if attempt.kind == "primary":  # on its replica at once
            await queued.wait()
            return httpx.Response(200)
        attempt.on_wire = math.nan  # as _wire.send marks it, until it leaves the queue
        queued.set()
        await anyio.sleep_forever()  # the one connection never comes
        raise AssertionError  # pragma: no cover (cancelled)

    choice = Choice(FirstReplica(), zone=None, backup_zone="any", non_fatal=NON_FATAL)
    one = race(send, choice, budget)
    response = await one.run()
    primary, backup = one.attempts
    assert (response.status_code, one.winner) == (200, primary)
    assert (backup.replica, backup.state, math.isnan(backup.on_wire)) == (B, CANCELLED, True)
    assert balances(budget) == REFUNDED[payer]
    assert budget.statistics().withdrawals == (2 if payer == "floor" else 1)


@pytest.mark.parametrize("payer", ["main", "floor"])
async def test_a_selector_raising_as_the_backup_begins_gives_its_token_back(
    payer: Payer, caplog: pytest.LogCaptureFixture
) -> None:
    """A custom selector whose ``attempt_started`` raises for the backup: no backup
    (``selector_error``), and the token drawn for it goes back to the bucket that paid
    (it stayed spent, though no replica saw the backup)."""
    budget = budget_paid_by(payer)
    refused = anyio.Event()

    class Failing(FirstReplica):
        def attempt_started(self, replica: str) -> None:
            if replica == B:
                refused.set()
                msg = "selector bug"
                raise RuntimeError(msg)

    async def send(attempt: Attempt) -> httpx.Response:
        await refused.wait()  # the primary answers once its backup was refused
        return httpx.Response(200)

    choice = Choice(Failing(), zone=None, backup_zone="any", non_fatal=NON_FATAL)
    one = race(send, choice, budget)
    response = await one.run()
    assert (response.status_code, len(one.attempts), one.suppressed) == (200, 1, "selector_error")
    assert balances(budget) == REFUNDED[payer]
    assert "the replica selector failed" in caplog.text
