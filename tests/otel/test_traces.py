"""OpenTelemetry spans of hedged requests, with the real SDK, over real sockets.

The replicas are ``FakeService`` on 127.0.0.1 (real clock): the tests assert the span
tree, attributes, statuses and events, and the ``traceparent`` each replica received;
never timings. Which attempt wins is made certain by margins: the slow replica takes
2 s against a hedge delay of 50 ms and a fast replica's few milliseconds.
"""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest
from opentelemetry.trace import SpanKind, StatusCode

from hedgeclient import HedgeBudget, HedgedTransport
from hedgeclient.testing import Down, ErrorStatus, FakeService, FirstReplica, ReplicaConfig

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SERVICE = "http://catalog"
SLOW = ReplicaConfig(latency=2.0)


def transport(svc: FakeService, sdk: Any, **options: Any) -> HedgedTransport:
    """A transport over ``svc`` traced to ``sdk``: primaries to replica 0, delay 50 ms."""
    options.setdefault("delay", 0.050)
    return HedgedTransport(
        replicas={SERVICE: svc.origins},
        selector=FirstReplica(),
        budget=HedgeBudget(ratio=1.0, burst=1000, min_per_second=0),
        metrics=False,
        opentelemetry=sdk.otel(),
        name="otel",
        **options,
    )


def http_attributes() -> dict[str, Any]:
    """The HTTP attributes every span of a GET to the logical service carries."""
    return {"http.request.method": "GET", "server.address": "catalog", "server.port": 80}


def traceparent(visit: Any) -> tuple[str, str, int]:
    """(trace id, span id, flags) of the ``traceparent`` a replica received."""
    version, trace_id, span_id, flags = visit.traceparent.split("-")
    assert version == "00"
    return trace_id, span_id, int(flags, 16)


async def test_backup_wins_one_request_span_two_attempt_spans(sdk: Any, ids: Any) -> None:
    """The backup wins: the request span (child of the caller's) holds two CLIENT spans with
    exact attributes; the loser is UNSET with its event; each replica got its own span."""
    async with (
        FakeService(replicas=2, replica_overrides={0: SLOW}) as svc,
        httpx.AsyncClient(transport=transport(svc, sdk), base_url=SERVICE) as client,
    ):
        with sdk.tracer_provider.get_tracer("app").start_as_current_span("handler") as app:
            response = await client.get("/item", headers={"x-request-id": "r1"})
        visits = svc.stats().visits("r1")
        o0, o1 = svc.origins
    assert response.extensions["hedge"].attempt == 2
    request, (primary, backup) = sdk.tree()
    assert request.name == "hedged GET"
    assert request.kind == SpanKind.INTERNAL
    assert ids.parent_hex(request) == format(app.get_span_context().span_id, "016x")
    assert request.status.status_code == StatusCode.OK
    assert ids.attrs(request) == {
        **http_attributes(),
        "url.full": "http://catalog/item",
        "hedgeclient.client": "otel",
        "hedgeclient.route": "GET http://catalog",
        "hedgeclient.hedge_delay": 0.050,
        "hedgeclient.attempts": 2,
        "hedgeclient.winner": 2,
        "http.response.status_code": 200,
    }
    for span in (primary, backup):
        assert span.name == "GET"
        assert span.kind == SpanKind.CLIENT
        assert ids.parent_hex(span) == ids.hexid(request)
        assert ids.trace_hex(span) == ids.trace_hex(request)
        assert span.status.status_code == StatusCode.UNSET
    assert ids.attrs(primary) == {
        **http_attributes(),
        "url.full": f"{o0}/item",
        "hedgeclient.attempt.role": "primary",
        "hedgeclient.replica": o0,
        "hedgeclient.attempt.outcome": "cancelled",
    }
    assert [(e.name, dict(e.attributes or {})) for e in primary.events] == [
        (
            "hedgeclient.cancelled",
            {
                "hedgeclient.cancel_reason": "another_attempt_won",
                "hedgeclient.had_response": False,
                "hedgeclient.winner": 2,
            },
        )
    ]
    assert ids.attrs(backup) == {
        **http_attributes(),
        "url.full": f"{o1}/item",
        "hedgeclient.attempt.role": "backup",
        "hedgeclient.attempt.trigger": "delay",
        "http.request.resend_count": 1,
        "hedgeclient.replica": o1,
        "http.response.status_code": 200,
        "hedgeclient.attempt.outcome": "won",
    }
    assert list(backup.events) == []
    # Each replica's traceparent names the attempt span that reached it, sampled.
    received = {v.replica: traceparent(v) for v in visits}
    assert received[0][:2] == (ids.trace_hex(primary), ids.hexid(primary))
    assert received[1][:2] == (ids.trace_hex(backup), ids.hexid(backup))
    assert received[0][2] & 1 == received[1][2] & 1 == 1
    # The loser starts first, the winner a hedge delay later; both within the request.
    assert request.start_time <= primary.start_time < backup.start_time
    assert max(primary.end_time, backup.end_time) <= request.end_time


async def test_primary_wins_before_the_delay_one_attempt_span(sdk: Any, ids: Any) -> None:
    """A primary that answers before the delay: one CLIENT span, no resend count, no event."""
    async with FakeService(replicas=2) as svc:
        options = {"delay": 1.0}
        async with httpx.AsyncClient(
            transport=transport(svc, sdk, **options), base_url=SERVICE
        ) as client:
            response = await client.get("/item", headers={"x-request-id": "r1"})
        (visit,) = svc.stats().visits("r1")
    assert response.status_code == 200
    request, (primary,) = sdk.tree()
    assert request.parent is None
    assert request.status.status_code == StatusCode.OK
    assert ids.attrs(request)["hedgeclient.attempts"] == 1
    assert ids.attrs(request)["hedgeclient.winner"] == 1
    attributes = ids.attrs(primary)
    assert attributes["hedgeclient.attempt.outcome"] == "won"
    assert attributes["hedgeclient.attempt.role"] == "primary"
    assert "http.request.resend_count" not in attributes
    assert "hedgeclient.attempt.trigger" not in attributes
    assert list(primary.events) == []
    assert primary.status.status_code == StatusCode.UNSET
    assert traceparent(visit)[:2] == (ids.trace_hex(primary), ids.hexid(primary))


async def test_failed_primary_is_error_backup_wins_request_ok(sdk: Any, ids: Any) -> None:
    """A 503 primary is ERROR with error.type 503; the backup sent for the failure wins; the
    request span is OK."""
    failing = ReplicaConfig(fault=ErrorStatus(503))
    async with (
        FakeService(replicas=2, replica_overrides={0: failing}) as svc,
        httpx.AsyncClient(transport=transport(svc, sdk, delay=1.0), base_url=SERVICE) as client,
    ):
        response = await client.get("/item")
    assert response.status_code == 200
    request, (primary, backup) = sdk.tree()
    assert primary.status.status_code == StatusCode.ERROR
    assert ids.attrs(primary)["error.type"] == "503"
    assert ids.attrs(primary)["http.response.status_code"] == 503
    assert ids.attrs(primary)["hedgeclient.attempt.outcome"] == "failed"
    assert list(primary.events) == []
    assert backup.status.status_code == StatusCode.UNSET
    assert ids.attrs(backup)["hedgeclient.attempt.trigger"] == "failure"
    assert ids.attrs(backup)["hedgeclient.attempt.outcome"] == "won"
    assert "error.type" not in ids.attrs(backup)
    assert request.status.status_code == StatusCode.OK
    assert "error.type" not in ids.attrs(request)


async def test_refused_primary_is_error_with_the_exception_type(sdk: Any, ids: Any) -> None:
    """A primary refused at connect is ERROR with error.type ConnectError and the exception
    event; the backup wins and the request span is OK."""
    async with (
        FakeService(replicas=2, replica_overrides={0: ReplicaConfig(fault=Down())}) as svc,
        httpx.AsyncClient(transport=transport(svc, sdk, delay=1.0), base_url=SERVICE) as client,
    ):
        response = await client.get("/item")
    assert response.status_code == 200
    request, (primary, backup) = sdk.tree()
    assert primary.status.status_code == StatusCode.ERROR
    assert ids.attrs(primary)["error.type"] == "ConnectError"
    assert "http.response.status_code" not in ids.attrs(primary)
    assert [e.name for e in primary.events] == ["exception"]
    assert ids.attrs(backup)["hedgeclient.attempt.outcome"] == "won"
    assert request.status.status_code == StatusCode.OK


async def test_every_attempt_fails_request_span_is_error(sdk: Any, ids: Any) -> None:
    """Both replicas refuse: the caller gets ConnectError, and the request span is ERROR
    with error.type ConnectError, as is each attempt."""
    async with (
        FakeService(replicas=2, fault=Down()) as svc,
        httpx.AsyncClient(transport=transport(svc, sdk, delay=1.0), base_url=SERVICE) as client,
    ):
        with pytest.raises(httpx.ConnectError):
            await client.get("/item")
    request, attempts = sdk.tree()
    assert len(attempts) == 2
    assert request.status.status_code == StatusCode.ERROR
    assert ids.attrs(request)["error.type"] == "ConnectError"
    assert "hedgeclient.winner" not in ids.attrs(request)
    assert [ids.attrs(a)["error.type"] for a in attempts] == ["ConnectError", "ConnectError"]


async def test_opted_out_request_names_the_suppressed_backup(sdk: Any, ids: Any) -> None:
    """A slow request with hedging turned off: one attempt, and the request span says why
    the due backup was not sent."""
    slow = ReplicaConfig(latency=0.2)
    async with (
        FakeService(replicas=2, replica_overrides={0: slow}) as svc,
        httpx.AsyncClient(transport=transport(svc, sdk), base_url=SERVICE) as client,
    ):
        response = await client.get("/item", extensions={"hedge": False})
    assert response.status_code == 200
    request, (primary,) = sdk.tree()
    assert ids.attrs(request)["hedgeclient.suppress_reason"] == "opted_out"
    assert "hedgeclient.hedge_delay" not in ids.attrs(request)
    assert ids.attrs(primary)["hedgeclient.attempt.outcome"] == "won"


async def test_caller_cancels_spans_end_unset_with_the_reason(sdk: Any, ids: Any) -> None:
    """The caller gives up: its attempts end UNSET with the event caller_cancelled, and the
    request span too."""
    async with (
        FakeService(replicas=2, latency=2.0) as svc,
        httpx.AsyncClient(transport=transport(svc, sdk), base_url=SERVICE) as client,
    ):
        # Cancelled once both attempts are on the wire (the backup goes at 50 ms; not
        # at a fixed instant, which a loaded machine could reach before it), long
        # before their 2 s.
        with anyio.CancelScope() as scope:
            written = 0

            async def trace(name: str, info: dict[str, Any]) -> None:
                nonlocal written
                if name == "http11.send_request_headers.complete":
                    written += 1
                    if written == 2:
                        scope.cancel()

            await client.get("/item", extensions={"trace": trace})
    request, attempts = sdk.tree()
    assert len(attempts) == 2
    for span in (request, *attempts):
        assert span.status.status_code == StatusCode.UNSET
        assert [
            (e.name, dict(e.attributes or {})["hedgeclient.cancel_reason"]) for e in span.events
        ] == [("hedgeclient.cancelled", "caller_cancelled")]
    assert ids.attrs(request)["hedgeclient.cancelled_by_caller"] is True
