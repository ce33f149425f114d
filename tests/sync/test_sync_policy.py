"""Issue 27 on the sync path: policy per route and per request under ``httpx.Client``,
and one hedge budget drawn on by a retry loop in many caller threads.

Real fake replicas on 127.0.0.1, real clock: the tests assert outcomes and counts.
"""

from __future__ import annotations

import threading

import anyio
import httpx
import pytest

from hedgeclient import HedgeBudget, HedgePolicy, Route, SyncHedgedTransport, hedge_info
from hedgeclient.testing import FakeService, FirstReplica, ReplicaConfig

pytestmark = pytest.mark.slow

SERVICE = "http://svc"


def threads_of_run(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Spy on ``LoopThread.run`` (a budget's draw handed to the loop thread): the list
    it returns gets the name of the thread each handed-over call ran on."""
    from hedgeclient._sync.loop import LoopThread

    where: list[str] = []
    run = LoopThread.run

    def spy(self: LoopThread, func: object) -> bool:
        def named() -> bool:
            where.append(threading.current_thread().name)
            return func()  # type: ignore[operator,no-any-return]

        return run(self, named)

    monkeypatch.setattr(LoopThread, "run", spy)
    return where


def test_request_then_route_then_transport_under_a_sync_client() -> None:
    """The primary always goes to a replica that answers in 300 ms, the other in 5 ms,
    with a 20 ms hedge delay: the transport hedges; a route with ``max_hedges=0`` does
    not; a request on that route with ``HedgePolicy(max_hedges=1)`` does again."""
    slow = ReplicaConfig(latency=0.3)
    with FakeService(replicas=2, latency=0.005, replica_overrides={0: slow}) as svc:
        origins = svc.origins
        transport = SyncHedgedTransport(
            replicas={SERVICE: origins},
            selector=FirstReplica(),
            delay=0.020,
            budget=HedgeBudget(ratio=1.0, burst=100, min_per_second=0),
            routes=[Route(path="/once/*", max_hedges=0)],
            metrics=False,
        )
        with httpx.Client(transport=transport, base_url=SERVICE) as client:
            hedged = hedge_info(client.get("/items/1"))
            routed = hedge_info(client.get("/once/1"))
            again = hedge_info(
                client.get("/once/2", extensions={"hedge": HedgePolicy(max_hedges=1)})
            )
    assert hedged is not None
    assert routed is not None
    assert again is not None
    assert (hedged.attempts, hedged.replica) == (2, origins[1])
    assert (routed.attempts, routed.replica) == (1, origins[0])
    assert (again.attempts, again.replica) == (2, origins[1])


class AllFail:
    """Every replica answers 503 at once (an async handler: the attempts run on the
    sync transport's loop); counts the attempts it saw."""

    def __init__(self) -> None:
        self.seen = 0

    async def handler(self, request: httpx.Request) -> httpx.Response:
        self.seen += 1  # on the loop thread only
        await anyio.lowlevel.checkpoint()
        return httpx.Response(503)


def test_retries_from_many_threads_and_backups_share_one_budget() -> None:
    """8 threads x 25 calls, each retried while ``budget.try_retry()`` allows (at most 2
    retries), through one client whose backups draw on the same budget: every draw from
    a caller's thread runs on the loop thread, so the accounting balances exactly (a
    lost update would break it) and the extra attempts stay within its bound."""
    service = AllFail()
    budget = HedgeBudget(ratio=0.1, burst=5, min_per_second=0)
    transport = SyncHedgedTransport(
        httpx.MockTransport(service.handler),
        replicas={SERVICE: ["http://a", "http://b"]},
        delay=1.0,
        budget=budget,
        metrics=False,
    )
    calls = 8 * 25

    def caller(client: httpx.Client) -> None:
        for _ in range(25):
            for attempt in range(3):
                response = client.get("/")
                if response.status_code < 500 or attempt == 2 or not budget.try_retry():
                    break

    with httpx.Client(transport=transport, base_url=SERVICE) as client:
        threads = [threading.Thread(target=caller, args=(client,)) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    stats = budget.statistics()
    assert service.seen == stats.deposits + stats.withdrawals
    assert stats.deposits == calls + stats.retries
    assert stats.retries + stats.withdrawals <= 0.1 * calls + 5 + 1e-9
    assert stats.retries + stats.withdrawals >= 0.1 * calls + 5 - 2.2  # drained
    assert stats.retry_refusals > 0


def test_a_budget_serves_one_open_sync_transport() -> None:
    """A budget lives on one event loop: a second open SyncHedgedTransport given it is
    refused, naming why; once the first is closed, it may serve another."""
    budget = HedgeBudget()
    first = SyncHedgedTransport(replicas={SERVICE: ["http://a", "http://b"]}, budget=budget)
    with pytest.raises(ValueError, match="already serves another SyncHedgedTransport"):
        SyncHedgedTransport(replicas={SERVICE: ["http://a", "http://b"]}, budget=budget)
    first.close()
    second = SyncHedgedTransport(replicas={SERVICE: ["http://a", "http://b"]}, budget=budget)
    second.close()


def test_a_draw_from_a_callers_thread_runs_on_the_loop_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before the loop thread runs, ``try_retry`` draws in the caller's thread (nothing
    else touches the budget); once it runs, on the loop thread, whose name says so."""
    where = threads_of_run(monkeypatch)
    service = AllFail()
    budget = HedgeBudget(ratio=0.1, burst=5, min_per_second=0)
    transport = SyncHedgedTransport(
        httpx.MockTransport(service.handler),
        replicas={SERVICE: ["http://a", "http://b"]},
        budget=budget,
        name="drawn",
        metrics=False,
    )
    with httpx.Client(transport=transport, base_url=SERVICE) as client:
        assert budget.try_retry()  # no loop thread yet: drawn here
        assert where == []
        client.get("/")
        assert budget.try_retry()
    assert where == ["hedgeclient-loop-drawn"]
    assert budget.statistics().retries == 2


def test_a_requests_own_budget_is_bound_to_the_loop_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A budget given per request (``HedgePolicy(budget=...)``, or a dict's ``budget``)
    lives on the transport's loop thread from its first request, as the transport's
    own: ``try_retry`` from the caller's thread runs there, and another open
    SyncHedgedTransport is refused it, naming where it came from (nothing sent); once
    the first is closed, another may take it."""
    where = threads_of_run(monkeypatch)
    service = AllFail()
    own = HedgeBudget(ratio=0.1, burst=5, min_per_second=0)

    def transport(name: str) -> SyncHedgedTransport:
        return SyncHedgedTransport(
            httpx.MockTransport(service.handler),
            replicas={SERVICE: ["http://a", "http://b"]},
            delay=1.0,
            name=name,
            metrics=False,
        )

    first, second = transport("first"), transport("second")
    with httpx.Client(transport=first, base_url=SERVICE) as client:
        assert client.get("/", extensions={"hedge": HedgePolicy(budget=own)}).status_code == 503
        assert own.try_retry()
        assert where == ["hedgeclient-loop-first"]
        with httpx.Client(transport=second, base_url=SERVICE) as other:
            seen = service.seen
            with pytest.raises(ValueError, match=r"^`extensions\['hedge'\]\['budget'\]`: Hedge"):
                other.get("/", extensions={"hedge": {"budget": own}})
            assert service.seen == seen  # refused before anything was sent
    third = SyncHedgedTransport(replicas={SERVICE: ["http://a", "http://b"]}, budget=own)
    third.close()  # the first closed: the budget was free for it
    stats = own.statistics()
    assert (stats.deposits, stats.withdrawals, stats.retries) == (1, 1, 1)


def test_try_retry_with_no_loop_answers_from_what_the_buckets_hold() -> None:
    """A retry library's ``try_retry`` from a caller's thread before the transport's first
    request, and after its close (its in-flight requests raise TransportClosedError, which
    a retry predicate sees): no loop to hand over to and none to read the default clock,
    so the floor bucket pays from what it holds, with no refill; never anyio's
    NoEventLoopError (found by a new user, 2026-12-05)."""
    budget = HedgeBudget(ratio=0.1, burst=1, min_per_second=1)
    transport = SyncHedgedTransport(
        httpx.MockTransport(AllFail().handler),
        replicas={SERVICE: ["http://a", "http://b"]},
        budget=budget,
        metrics=False,
    )
    assert budget.try_retry(deposits=False) is True  # the main bucket's one token
    assert budget.try_retry(deposits=False) is False  # the floor never started: empty
    with httpx.Client(transport=transport, base_url=SERVICE) as client:
        client.get("/")
    # Closed: no loop. The floor refilled only while the request ran (milliseconds).
    assert budget.try_retry(deposits=False) is False
    assert budget.statistics().retries + budget.statistics().retry_refusals == 3
