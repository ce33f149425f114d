"""An attempt's replayed request body: the same bytes, through an iterator that is no
async generator (a loser cancelled mid-send leaves nothing for the collector)."""

from __future__ import annotations

import inspect

import anyio
import httpx
import pytest

from hedgeclient._compat import httpx as _fast
from hedgeclient._replicas.services import parse_replicas
from hedgeclient._wire.send import attempt_request


@pytest.mark.parametrize("content_slot", [True, False], ids=["stored", "read"])
def test_attempt_body_is_the_same_bytes_in_one_chunk(
    monkeypatch: pytest.MonkeyPatch, content_slot: bool
) -> None:
    """Each attempt's request carries the caller's bytes, readable sync and async,
    and its async iterator is a plain object, not an async generator; whether the
    body is stored as httpx stores a read body or read again (httpx internals moved)."""
    assert _fast.FAST_BODY  # the httpx the tests run
    monkeypatch.setattr(_fast, "FAST_BODY", content_slot)
    services = parse_replicas({"http://svc": ["http://a", "http://b"]})
    service = services[("http", "svc", 80)]
    payload = b'{"stream": true}\x00\xff'
    request = httpx.Request("POST", "http://svc/v1/chat/completions", content=payload)
    attempt = attempt_request(
        request, service, "http://b", 2, payload, attempt_header="Hedge-Attempt",
        preserve_host=True,
    )  # fmt: skip
    assert attempt.content == payload
    assert attempt.headers["content-length"] == str(len(payload))
    assert list(attempt.stream) == [payload]  # type: ignore[arg-type]
    iterator = attempt.stream.__aiter__()  # type: ignore[union-attr]
    assert not inspect.isasyncgen(iterator)

    async def chunks() -> list[bytes]:
        return [chunk async for chunk in attempt.stream]  # type: ignore[union-attr]

    assert anyio.run(chunks) == [payload]
    assert attempt.read() == payload
    assert anyio.run(attempt.aread) == payload
