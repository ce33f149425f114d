"""The hedged race in virtual time: exact instants under trio's MockClock.

Replicas are in-process (``ScriptedReplicas``), so every instant asserted here is the
scripted arithmetic, e.g. a backup sent at the 0.030 s hedge delay that answers in
0.010 s wins at 0.040 s.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from fractions import Fraction
from typing import Any

import anyio
import httpx
import pytest

from hedgeclient import (
    AttemptResult,
    FixedDelay,
    HedgeBudget,
    HedgedTransport,
    HedgeInfo,
    RequestRecord,
)
from hedgeclient.testing import FirstReplica, Reply, ScriptedReplicas

pytestmark = pytest.mark.anyio

SERVICE = "http://svc"
REPLICAS = ["http://a", "http://b", "http://c"]


@pytest.fixture
def anyio_backend(virtual_time: tuple[str, dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """Every test in this module runs on trio with a fresh MockClock."""
    return virtual_time


def unlimited() -> HedgeBudget:
    """A budget that never binds in these short scenarios."""
    return HedgeBudget(ratio=1.0, burst=1000, min_per_second=0)


def hedged(
    script: ScriptedReplicas,
    *,
    replicas: list[str] | None = None,
    delay: float | FixedDelay = 0.030,
    records: list[RequestRecord] | None = None,
    **kwargs: Any,
) -> httpx.AsyncClient:
    """A client whose HedgedTransport routes ``http://svc`` to scripted replicas."""
    kwargs.setdefault("budget", unlimited())
    kwargs.setdefault("metrics", False)
    transport = HedgedTransport(
        httpx.MockTransport(script.handler),
        replicas={SERVICE: replicas or REPLICAS[:2]},
        delay=delay,
        hooks=[records.append] if records is not None else (),
        **kwargs,
    )
    return httpx.AsyncClient(transport=transport, base_url=SERVICE)


async def test_completes_before_hedge() -> None:
    """A primary that answers before the hedge delay is the only attempt."""
    script = ScriptedReplicas({"a": [0.010], "b": [0.010]})
    async with hedged(script) as client:
        script.start_clock()
        response = await client.get("/x")
    assert response.status_code == 200
    assert [(t, attempt) for t, _, attempt in script.sent()] == [(0.0, "1")]
    info = response.extensions["hedge"]
    assert info == HedgeInfo(attempt=1, replica=info.replica, attempts=1, delay=0.030)


async def test_backup_sent_exactly_at_delay_and_wins() -> None:
    """No headers by 0.030 s: the backup goes to the other replica at 0.030 and wins."""
    script = ScriptedReplicas({"a": [0.100], "b": [0.010]})
    async with hedged(script, selector=FirstReplica()) as client:
        script.start_clock()
        response = await client.get("/x")
        assert anyio.current_time() - script.t0 == pytest.approx(0.040)
    assert script.sent() == [(0.0, "a", "1"), (0.030, "b", "2")]
    assert script.of("answered") == [(0.040, "b")]
    assert script.of("cancelled") == [(0.040, "a")]
    assert response.text == "b"
    assert response.extensions["hedge"] == HedgeInfo(
        attempt=2, replica="http://b", attempts=2, delay=0.030
    )


async def test_primary_wins_after_backup_sent() -> None:
    """The primary answering first (at 0.050) cancels the backup sent at 0.030."""
    script = ScriptedReplicas({"a": [0.050], "b": [0.100]})
    async with hedged(script, selector=FirstReplica()) as client:
        script.start_clock()
        response = await client.get("/x")
    assert response.text == "a"
    assert script.of("cancelled") == [(0.050, "b")]
    assert response.extensions["hedge"].attempt == 1


async def test_backups_never_to_the_same_replica() -> None:
    """With three slow replicas and two backups, each attempt has its own replica."""
    script = ScriptedReplicas({"a": [1.0], "b": [1.0], "c": [0.5]})
    async with hedged(script, replicas=REPLICAS, max_hedges=2) as client:
        script.start_clock()
        response = await client.get("/x")
    sent = script.sent()
    assert [(t, attempt) for t, _, attempt in sent] == [(0.0, "1"), (0.030, "2"), (0.060, "3")]
    assert sorted(replica for _, replica, _ in sent) == ["a", "b", "c"]
    assert response.text == "c"


async def test_failed_primary_sends_backup_at_once() -> None:
    """A primary refused at 0.005 s is followed by a backup at 0.005, not at the delay."""
    script = ScriptedReplicas({"a": [Reply(0.005, error=httpx.ConnectError)], "b": [Reply(0.010)]})
    async with hedged(script, selector=FirstReplica()) as client:
        script.start_clock()
        response = await client.get("/x")
    assert script.sent() == [(0.0, "a", "1"), (0.005, "b", "2")]
    assert response.text == "b"


async def test_all_failed_raises_last_error_type() -> None:
    """Both attempts fail: the caller gets the last error's own type and message, not a
    group, with a note naming each attempt's replica and error."""
    script = ScriptedReplicas(
        {"a": [Reply(0.001, error=httpx.ConnectError)], "b": [Reply(0.003, error=httpx.ReadError)]}
    )
    async with hedged(script, selector=FirstReplica()) as client:
        with pytest.raises(httpx.ReadError) as caught:
            await client.get("/x")
    assert str(caught.value) == "scripted failure"
    assert caught.value.__notes__ == [
        "hedgeclient: no replica answered: "
        "attempt 1 to http://a failed (ConnectError: scripted failure); "
        "attempt 2 to http://b failed (ReadError: scripted failure)"
    ]


async def test_all_refused_raises_connect_error() -> None:
    """Every replica refusing the connection raises ``httpx.ConnectError`` itself."""
    script = ScriptedReplicas(
        {h: [Reply(0.001, error=httpx.ConnectError)] for h in ("a", "b", "c")}
    )
    async with hedged(script, replicas=REPLICAS, max_hedges=2) as client:
        with pytest.raises(httpx.ConnectError, match=r"^scripted failure\nhedgeclient: no rep"):
            await client.get("/x")
    assert len(script.sent()) == 3


async def test_all_503_returns_last_503() -> None:
    """Every attempt answering 503 returns a 503 response, after each replica tried."""
    script = ScriptedReplicas({"a": [Reply(0.001, status=503)], "b": [Reply(0.002, status=503)]})
    async with hedged(script, selector=FirstReplica()) as client:
        script.start_clock()
        response = await client.get("/x")
    assert response.status_code == 503
    assert response.text == "b"
    assert script.sent() == [(0.0, "a", "1"), (0.001, "b", "2")]


async def test_404_is_returned_at_once() -> None:
    """A 404 is an answer, not a failure: it wins and no backup is sent."""
    script = ScriptedReplicas({"a": [Reply(0.001, status=404)], "b": [0.001]})
    async with hedged(script, selector=FirstReplica()) as client:
        response = await client.get("/x")
    assert response.status_code == 404
    assert len(script.sent()) == 1


async def test_retry_after_stops_backups() -> None:
    """A 503 with Retry-After is pushback: no backup is sent; the 503 is returned."""
    script = ScriptedReplicas(
        {"a": [Reply(0.001, status=503, headers={"retry-after": "1"})], "b": [0.001]}
    )
    records: list[RequestRecord] = []
    async with hedged(script, selector=FirstReplica(), records=records) as client:
        response = await client.get("/x")
    assert response.status_code == 503
    assert len(script.sent()) == 1
    assert records[0].suppressed == "pushback"


async def test_post_never_duplicated() -> None:
    """A slow POST that then fails with 503 is sent once, and its 503 returned."""
    script = ScriptedReplicas({"a": [Reply(0.100, status=503)], "b": [Reply(0.100, status=503)]})
    async with hedged(script) as client:
        response = await client.post("/orders", content=b"order-1")
    assert response.status_code == 503
    assert [(e.method, e.body) for e in script.events if e.event == "sent"] == [
        ("POST", b"order-1")
    ]


async def test_post_opted_in_is_hedged() -> None:
    """``extensions={"hedge": True}`` hedges a POST the caller declares idempotent."""
    script = ScriptedReplicas({"a": [0.100], "b": [0.010]})
    async with hedged(script, selector=FirstReplica()) as client:
        response = await client.post("/x", content=b"k", extensions={"hedge": True})
    assert response.text == "b"
    assert [e.body for e in script.events if e.event == "sent"] == [b"k", b"k"]


async def test_inner_transport_may_read_content() -> None:
    """Each attempt's body is read, as the caller's was: ``request.content`` works inside."""
    bodies: list[tuple[str, bytes]] = []

    class ContentReading(httpx.AsyncBaseTransport):  # a signing or logging layer, say
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            bodies.append((request.url.host, request.content))
            if request.url.host == "a":
                await anyio.sleep(0.100)
            return httpx.Response(200)

    transport = HedgedTransport(
        ContentReading(),
        replicas={SERVICE: REPLICAS[:2]},
        delay=0.030,
        selector=FirstReplica(),
        budget=unlimited(),
        metrics=False,
    )
    async with httpx.AsyncClient(transport=transport, base_url=SERVICE) as client:
        response = await client.put("/x", content=b"v1", extensions={"hedge": True})
    assert response.extensions["hedge"].attempt == 2
    assert bodies == [("a", b"v1"), ("b", b"v1")]


async def test_get_opted_out_is_not_hedged() -> None:
    """``extensions={"hedge": False}`` keeps a slow GET to one attempt."""
    script = ScriptedReplicas({"a": [0.100], "b": [0.010]})
    async with hedged(script, selector=FirstReplica()) as client:
        response = await client.get("/x", extensions={"hedge": False})
    assert response.text == "a"
    assert len(script.sent()) == 1


@pytest.mark.parametrize("flag", [0, 1, "false", "true"])
async def test_a_hedge_extension_that_is_not_a_bool_is_refused(flag: object) -> None:
    """``extensions={"hedge": 0}`` (or ``"false"``) is a TypeError before anything is sent,
    not read one way or the other."""
    script = ScriptedReplicas({"a": [0.100], "b": [0.010]})
    async with hedged(script, selector=FirstReplica()) as client:
        message = (
            "`extensions['hedge']` must be True, False, None, a HedgePolicy or a mapping "
            f"of its fields, got {flag!r}"
        )
        with pytest.raises(TypeError, match=f"^{re.escape(message)}$"):
            await client.get("/x", extensions={"hedge": flag})
    assert script.sent() == []


async def test_streaming_body_never_sent_twice() -> None:
    """An async-iterator body is sent once, intact, even when opted in."""

    async def body() -> Any:
        yield b"part-1,"
        yield b"part-2"

    script = ScriptedReplicas({"a": [0.100], "b": [0.010]})
    records: list[RequestRecord] = []
    async with hedged(script, selector=FirstReplica(), records=records) as client:
        response = await client.put("/x", content=body(), extensions={"hedge": True})
    assert response.text == "a"
    assert [e.body for e in script.events if e.event == "sent"] == [b"part-1,part-2"]
    assert records[0].suppressed == "unreplayable_body"


async def test_each_request_gets_its_own_reason_whatever_its_route_cached() -> None:
    """A route keeps its requests' reasons by method, and only for a request with a read
    body and no setting of its own: after a plain GET was found eligible, a GET opted
    out, a PUT, a streamed PUT opted in and a GET again each get their own answer."""

    async def body() -> Any:
        yield b"streamed"

    script = ScriptedReplicas({"a": [0.100], "b": [0.100]})
    records: list[RequestRecord] = []
    async with hedged(script, selector=FirstReplica(), records=records) as client:
        await client.get("/1")
        await client.get("/2", extensions={"hedge": False})
        await client.put("/3", content=b"x")
        await client.put("/4", content=body(), extensions={"hedge": True})
        await client.put("/5", content=b"y", extensions={"hedge": True})
        await client.get("/6")
    assert [r.suppressed for r in records] == [
        None, "opted_out", "not_idempotent", "unreplayable_body", None, None,
    ]  # fmt: skip
    assert [len(r.attempts) for r in records] == [2, 1, 1, 1, 2, 2]


async def test_budget_empty_suppresses_backup() -> None:
    """With one token, the first slow request hedges and the second waits for its primary."""
    script = ScriptedReplicas({"a": [0.100], "b": [0.100]})
    budget = HedgeBudget(ratio=0.01, burst=1, min_per_second=0)
    records: list[RequestRecord] = []
    async with hedged(script, selector=FirstReplica(), budget=budget, records=records) as client:
        first = await client.get("/1")
        second = await client.get("/2")
    assert [len(r.attempts) for r in records] == [2, 1]
    assert first.extensions["hedge"].suppressed is None
    assert second.extensions["hedge"].suppressed == "budget"
    assert [r.suppressed for r in records] == [None, "budget"]


async def test_single_address_backup_goes_to_it_again() -> None:
    """A service with one address is hedged: the backup goes to that address (over
    another connection) at the delay, and wins."""
    script = ScriptedReplicas({"a": [0.100, 0.010]})
    records: list[RequestRecord] = []
    async with hedged(script, replicas=["http://a"], records=records) as client:
        script.start_clock()
        response = await client.get("/x")
    assert script.sent() == [(0.0, "a", "1"), (0.030, "a", "2")]
    assert response.extensions["hedge"].attempt == 2
    assert records[0].suppressed is None


async def test_caller_cancel_cancels_every_attempt() -> None:
    """A caller timeout at 0.075 cancels the primary and the backup, both at 0.075."""
    script = ScriptedReplicas({"a": [1.0], "b": [1.0]})
    records: list[RequestRecord] = []
    async with hedged(script, selector=FirstReplica(), records=records) as client:
        script.start_clock()
        with anyio.move_on_after(0.075):
            await client.get("/x")
    assert sorted(script.of("cancelled")) == [(0.075, "a"), (0.075, "b")]
    assert records[0].cancelled_by_caller
    assert records[0].outcome == "error"


async def test_no_backup_that_cannot_answer_before_the_callers_deadline() -> None:
    """A caller deadline at 0.045 leaves 0.015 s at the 0.030 delay, less than the
    route's expected latency (the delay): the backup is suppressed as ``deadline``."""
    script = ScriptedReplicas({"a": [1.0], "b": [1.0]})
    records: list[RequestRecord] = []
    async with hedged(script, selector=FirstReplica(), records=records) as client:
        script.start_clock()
        with anyio.move_on_after(0.045):
            await client.get("/x")
    assert script.sent() == [(0.0, "a", "1")]
    assert script.of("cancelled") == [(0.045, "a")]
    assert records[0].suppressed == "deadline"


async def test_backups_share_the_read_timeout_instead_of_stacking_it() -> None:
    """Three replicas that all hang, read timeout 0.3 s, a failure-triggered backup
    at once: the caller gets the ReadTimeout at 0.3 s, not 0.9 s, and a backup sent at
    0.030 gets only the 0.27 s left as its timeout."""

    timeouts: list[tuple[float, float]] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        read = request.extensions["timeout"]["read"]
        timeouts.append((round(anyio.current_time() - t0, 3), round(read, 3)))
        await anyio.sleep(read)
        msg = "timed out"
        raise httpx.ReadTimeout(msg, request=request)

    transport = HedgedTransport(
        httpx.MockTransport(handler),
        replicas={SERVICE: REPLICAS},
        delay=0.030,
        max_hedges=2,
        budget=unlimited(),
        selector=FirstReplica(),
        metrics=False,
    )
    t0 = anyio.current_time()
    async with httpx.AsyncClient(transport=transport, base_url=SERVICE, timeout=0.3) as client:
        t0 = anyio.current_time()
        with pytest.raises(httpx.ReadTimeout):
            await client.get("/x")
        assert round(anyio.current_time() - t0, 3) == 0.3
    assert timeouts == [(0.0, 0.3), (0.03, 0.27), (0.06, 0.24)]


async def test_host_header_and_path_kept() -> None:
    """An attempt goes to the replica with the logical Host header, path and query kept."""
    seen: list[httpx.Request] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200)

    transport = HedgedTransport(
        httpx.MockTransport(handler),
        replicas={"https://catalog.example": ["https://10.0.0.7:8443"]},
        delay=0.030,
        max_hedges=0,
        metrics=False,
    )
    async with httpx.AsyncClient(transport=transport) as client:
        await client.get("https://catalog.example/items/42?x=1")
    (request,) = seen
    assert str(request.url) == "https://10.0.0.7:8443/items/42?x=1"
    assert request.headers["host"] == "catalog.example"
    assert request.extensions["sni_hostname"] == "catalog.example"
    assert "hedge-attempt" not in request.headers  # max_hedges=0: sent once, unmarked


async def test_unconfigured_origin_passes_through_unchanged_by_default() -> None:
    """With ``replicas`` given, a request to another origin is sent once, unchanged:
    no attempt header, no HedgeInfo, no record, however slow it is."""
    script = ScriptedReplicas({"elsewhere": [0.100, 0.010]})
    records: list[RequestRecord] = []
    async with hedged(script, records=records) as client:
        response = await client.get("http://elsewhere/x")
    assert response.status_code == 200
    assert script.sent() == [(0.0, "elsewhere", None)]  # None: no attempt header
    assert "hedge" not in response.extensions
    assert records == []


async def test_unconfigured_origin_backup_goes_to_same_origin() -> None:
    """With ``other_origins="hedge"``, a request to an origin with no replicas is
    hedged against that same origin."""
    script = ScriptedReplicas({"elsewhere": [0.100, 0.010]})
    records: list[RequestRecord] = []
    async with hedged(script, records=records, other_origins="hedge") as client:
        response = await client.get("http://elsewhere/x")
    assert response.status_code == 200
    assert [a.replica for a in records[0].attempts] == ["http://elsewhere"] * 2


async def test_censored_primary_recorded_at_elapsed_time() -> None:
    """A primary cancelled because its backup won is recorded as censored at 0.040."""
    recorded: list[tuple[str, float, bool]] = []

    class Recording:
        def hedge_delay(self, route: str) -> float:
            return 0.030

        def record(self, route: str, seconds: float, *, censored: bool) -> None:
            recorded.append((route, round(seconds, 9), censored))

    script = ScriptedReplicas({"a": [0.100, 0.020], "b": [0.010]})
    transport = HedgedTransport(
        httpx.MockTransport(script.handler),
        replicas={SERVICE: REPLICAS[:2]},
        delay=Recording(),
        selector=FirstReplica(),
        budget=unlimited(),
        metrics=False,
    )
    async with httpx.AsyncClient(transport=transport, base_url=SERVICE) as client:
        await client.get("/slow")
        # a, silent while b answered, is avoided for as long again as it waited (the
        # memory of a freeze, issue 24): the next primary goes back to it after that
        await anyio.sleep(0.041)
        await client.get("/fast")
    assert recorded == [("GET http://svc", 0.040, True), ("GET http://svc", 0.020, False)]


async def test_closed_transport_rejects_requests() -> None:
    """A request after ``aclose()`` raises a clear RuntimeError."""
    transport = HedgedTransport(httpx.MockTransport(lambda r: httpx.Response(200)), metrics=False)
    await transport.aclose()
    with pytest.raises(RuntimeError, match=r"^Cannot send a request, as the HedgedTransport"):
        await transport.handle_async_request(httpx.Request("GET", "http://x/"))


async def test_fixed_delay_object_accepted() -> None:
    """``delay=FixedDelay(0.03)`` behaves as ``delay=0.03``."""
    script = ScriptedReplicas({"a": [0.100], "b": [0.010]})
    async with hedged(script, selector=FirstReplica(), delay=FixedDelay(0.020)) as client:
        script.start_clock()
        await client.get("/x")
    assert script.sent()[1][0] == 0.020


async def test_route_key_must_return_a_string() -> None:
    """A ``route_key`` returning a non-string fails the request with a clear TypeError."""
    script = ScriptedReplicas({"a": [0.001], "b": [0.001]})
    async with hedged(script, route_key=lambda request: None) as client:
        with pytest.raises(TypeError, match=r"^`route_key` must return a non-empty str, got None$"):
            await client.get("/x")


async def test_all_failed_hedge_info_names_the_returned_response() -> None:
    """Every attempt a 503: the response is the last to end, and HedgeInfo names it."""
    script = ScriptedReplicas({"a": [Reply(0.050, status=503)], "b": [Reply(0.010, status=503)]})
    async with hedged(script, selector=FirstReplica()) as client:
        script.start_clock()
        response = await client.get("/x")
    assert (response.status_code, response.text) == (503, "a")  # a ended at 0.050, b at 0.040
    info = response.extensions["hedge"]
    assert (info.attempt, info.replica, info.attempts) == (1, "http://a", 2)


async def _get_with(
    selector: FirstReplica,
) -> tuple[httpx.Response, ScriptedReplicas, HedgeBudget]:
    """One GET through ``selector``: the primary on a takes 100 ms, a backup to b 10 ms
    (the delay is 30 ms), the budget never binds; the response, the script, the budget."""
    budget = unlimited()
    script = ScriptedReplicas({"a": [0.100], "b": [0.010]})
    async with hedged(script, selector=selector, budget=budget) as client:
        script.start_clock()
        response = await client.get("/x")
    return response, script, budget


@pytest.mark.parametrize("failing", ["choose", "attempt_started"])
async def test_selector_failing_for_a_backup_leaves_the_primary_alone(
    failing: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A custom selector that raises when a backup is due: logged, no backup, nothing leaks.

    Never an ExceptionGroup, and the budget's count of backups in flight returns to 0.
    One raising as the backup begins (``attempt_started``) had its token drawn: given
    back (the budget full again: 1000, its cap), counted as a refund.
    """

    class Failing(FirstReplica):
        def choose(self, replicas: Sequence[str], exclude: Collection[str]) -> str | None:
            if exclude and failing == "choose":
                msg = "selector bug"
                raise RuntimeError(msg)
            return super().choose(replicas, exclude)

        def attempt_started(self, replica: str) -> None:
            if replica != "http://a" and failing == "attempt_started":
                msg = "selector bug"
                raise RuntimeError(msg)

    response, script, budget = await _get_with(Failing())
    info = response.extensions["hedge"]
    assert (response.text, info.attempts, info.suppressed) == ("a", 1, "selector_error")
    assert [(t, replica) for t, replica, _ in script.sent()] == [(0.0, "a")]
    assert budget.backups_in_flight == 0
    refunded = 1 if failing == "attempt_started" else 0
    assert (budget.tokens, budget.statistics().refunds) == (1000.0, refunded)
    assert "the replica selector failed" in caplog.text


async def test_detached_backup_task_failing_is_logged_never_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A custom selector that raises as the backup ends, in the detached backup task: the
    failure is logged (``a backup task failed``), never raised, and the primary, alone in
    the race then, answers the caller; the budget's backups in flight return to 0."""

    class Failing(FirstReplica):
        def attempt_finished(self, replica: str, *, result: AttemptResult) -> None:
            if replica == "http://b":
                msg = "selector bug"
                raise RuntimeError(msg)

    response, script, budget = await _get_with(Failing())
    assert response.text == "a"
    assert [(t, replica) for t, replica, _ in script.sent()] == [(0.0, "a"), (0.030, "b")]
    assert budget.backups_in_flight == 0
    failures = [r for r in caplog.records if r.getMessage() == "hedgeclient: a backup task failed"]
    assert [str(r.exc_info[1]) for r in failures if r.exc_info] == ["selector bug"]


async def test_selector_choosing_outside_the_replicas_is_named(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A selector returning a replica it was not given: a ValueError naming it for the
    primary attempt; for a backup, logged and no backup (never a bare KeyError)."""

    class Stray(FirstReplica):
        def __init__(self, stray_for: str) -> None:
            self.stray_for = stray_for

        def choose(self, replicas: Sequence[str], exclude: Collection[str]) -> str | None:
            kind = "backup" if exclude else "primary"
            return "http://stray" if kind == self.stray_for else super().choose(replicas, exclude)

        def __repr__(self) -> str:
            return "Stray()"

    script = ScriptedReplicas({"a": [0.100], "b": [0.010]})
    async with hedged(script, selector=Stray("primary")) as client:
        with pytest.raises(ValueError) as raised:
            await client.get("/x")
    assert str(raised.value) == (
        "Stray().choose() returned 'http://stray': a ReplicaSelector must return one of the "
        "replicas it is given (['http://a', 'http://b']) or None"
    )
    assert script.sent() == []
    async with hedged(script, selector=Stray("backup")) as client:
        script.start_clock()
        response = await client.get("/x")
    info = response.extensions["hedge"]
    assert (response.text, info.attempts, info.suppressed) == ("a", 1, "selector_error")
    assert "the replica selector failed" in caplog.text


class _Returns:
    """A DelayPolicy whose hedge_delay() returns ``value`` as it is."""

    def __init__(self, value: object) -> None:
        self.value = value

    def hedge_delay(self, route: str) -> Any:
        return self.value

    def record(self, route: str, seconds: float, *, censored: bool) -> None:
        pass

    def __repr__(self) -> str:
        return "Returns()"


class _Seconds(float):
    """A float subclass, as numpy.float64 is."""


@pytest.mark.parametrize(
    ("value", "error"),
    [("0.01", TypeError), (True, TypeError), (-1.0, ValueError), (float("nan"), ValueError),
     (float("inf"), ValueError), (10**400, ValueError)],
    ids=["str", "bool", "negative", "nan", "inf", "huge-int"],
)  # fmt: skip
async def test_delay_policy_returning_a_non_delay_is_refused(
    value: object, error: type[Exception]
) -> None:
    """A custom policy's hedge_delay() that is not seconds >= 0 or None: a TypeError or
    ValueError naming the policy, raised before any attempt (never an ExceptionGroup)."""
    script = ScriptedReplicas({"a": [0.010], "b": [0.010]})
    async with hedged(script, delay=_Returns(value)) as client:  # type: ignore[arg-type]
        with pytest.raises(error) as raised:
            await client.get("/x")
    assert type(raised.value) is error
    shown = "1.000e+400 (an int of 401 digits)" if value == 10**400 else repr(value)
    assert str(raised.value) == (
        f"Returns().hedge_delay('GET http://svc') returned {shown}; a DelayPolicy must "
        "return a finite number of seconds >= 0, or None"
    )
    assert script.sent() == []


class _OwnFixed(FixedDelay):
    """A subclass of the library's own policy that answers on its own."""

    def hedge_delay(self, route: str) -> float | None:
        return float("nan")


async def test_a_subclass_of_fixed_delay_is_checked_and_named() -> None:
    """A subclass of ``FixedDelay`` that overrides ``hedge_delay`` is checked as any
    policy of the caller's own (the library's own are trusted), and the message names
    the subclass, not ``FixedDelay``."""
    script = ScriptedReplicas({"a": [0.010], "b": [0.010]})
    async with hedged(script, delay=_OwnFixed(0.05)) as client:
        with pytest.raises(
            ValueError, match=r"^_OwnFixed\(0\.05\)\.hedge_delay\('GET http://svc'\)"
        ):
            await client.get("/x")
    assert script.sent() == []


@pytest.mark.parametrize(
    "value",
    [0, 1, _Seconds(0.030), Fraction(3, 100)],
    ids=["int-0", "int-1", "float-subclass", "fraction"],
)
async def test_delay_policy_may_return_any_real_number(value: float) -> None:
    """An int, a float subclass (numpy.float64) or any other real number (a Fraction, a
    numpy.float32) is a delay in seconds, as a float."""
    script = ScriptedReplicas({"a": [0.100], "b": [0.010]})
    async with hedged(script, delay=_Returns(value), selector=FirstReplica()) as client:  # type: ignore[arg-type]
        script.start_clock()
        response = await client.get("/x")
    info = response.extensions["hedge"]
    assert type(info.delay) is float
    assert info.delay == float(value)


async def test_suppressed_reason_is_the_same_in_hedge_info_and_record() -> None:
    """A POST slower than the delay: HedgeInfo and RequestRecord both say not_idempotent;
    a POST faster than the delay: both say nothing."""
    script = ScriptedReplicas({"a": [0.050, 0.010], "b": [0.050, 0.010]})
    records: list[RequestRecord] = []
    async with hedged(script, selector=FirstReplica(), records=records) as client:
        script.start_clock()
        slow = await client.post("/x", content=b"1")
        fast = await client.post("/x", content=b"2")
    assert slow.extensions["hedge"].suppressed == records[0].suppressed == "not_idempotent"
    assert fast.extensions["hedge"].suppressed is records[1].suppressed is None
    assert len(script.sent()) == 2  # each POST sent once
