"""The fake model of ``FakeService``: an OpenAI-compatible ``POST /v1/chat/completions``.

Driven over loopback with plain httpx (the SDK's own tests are in
``tests/integration/test_openai_sdk.py``): the wire format, the latency law as the time
to the first token, the token count, faults, and the accounting of tokens generated for
clients that went away. Outcomes and counts are asserted, never timings, except where a
tolerance is stated with its reason.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import anyio
import httpx
import pytest

from hedgeclient.testing import (
    CloseMidBody,
    ErrorStatus,
    FakeService,
    Generation,
    LogNormal,
    ReplicaConfig,
    Reset,
)

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

PROMPT = {"model": "fake-1", "messages": [{"role": "user", "content": "say three words"}]}


def events(raw: bytes) -> list[Any]:
    """The ``data:`` payloads of a server-sent-event body: JSON objects, or ``"[DONE]"``."""
    payloads = [line[6:] for line in raw.decode().split("\n\n") if line.startswith("data: ")]
    return [p if p == "[DONE]" else json.loads(p) for p in payloads]


def text_of(chunks: list[Any]) -> str:
    """The content of a completion's chunks, in order."""
    return "".join(
        c["choices"][0]["delta"].get("content", "")
        for c in chunks
        if c != "[DONE]" and c["choices"]
    )


async def test_streamed_completion_is_sse_ending_with_done() -> None:
    """``stream: true``: headers, one chunk per token (role on the first), a finish chunk,
    a usage chunk when asked, then ``data: [DONE]``; the text is what the ledger hashed."""
    body = {**PROMPT, "stream": True, "stream_options": {"include_usage": True}}
    generation = Generation(tokens_per_second=1000, tokens=5)
    async with FakeService(replicas=1, latency=0.001, generation=generation) as svc:
        async with httpx.AsyncClient() as client:
            url = f"{svc.origins[0]}/v1/chat/completions"
            response = await client.post(url, json=body, headers={"x-request-id": "s1"})
        stats = svc.stats()
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/event-stream"
    chunks = events(response.content)
    assert chunks[-1] == "[DONE]"
    tokens, finish, usage = chunks[:5], chunks[5], chunks[6]
    assert [c["object"] for c in tokens] == ["chat.completion.chunk"] * 5
    assert len({c["id"] for c in chunks[:-1]}) == 1
    assert tokens[0]["choices"][0]["delta"]["role"] == "assistant"
    assert [c["choices"][0]["finish_reason"] for c in tokens] == [None] * 5
    assert finish["choices"][0] == {
        "index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"
    }  # fmt: skip
    assert usage["choices"] == []
    assert usage["usage"] == {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}
    (visit,) = stats.visits("s1")
    assert (visit.outcome, visit.tokens) == ("completed", 5)
    assert visit.text_sha256 == hashlib.sha256(text_of(chunks).encode()).hexdigest()
    assert (stats.tokens, stats.wasted_tokens, stats.replicas[0].writes) == (5, 0, 0)


async def test_whole_completion_is_json_with_usage() -> None:
    """Without ``stream``: one ``chat.completion`` object; ``max_tokens`` sets the length
    and the finish reason ``length``."""
    async with FakeService(replicas=1, latency=0.001) as svc:
        async with httpx.AsyncClient() as client:
            url = f"{svc.origins[0]}/v1/chat/completions"
            response = await client.post(url, json={**PROMPT, "max_tokens": 3})
        stats = svc.stats()
    assert response.headers["content-type"] == "application/json"
    completion = response.json()
    assert completion["object"] == "chat.completion"
    assert completion["model"] == "fake-1"
    (choice,) = completion["choices"]
    assert choice["finish_reason"] == "length"
    assert len(choice["message"]["content"].split()) == 3
    assert completion["usage"] == {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}
    assert stats.tokens == 3


async def test_text_depends_on_replica_and_prompt() -> None:
    """The same prompt gives the same text on one replica and another text on another."""
    texts = []
    async with FakeService(replicas=2, latency=0.001, seed=3) as svc, httpx.AsyncClient() as client:
        for origin in (svc.origins[0], svc.origins[0], svc.origins[1]):
            response = await client.post(f"{origin}/v1/chat/completions", json=PROMPT)
            texts.append(response.json()["choices"][0]["message"]["content"])
    assert texts[0] == texts[1]
    assert texts[0] != texts[2]


@pytest.mark.parametrize(("slowness", "same"), [("request-owned", True), ("server-owned", False)])
async def test_time_to_first_token_law_owned_by_request_or_server(
    slowness: Any, same: bool
) -> None:
    """Request-owned: one prompt draws the same time to first token on every replica;
    server-owned: each attempt draws afresh."""
    law = LogNormal(median=0.002, sigma=1.0)
    drawn = []
    service = FakeService(replicas=2, latency=law, slowness=slowness, seed=5)
    async with service as svc, httpx.AsyncClient() as client:
        for origin in svc.origins:
            url = f"{origin}/v1/chat/completions"
            response = await client.post(url, json={**PROMPT, "stream": True})
            drawn.append(response.headers["x-latency"])
    assert (drawn[0] == drawn[1]) is same


async def test_tokens_of_a_client_gone_mid_stream_are_wasted() -> None:
    """A client that reads two tokens and leaves: its visit is abandoned, and the tokens
    generated for it (at least the two read) are counted as wasted."""
    generation = Generation(tokens_per_second=20, tokens=50)
    async with FakeService(replicas=1, latency=0.001, generation=generation) as svc:
        async with httpx.AsyncClient() as client:
            url = f"{svc.origins[0]}/v1/chat/completions"
            request = client.build_request(
                "POST", url, json={**PROMPT, "stream": True}, headers={"x-request-id": "w1"}
            )
            response = await client.send(request, stream=True)
            seen = 0
            # Stop by cancelling, not by `break`: the cancellation unwinds httpx's nested
            # async generators, where a `break` leaves them to the garbage collector
            # (a ResourceWarning under trio).
            with anyio.CancelScope() as scope:
                async for line in response.aiter_lines():
                    seen += line.startswith("data: ")
                    if seen == 2:
                        scope.cancel()
            await response.aclose()
        with anyio.fail_after(5.0):  # the disconnect reaches the server in a few ms
            stats = await svc.wait_stats(lambda s: s.replicas[0].abandoned == 1)
    (visit,) = stats.visits("w1")
    assert visit.outcome == "abandoned"
    assert visit.text_sha256 is None
    # Every token read was generated for it, and the generation stopped at the
    # disconnect, short of its 50 tokens (2.5 s at 20 tokens/s). How many more than the
    # two read got out first (usually none: the next is due 50 ms later) is the load.
    assert 2 == seen <= visit.tokens < generation.tokens
    assert stats.wasted_tokens == stats.tokens == visit.tokens


async def test_client_gone_before_the_first_token_wastes_none(cancel_once_received: Any) -> None:
    """A client that leaves during the time to first token: abandoned, 0 tokens."""
    async with FakeService(replicas=1, latency=5.0) as svc:
        async with httpx.AsyncClient() as client:
            url = f"{svc.origins[0]}/v1/chat/completions"
            body = {**PROMPT, "stream": True}
            await cancel_once_received(
                svc, 1, lambda ext: client.post(url, json=body, extensions=ext)
            )
        with anyio.fail_after(5.0):  # the disconnect reaches the server in a few ms
            stats = await svc.wait_stats(lambda s: s.abandoned == 1)
    assert (stats.tokens, stats.wasted_tokens) == (0, 0)


@pytest.mark.parametrize("stream", [True, False])
async def test_error_status_fault_answers_an_openai_error(stream: bool) -> None:
    """An ``ErrorStatus(503)`` replica answers 503 with an OpenAI-style error body."""
    async with FakeService(replicas=1, latency=0.001, fault=ErrorStatus(503)) as svc:
        async with httpx.AsyncClient() as client:
            url = f"{svc.origins[0]}/v1/chat/completions"
            response = await client.post(url, json={**PROMPT, "stream": stream})
        stats = svc.stats()
    assert response.status_code == 503
    assert response.json()["error"]["type"] == "server_error"
    assert stats.tokens == 0


async def test_close_mid_stream_fault_cuts_the_stream() -> None:
    """``CloseMidBody``: half the tokens, then the connection closes: a protocol error."""
    generation = Generation(tokens_per_second=1000, tokens=6)
    async with FakeService(
        replicas=1, latency=0.001, fault=CloseMidBody(), generation=generation
    ) as svc:
        async with httpx.AsyncClient() as client:
            url = f"{svc.origins[0]}/v1/chat/completions"
            async with client.stream("POST", url, json={**PROMPT, "stream": True}) as response:
                lines: list[str] = []
                with pytest.raises(httpx.RemoteProtocolError):
                    await collect(response, lines)
        with anyio.fail_after(5.0):  # the server ends its accounting a moment later
            stats = await svc.wait_stats(lambda s: s.failed == 1)
    assert sum(line.startswith("data: ") for line in lines) == 3
    assert (stats.failed, stats.tokens) == (1, 3)


async def collect(response: httpx.Response, lines: list[str]) -> None:
    """Append every line of ``response`` to ``lines`` until it ends or fails."""
    async for line in response.aiter_lines():
        lines.append(line)


async def test_reset_fault_drops_a_stream_after_its_headers() -> None:
    """``Reset`` on a stream: headers at once, then the connection is reset at the time
    the first token was due; the client sees a read error before any byte."""
    async with FakeService(replicas=1, latency=0.01, fault=Reset()) as svc:
        async with httpx.AsyncClient() as client:
            url = f"{svc.origins[0]}/v1/chat/completions"
            async with client.stream("POST", url, json={**PROMPT, "stream": True}) as response:
                assert response.status_code == 200
                with pytest.raises((httpx.ReadError, httpx.RemoteProtocolError)):
                    await response.aread()
        with anyio.fail_after(5.0):  # the server ends its accounting a moment later
            stats = await svc.wait_stats(lambda s: s.failed == 1)
    assert (stats.failed, stats.tokens) == (1, 0)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "the body must be a JSON object"),
        (b'{"model": "m"}', "the body must be a JSON object with a `messages` list"),
        (b'{"messages": [], "stream": "yes"}', "`stream` must be a bool, got 'yes'"),
        (b'{"messages": [], "max_tokens": 0}', "`max_tokens` must be an int in [1, 100000], got 0"),
    ],
)
async def test_bad_chat_request_is_a_400_openai_error(body: bytes, message: str) -> None:
    """A malformed request is answered 400 at once, with the OpenAI error shape."""
    async with FakeService(replicas=1, latency=5.0) as svc, httpx.AsyncClient() as client:
        url = f"{svc.origins[0]}/v1/chat/completions"
        response = await client.post(url, content=body)
    assert response.status_code == 400
    assert response.json() == {
        "error": {"message": message, "type": "invalid_request_error", "param": None, "code": None}
    }


@pytest.mark.parametrize(
    ("kwargs", "error", "pattern"),
    [
        ({"tokens_per_second": 0}, ValueError, r"^`tokens_per_second` must be a number of tokens"),
        ({"tokens_per_second": "5"}, TypeError, r"^`tokens_per_second` must be a number"),
        ({"tokens": 0}, ValueError, r"^`tokens` must be in \[1, 100000\], got 0$"),
        ({"tokens": 2.0}, TypeError, r"^`tokens` must be an int in \[1, 100000\], got 2.0$"),
    ],
)
def test_bad_generation_is_refused_by_name(
    kwargs: dict[str, Any], error: type[Exception], pattern: str
) -> None:
    """Each bad Generation argument raises early, naming the parameter and range."""
    with pytest.raises(error, match=pattern):
        Generation(**kwargs)


def test_generation_of_replica_config_must_be_a_generation() -> None:
    """``ReplicaConfig(generation=...)`` takes a Generation only."""
    with pytest.raises(TypeError, match=r"^`generation` must be a Generation or None, got 5$"):
        ReplicaConfig(generation=5)  # type: ignore[arg-type]


def test_generated_tokens_follow_the_rate() -> None:
    """Token i is due at first + i / rate; by ``now`` that many have been generated."""
    generation = Generation(tokens_per_second=10, tokens=4)
    assert generation.token_at(1.0, 3) == pytest.approx(1.3)
    assert [generation.generated_by(1.0, t, 4) for t in (0.9, 1.0, 1.05, 1.1, 9.0)] == [
        0, 1, 1, 2, 4
    ]  # fmt: skip
