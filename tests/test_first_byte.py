"""The race decided on the first body byte, in virtual time (trio's MockClock).

Replicas are in-process (``ScriptedReplicas``) and stream their bodies in scripted
chunks, so every instant asserted is the scripted arithmetic: a primary whose headers
come at 0.010 s but whose first chunk comes 0.200 s later is still racing at the
0.030 s hedge delay, and a backup whose first chunk arrives at 0.050 s wins there.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import httpx
import pytest

from hedgeclient import (
    AdaptiveDelay,
    FixedDelay,
    HedgeBudget,
    HedgedTransport,
    RequestRecord,
    Route,
)
from hedgeclient._wire.first_byte import read_first_byte
from hedgeclient.testing import FirstReplica, Reply, ScriptedReplicas

pytestmark = pytest.mark.anyio

SERVICE = "http://svc"
REPLICAS = ["http://a", "http://b"]
FIRST_BYTE = [Route(decide_on="first_byte")]


@pytest.fixture
def anyio_backend(virtual_time: tuple[str, dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """Every test in this module runs on trio with a fresh MockClock."""
    return virtual_time


def count_tasks() -> int:
    """Tasks alive under trio's root task, but the hedge timer (kept for the run)."""
    import trio

    def count(task: Any) -> int:
        own = 0 if task.name == "hedgeclient-timer" else 1
        return own + sum(count(t) for n in task.child_nurseries for t in n.child_tasks)

    return count(trio.lowlevel.current_root_task())


def hedged(
    script: ScriptedReplicas,
    *,
    routes: list[Route] | None = None,
    delay: float | FixedDelay | AdaptiveDelay = 0.030,
    records: list[RequestRecord] | None = None,
    **kwargs: Any,
) -> httpx.AsyncClient:
    """A client whose HedgedTransport routes ``http://svc`` to scripted replicas a, b."""
    kwargs.setdefault("budget", HedgeBudget(ratio=1.0, burst=1000, min_per_second=0))
    kwargs.setdefault("selector", FirstReplica())
    transport = HedgedTransport(
        httpx.MockTransport(script.handler),
        replicas={SERVICE: REPLICAS},
        delay=delay,
        routes=FIRST_BYTE if routes is None else routes,
        hooks=[records.append] if records is not None else (),
        metrics=False,
        **kwargs,
    )
    return httpx.AsyncClient(transport=transport, base_url=SERVICE)


def body(*chunks: tuple[float, bytes]) -> list[tuple[float, bytes]]:
    """Scripted chunks: ``(delay after the previous one, data)``."""
    return list(chunks)


SLOW_FIRST_BYTE = Reply(0.010, chunks=body((0.200, b"a1"), (0.010, b"a2")))
FAST_FIRST_BYTE = Reply(0.010, chunks=body((0.010, b"b1"), (0.010, b"b2")))


async def test_first_body_byte_wins_not_first_headers() -> None:
    """Headers at 0.010 but no body by 0.030: the backup goes; its first byte at 0.050
    wins, and the primary's stream is closed at that instant."""
    script = ScriptedReplicas({"a": [SLOW_FIRST_BYTE], "b": [FAST_FIRST_BYTE]})
    records: list[RequestRecord] = []
    async with hedged(script, records=records) as client:
        tasks = count_tasks()
        script.start_clock()
        response = await client.get("/x")  # read to its end at 0.060
        assert anyio.current_time() - script.t0 == pytest.approx(0.060)
        assert count_tasks() == tasks
    assert script.sent() == [(0.0, "a", "1"), (0.030, "b", "2")]
    assert script.of("answered") == [(0.010, "a"), (0.040, "b")]
    assert script.of("body_closed") == [(0.050, "a")]
    assert script.of("body_ended") == [(0.060, "b")]
    assert response.content == b"b1b2"
    assert response.extensions["hedge"].attempt == 2
    (record,) = records
    assert record.duration == pytest.approx(0.050)
    assert [(a.outcome, a.censored) for a in record.attempts] == [
        ("cancelled", True),
        ("won", False),
    ]
    assert record.attempts[0].duration == pytest.approx(0.050)


async def test_closing_a_primed_stream_ends_every_nested_generator() -> None:
    """A primed response closed before its end (a loser that had its first byte too,
    or a caller that stops): the transport's stream is closed, then its iterator run
    out, so that the generators it nests end at once (none is left for the garbage
    collector, which trio would warn about, an error in this suite)."""
    ended: list[str] = []

    async def inner() -> AsyncIterator[bytes]:
        try:
            yield b"1"
            await anyio.sleep(1.0)
            yield b"2"
        finally:
            ended.append("inner")

    class Stream(httpx.AsyncByteStream):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            try:
                async for chunk in inner():
                    yield chunk
            finally:
                ended.append("outer")

        async def aclose(self) -> None:
            ended.append("closed")

    response = httpx.Response(200, stream=Stream())
    await read_first_byte(response)
    assert ended == []
    start = anyio.current_time()
    await response.aclose()
    assert ended == ["closed", "inner", "outer"]
    assert anyio.current_time() == start  # at once: the sleep was cancelled


async def test_same_script_decided_on_headers_sends_no_backup() -> None:
    """The contrast: decided on headers, the primary's headers at 0.010 win and its slow
    body is read to the end at 0.220; no backup is sent."""
    script = ScriptedReplicas({"a": [SLOW_FIRST_BYTE], "b": [FAST_FIRST_BYTE]})
    async with hedged(script, routes=[]) as client:
        script.start_clock()
        response = await client.get("/x")
    assert script.sent() == [(0.0, "a", "1")]
    assert script.of("body_ended") == [(0.220, "a")]
    assert response.content == b"a1a2"


async def test_primary_first_byte_before_delay_is_the_only_attempt() -> None:
    """A first byte at 0.020, before the 0.030 delay: no backup, the body continues."""
    script = ScriptedReplicas(
        {"a": [Reply(0.010, chunks=body((0.010, b"a1"), (0.100, b"a2")))], "b": [0.010]}
    )
    async with hedged(script) as client:
        script.start_clock()
        async with client.stream("GET", "/x") as response:
            assert anyio.current_time() - script.t0 == pytest.approx(0.020)
            chunks = [chunk async for chunk in response.aiter_raw()]
    assert chunks == [b"a1", b"a2"]
    assert script.sent() == [(0.0, "a", "1")]


async def test_winner_error_mid_stream_reaches_the_caller_unspliced() -> None:
    """The winner's first chunk then a read error: the caller gets that error after
    exactly the winner's first chunk, and nothing from the closed loser."""
    script = ScriptedReplicas(
        {
            "a": [SLOW_FIRST_BYTE],
            "b": [
                Reply(
                    0.010, chunks=body((0.010, b"b1"), (0.010, b"b2")), body_error=httpx.ReadError
                )
            ],
        }
    )
    received: list[bytes] = []
    async with hedged(script) as client:
        tasks = count_tasks()
        script.start_clock()
        async with client.stream("GET", "/x") as response:
            with pytest.raises(httpx.ReadError, match=r"^scripted failure mid-body$"):
                await read_into(response, received)
        assert count_tasks() == tasks
    assert received == [b"b1", b"b2"]
    assert script.of("body_closed") == [(0.050, "a")]
    assert script.of("body_failed") == [(0.060, "b")]


async def read_into(response: httpx.Response, received: list[bytes]) -> None:
    """Append each raw chunk of ``response`` to ``received`` until it ends or fails."""
    async for chunk in response.aiter_raw():
        received.append(chunk)


async def test_error_before_the_first_byte_sends_a_backup_at_once() -> None:
    """Headers at 0.005 then a body error before any byte: the attempt failed, so the
    backup goes at once (0.005), not at the delay, and wins."""
    script = ScriptedReplicas(
        {
            "a": [Reply(0.005, chunks=[], body_error=httpx.RemoteProtocolError)],
            "b": [FAST_FIRST_BYTE],
        }
    )
    async with hedged(script) as client:
        script.start_clock()
        response = await client.get("/x")
    assert script.sent() == [(0.0, "a", "1"), (0.005, "b", "2")]
    assert response.content == b"b1b2"


async def test_empty_body_end_counts_as_the_first_byte() -> None:
    """An empty body ends at 0.010: that is its first byte; no backup is sent."""
    script = ScriptedReplicas({"a": [Reply(0.010, status=204, chunks=[])], "b": [0.010]})
    async with hedged(script) as client:
        script.start_clock()
        response = await client.get("/x")
        assert anyio.current_time() - script.t0 == pytest.approx(0.010)
    assert response.status_code == 204
    assert response.content == b""
    assert script.sent() == [(0.0, "a", "1")]


async def test_empty_chunks_are_not_a_first_byte() -> None:
    """An empty chunk at once, the data at 0.210: still racing at 0.030, the backup goes."""
    script = ScriptedReplicas(
        {"a": [Reply(0.010, chunks=body((0.0, b""), (0.200, b"a1")))], "b": [FAST_FIRST_BYTE]}
    )
    async with hedged(script) as client:
        script.start_clock()
        response = await client.get("/x")
    assert response.content == b"b1b2"
    assert script.of("body_closed") == [(0.050, "a")]


async def test_non_fatal_status_with_a_body_moves_on_at_its_headers() -> None:
    """A 503 with a body at 0.010 is not waited on: the backup goes at 0.010 and its
    first byte (0.030) wins; the 503's body is closed unread."""
    script = ScriptedReplicas(
        {
            "a": [Reply(0.010, status=503, chunks=body((0.500, b"busy")))],
            "b": [FAST_FIRST_BYTE],
        }
    )
    records: list[RequestRecord] = []
    async with hedged(script, records=records) as client:
        script.start_clock()
        response = await client.get("/x")
    assert records[0].duration == pytest.approx(0.030)
    assert script.sent() == [(0.0, "a", "1"), (0.010, "b", "2")]
    assert response.status_code == 200
    assert script.of("body_closed") == [(0.030, "a")]


async def test_fatal_error_status_wins_at_its_first_byte() -> None:
    """A 500 (not non-fatal) with its body's first byte at 0.020 wins there."""
    script = ScriptedReplicas(
        {"a": [Reply(0.010, status=500, chunks=body((0.010, b"oops")))], "b": [FAST_FIRST_BYTE]}
    )
    async with hedged(script) as client:
        script.start_clock()
        response = await client.get("/x")
    assert (response.status_code, response.content) == (500, b"oops")
    assert script.sent() == [(0.0, "a", "1")]


async def test_request_body_replayed_byte_exact_to_both_replicas() -> None:
    """A POST opted in by its route: both replicas receive the very same bytes."""
    payload = bytes(range(256)) * 3 + b'{"stream": true}\r\n\x00'
    route = Route(method="POST", path="/v1/*", hedge=True, decide_on="first_byte")
    script = ScriptedReplicas({"a": [SLOW_FIRST_BYTE], "b": [FAST_FIRST_BYTE]})
    async with hedged(script, routes=[route]) as client:
        script.start_clock()
        response = await client.post("/v1/chat/completions", content=payload)
    assert response.content == b"b1b2"
    sent = [(e.replica, e.method, e.body) for e in script.events if e.event == "sent"]
    assert sent == [("a", "POST", payload), ("b", "POST", payload)]


async def cancel_after(scope: anyio.CancelScope, seconds: float) -> None:
    """Cancel ``scope`` after ``seconds``, as another task of the caller would (a
    deadline of its own would also veto backups that could not answer in time)."""
    await anyio.sleep(seconds)
    scope.cancel()


async def test_caller_cancelled_while_the_body_streams() -> None:
    """The caller gives up at 0.055, mid-body of the winner: its stream is closed at
    that instant, the loser's at 0.050, and no task is left behind."""
    script = ScriptedReplicas(
        {"a": [SLOW_FIRST_BYTE], "b": [Reply(0.010, chunks=body((0.010, b"b1"), (1.0, b"b2")))]}
    )
    received: list[bytes] = []
    async with hedged(script) as client:
        tasks = count_tasks()
        script.start_clock()
        async with anyio.create_task_group() as tg:  # no deadline: backups may go
            tg.start_soon(cancel_after, tg.cancel_scope, 0.055)
            async with client.stream("GET", "/x") as response:
                async for chunk in response.aiter_raw():
                    received.append(chunk)
        assert tg.cancel_scope.cancelled_caught
        assert count_tasks() == tasks
    assert received == [b"b1"]
    assert script.of("body_closed") == [(0.050, "a"), (0.055, "b")]


async def test_caller_cancelled_while_waiting_for_first_bytes() -> None:
    """Cancelled at 0.045, both attempts still waiting for a first byte: both streams
    are closed then, and the record says the caller cancelled."""
    slow = Reply(0.010, chunks=body((0.500, b"x")))
    script = ScriptedReplicas({"a": [slow], "b": [slow]})
    records: list[RequestRecord] = []
    async with hedged(script, records=records) as client:
        tasks = count_tasks()
        script.start_clock()
        async with anyio.create_task_group() as tg:  # no deadline: backups may go
            tg.start_soon(cancel_after, tg.cancel_scope, 0.045)
            await client.get("/x")
        assert count_tasks() == tasks
    assert script.of("body_closed") == [(0.045, "a"), (0.045, "b")]
    (record,) = records
    assert record.cancelled_by_caller


async def test_delay_learned_from_time_to_first_byte_apart_from_headers() -> None:
    """Samples of a first-byte route are times to the first byte, under its own key;
    the same requests decided on headers feed the plain key with header latencies."""
    policy = AdaptiveDelay(min_samples=1, refresh_samples=1, initial_delay=1.0)
    script = ScriptedReplicas({"a": [Reply(0.010, chunks=body((0.070, b"a")))], "b": [0.5]})
    async with hedged(script, delay=policy) as client:
        await client.get("/x")
        await client.get("/x", extensions={"hedge_decide_on": "headers"})
    delays = policy.delays()
    assert delays["GET http://svc (first byte)"] == pytest.approx(0.080, rel=0.01)
    assert delays["GET http://svc"] == pytest.approx(0.010, rel=0.01)


async def test_primary_cancelled_waiting_for_first_byte_is_a_censored_sample() -> None:
    """A primary cancelled at 0.050 by its backup's first byte is recorded censored."""
    seen: list[tuple[str, float, bool]] = []

    class Recording(FixedDelay):
        def record(self, route: str, seconds: float, *, censored: bool) -> None:
            seen.append((route, seconds, censored))

    script = ScriptedReplicas({"a": [SLOW_FIRST_BYTE], "b": [FAST_FIRST_BYTE]})
    async with hedged(script, delay=Recording(0.030)) as client:
        await client.get("/x")
    assert seen == [("GET http://svc (first byte)", pytest.approx(0.050), True)]


@pytest.mark.parametrize(
    ("route", "extensions", "sent"),
    [
        pytest.param(Route(method="POST", decide_on="first_byte"), {}, 1, id="post-not-opted-in"),
        pytest.param(
            Route(method="POST", hedge=True, decide_on="first_byte"), {}, 2, id="opted-in"
        ),
        pytest.param(
            Route(method="POST", hedge=True, decide_on="first_byte"),
            {"hedge": False},
            1,
            id="request-opts-out",
        ),
        pytest.param(Route(method="GET", hedge=True), {}, 1, id="other-method"),
        pytest.param(Route(path="/other", hedge=True), {}, 1, id="other-path"),
        pytest.param(
            Route(match=lambda r: r.url.path.endswith("/x"), hedge=True), {}, 2, id="pred"
        ),
    ],
)
async def test_routes_opt_in_non_idempotent_requests_only_explicitly(
    route: Route, extensions: dict[str, Any], sent: int
) -> None:
    """A POST is hedged only when a route it matches opts it in (and its own
    extension does not opt it out)."""
    script = ScriptedReplicas({"a": [Reply(0.100, chunks=body((0.0, b"a")))], "b": [0.010]})
    records: list[RequestRecord] = []
    async with hedged(script, routes=[route], records=records) as client:
        await client.post("/x", content=b"{}", extensions=extensions)
    assert len(script.sent()) == sent
    expected = None if sent == 2 else records[0].suppressed
    assert records[0].suppressed == expected
    if sent == 1 and route.method == "POST":
        assert records[0].suppressed in ("not_idempotent", "opted_out")


async def test_request_extension_overrides_the_route_decision_point() -> None:
    """``hedge_decide_on="headers"`` on one request of a first-byte route ends its race
    at the headers (0.010): no backup."""
    script = ScriptedReplicas({"a": [SLOW_FIRST_BYTE], "b": [FAST_FIRST_BYTE]})
    async with hedged(script) as client:
        response = await client.get("/x", extensions={"hedge_decide_on": "headers"})
    assert response.content == b"a1a2"
    assert len(script.sent()) == 1


async def test_bad_decision_point_extension_is_refused_by_name() -> None:
    """An unknown ``hedge_decide_on`` value raises, naming the extension."""
    script = ScriptedReplicas({"a": [0.010], "b": [0.010]})
    async with hedged(script) as client:
        with pytest.raises(ValueError, match=r"^`extensions\['hedge_decide_on'\]` must be"):
            await client.get("/x", extensions={"hedge_decide_on": "body"})


async def test_route_name_is_the_route_key() -> None:
    """A named first-byte route learns under its name plus ``(first byte)``."""
    policy = AdaptiveDelay(min_samples=1, refresh_samples=1)
    route = Route(path="/v1/*", decide_on="first_byte", name="chat")
    script = ScriptedReplicas({"a": [Reply(0.010, chunks=body((0.010, b"a")))], "b": [0.5]})
    async with hedged(script, routes=[route], delay=policy) as client:
        await client.get("/v1/x")
    assert list(policy.delays()) == ["chat (first byte)"]


def _never(request: httpx.Request) -> bool:
    """A predicate that matches nothing."""
    return False


async def test_first_matching_route_wins() -> None:
    """Routes are tried in order: the first that matches decides."""
    routes = [Route(match=_never, decide_on="headers"), Route(path="/x", decide_on="first_byte")]
    script = ScriptedReplicas({"a": [SLOW_FIRST_BYTE], "b": [FAST_FIRST_BYTE]})
    async with hedged(script, routes=routes) as client:
        response = await client.get("/x")
    assert response.content == b"b1b2"


CallableCheck = Callable[[], object]


@pytest.mark.parametrize(
    ("make", "error", "pattern"),
    [
        (
            lambda: Route(method="FETCH"),
            ValueError,
            r"^`Route\(method='FETCH'\)\.method` must be one of",
        ),
        (
            lambda: Route(method=1),
            TypeError,
            r"^`Route\(method=1\)\.method` must be an HTTP method name or None",
        ),
        (
            lambda: Route(path=""),
            ValueError,
            r"^`Route\(path=''\)\.path` must be a glob over the URL path, start",
        ),
        (lambda: Route(path="reports/*"), ValueError, r"starting with '/' or '\*'"),
        (lambda: Route(path="http://svc/r/*"), ValueError, r"got 'http://svc/r/\*'$"),
        (
            lambda: Route(match="x"),
            TypeError,
            r"^`Route\(match='x'\)\.match` must be a callable request -> bool",
        ),
        (
            lambda: Route(hedge=1),
            TypeError,
            r"^`Route\(\)\.hedge` must be True, False or None, got 1$",
        ),
        (
            lambda: Route(decide_on="body"),
            ValueError,
            r"^`Route\(\)\.decide_on` must be 'headers' or",
        ),
        (
            lambda: Route(name=""),
            ValueError,
            r"^`Route\(name=''\)\.name` must be a non-empty str or None",
        ),
        (lambda: HedgedTransport(routes=Route()), TypeError, r"^`routes` must be a sequence"),
        (lambda: HedgedTransport(routes=["x"]), TypeError, r"^`routes` must hold Route objects"),
    ],
)
def test_bad_route_settings_are_refused_by_name(
    make: CallableCheck, error: type[Exception], pattern: str
) -> None:
    """Each bad Route or routes argument raises early, naming the parameter."""
    with pytest.raises(error, match=pattern):
        make()


def test_route_method_is_case_insensitive() -> None:
    """``method="post"`` is kept upper-cased and matches a POST."""
    route = Route(method="post", path="/v1/*")
    assert route.method == "POST"
    assert route.matches(httpx.Request("POST", "http://svc/v1/chat/completions"))
    assert not route.matches(httpx.Request("GET", "http://svc/v1/chat/completions"))
    assert not route.matches(httpx.Request("POST", "http://svc/v2/chat"))
