"""Properties of the race over any sequence of attempt latencies and faults.

Hypothesis draws a few concurrent requests, each attempt's latency and outcome (200,
404, 503, 503 with Retry-After, connection refused, read error, pool timeout), the
hedge delay, ``max_hedges``, the budget and sometimes a caller timeout. Each example is
one ``trio.run`` under ``MockClock(autojump_threshold=0)``, so every instant is exact.
For every request:

- exactly one outcome: a response, or one exception of the last failed attempt's own
  type (never an ``ExceptionGroup``), or the caller's own timeout;
- every response but the one returned is closed when the call returns;
- at most ``1 + max_hedges`` attempts, each on a replica of its own (3 replicas);
- the first backup leaves exactly at the hedge delay, or at the primary's failure if
  that came first; the winner is the first answer that is not a 502-504;

and over the run, backups <= ratio x requests + burst + min_per_second x elapsed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx
import trio
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from trio.testing import MockClock

from hedgeclient import HedgeBudget, HedgedTransport, RequestRecord

SERVICE = "http://svc"
REPLICAS = ["http://a", "http://b", "http://c"]
NON_FATAL = {502, 503, 504}
ERRORS: dict[str, type[httpx.HTTPError]] = {
    "refused": httpx.ConnectError,
    "read-error": httpx.ReadError,
    "pool-timeout": httpx.PoolTimeout,
}
OUTCOMES = ["200", "404", "503", "503-retry-after", "refused", "read-error", "pool-timeout"]


@dataclass(frozen=True)
class Step:
    """One attempt's scripted answer: seconds before it, and what it is."""

    latency: float
    outcome: str


@dataclass(frozen=True)
class Scenario:
    """One example: requests (arrival, caller timeout, steps per attempt) and settings."""

    requests: tuple[tuple[float, float | None, tuple[Step, ...]], ...]
    delay: float
    max_hedges: int
    ratio: float
    burst: float
    floor: float


steps = st.builds(
    Step,
    latency=st.sampled_from([0.0, 0.001, 0.004, 0.010, 0.030, 0.100]),
    outcome=st.sampled_from(OUTCOMES),
)
scenarios = st.builds(
    Scenario,
    requests=st.lists(
        st.tuples(
            st.sampled_from([0.0, 0.002, 0.010]),
            st.sampled_from([None, None, 0.008, 0.050]),
            st.lists(steps, min_size=3, max_size=3).map(tuple),
        ),
        min_size=1,
        max_size=4,
    ).map(tuple),
    delay=st.sampled_from([0.0, 0.005, 0.020, 0.050]),
    max_hedges=st.integers(0, 2),
    ratio=st.sampled_from([0.05, 0.5, 1.0]),
    burst=st.sampled_from([1.0, 2.0, 10.0]),
    floor=st.sampled_from([0.0, 1.0]),
)


@dataclass
class Log:
    """What the replicas saw and made, in virtual seconds from the run's start."""

    sent: dict[int, list[tuple[float, int, str]]] = field(default_factory=dict)
    answered: dict[int, list[tuple[float, int, str]]] = field(default_factory=dict)
    responses: dict[int, list[httpx.Response]] = field(default_factory=dict)


def check(scenario: Scenario) -> None:
    """Run one example and assert every property on it."""
    log = Log()
    records: list[RequestRecord] = []
    results: dict[int, tuple[str, Any]] = {}
    starts: dict[int, float] = {}
    budget_out: list[Any] = []
    marked: list[bool] = []  # whether each attempt carried the attempt header

    async def handler(request: httpx.Request) -> httpx.Response:
        rid = int(request.headers["x-rid"])
        marked.append("hedge-attempt" in request.headers)
        attempt = int(request.headers.get("hedge-attempt", "1"))  # unmarked: sent once
        step = scenario.requests[rid][2][attempt - 1]
        now = anyio.current_time() - t0
        log.sent.setdefault(rid, []).append((now, attempt, request.url.host))
        await anyio.sleep(step.latency)
        now = anyio.current_time() - t0
        log.answered.setdefault(rid, []).append((now, attempt, step.outcome))
        if step.outcome in ERRORS:
            raise ERRORS[step.outcome](step.outcome, request=request)
        status = int(step.outcome[:3])
        headers = {"retry-after": "1"} if step.outcome.endswith("retry-after") else {}
        response = httpx.Response(status, headers=headers, content=b"x" * 10)
        log.responses.setdefault(rid, []).append(response)
        return response

    async def main() -> None:
        nonlocal t0
        t0 = anyio.current_time()
        budget = HedgeBudget(
            ratio=scenario.ratio, burst=scenario.burst, min_per_second=scenario.floor
        )
        transport = HedgedTransport(
            httpx.MockTransport(handler),
            replicas={SERVICE: REPLICAS},
            delay=scenario.delay,
            max_hedges=scenario.max_hedges,
            budget=budget,
            hooks=[records.append],
            metrics=False,
        )

        async def call(rid: int, arrival: float, limit: float | None) -> None:
            await anyio.sleep(arrival)
            starts[rid] = anyio.current_time() - t0
            request = httpx.Request("GET", f"{SERVICE}/{rid}", headers={"x-rid": str(rid)})
            try:
                with anyio.fail_after(math.inf if limit is None else limit):
                    response = await transport.handle_async_request(request)
            except BaseException as exc:  # the outcome under test, whatever it is
                results[rid] = ("error", exc)
                return
            others = [r for r in log.responses.get(rid, []) if r is not response]
            results[rid] = ("response", response, [r.is_closed for r in others])
            await response.aclose()

        async with anyio.create_task_group() as tg:
            for rid, (arrival, timeout, _) in enumerate(scenario.requests):
                tg.start_soon(call, rid, arrival, timeout)
        budget_out.extend([budget.statistics(), anyio.current_time() - t0])
        await transport.aclose()

    t0 = 0.0
    trio.run(main, clock=MockClock(autojump_threshold=0))

    stats, elapsed = budget_out
    # The attempt header only on requests that may be hedged (max_hedges > 0).
    assert set(marked) == {scenario.max_hedges > 0}
    assert set(results) == set(range(len(scenario.requests)))
    backups = 0
    for rid, (_, timeout, _script) in enumerate(scenario.requests):
        sent = log.sent.get(rid, [])
        answered = {a: (t, outcome) for t, a, outcome in log.answered.get(rid, [])}
        backups += max(0, len(sent) - 1)
        # Attempts: at most 1 + max_hedges, each on its own replica.
        assert 1 <= len(sent) <= 1 + scenario.max_hedges
        assert len({host for _, _, host in sent}) == len(sent)
        assert [attempt for _, attempt, _ in sent] == list(range(1, len(sent) + 1))
        # The first backup: at the delay, or at the primary's failure if earlier.
        if len(sent) > 1:
            due = starts[rid] + scenario.delay
            failed_at = answered.get(1)
            if failed_at is not None and failed_at[1] not in ("200", "404"):
                due = min(due, failed_at[0])
            assert math.isclose(sent[1][0], due, abs_tol=1e-9)
        result = results[rid]
        event(f"attempts={len(sent)}")
        event(f"outcome={type(result[1]).__name__ if result[0] == 'error' else 'response'}")
        if result[0] == "response":
            response, closed = result[1], result[2]
            assert all(closed)  # every other response was closed before the return
            winner = response.extensions["hedge"].attempt
            good = {a: t for a, (t, o) in answered.items() if o in ("200", "404")}
            if response.status_code in NON_FATAL:
                assert good == {}  # a 503 is returned only when nothing better came
            else:
                assert winner in good
                assert good[winner] == min(good.values())  # the first answer wins
        else:
            exc = result[1]
            assert isinstance(exc, (httpx.HTTPError, TimeoutError))  # never a group
            assert all(r.is_closed for r in log.responses.get(rid, []))
            if isinstance(exc, TimeoutError):
                assert timeout is not None
            else:
                # Every attempt failed without a response: the last one's own error.
                assert not log.responses.get(rid)
                last = max(answered, key=lambda a: (answered[a][0], a))
                assert type(exc) is ERRORS[answered[last][1]]
    # Backups within the budget over the whole run.
    assert backups == stats.withdrawals
    assert (
        backups
        <= scenario.ratio * len(scenario.requests)
        + scenario.burst
        + (scenario.floor * elapsed)
        + 1e-9
    )
    assert len(records) == len(scenario.requests)


@settings(
    max_examples=200,
    deadline=None,
    # `tally` only adds up counts for the report: sharing it across examples is fine.
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    derandomize=True,
)
@given(scenario=scenarios)
def test_race_properties_hold_for_any_script(scenario: Scenario, tally: Any) -> None:
    """Any latencies and faults: one outcome, losers closed, attempts bounded, budget kept."""
    check(scenario)
    faults = sum(
        s.outcome not in ("200", "404") for _, _, steps in scenario.requests for s in steps
    )
    tally(
        "P19 race properties (Hypothesis)",
        examples=1,
        requests=len(scenario.requests),
        faults=faults,
    )
