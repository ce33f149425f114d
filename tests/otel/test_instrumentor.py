"""hedgeclient's spans beside ``opentelemetry-instrumentation-httpx``: the combined trees
that ``docs/tracing.md`` documents, over real sockets.

``HTTPXClientInstrumentor().instrument()`` wraps ``httpx.AsyncHTTPTransport`` for the
whole process, so it sees every attempt a ``HedgedTransport`` sends through its inner
transport: hedgeclient suppresses HTTP instrumentation under its attempt spans, so no
attempt is traced twice and the instrumentor's duration metric does not count them.
``instrument_client(client)`` wraps the client's own transport, the ``HedgedTransport``:
its span is the parent of hedgeclient's request span.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
from opentelemetry.trace import SpanKind, StatusCode

from hedgeclient import HedgeBudget, HedgedTransport
from hedgeclient.testing import FakeService, FirstReplica, ReplicaConfig

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SERVICE = "http://catalog"
HTTPX_SCOPE = "opentelemetry.instrumentation.httpx"


@pytest.fixture
def instrumented(sdk: Any) -> Iterator[None]:
    """The httpx instrumentor on for the process (to ``sdk``'s providers), then off."""
    instrumentor = HTTPXClientInstrumentor()
    instrumentor.instrument(tracer_provider=sdk.tracer_provider, meter_provider=sdk.meter_provider)
    yield
    instrumentor.uninstrument()


def hedged(svc: FakeService, opentelemetry: Any) -> HedgedTransport:
    """A transport over ``svc``: primaries to the slow replica 0, backups after 50 ms."""
    return HedgedTransport(
        replicas={SERVICE: svc.origins},
        delay=0.050,
        selector=FirstReplica(),
        budget=HedgeBudget(ratio=1.0, burst=1000, min_per_second=0),
        metrics=False,
        opentelemetry=opentelemetry,
    )


@pytest.mark.usefixtures("instrumented")
async def test_global_instrumentor_each_attempt_traced_once(sdk: Any, ids: Any) -> None:
    """With the instrumentor on for the process: the hedged request is hedgeclient's tree
    alone (the instrumentor traces none of its attempts, nor counts them), while a plain
    client's request is still the instrumentor's span."""
    slow = ReplicaConfig(latency=2.0)
    async with (
        FakeService(replicas=2, replica_overrides={0: slow}) as svc,
        httpx.AsyncClient(transport=hedged(svc, sdk.otel()), base_url=SERVICE) as client,
    ):
        response = await client.get("/item", headers={"x-request-id": "r1"})
        async with httpx.AsyncClient() as plain:
            await plain.get(svc.origins[1] + "/plain")
        visits = svc.stats().visits("r1")
    assert response.extensions["hedge"].attempt == 2
    request, (primary, backup) = sdk.tree()
    assert {ids.parent_hex(primary), ids.parent_hex(backup)} == {ids.hexid(request)}
    assert primary.status.status_code == StatusCode.UNSET
    (theirs,) = sdk.spans(HTTPX_SCOPE)  # the plain client's request only
    assert theirs.kind == SpanKind.CLIENT
    url = ids.attrs(theirs).get("url.full") or ids.attrs(theirs)["http.url"]  # new or old names
    assert url.endswith("/plain")
    assert theirs.parent is None
    # The replicas received our attempt spans' context, not the instrumentor's.
    assert sorted(v.traceparent.split("-")[2] for v in visits) == sorted(
        [ids.hexid(primary), ids.hexid(backup)]
    )
    # The instrumentor's duration metric (stable or old name, whichever its
    # OTEL_SEMCONV_STABILITY_OPT_IN selects) counts the plain request only.
    names = ("http.client.request.duration", "http.client.duration")
    assert sum(p.count for name in names for p in sdk.points(name, HTTPX_SCOPE)) == 1
    assert sum(p.count for p in sdk.points("http.client.request.duration")) == 1  # the winner


async def test_instrument_client_wraps_the_hedged_request(sdk: Any, ids: Any) -> None:
    """``instrument_client`` on a hedged client: the instrumentor's CLIENT span is the
    parent of hedgeclient's request span; each attempt is still one span of ours."""
    slow = ReplicaConfig(latency=2.0)
    async with (
        FakeService(replicas=2, replica_overrides={0: slow}) as svc,
        httpx.AsyncClient(transport=hedged(svc, sdk.otel()), base_url=SERVICE) as client,
    ):
        HTTPXClientInstrumentor.instrument_client(client, tracer_provider=sdk.tracer_provider)
        try:
            await client.get("/item")
        finally:
            HTTPXClientInstrumentor.uninstrument_client(client)
    request, attempts = sdk.tree()
    (outer,) = sdk.spans(HTTPX_SCOPE)
    assert outer.kind == SpanKind.CLIENT
    assert ids.parent_hex(request) == ids.hexid(outer)
    assert [ids.parent_hex(a) for a in attempts] == [ids.hexid(request)] * 2
    assert outer.status.status_code == StatusCode.UNSET


@pytest.mark.usefixtures("instrumented")
async def test_instrumentor_alone_traces_attempts_as_siblings(sdk: Any, ids: Any) -> None:
    """With hedgeclient's tracing off, the instrumentor traces each attempt as an unrelated
    sibling: no request span, nothing says which was the backup (what this issue fixes)."""
    slow = ReplicaConfig(latency=2.0)
    async with (
        FakeService(replicas=2, replica_overrides={0: slow}) as svc,
        httpx.AsyncClient(transport=hedged(svc, False), base_url=SERVICE) as client,
    ):
        await client.get("/item")
    assert sdk.spans("hedgeclient") == []
    theirs = sdk.spans(HTTPX_SCOPE)
    assert len(theirs) == 2
    assert [s.parent for s in theirs] == [None, None]
    assert not any(k.startswith("hedgeclient.") for s in theirs for k in ids.attrs(s))
