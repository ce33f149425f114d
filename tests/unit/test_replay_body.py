"""An attempt's replayed request body: the same bytes, through an iterator that is no
async generator (a loser cancelled mid-send leaves nothing for the collector)."""

from __future__ import annotations

import inspect

import anyio
import httpx

from hedgeclient._routing import attempt_request, parse_replicas


def test_attempt_body_is_the_same_bytes_in_one_chunk() -> None:
    """Each attempt's request carries the caller's bytes, readable sync and async,
    and its async iterator is a plain object, not an async generator."""
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
