"""The replicas' side of tied requests, in process: the drop endpoint and its
authentication, and what a drop message does to a copy that waits, runs, or has not
come yet. Messages are signed as a peer signs them (``TieAuth.sign``)."""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest

from hedgeclient._timer import loop_id
from hedgeclient.server import HedgeMiddleware, Ties
from hedgeclient.server._auth import TieAuth

pytestmark = pytest.mark.anyio

SECRET = b"0123456789abcdef0123456789abcdef"
TIE = "ab" * 16
PEER = "http://127.0.0.1:9"  # a configured peer on loopback, where nothing listens
OTHER = "http://127.0.0.1:7"  # a twin that is not a peer: a copy naming it sends no message


@pytest.fixture
def anyio_backend(virtual_time: tuple[str, dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """Every test in this module runs on trio with a fresh MockClock."""
    return virtual_time


class Exchange:
    """One request: a body-less client that never goes away, and what it was sent."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.given = False

    async def receive(self) -> dict[str, Any]:
        if not self.given:
            self.given = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await anyio.sleep_forever()
        raise AssertionError  # pragma: no cover

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    @property
    def status(self) -> int:
        return int(self.sent[0]["status"])

    @property
    def headers(self) -> dict[bytes, bytes]:
        return dict(self.sent[0]["headers"])

    @property
    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.sent[1:])


def middleware(app: Any = None, **kwargs: Any) -> HedgeMiddleware:
    kwargs.setdefault("ties", Ties(peers=[PEER], secret=SECRET))
    return HedgeMiddleware(app or worker([]), metrics=False, **kwargs)


def worker(log: list[str], seconds: float = 0.100) -> Any:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        log.append(f"start {anyio.current_time():.3f}")
        await anyio.sleep(seconds)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})
        log.append(f"done {anyio.current_time():.3f}")

    return app


def message(
    tie: str = TIE, headers: dict[str, str] | None = None, client: str = "127.0.0.1"
) -> dict[str, Any]:
    """The scope of a drop message; signed unless ``headers`` is given."""
    if headers is None:
        headers = TieAuth(SECRET, (), 10.0, "/_hedge/tie").sign(tie)
    raw = [(b"hedge-tie", tie.encode())] + [(k.encode(), v.encode()) for k, v in headers.items()]
    return {
        "type": "http", "method": "POST", "path": "/_hedge/tie", "headers": raw,
        "client": (client, 40000),
    }  # fmt: skip


def copy(tie: str = TIE, twin: str = OTHER, attempt: str = "2") -> dict[str, Any]:
    """The scope of a tied copy."""
    headers = [(b"hedge-attempt", attempt.encode()), (b"hedge-tie", tie.encode())]
    headers.append((b"hedge-twin", twin.encode()))
    return {"type": "http", "method": "GET", "path": "/x", "headers": headers}


async def call(app: HedgeMiddleware, scope: dict[str, Any]) -> Exchange:
    exchange = Exchange()
    await app(scope, exchange.receive, exchange.send)
    return exchange


async def test_unauthenticated_message_refused() -> None:
    """An unsigned message, and one with a wrong signature, get 401 and drop nothing."""
    app = middleware()
    unsigned = await call(app, message(headers={}))
    forged = TieAuth(b"another secret of 32 bytes......", (), 10.0, "/_hedge/tie").sign(TIE)
    wrong = await call(app, message(headers=forged))
    assert (unsigned.status, unsigned.body) == (401, b'{"error": "not signed"}')
    assert (wrong.status, wrong.body) == (401, b'{"error": "bad signature"}')
    stats = app.statistics()
    assert (stats.messages_refused, stats.messages_received) == (2, 0)


async def test_replayed_and_stale_messages_refused() -> None:
    """The same signed message twice: the second is a replay (401); a message signed
    an hour ago is stale (401)."""
    app = middleware()
    signed = message()
    first, again = await call(app, signed), await call(app, signed)
    old = TieAuth(SECRET, (), 10.0, "/_hedge/tie", wall=lambda: 1_000.0).sign(TIE)
    stale = await call(app, message(headers=old))
    assert first.status == 404  # authenticated; no such copy here
    assert (again.status, again.body) == (401, b'{"error": "replayed"}')
    assert (stale.status, stale.body) == (401, b'{"error": "stale timestamp"}')


async def test_unknown_id_refused_and_copy_dropped_on_arrival() -> None:
    """A message for a tie not here answers 404 "unknown"; the copy that arrives later
    is dropped at once (503, Hedge-Tie-Dropped) without reaching the handler."""
    log: list[str] = []
    app = middleware(worker(log))
    unknown = await call(app, message())
    dropped = await call(app, copy())
    assert (unknown.status, unknown.body) == (
        404,
        b'{"tie": "%s", "result": "unknown"}' % TIE.encode(),
    )
    assert dropped.status == 503
    assert dropped.headers[b"hedge-tie-dropped"] == TIE.encode()
    assert log == []
    assert app.statistics().dropped_on_arrival == 1


async def test_malformed_tie_and_wrong_method_refused() -> None:
    """A tie id that is not 32 hex digits gets 400; a GET to the endpoint gets 405."""
    app = middleware()
    bad = await call(app, message(tie="not-a-tie", headers={}))
    get = await call(app, {**message(), "method": "GET"})
    assert bad.status == 400
    assert get.status == 405


async def test_network_allow_list() -> None:
    """With networks only, a caller outside them gets 403; one inside is accepted."""
    app = middleware(ties=Ties(peers=[PEER], networks=["127.0.0.0/8"]))
    outside = await call(app, message(headers={}, client="192.0.2.1"))
    inside = await call(app, message(headers={}, client="127.0.0.2"))
    assert outside.status == 403
    assert inside.status == 404


async def test_queued_twin_dropped() -> None:
    """One slot busy until 0.100; a tied copy waits; the drop message at 0.010 takes it
    out of the queue: it answers 503 dropped at 0.010 and never runs."""
    log: list[str] = []
    app = middleware(worker(log), max_concurrency=1)
    results: dict[str, Exchange] = {}

    async def run(name: str, scope: dict[str, Any]) -> None:
        results[name] = await call(app, scope)

    async with anyio.create_task_group() as tg:
        tg.start_soon(run, "busy", copy(tie="cd" * 16))
        await anyio.sleep(0.001)
        tg.start_soon(run, "twin", copy())
        await anyio.sleep(0.009)
        drop = await call(app, message())
        assert anyio.current_time() == pytest.approx(0.010)
    assert drop.body == b'{"tie": "%s", "result": "dropped"}' % TIE.encode()
    assert results["twin"].status == 503
    assert log == ["start 0.000", "done 0.100"]
    assert app.statistics().dropped_queued == 1


async def test_twin_dropped_after_it_started_is_not_interrupted() -> None:
    """A drop message for a copy already running answers "running" and the copy runs
    to its 200 at 0.100."""
    log: list[str] = []
    app = middleware(worker(log))
    results: list[Exchange] = []

    async def run() -> None:
        results.append(await call(app, copy()))

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await anyio.sleep(0.010)
        drop = await call(app, message())
    assert drop.body == b'{"tie": "%s", "result": "running"}' % TIE.encode()
    assert results[0].status == 200
    assert log == ["start 0.000", "done 0.100"]
    assert app.statistics().twins_running == 1


def test_ties_arguments_checked() -> None:
    """Ties refuses an open endpoint, a short secret, a bad peer, network or path."""
    for path in ("//", "/a//b"):
        with pytest.raises(ValueError, match=r"^`path` must be an absolute URL path other than"):
            Ties(peers=[PEER], secret=SECRET, path=path)
    with pytest.raises(ValueError, match=r"^`Ties` needs a `secret`, `networks`, or both"):
        Ties(peers=[PEER])
    with pytest.raises(ValueError, match=r"^`secret` must be at least 16 bytes, got 5$"):
        Ties(peers=[PEER], secret="short")
    with pytest.raises(ValueError, match=r"^`peers` must be an absolute http"):
        Ties(peers=["10.0.0.1:80"], secret=SECRET)
    with pytest.raises(ValueError, match=r"^`networks` must hold CIDR strings"):
        Ties(peers=[PEER], networks=["ten"])
    with pytest.raises(ValueError, match=r"^`path` must be an absolute URL path"):
        Ties(peers=[PEER], secret=SECRET, path="tie")
    with pytest.raises(ValueError, match=r"^`path` must be an absolute URL path other than '/'"):
        Ties(peers=[PEER], secret=SECRET, path="/")  # it would take the application's root
    with pytest.raises(ValueError, match=r"^`timeout` must be a number of seconds in \(0, 60\]"):
        Ties(peers=[PEER], secret=SECRET, timeout=0)
    assert "0123" not in repr(Ties(peers=[PEER], secret=SECRET))


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # real I/O: a real clock
async def test_leader_sends_nothing_and_follower_asks() -> None:
    """The leader (attempt 1) starts and sends no message; the follower (attempt 2),
    its leader's replica down (nothing listens on the loopback port), asks, the message
    fails and is counted, and the follower runs to its 200."""
    log: list[str] = []
    app = middleware(worker(log, 0.0))
    leader = await call(app, copy(tie="cd" * 16, twin=PEER, attempt="1"))
    assert app.statistics().messages_sent == 0
    follower = await call(app, copy(twin=PEER, attempt="2"))
    stats = app.statistics()
    assert (leader.status, follower.status) == (200, 200)
    assert (stats.messages_sent, stats.messages_failed, stats.dropped_on_answer) == (1, 1, 0)
    await app.aclose()


R1, R2 = "http://r1.test", "http://r2.test"  # the leader's and the follower's replicas


def pair_of_replicas(log: list[str], seconds: float) -> tuple[HedgeMiddleware, HedgeMiddleware]:
    """Two replicas of one slot each whose tie messages go to each other in process
    (``httpx.ASGITransport``), so that a pair's timeline is exact in virtual time."""
    ties = Ties(peers=[R1, R2], secret=SECRET)

    def app(name: str) -> Any:
        async def handler(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["path"] != "/busy":
                log.append(f"{name} {scope['path']} {anyio.current_time():.3f}")
            await anyio.sleep(seconds if scope["path"] != "/busy" else 0.100)
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})

        return handler

    r1 = HedgeMiddleware(app("r1"), max_concurrency=1, ties=ties, metrics=False)
    r2 = HedgeMiddleware(app("r2"), max_concurrency=1, ties=ties, metrics=False)
    for here, there in ((r1, r2), (r2, r1)):
        assert here._book is not None
        here._book._client = httpx.AsyncClient(transport=httpx.ASGITransport(app=there))
        here._book._client_loop = loop_id()  # the messages' client of this loop
    return r1, r2


@pytest.mark.parametrize(
    ("follower_at", "r1_busy", "r2_busy", "runs"),
    [
        pytest.param(0.0, False, False, None, id="both-idle-same-instant"),
        pytest.param(0.002, False, False, "r1", id="both-idle-offset"),
        pytest.param(0.0, True, False, "r2", id="leader-queued"),
        pytest.param(0.0, False, True, "r1", id="follower-queued"),
        pytest.param(0.0, True, True, None, id="both-queued-same-instant"),
        pytest.param(-0.003, False, False, "r2", id="follower-first"),
    ],
)
async def test_one_message_and_one_run_per_pair(
    follower_at: float, r1_busy: bool, r2_busy: bool, runs: str | None
) -> None:
    """Whatever the copies' timing and queues, a tied pair sends at most one message and
    runs one copy: the follower asks the leader's replica as it is about to start, and
    that replica decides (drops a queued or late leader, or has the follower dropped).
    Copies that start in the same instant run in either order (trio's scheduling is
    random): then either copy may be the one (``runs`` None)."""
    log: list[str] = []
    r1, r2 = pair_of_replicas(log, 0.050)
    results: dict[str, Exchange] = {}

    async def send(name: str, app: HedgeMiddleware, scope: dict[str, Any], at: float) -> None:
        await anyio.sleep_until(at)
        results[name] = await call(app, scope)

    start = 0.010
    async with anyio.create_task_group() as tg:
        for busy, app in ((r1_busy, r1), (r2_busy, r2)):
            if busy:  # a request holding the slot until 0.100
                tg.start_soon(call, app, {**copy(), "path": "/busy", "headers": []})
        tg.start_soon(send, "leader", r1, copy(twin=R2, attempt="1"), start)
        tg.start_soon(send, "follower", r2, copy(twin=R1, attempt="2"), start + follower_at)
    stats = [r1.statistics(), r2.statistics()]
    assert sum(s.messages_sent for s in stats) == 1  # the follower's question, only
    assert sum(s.messages_failed for s in stats) == 0
    ran = [entry.split()[0] for entry in log]
    assert ran in ([[runs]] if runs else [["r1"], ["r2"]])  # one copy ran
    runs = ran[0]
    statuses = {name: result.status for name, result in results.items()}
    winner, loser = ("leader", "follower") if runs == "r1" else ("follower", "leader")
    assert statuses == {winner: 200, loser: 503}
    assert results[loser].headers[b"hedge-tie-dropped"] == TIE.encode()
    for app in (r1, r2):
        await app.aclose()
