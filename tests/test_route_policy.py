"""Policy per route and per request (issue 27), in virtual time on trio's MockClock.

One precedence: the request's own settings (``extensions={"hedge": HedgePolicy(...)}``
or a dict), then its route's (``Route(...)``), then the transport's. Each instant
asserted is scripted arithmetic: a backup sent at a 0.050 s hedge delay to a replica
answering in 0.010 s wins at 0.060 s.
"""

from __future__ import annotations

import math
import re
from typing import Any

import anyio
import httpx
import pytest

from hedgeclient import (
    AdaptiveDelay,
    FixedDelay,
    HedgeBudget,
    HedgedTransport,
    HedgePolicy,
    RequestRecord,
    Route,
)
from hedgeclient.testing import FirstReplica, ScriptedReplicas

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
    records: list[RequestRecord] | None = None,
    **kwargs: Any,
) -> httpx.AsyncClient:
    """A client whose HedgedTransport routes ``http://svc`` to three scripted replicas,
    a fixed 0.030 s delay, the first replica always the primary."""
    kwargs.setdefault("budget", unlimited())
    kwargs.setdefault("delay", 0.030)
    transport = HedgedTransport(
        httpx.MockTransport(script.handler),
        replicas={SERVICE: REPLICAS},
        metrics=False,
        selector=FirstReplica(),
        hooks=[records.append] if records is not None else (),
        **kwargs,
    )
    return httpx.AsyncClient(transport=transport, base_url=SERVICE)


def slow_primary() -> ScriptedReplicas:
    """Replica a answers in 1 s; b and c in 10 ms."""
    return ScriptedReplicas({"a": [1.0], "b": [0.010], "c": [0.010]})


class Primaries:
    """A handler whose primaries (attempt 1) answer in 1 s and every backup in 10 ms,
    whatever the replica (the replica choice steers around a slow one); it logs
    ``(instant, attempt, path)`` of each attempt sent."""

    def __init__(self) -> None:
        self.sent: list[tuple[float, str, str]] = []
        self.t0 = 0.0

    async def handler(self, request: httpx.Request) -> httpx.Response:
        attempt = request.headers.get("hedge-attempt", "1")
        self.sent.append((round(anyio.current_time() - self.t0, 6), attempt, request.url.path))
        await anyio.sleep(1.0 if attempt == "1" else 0.010)
        return httpx.Response(200, text=request.url.path)


def primaries(handler: Primaries, **kwargs: Any) -> httpx.AsyncClient:
    """A client over ``handler``, as :func:`hedged` builds it."""
    kwargs.setdefault("budget", unlimited())
    kwargs.setdefault("delay", 0.030)
    transport = HedgedTransport(
        httpx.MockTransport(handler.handler),
        replicas={SERVICE: REPLICAS},
        metrics=False,
        **kwargs,
    )
    handler.t0 = anyio.current_time()
    return httpx.AsyncClient(transport=transport, base_url=SERVICE)


# -- precedence -------------------------------------------------------------------------


async def test_a_route_delay_wins_over_the_transport_delay() -> None:
    """``Route(delay=0.050)``: its requests hedge at 0.050, the others at 0.030."""
    handler = Primaries()
    routes = [Route(path="/export/*", delay=0.050)]
    async with primaries(handler, routes=routes) as client:
        await client.get("/export/1")
        await client.get("/lookup/1")
    assert handler.sent == [
        (0.0, "1", "/export/1"), (0.050, "2", "/export/1"),
        (0.060, "1", "/lookup/1"), (0.090, "2", "/lookup/1"),
    ]  # fmt: skip


async def test_a_request_policy_wins_over_its_route_and_the_transport() -> None:
    """A HedgePolicy's delay beats the route's, a dict's too; without one the route's
    holds."""
    handler = Primaries()
    routes = [Route(path="/export/*", delay=0.050)]
    async with primaries(handler, routes=routes) as client:
        await client.get("/export/1", extensions={"hedge": HedgePolicy(delay=0.020)})
        await client.get("/export/2", extensions={"hedge": {"delay": 0.040}})
        await client.get("/export/3")
    assert [(t, attempt) for t, attempt, _ in handler.sent] == [
        (0.0, "1"), (0.020, "2"),  # the request's own 0.020
        (0.030, "1"), (0.070, "2"),  # the dict's 0.040
        (0.080, "1"), (0.130, "2"),  # the route's 0.050
    ]  # fmt: skip


async def test_max_hedges_per_route_and_per_request() -> None:
    """The transport sends one backup; a route two; a request on that route none."""
    handler = Primaries()
    routes = [Route(path="/deep/*", max_hedges=2, delay=0.005)]  # backups of 10 ms
    async with primaries(handler, routes=routes, max_hedges=1) as client:
        deep = await client.get("/deep/1")
        flat = await client.get("/flat/1")
        none = await client.get("/deep/2", extensions={"hedge": {"max_hedges": 0}})
    assert deep.extensions["hedge"].attempts == 3
    assert flat.extensions["hedge"].attempts == 2
    info = none.extensions["hedge"]
    assert (info.attempts, info.suppressed) == (1, "hedging_off")


async def test_a_route_hedges_its_own_methods() -> None:
    """``Route(methods={"POST"})`` hedges the POSTs of its path, and only those."""
    script = slow_primary()
    routes = [Route(path="/search", methods={"post"})]
    async with hedged(script, routes=routes) as client:
        on_route = await client.post("/search", content=b"q")
        elsewhere = await client.post("/other", content=b"q")
    assert on_route.extensions["hedge"].attempts == 2
    info = elsewhere.extensions["hedge"]
    assert (info.attempts, info.suppressed) == (1, "not_idempotent")


async def test_a_route_budget_is_its_own_and_the_others_share_the_transports() -> None:
    """A route with an empty budget of its own sends no backup; the transport's budget
    still pays the other routes'."""
    script = slow_primary()
    empty = HedgeBudget(ratio=0.01, burst=1, min_per_second=0)
    assert empty.try_withdraw()
    shared = HedgeBudget(ratio=1.0, burst=10, min_per_second=0)
    routes = [Route(path="/export/*", budget=empty)]
    async with hedged(script, routes=routes, budget=shared) as client:
        export = await client.get("/export/1")
        lookup = await client.get("/lookup/1")
    assert (export.extensions["hedge"].attempts, export.extensions["hedge"].suppressed) == (
        1,
        "budget",
    )
    assert lookup.extensions["hedge"].attempts == 2
    assert (empty.statistics().deposits, shared.statistics().deposits) == (1, 1)
    assert (empty.statistics().refusals, shared.statistics().withdrawals) == (1, 1)


async def test_bounds_clamp_the_delay_per_route_and_per_request() -> None:
    """``min_delay`` raises a short delay; a delay above ``max_delay`` sends no backup
    (``cutoff``). The capped route's delay is adaptive (0.030 s while it warms up): a
    fixed delay above its ``max_delay`` would be refused, as it could never hedge."""
    script = slow_primary()
    adaptive = AdaptiveDelay(initial_delay=0.030)
    routes = [
        Route(path="/floor/*", min_delay=0.045),
        Route(path="/cap/*", delay=adaptive, max_delay=0.020),
    ]
    async with hedged(script, routes=routes) as client:
        script.start_clock()
        floored = await client.get("/floor/1")
        capped = await client.get("/cap/1")
        lifted = await client.get("/cap/2", extensions={"hedge": {"max_delay": math.inf}})
    assert floored.extensions["hedge"].delay == pytest.approx(0.045)
    info = capped.extensions["hedge"]
    assert (info.attempts, info.delay, info.suppressed) == (1, None, "cutoff")
    assert lifted.extensions["hedge"].delay == pytest.approx(0.030)


async def test_a_route_quantile_learns_its_own_delay() -> None:
    """``Route(quantile=0.5)`` gets an AdaptiveDelay of its own at that quantile, with
    the transport's other settings; the transport's learns nothing of the route."""
    script = ScriptedReplicas({"a": [0.010], "b": [0.010], "c": [0.010]})
    transport_delay = AdaptiveDelay(min_samples=5, initial_delay=0.1, refresh_interval=0.0)
    routes = [Route(path="/fast/*", quantile=0.5, name="fast")]
    async with hedged(script, routes=routes, delay=transport_delay) as client:
        for i in range(6):
            await client.get(f"/fast/{i}")
        response = await client.get("/fast/last")
    assert response.extensions["hedge"].delay == pytest.approx(0.010, rel=0.05)
    assert transport_delay.delays() == {}


async def test_a_request_decides_on_the_first_byte_by_its_policy() -> None:
    """``HedgePolicy(decide_on="first_byte")`` keys the route apart, as the extension
    ``hedge_decide_on`` does."""
    script = ScriptedReplicas({"a": [0.010], "b": [0.010], "c": [0.010]})
    records: list[RequestRecord] = []
    async with hedged(script, records=records) as client:
        await client.get("/x", extensions={"hedge": HedgePolicy(decide_on="first_byte")})
    assert records[0].route.endswith(" (first byte)")


async def test_hedge_true_in_a_policy_opts_in_a_post() -> None:
    """``{"hedge": {"hedge": True}}`` opts a POST in, as ``{"hedge": True}`` does."""
    script = slow_primary()
    async with hedged(script) as client:
        response = await client.post("/x", content=b"q", extensions={"hedge": {"hedge": True}})
    assert response.extensions["hedge"].attempts == 2


# -- validation -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (
            {"path": "/export/*", "max_hedges": 7},
            ValueError,
            "`Route(path='/export/*').max_hedges` must be in [0, 4] or None, got 7",
        ),
        (
            {"name": "export", "quantile": 1.5},
            ValueError,
            "`Route(name='export').quantile` must be in (0, 1) or None, got 1.5",
        ),
        (
            {"path": "/x", "delay": 0.05, "quantile": 0.9},
            ValueError,
            "`Route(path='/x').quantile` must be None when `Route(path='/x').delay` is given "
            "(the quantile builds the route's own delay), got 0.9",
        ),
        (
            {"method": "GET", "path": "/x", "delay": 30},
            ValueError,
            "`Route(method='GET', path='/x').delay` must be a number of seconds in [0, 5] "
            "or None, got 30",
        ),
        (
            {"path": "/x", "min_delay": 0.5, "max_delay": 0.1},
            ValueError,
            "`Route(path='/x').min_delay` must be <= `Route(path='/x').max_delay`, got 0.5 > 0.1",
        ),
        (
            {"path": "/x", "budget": 0.1},
            TypeError,
            "`Route(path='/x').budget` must be a HedgeBudget or None, got 0.1",
        ),
        (
            {"path": "/x", "methods": {"FETCH"}},
            ValueError,
            "`Route(path='/x').methods` has unknown method(s) ['FETCH']; allowed: "
            "CONNECT, DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT, QUERY, TRACE",
        ),
        (
            {"path": "/x", "on_backup": "header"},
            TypeError,
            "`Route(path='/x').on_backup` must be a callable request -> request | None, "
            "got 'header'",
        ),
        (
            {"path": "/x", "decide_on": "body"},
            ValueError,
            "`Route(path='/x').decide_on` must be 'headers' or 'first_byte', got 'body'",
        ),
        (
            {"path": "/x", "hedge": "yes"},
            TypeError,
            "`Route(path='/x').hedge` must be True, False or None, got 'yes'",
        ),
        (
            {"name": 7},
            TypeError,
            "`Route(name=7).name` must be a non-empty str or None, got 7",
        ),
        (
            {"method": "fetch", "path": "/x"},
            ValueError,
            "`Route(method='fetch', path='/x').method` must be one of ['CONNECT', 'DELETE', "
            "'GET', 'HEAD', 'OPTIONS', 'PATCH', 'POST', 'PUT', 'QUERY', 'TRACE'] or None, "
            "got 'fetch'",
        ),
        (
            {"method": "GET", "path": "export/*"},
            ValueError,
            "`Route(method='GET', path='export/*').path` must be a glob over the URL path, "
            "starting with '/' or '*' (such as '/v1/*'), got 'export/*'",
        ),
        (
            {"path": "/x", "match": 3},
            TypeError,
            "`Route(path='/x', match=3).match` must be a callable request -> bool or None, got 3",
        ),
    ],
)
def test_a_route_setting_out_of_range_is_refused_by_name(
    kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    """Each message names the route, the setting and the range allowed."""
    with pytest.raises(error, match=f"^{re.escape(message)}$"):
        Route(**kwargs)


def test_a_route_asking_more_backups_than_replicas_is_refused_at_construction() -> None:
    """Two replicas allow one backup: a route asking two is refused, by name."""
    message = (
        "`Route(path='/deep/*').max_hedges` must be in [0, 1] (the transport's "
        "`max_hedges` bound for its replicas), got 2"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        HedgedTransport(
            replicas={SERVICE: REPLICAS[:2]},
            routes=[Route(path="/deep/*", max_hedges=2)],
            metrics=False,
        )


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        (
            {"max_hedges": 9},
            ValueError,
            "`extensions['hedge']['max_hedges']` must be in [0, 4] or None, got 9",
        ),
        (
            {"max_hedges": 3},
            ValueError,
            "`extensions['hedge']['max_hedges']` must be in [0, 2] (the transport's "
            "`max_hedges` bound for its replicas), got 3",
        ),
        (
            {"quantile": 0.99},
            ValueError,
            "`extensions['hedge']` has unknown key(s) ['quantile']; allowed: ['budget', "
            "'decide_on', 'delay', 'hedge', 'max_delay', 'max_hedges', 'min_delay', "
            "'on_backup'] (a quantile is a route's: Route(quantile=...), or give `delay`)",
        ),
        (
            {"delay": -1},
            ValueError,
            "`extensions['hedge']['delay']` must be a number of seconds in [0, 5] or None, got -1",
        ),
        (
            {"hedge": "yes"},
            TypeError,
            "`extensions['hedge']['hedge']` must be True, False or None, got 'yes'",
        ),
    ],
)
async def test_a_request_setting_out_of_range_is_refused_before_anything_is_sent(
    value: object, error: type[Exception], message: str
) -> None:
    """A request's own setting is checked as it enters: nothing is sent."""
    script = slow_primary()
    async with hedged(script) as client:
        with pytest.raises(error, match=f"^{re.escape(message)}$"):
            await client.get("/x", extensions={"hedge": value})
    assert script.sent() == []


def test_a_hedge_policy_is_checked_when_built() -> None:
    """``HedgePolicy`` checks its fields at construction, a fixed delay kept as one."""
    with pytest.raises(ValueError, match=r"^`min_delay` must be a number of seconds"):
        HedgePolicy(min_delay=-0.1)
    assert isinstance(HedgePolicy(delay=0.02).delay, FixedDelay)


# -- the backup hook ----------------------------------------------------------------------


async def test_the_hook_changes_the_backup_request_and_only_the_backup() -> None:
    """A header set and a path changed by the hook reach the backup's replica; the
    primary goes as the caller wrote it."""
    seen: list[httpx.Request] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.host == "a":
            await __import__("anyio").sleep(1.0)
        return httpx.Response(200, text=request.url.path)

    def on_backup(request: httpx.Request) -> httpx.Request:
        request.headers["X-Backup"] = "1"
        request.url = request.url.copy_with(path="/replica" + request.url.path)
        return request

    transport = HedgedTransport(
        httpx.MockTransport(handler),
        replicas={SERVICE: REPLICAS},
        delay=0.030,
        budget=unlimited(),
        selector=FirstReplica(),
        metrics=False,
        on_backup=on_backup,
    )
    async with httpx.AsyncClient(transport=transport, base_url=SERVICE) as client:
        response = await client.get("/items/1", params={"q": "1"})
    assert response.text == "/replica/items/1"
    (primary, backup) = seen
    assert (primary.url.path, primary.headers.get("x-backup")) == ("/items/1", None)
    assert (backup.url.path, backup.headers["x-backup"], backup.url.params["q"]) == (
        "/replica/items/1",
        "1",
        "1",
    )
    assert backup.headers["hedge-attempt"] == "2"


async def test_a_new_request_from_the_hook_is_sent_as_the_backup() -> None:
    """The hook may return another request (bytes body): it is sent instead."""
    script = slow_primary()

    def on_backup(request: httpx.Request) -> httpx.Request:
        return httpx.Request("GET", request.url.copy_with(path="/other"), headers=request.headers)

    async with hedged(script, on_backup=on_backup) as client:
        response = await client.get("/x")
    assert response.text == "b"
    assert [e.body for e in script.events if e.event == "sent"] == [b"", b""]


async def test_a_veto_sends_no_backup_spends_no_token_and_is_counted() -> None:
    """``None`` from the hook: no backup, no token, reason ``vetoed``."""
    script = slow_primary()
    budget = HedgeBudget(ratio=0.1, burst=5, min_per_second=0)
    records: list[RequestRecord] = []
    async with hedged(script, budget=budget, records=records, on_backup=lambda r: None) as c:
        response = await c.get("/x")
    info = response.extensions["hedge"]
    assert (info.attempts, info.suppressed) == (1, "vetoed")
    assert (budget.statistics().withdrawals, budget.tokens) == (0, pytest.approx(5.0))
    assert records[0].suppressed == "vetoed"


async def test_a_hook_that_raises_costs_the_backup_never_the_request(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A hook that raises: the primary answers, no backup (``hook_error``), logged."""
    script = slow_primary()

    def broken(request: httpx.Request) -> httpx.Request:
        msg = "a hook's bug"
        raise RuntimeError(msg)

    async with hedged(script, on_backup=broken) as client:
        response = await client.get("/x")
    info = response.extensions["hedge"]
    assert (response.text, info.attempts, info.suppressed) == ("a", 1, "hook_error")
    assert "hedgeclient: the backup hook (on_backup) failed; no backup" in caplog.messages


@pytest.mark.parametrize(
    "returned",
    [
        "not a request",
        httpx.Request("POST", "http://b/x", content=iter([b"chunk"])),
    ],
)
async def test_a_hook_returning_what_cannot_be_sent_is_a_hook_error(returned: object) -> None:
    """Anything but a request, or a request with a streaming body: ``hook_error``."""
    script = slow_primary()
    async with hedged(script, on_backup=lambda r: returned) as client:
        response = await client.get("/x")
    assert response.extensions["hedge"].suppressed == "hook_error"
    assert len(script.sent()) == 1


async def test_the_hook_is_never_called_for_a_request_sent_once() -> None:
    """A streaming body (opted in) and a POST not hedged: the hook is not called."""
    script = slow_primary()
    calls: list[httpx.Request] = []

    async def body() -> Any:
        yield b"chunk"

    async with hedged(script, on_backup=calls.append) as client:
        await client.post("/x", content=body(), extensions={"hedge": True})
        await client.post("/x", content=b"q")
    assert calls == []


async def test_a_route_and_a_request_hook_win_over_the_transports() -> None:
    """Request, then route, then transport: the most specific hook is the one called."""
    handler = Primaries()
    called: list[str] = []

    def hook(name: str) -> Any:
        def mark(request: httpx.Request) -> httpx.Request:
            called.append(name)
            return request

        return mark

    routes = [Route(path="/r/*", on_backup=hook("route"))]
    async with primaries(handler, routes=routes, on_backup=hook("transport")) as client:
        await client.get("/x")
        await client.get("/r/1")
        await client.get("/r/2", extensions={"hedge": HedgePolicy(on_backup=hook("request"))})
    assert called == ["transport", "route", "request"]


@pytest.mark.parametrize(
    ("where", "origin"),
    [
        ("returned", "http://elsewhere"),
        ("in place", "https://b"),
        ("returned", "http://b:8081"),
        ("returned", "http://admin:s3cret@elsewhere"),
    ],
)
async def test_a_hook_sending_the_backup_to_another_origin_is_a_hook_error(
    where: str, origin: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A backup moved off the replica chosen (another host, scheme or port, in place or
    in a new request) is not sent: ``HedgeInfo.replica`` would name the wrong one."""
    script = slow_primary()

    def elsewhere(request: httpx.Request) -> httpx.Request:
        url = httpx.URL(origin).copy_with(path=request.url.path)
        if where == "in place":
            request.url = url
            return request
        return httpx.Request("GET", url)

    async with hedged(script, on_backup=elsewhere) as client:
        response = await client.get("/x")
    info = response.extensions["hedge"]
    assert (response.text, info.attempts, info.replica, info.suppressed) == (
        "a",
        1,
        "http://a",
        "hook_error",
    )
    assert [e.replica for e in script.events if e.event == "sent"] == ["a"]
    (failure,) = [r for r in caplog.records if r.name == "hedgeclient"]
    assert failure.exc_info is not None
    # The credentials of the URL the hook chose are never logged (httpx's netloc).
    shown = origin.replace("admin:s3cret@", "")
    assert str(failure.exc_info[1]) == (
        "the backup hook must keep the backup on the replica chosen, 'http://b' (a header, "
        f"a query parameter or a path may change), got a request to {shown}"
    )
    assert "s3cret" not in caplog.text


async def test_a_hook_that_changes_the_request_and_returns_none_vetoes_it() -> None:
    """Changing the request in place is not enough: ``None`` is the veto, whatever the
    request became."""
    script = slow_primary()

    def forgets_its_return(request: httpx.Request) -> None:
        request.headers["X-Backup"] = "1"

    async with hedged(script, on_backup=forgets_its_return) as client:
        response = await client.get("/x")
    info = response.extensions["hedge"]
    assert (response.text, info.attempts, info.suppressed) == ("a", 1, "vetoed")


class _AsyncCall:
    """A callable object whose ``__call__`` is a coroutine function."""

    async def __call__(self, request: httpx.Request) -> httpx.Request:
        return request  # pragma: no cover - never called: refused at construction


async def _async_hook(request: httpx.Request) -> httpx.Request:
    return request  # pragma: no cover - never called: refused at construction


@pytest.mark.parametrize("hook", [_async_hook, _AsyncCall()], ids=["async def", "__call__"])
@pytest.mark.parametrize(
    ("build", "name"),
    [
        (lambda hook: Route(path="/x", on_backup=hook), "Route(path='/x').on_backup"),
        (lambda hook: HedgePolicy(on_backup=hook), "on_backup"),
        (lambda hook: HedgedTransport(on_backup=hook, metrics=False), "on_backup"),
    ],
    ids=["route", "policy", "transport"],
)
def test_an_async_hook_is_refused_at_construction(build: Any, name: str, hook: object) -> None:
    """An ``async def`` hook (or ``__call__``) would never be awaited and lose every
    backup: refused when built, by name, not when a backup is due."""
    message = (
        f"`{name}` must be a plain (not async) callable request -> request | None: it runs "
        f"synchronously as the backup is due, got the coroutine function {hook!r}"
    )
    with pytest.raises(TypeError, match=f"^{re.escape(message)}$"):
        build(hook)


async def test_an_async_hook_in_a_request_dict_is_refused_before_anything_is_sent() -> None:
    """The same check for a per-request mapping, named as the extension's key."""
    script = slow_primary()
    async with hedged(script) as client:
        message = r"^`extensions\['hedge'\]\['on_backup'\]` must be a plain"
        with pytest.raises(TypeError, match=message):
            await client.get("/x", extensions={"hedge": {"on_backup": _async_hook}})
    assert script.sent() == []


async def test_a_failing_hook_is_logged_once_a_minute_and_counted_every_time(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """30 failures in 30 s: one traceback; the next, a minute later, gives the count of
    those not logged. Every one is still ``hook_error``."""
    script = slow_primary()
    records: list[RequestRecord] = []

    def broken(request: httpx.Request) -> httpx.Request:
        msg = "a hook's bug"
        raise RuntimeError(msg)

    async with hedged(script, records=records, on_backup=broken) as client:
        for _ in range(30):
            await client.get("/x")  # 1 s each: the primary's latency
        logged = [(r.getMessage(), r.exc_info is not None) for r in caplog.records]
        assert logged == [("hedgeclient: the backup hook (on_backup) failed; no backup", True)]
        await anyio.sleep(60.0)
        await client.get("/x")
    assert [(r.getMessage(), r.exc_info is not None) for r in caplog.records][1:] == [
        (
            "hedgeclient: the backup hook (on_backup) failed; no backup (29 more failure(s) "
            "of client 'default' not logged)",
            True,
        )
    ]
    assert [r.suppressed for r in records] == ["hook_error"] * 31


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda: Route(path="/x", delay=2.0, max_delay=1.0),
            "`Route(path='/x').max_delay` must be >= `Route(path='/x').delay`, got 1.0 < 2.0",
        ),
        (
            lambda: Route(
                path="/x", delay=AdaptiveDelay(min_delay=0.5, initial_delay=0.5), max_delay=0.2
            ),
            "`Route(path='/x').max_delay` must be >= `Route(path='/x').delay.min_delay`, "
            "got 0.2 < 0.5",
        ),
        (
            lambda: HedgePolicy(delay=2.0, max_delay=1.0),
            "`max_delay` must be >= `delay`, got 1.0 < 2.0",
        ),
    ],
)
def test_a_delay_above_its_own_max_delay_is_refused(build: Any, message: str) -> None:
    """A delay that can never be below ``max_delay`` would turn hedging off (every
    backup ``cutoff``): refused when built, naming both settings and their values."""
    full = f"{message} (above `max_delay` no backup is sent: hedging would be off)"
    with pytest.raises(ValueError, match=f"^{re.escape(full)}$"):
        build()


@pytest.mark.parametrize(
    ("kwargs", "route", "message"),
    [
        (
            {},
            Route(max_delay=0),
            "`Route().max_delay` must be >= `HedgedTransport.delay.min_delay`, got 0.0 < 0.001",
        ),
        (
            {"delay": 0.030},
            Route(path="/x", max_delay=0.010),
            "`Route(path='/x').max_delay` must be >= `HedgedTransport.delay`, got 0.01 < 0.03",
        ),
        (
            {"delay": 0.030},
            Route(name="q", quantile=0.9, max_delay=0.0005),
            "`Route(name='q').max_delay` must be >= `AdaptiveDelay().min_delay`, "
            "got 0.0005 < 0.001",
        ),
    ],
)
def test_a_route_max_delay_below_the_transports_delay_is_refused_at_construction(
    kwargs: dict[str, Any], route: Route, message: str
) -> None:
    """Merged with the transport's delay, the route's ``max_delay`` leaves no delay at
    which a backup may go: refused when the transport is built, naming the route."""
    full = f"{message} (above `max_delay` no backup is sent: hedging would be off)"
    with pytest.raises(ValueError, match=f"^{re.escape(full)}$"):
        HedgedTransport(routes=[route], metrics=False, **kwargs)


async def test_a_request_max_delay_below_its_routes_delay_is_refused_before_sending() -> None:
    """A request's ``max_delay`` below the transport's fixed 0.030 s delay: refused
    before anything is sent, naming the request's key and the delay."""
    script = slow_primary()
    message = (
        "`extensions['hedge']['max_delay']` must be >= the route's delay, got 0.01 < 0.03 "
        "(above `max_delay` no backup is sent: hedging would be off)"
    )
    async with hedged(script) as client:
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            await client.get("/x", extensions={"hedge": {"max_delay": 0.010}})
        response = await client.get("/x", extensions={"hedge": {"max_delay": 0.030}})
    assert response.extensions["hedge"].attempts == 2  # a delay at its bound still hedges
