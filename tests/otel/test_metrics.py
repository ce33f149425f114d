"""OpenTelemetry metrics: names, units and attributes checked against the semantic
conventions package (v1.44.0, ``opentelemetry-semantic-conventions`` 0.66b*), and
hedgeclient's own instruments mirroring the Prometheus series from the same records.

Hand-built records go to both hooks (the Prometheus one and the OpenTelemetry one), as
``tests/instrumentation/test_prometheus.py`` does; one end-to-end request checks the
SDK's exemplars.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from opentelemetry.semconv.attributes import (
    error_attributes,
    http_attributes,
    server_attributes,
    url_attributes,
)
from opentelemetry.semconv.metrics import http_metrics
from opentelemetry.semconv.schemas import Schemas
from prometheus_client import CollectorRegistry

from hedgeclient import AttemptRecord, HedgedTransport, RequestRecord
from hedgeclient.instrumentation import PrometheusMetrics, _otel_names
from hedgeclient.instrumentation._otel_metrics import OtelMetricsHook
from hedgeclient.testing import FakeService

A, B = "http://10.0.0.7:8080", "http://10.0.0.8:8080"
CLIENT, ROUTE = "catalog", "GET http://catalog"

# The attributes the conventions list for http.client.request.duration
# (docs/http/http-metrics.md, "Metric: http.client.request.duration").
SEMCONV_DURATION_ATTRIBUTES = {
    "http.request.method",
    "server.address",
    "server.port",
    "error.type",
    "http.response.status_code",
    "network.protocol.name",
    "network.protocol.version",
    "url.scheme",
    "url.template",
    "user_agent.synthetic.type",
}
# The bucket boundaries the conventions advise for it (same document), in seconds.
SEMCONV_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10]

# Prometheus family -> OpenTelemetry instrument; Prometheus label -> attribute.
MIRRORED = {
    "hedgeclient_requests": "hedgeclient.requests",
    "hedgeclient_attempts": "hedgeclient.attempts",
    "hedgeclient_hedges": "hedgeclient.hedges",
    "hedgeclient_hedge_wins": "hedgeclient.hedge_wins",
    "hedgeclient_hedges_suppressed": "hedgeclient.hedges_suppressed",
    "hedgeclient_cancelled_attempts": "hedgeclient.cancelled_attempts",
    "hedgeclient_lost_attempts": "hedgeclient.lost_attempts",
    "hedgeclient_unsent_attempts": "hedgeclient.unsent_attempts",
    "hedgeclient_request_duration_seconds": "hedgeclient.request.duration",
    "hedgeclient_attempt_duration_seconds": "hedgeclient.attempt.duration",
}
LABELS = {
    "client": "hedgeclient.client",
    "route": "hedgeclient.route",
    "outcome": "hedgeclient.outcome",
    "kind": "hedgeclient.attempt.role",
    "replica": "hedgeclient.replica",
    "reason": "hedgeclient.suppress_reason",
}


def record(*attempts: AttemptRecord, **fields: Any) -> RequestRecord:
    """A request record of client ``catalog``, route ``GET http://catalog``."""
    base: dict[str, Any] = {
        "client": CLIENT,
        "route": ROUTE,
        "outcome": "ok",
        "duration": 0.0415,
        "delay": 0.030,
        "attempts": attempts,
        "suppressed": None,
        "method": "GET",
        "origin": "http://catalog",
    }
    base.update(fields)
    return RequestRecord(**base)


def hedged_records() -> list[RequestRecord]:
    """A mix: a backup that won over a cancelled primary, a failed primary (503) and a
    lost backup, a suppressed backup, an error, and a connect failure."""
    return [
        record(
            AttemptRecord("primary", A, 0.0, 0.0415, "cancelled", None, censored=True),
            AttemptRecord("backup", B, 0.030, 0.0115, "won", 200, False, trigger="delay"),
        ),
        record(
            AttemptRecord("primary", A, 0.0, 0.004, "failed", 503, False),
            AttemptRecord("backup", B, 0.004, 0.012, "won", 200, False, trigger="failure"),
        ),
        record(
            AttemptRecord("primary", A, 0.0, 0.050, "won", 200, False),
            AttemptRecord("backup", B, 0.030, 0.021, "lost", 200, False, trigger="delay"),
        ),
        record(AttemptRecord("primary", A, 0.0, 0.090, "won", 200, False), suppressed="budget"),
        record(
            AttemptRecord(
                "primary", A, 0.0, 0.001, "failed", None, False, error_type="ConnectError"
            ),
            outcome="error",
            delay=None,
        ),
    ]


def unsent_record() -> RequestRecord:
    """A primary that won in 50 ms, and a backup that never reached the wire."""
    return record(
        AttemptRecord("primary", A, 0.0, 0.050, "won", 200, False),
        AttemptRecord("backup", B, 0.030, 0.020, "unsent", None, True, trigger="delay"),
    )


def test_names_and_schema_are_the_semantic_conventions() -> None:
    """Our HTTP names equal the semantic-conventions package's, and our schema URL is one
    it knows (the pinned version)."""
    assert _otel_names.HTTP_CLIENT_REQUEST_DURATION == http_metrics.HTTP_CLIENT_REQUEST_DURATION
    assert _otel_names.HTTP_REQUEST_METHOD == http_attributes.HTTP_REQUEST_METHOD
    assert _otel_names.HTTP_REQUEST_METHOD_ORIGINAL == http_attributes.HTTP_REQUEST_METHOD_ORIGINAL
    assert _otel_names.HTTP_RESPONSE_STATUS_CODE == http_attributes.HTTP_RESPONSE_STATUS_CODE
    assert _otel_names.HTTP_REQUEST_RESEND_COUNT == http_attributes.HTTP_REQUEST_RESEND_COUNT
    assert _otel_names.SERVER_ADDRESS == server_attributes.SERVER_ADDRESS
    assert _otel_names.SERVER_PORT == server_attributes.SERVER_PORT
    assert _otel_names.URL_FULL == url_attributes.URL_FULL
    assert _otel_names.ERROR_TYPE == error_attributes.ERROR_TYPE
    assert Schemas.V1_44_0.value == _otel_names.SCHEMA_URL
    assert list(_otel_names.HTTP_DURATION_BUCKETS) == SEMCONV_BUCKETS


def test_http_client_request_duration_per_attempt(sdk: Any) -> None:
    """``http.client.request.duration`` is in seconds with the advised buckets, one point
    per attempt that had headers or failed (never a cancelled one), semconv attributes
    only, with error.type on failures."""
    hook = OtelMetricsHook(sdk.meter_provider, 1000, 100)
    for each in hedged_records():
        hook(each)
    metric = sdk.metrics()["http.client.request.duration"]
    assert metric.unit == "s"
    points = {tuple(sorted(p.attributes.items())): p for p in metric.data.data_points}
    for point in points.values():
        assert list(point.explicit_bounds) == SEMCONV_BUCKETS
        assert set(point.attributes) <= SEMCONV_DURATION_ATTRIBUTES
    base = {"http.request.method": "GET", "server.address": "catalog", "server.port": 80}

    def count(**extra: Any) -> int:
        return points[tuple(sorted({**base, **extra}.items()))].count

    assert count(**{"http.response.status_code": 200}) == 5  # 3 winners, 1 lost, 1 alone
    assert count(**{"http.response.status_code": 503, "error.type": "503"}) == 1
    assert count(**{"error.type": "ConnectError"}) == 1
    assert len(points) == 3


def test_own_instruments_mirror_the_prometheus_series(sdk: Any) -> None:
    """The same records through the Prometheus hook and the OpenTelemetry hook give the
    same counts and sums, series for series, with the same (renamed) attributes."""
    registry = CollectorRegistry()
    prometheus = PrometheusMetrics(registry).bind(_Source())
    otel = OtelMetricsHook(sdk.meter_provider, 1000, 100)
    for each in [*hedged_records(), unsent_record()]:
        prometheus(each)
        otel(each)
    ours = sdk.metrics()
    expected: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in registry.collect():
        if family.name not in MIRRORED:
            continue
        for sample in family.samples:
            suffix = sample.name[len(family.name) :]
            if suffix not in ("_total", "_count", "_sum") or sample.value == 0:
                continue
            attributes = tuple(sorted((LABELS[k], v) for k, v in sample.labels.items()))
            expected[(MIRRORED[family.name] + suffix, attributes)] = sample.value
    got: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for name in MIRRORED.values():
        for point in ours[name].data.data_points:
            attributes = tuple(sorted(point.attributes.items()))
            if hasattr(point, "count"):
                got[(name + "_count", attributes)] = point.count
                got[(name + "_sum", attributes)] = pytest.approx(point.sum)
            else:
                got[(name + "_total", attributes)] = point.value
    assert got == expected
    assert len(expected) == 16  # every family has a series: the comparison is not vacuous
    units = {name: ours[name].unit for name in MIRRORED.values()}
    assert units["hedgeclient.request.duration"] == units["hedgeclient.attempt.duration"] == "s"
    assert units["hedgeclient.requests"] == "{request}"
    assert units["hedgeclient.attempts"] == "{attempt}"


def test_hedge_delay_histogram(sdk: Any) -> None:
    """``hedgeclient.hedge_delay`` (seconds) observes the delay of each hedgeable request."""
    hook = OtelMetricsHook(sdk.meter_provider, 1000, 100)
    for each in hedged_records():
        hook(each)
    (point,) = sdk.points("hedgeclient.hedge_delay")
    assert sdk.metrics()["hedgeclient.hedge_delay"].unit == "s"
    assert point.count == 4  # the error record had no delay
    assert point.sum == pytest.approx(4 * 0.030)
    assert dict(point.attributes) == {"hedgeclient.client": CLIENT, "hedgeclient.route": ROUTE}


def test_route_and_replica_caps_fold_into_other(sdk: Any) -> None:
    """Beyond ``max_routes`` routes and ``max_replicas`` replicas per client, attributes
    read ``other``, as the Prometheus labels do."""
    hook = OtelMetricsHook(sdk.meter_provider, 1, 1)
    hook(record(AttemptRecord("primary", A, 0.0, 0.01, "won", 200, False)))
    hook(record(AttemptRecord("primary", B, 0.0, 0.01, "won", 200, False), route="GET /b"))
    routes = {dict(p.attributes)["hedgeclient.route"] for p in sdk.points("hedgeclient.requests")}
    assert routes == {ROUTE, "other"}
    replicas = {
        dict(p.attributes)["hedgeclient.replica"] for p in sdk.points("hedgeclient.attempts")
    }
    assert replicas == {A, "other"}


def test_hedge_delay_routes_are_capped_like_the_counters(sdk: Any) -> None:
    """``hedgeclient.hedge_delay`` is observed per request, not a gauge of every route
    ever seen: beyond ``max_routes`` routes its points read ``other`` (10 routes, 2 kept)."""
    hook = OtelMetricsHook(sdk.meter_provider, 2, 100)
    for i in range(10):
        hook(record(AttemptRecord("primary", A, 0.0, 0.01, "won", 200, False), route=f"GET /{i}"))
    points = {
        dict(p.attributes)["hedgeclient.route"]: p.count
        for p in sdk.points("hedgeclient.hedge_delay")
    }
    assert points == {"GET /0": 1, "GET /1": 1, "other": 8}


def test_no_meter_provider_records_nothing() -> None:
    """Without a configured meter provider (the API's proxy) the hook does nothing."""
    hook = OtelMetricsHook(None, 1000, 100)
    assert hook.instruments() is None
    hook(hedged_records()[0])  # returns at once, no error


@pytest.mark.anyio
@pytest.mark.slow
async def test_sdk_exemplars_name_the_request_trace(sdk: Any, ids: Any) -> None:
    """The SDK's own exemplars on hedgeclient's histograms carry the request span's trace."""
    async with FakeService(replicas=2) as svc:
        transport = HedgedTransport(
            replicas={"http://catalog": svc.origins}, metrics=False, opentelemetry=sdk.otel()
        )
        async with httpx.AsyncClient(transport=transport, base_url="http://catalog") as client:
            await client.get("/item")
    request, _ = sdk.tree()
    (point,) = sdk.points("hedgeclient.request.duration")
    assert [format(e.trace_id, "032x") for e in point.exemplars] == [ids.trace_hex(request)]
    assert [format(e.span_id, "016x") for e in point.exemplars] == [ids.hexid(request)]


def test_unsent_backup_is_not_a_hedge(sdk: Any) -> None:
    """A backup that never reached the wire (outcome ``unsent``, issue 23, BH-54) is one
    ``hedgeclient.unsent_attempts``, by role, and neither a hedge nor an attempt sent."""
    hook = OtelMetricsHook(sdk.meter_provider, 1000, 100)
    hook(unsent_record())
    (point,) = sdk.points("hedgeclient.unsent_attempts")
    assert point.value == 1
    assert dict(point.attributes) == {
        "hedgeclient.client": CLIENT,
        "hedgeclient.route": ROUTE,
        "hedgeclient.attempt.role": "backup",
    }
    assert sdk.metrics()["hedgeclient.unsent_attempts"].unit == "{attempt}"
    assert "hedgeclient.hedges" not in sdk.metrics()
    sent = sdk.points("hedgeclient.attempts")
    assert [dict(p.attributes)["hedgeclient.attempt.role"] for p in sent] == ["primary"]
    (duration,) = sdk.points("http.client.request.duration")  # the primary's only
    assert duration.count == 1


class _Source:
    """A minimal MetricsSource for binding the Prometheus hook."""

    name = CLIENT
    delay_policy = None

    class budget:
        tokens = 10.0


@pytest.mark.anyio
async def test_two_transports_of_one_name_both_record_their_delays(sdk: Any) -> None:
    """Two transports of one name (two services, ``name="default"``): the OpenTelemetry
    delay and loop-lag histograms are observed by each request as it ends, not read
    from the transport bound last, so both routes have their points."""
    clients = []
    for service, seconds in (("http://catalog", 0.030), ("http://prices", 0.050)):
        transport = HedgedTransport(
            httpx.MockTransport(lambda request: httpx.Response(200)),
            replicas={service: [A, B]},
            delay=seconds,
            metrics=False,
            opentelemetry=sdk.otel(),
        )
        clients.append(httpx.AsyncClient(transport=transport, base_url=service))
    for client in clients:
        for _ in range(2):
            (await client.get("/x")).raise_for_status()
        await client.aclose()
    delays = {
        dict(p.attributes)["hedgeclient.route"]: (p.count, p.sum)
        for p in sdk.points("hedgeclient.hedge_delay")
        if dict(p.attributes)["hedgeclient.client"] == "default"
    }
    assert delays == {"GET http://catalog": (2, 0.060), "GET http://prices": (2, 0.100)}
    lags = {
        dict(p.attributes)["hedgeclient.route"]: p.count
        for p in sdk.points("hedgeclient.event_loop.lag")
    }
    assert lags == {"GET http://catalog": 2, "GET http://prices": 2}
