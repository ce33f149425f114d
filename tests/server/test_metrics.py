"""The middleware's Prometheus metrics: names, labels and values after real requests
through the ASGI interface; middlewares sharing a name; a counter never goes back."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

from prometheus_client import CollectorRegistry

from hedgeclient.server import HedgeMiddleware


async def _ok(scope: dict[str, Any], receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def _serve(app: HedgeMiddleware, *attempts: str | None) -> None:
    """One request through ``app`` per attempt header value (None: no header)."""

    async def main() -> None:
        for attempt in attempts:
            headers = [] if attempt is None else [(b"hedge-attempt", attempt.encode())]
            scope = {"type": "http", "method": "GET", "path": "/", "headers": headers}
            given = False

            async def receive() -> dict[str, Any]:
                nonlocal given
                if given:
                    await asyncio.Event().wait()  # a client that stays
                given = True
                return {"type": "http.request", "body": b"", "more_body": False}

            async def send(message: dict[str, Any]) -> None:
                pass

            await app(scope, receive, send)

    asyncio.run(main())


def _requests(registry: CollectorRegistry, kind: str, server: str = "default") -> float | None:
    labels = {"server": server, "kind": kind}
    return registry.get_sample_value("hedgeclient_server_requests_total", labels)


def test_requests_are_counted_by_kind() -> None:
    """Primaries, backups and unmarked requests each in their series of
    ``hedgeclient_server_requests_total``, labelled with the middleware's name."""
    registry = CollectorRegistry()
    app = HedgeMiddleware(_ok, metrics=registry, name="api")
    _serve(app, "1", "1", "2", None, "3")
    assert _requests(registry, "primary", "api") == 2.0
    assert _requests(registry, "backup", "api") == 2.0
    assert _requests(registry, "unmarked", "api") == 1.0


def test_a_counter_never_goes_back_when_a_middleware_is_collected() -> None:
    """Two middlewares under one name are summed; when one is garbage-collected, its
    counts stay in the sum, and a new one under that name adds to it."""
    registry = CollectorRegistry()
    first = HedgeMiddleware(_ok, metrics=registry)
    second = HedgeMiddleware(_ok, metrics=registry)
    _serve(first, "1", "1", "1")
    _serve(second, "1", "1", "1", "1", "1")
    assert _requests(registry, "primary") == 8.0
    del first
    gc.collect()
    assert _requests(registry, "primary") == 8.0
    del second
    gc.collect()
    assert _requests(registry, "primary") == 8.0
    third = HedgeMiddleware(_ok, metrics=registry)
    _serve(third, "1")
    assert _requests(registry, "primary") == 9.0


def test_queue_gauges_only_with_an_admission_queue() -> None:
    """``running`` and ``queued`` describe the admission queue: a middleware without
    one exports no series for them, rather than a 0 that reads as idle."""
    registry = CollectorRegistry()
    HedgeMiddleware(_ok, metrics=registry, name="plain")
    queued = HedgeMiddleware(_ok, metrics=registry, name="queued", max_concurrency=2)
    assert registry.get_sample_value("hedgeclient_server_running", {"server": "plain"}) is None
    assert registry.get_sample_value("hedgeclient_server_running", {"server": "queued"}) == 0.0
    assert registry.get_sample_value("hedgeclient_server_queued", {"server": "queued"}) == 0.0
    assert queued.admits
