"""One hedge budget shared by backups and retries (issue 27), under concurrency.

The recipes of ``docs/budget.md`` ("One budget for retries and backups"), run against
a service whose every replica answers ``503`` at once (no time passes, so nothing here
asserts time): stamina on asyncio and trio, httpx-retries on asyncio (it sleeps with
``asyncio.sleep``). Many callers at once share one budget; its accounting must balance
exactly, and the extra attempts (backups and retries together) stay within
``ratio x calls + burst``, which a plain client's ``calls`` bounds to ``1 + ratio``.
"""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest
import stamina

from hedgeclient import HedgeBudget, HedgedTransport

pytestmark = pytest.mark.anyio

SERVICE = "http://svc"
RATIO, BURST = 0.1, 5.0
CALLERS, CALLS_EACH = 25, 8  # 200 calls, 25 at once


class AllFail:
    """Every replica answers 503 at once; counts the attempts it saw."""

    def __init__(self) -> None:
        self.seen = 0

    async def handler(self, request: httpx.Request) -> httpx.Response:
        self.seen += 1
        await anyio.lowlevel.checkpoint()  # let the other callers interleave
        return httpx.Response(503)


def hedged_transport(service: AllFail, budget: HedgeBudget) -> HedgedTransport:
    """Two replicas, a delay no 503 waits for: backups go only after a failure."""
    return HedgedTransport(
        httpx.MockTransport(service.handler),
        replicas={SERVICE: ["http://a", "http://b"]},
        delay=1.0,
        budget=budget,
        metrics=False,
    )


def check_accounting(service: AllFail, budget: HedgeBudget, calls: int) -> None:
    """Every attempt the service saw is a deposit (a request the transport was sent) or
    a withdrawal (a backup); every request but the callers' is a retry drawn; and the
    extra attempts stay within the budget's bound."""
    stats = budget.statistics()
    assert service.seen == stats.deposits + stats.withdrawals
    assert stats.deposits == calls + stats.retries
    extra = service.seen - calls
    assert extra == stats.retries + stats.withdrawals
    assert extra <= RATIO * calls + BURST + 1e-9
    assert service.seen <= (1 + RATIO) * calls + BURST


async def test_stamina_and_backups_share_one_budget_under_concurrency() -> None:
    """stamina's 3 attempts around hedging, 25 callers at once: the budget pays for
    both, and an all-503 service sees at most (1 + ratio) x calls + burst requests
    (without it: 3 x 2 = 6 x calls)."""
    service = AllFail()
    budget = HedgeBudget(ratio=RATIO, burst=BURST, min_per_second=0)

    def retry_while_the_budget_allows(exc: Exception) -> bool:
        """stamina's ``on``: a 5xx or a transport error, if the budget pays for it."""
        if isinstance(exc, httpx.HTTPStatusError):
            return exc.response.status_code >= 500 and budget.try_retry()
        return isinstance(exc, httpx.TransportError) and budget.try_retry()

    failed = 0
    async with httpx.AsyncClient(
        transport=hedged_transport(service, budget), base_url=SERVICE
    ) as client:

        @stamina.retry(
            on=retry_while_the_budget_allows, attempts=3, wait_initial=0, wait_max=0, wait_jitter=0
        )
        async def get_item() -> httpx.Response:
            return (await client.get("/items/1")).raise_for_status()

        async def caller() -> None:
            nonlocal failed
            for _ in range(CALLS_EACH):
                try:
                    await get_item()
                except httpx.HTTPStatusError:
                    failed += 1

        async with anyio.create_task_group() as tg:
            for _ in range(CALLERS):
                tg.start_soon(caller)
    calls = CALLERS * CALLS_EACH
    assert failed == calls
    check_accounting(service, budget, calls)
    assert budget.statistics().retry_refusals > 0  # the budget did refuse retries


async def test_the_budget_alone_balances_under_concurrency() -> None:
    """Backups and direct ``try_retry`` draws from many tasks: no token is counted
    twice, none lost."""
    service = AllFail()
    budget = HedgeBudget(ratio=RATIO, burst=BURST, min_per_second=0)
    async with httpx.AsyncClient(
        transport=hedged_transport(service, budget), base_url=SERVICE
    ) as client:

        async def caller() -> None:
            for _ in range(CALLS_EACH):
                for attempt in range(3):
                    if attempt and not budget.try_retry():
                        break
                    await client.get("/items/1")

        async with anyio.create_task_group() as tg:
            for _ in range(CALLERS):
                tg.start_soon(caller)
    check_accounting(service, budget, CALLERS * CALLS_EACH)


@pytest.fixture
def asyncio_only(anyio_backend_name: str) -> None:
    """httpx-retries sleeps with ``asyncio.sleep``: asyncio only."""
    if anyio_backend_name != "asyncio":
        pytest.skip("httpx-retries sleeps with asyncio.sleep (asyncio only)")


@pytest.mark.usefixtures("asyncio_only")
async def test_httpx_retries_and_backups_share_one_budget_under_concurrency() -> None:
    """httpx-retries' RetryTransport around the hedged one, its retries drawn from the
    same budget (the recipe's ``BudgetedRetry``)."""
    from httpx_retries import Retry, RetryTransport

    class BudgetedRetry(Retry):
        """httpx-retries' ``Retry``, each retry drawn from a hedge budget."""

        def __init__(self, *args: Any, budget: HedgeBudget | None = None, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.budget = budget

        def is_retryable_status_code(self, status_code: int) -> bool:
            retry = super().is_retryable_status_code(status_code)
            return retry and (self.budget is None or self.budget.try_retry())

        def is_retryable_exception(self, exception: Exception) -> bool:
            retry = super().is_retryable_exception(exception)
            return retry and (self.budget is None or self.budget.try_retry())

        def copy_with(self, **kwargs: Any) -> BudgetedRetry:
            copy = super().copy_with(**kwargs)
            assert isinstance(copy, BudgetedRetry)
            copy.budget = self.budget
            return copy

    service = AllFail()
    budget = HedgeBudget(ratio=RATIO, burst=BURST, min_per_second=0)
    retry = BudgetedRetry(total=2, backoff_factor=0, budget=budget)  # 3 attempts
    transport = RetryTransport(transport=hedged_transport(service, budget), retry=retry)
    statuses: list[int] = []
    async with httpx.AsyncClient(transport=transport, base_url=SERVICE) as client:

        async def caller() -> None:
            for _ in range(CALLS_EACH):
                statuses.append((await client.get("/items/1")).status_code)

        async with anyio.create_task_group() as tg:
            for _ in range(CALLERS):
                tg.start_soon(caller)
    calls = CALLERS * CALLS_EACH
    assert statuses == [503] * calls
    check_accounting(service, budget, calls)
    # httpx-retries asks only while attempts remain: no token is drawn for a retry
    # that would not go, so the budget is spent to its bound
    stats = budget.statistics()
    assert stats.retries + stats.withdrawals >= RATIO * calls - 1


@pytest.mark.parametrize("method", ["POST", "GET never hedged"])
async def test_requests_never_hedged_pay_for_their_retries(method: str) -> None:
    """A POST (never sent twice) and a GET with ``max_hedges=0`` deposit into the budget
    as a hedgeable GET does: a retry library retrying them draws what they earned
    (before, they earned nothing, and every retry after the burst was refused: 1 retry
    in 100 calls). 100 calls, each retried at most twice while the budget allows:
    retries are ``ratio x calls + burst`` at most, and here exactly what was earned."""
    service = AllFail()
    budget = HedgeBudget(ratio=RATIO, burst=2, min_per_second=0)
    transport = HedgedTransport(
        httpx.MockTransport(service.handler),
        replicas={SERVICE: ["http://a", "http://b"]},
        delay=1.0,
        budget=budget,
        max_hedges=0 if method != "POST" else None,
        metrics=False,
    )
    verb = method.split()[0]
    async with httpx.AsyncClient(transport=transport, base_url=SERVICE) as client:
        for _ in range(100):
            for attempt in range(3):
                response = await client.request(verb, "/")
                if response.status_code < 500 or attempt == 2 or not budget.try_retry():
                    break
    stats = budget.statistics()
    assert stats.withdrawals == 0  # never a backup
    assert stats.deposits == 100 + stats.retries  # every request sent deposits
    assert service.seen == stats.deposits
    # Each retry costs 1.1 and its resend deposits 0.1 back: a net 1 token per retry,
    # paid from 100 calls x 0.1 plus the burst of 2, so 11 retries (12 - 1.1 < 1.1).
    assert stats.retries == 11
    # Two retries in a row would need 2.2 tokens, more than the burst: every call ends
    # on a refused ask.
    assert stats.retry_refusals == 100
