"""The fake model of one replica: an OpenAI-compatible ``POST /v1/chat/completions``.

Strictly private; :class:`~hedgeclient.testing._app._ReplicaApp` serves it for any
``POST`` whose path ends in ``/chat/completions``. The request body is JSON with
``messages`` (a list), and optionally ``model``, ``stream``, ``max_tokens`` or
``max_completion_tokens`` and ``stream_options.include_usage``, as the ``openai`` SDK
sends them. The latency drawn from the replica's law is the time to the first token;
tokens then follow at :attr:`Generation.tokens_per_second`.

- ``stream: true``: ``200`` and the headers at once (``content-type:
  text/event-stream``), then one server-sent event per token (``chat.completion.chunk``
  objects, the first carrying the assistant role), a last chunk with the
  ``finish_reason`` (and a usage chunk if asked), then ``data: [DONE]``;
- otherwise: the whole ``chat.completion`` JSON once every token is generated.

The text is a seeded function of the service seed, the replica and the request body
(the same prompt gives the same text on one replica, another text on another), so a
body spliced from two replicas cannot pass for either. A malformed body is answered
with ``400`` and an OpenAI-style ``{"error": {...}}`` body.

Prior art: the OpenAI API reference, "Create chat completion" and "The chat completion
chunk object" (https://platform.openai.com/docs/api-reference/chat).

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
from dataclasses import dataclass
from typing import Any

from hedgeclient.testing._asgi import Message, Scope, Send, Wait, _BadRequest, _drop
from hedgeclient.testing._faults import CloseMidBody, ErrorStatus, Fault, Reset
from hedgeclient.testing._generation import MAX_TOKENS, Generation
from hedgeclient.testing._ledger import _Attempt, _Ledger
from hedgeclient.testing._stats import Outcome

__all__ = ["Completion", "error_body", "is_chat", "parse_chat", "serve_chat"]

_WORDS = (
    "the", "a", "model", "token", "stream", "replica", "hedge", "first", "byte", "tail",
    "latency", "answer", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "request",
    "backup", "budget", "delay", "prompt", "queue", "prefill", "decode", "cache", "batch",
    "server", "client", "race", "winner", "loser", "cancel", "text", "word", "line", "done",
)  # fmt: skip


def is_chat(scope: Scope) -> bool:
    """True for a ``POST`` whose path ends in ``/chat/completions``."""
    return scope["method"] == "POST" and str(scope["path"]).endswith("/chat/completions")


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """Strictly private: the parts of a chat completion request the fake model reads."""

    model: str
    stream: bool
    tokens: int
    limited: bool  # the request set the length: finish_reason "length"
    usage: bool
    prompt_tokens: int


def _bad(message: str) -> _BadRequest:
    return _BadRequest(message)


def _length(body: dict[str, Any]) -> int | None:
    for name in ("max_completion_tokens", "max_tokens"):
        value = body.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_TOKENS:
            msg = f"`{name}` must be an int in [1, {MAX_TOKENS}], got {value!r}"
            raise _bad(msg)
        return value
    return None


def _prompt_tokens(messages: list[Any]) -> int:
    """Whitespace-separated words of every message's text: a stand-in for tokens."""
    words = 0
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        parts = content if isinstance(content, list) else [content]
        for part in parts:
            text = part.get("text") if isinstance(part, dict) else part
            if isinstance(text, str):
                words += len(text.split())
    return words


def parse_chat(body: bytes, generation: Generation) -> ChatRequest:
    """Parse a chat completion request body.

    Raises:
        _BadRequest: not a JSON object with a ``messages`` list, or a bad field.
    """
    try:
        parsed = json.loads(body)
    except ValueError:
        msg = "the body must be a JSON object"
        raise _bad(msg) from None
    if not isinstance(parsed, dict) or not isinstance(parsed.get("messages"), list):
        msg = "the body must be a JSON object with a `messages` list"
        raise _bad(msg)
    stream = parsed.get("stream") or False
    if not isinstance(stream, bool):
        msg = f"`stream` must be a bool, got {stream!r}"
        raise _bad(msg)
    options = parsed.get("stream_options") or {}
    length = _length(parsed)
    return ChatRequest(
        model=str(parsed.get("model") or "fake"),
        stream=stream,
        tokens=generation.tokens if length is None else length,
        limited=length is not None,
        usage=isinstance(options, dict) and options.get("include_usage") is True,
        prompt_tokens=_prompt_tokens(parsed["messages"]),
    )


def error_body(message: str, kind: str) -> bytes:
    """An OpenAI-style error body: ``{"error": {"message", "type", "param", "code"}}``."""
    error = {"message": message, "type": kind, "param": None, "code": None}
    return json.dumps({"error": error}).encode()


class Completion:
    """Strictly private: the text of one completion and its wire forms."""

    def __init__(
        self, request: ChatRequest, *, seed: int, replica: int, body: bytes, ident: str
    ) -> None:
        rng = random.Random(b"%d\x00%d\x00%s" % (seed, replica, body))
        self.request = request
        self.tokens = [(" " if i else "") + rng.choice(_WORDS) for i in range(request.tokens)]
        self.text_sha256 = hashlib.sha256("".join(self.tokens).encode()).hexdigest()
        self._head = {"id": ident, "created": 0, "model": request.model}

    @property
    def finish_reason(self) -> str:
        """``"length"`` when the request set the length, else ``"stop"``."""
        return "length" if self.request.limited else "stop"

    def _usage(self) -> dict[str, int]:
        prompt, completion = self.request.prompt_tokens, len(self.tokens)
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }

    def _event(self, choices: list[dict[str, Any]], **extra: Any) -> bytes:
        chunk = {**self._head, "object": "chat.completion.chunk", "choices": choices, **extra}
        return b"data: " + json.dumps(chunk).encode() + b"\n\n"

    def chunk(self, i: int) -> bytes:
        """The server-sent event of token ``i`` (the first also carries the role)."""
        delta = (
            {"role": "assistant", "content": self.tokens[i]}
            if i == 0
            else {"content": self.tokens[i]}
        )
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}
        return self._event([choice])

    def end(self) -> bytes:
        """The events after the last token: the finish reason, usage if asked, [DONE]."""
        choice = {"index": 0, "delta": {}, "logprobs": None, "finish_reason": self.finish_reason}
        events = self._event([choice])
        if self.request.usage:
            events += self._event([], usage=self._usage())
        return events + b"data: [DONE]\n\n"

    def whole(self) -> bytes:
        """The non-streamed ``chat.completion`` JSON."""
        message = {"role": "assistant", "content": "".join(self.tokens), "refusal": None}
        choice = {
            "index": 0,
            "message": message,
            "logprobs": None,
            "finish_reason": self.finish_reason,
        }
        completion = {
            **self._head,
            "object": "chat.completion",
            "choices": [choice],
            "usage": self._usage(),
        }
        return json.dumps(completion).encode()


async def serve_chat(
    body: bytes,
    *,
    ident: str,
    seed: int,
    replica: int,
    generation: Generation,
    send: Send,
    watcher: asyncio.Future[Message],
    wait: Wait,
    visit: _Attempt,
    ledger: _Ledger,
    start: float,
    due: float,
    fault: Fault | None,
    headers: list[tuple[bytes, bytes]],
) -> Outcome:
    """Answer the chat completion of ``body``, its first token due at ``due`` (loop
    clock); its id is ``ident``, its text seeded by ``seed``, ``replica`` and ``body``.

    ``wait(watcher, t)`` waits until ``t``, a disconnect or a halt (``"due"``,
    ``"disconnect"``, ``"halt"``). Faults: :class:`ErrorStatus` answers its status (an
    OpenAI-style error body) at ``due``; :class:`Reset` drops the connection at ``due``
    (after the headers, when streaming); :class:`CloseMidBody` drops it after half the
    tokens. Other faults do not apply here.

    Raises:
        _BadRequest: a malformed request (:func:`parse_chat`), before anything is sent.
    """
    request = parse_chat(body, generation)
    completion = Completion(request, seed=seed, replica=replica, body=body, ident=ident)
    loop = asyncio.get_running_loop()
    total = len(completion.tokens)
    streaming = completion.request.stream and not isinstance(fault, ErrorStatus)
    if streaming:
        kind = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
        await send({"type": "http.response.start", "status": 200, "headers": kind + headers})
        visit.status = 200
    cut = total // 2 if isinstance(fault, CloseMidBody) else None
    last = total - 1 if streaming else 0  # one wait per token when streaming
    whole_at = due if isinstance(fault, ErrorStatus) else generation.token_at(due, total - 1)
    for i in range(last + 1):
        at = generation.token_at(due, i) if streaming else whole_at
        wake = await wait(watcher, at)
        if wake != "due" or (i == 0 and isinstance(fault, Reset)):
            reset = wake == "due"  # a Reset fault: no token generated
            visit.tokens = 0 if reset else generation.generated_by(due, loop.time(), total)
            if wake == "disconnect":
                return "abandoned"
            dropped = await _drop(send, watcher, reset=True, started=streaming)
            return "failed" if dropped else "abandoned"
        if i == 0:
            ledger.started(visit, loop.time() - start)
        if not streaming:
            break
        if i == cut:
            visit.tokens = i
            dropped = await _drop(send, watcher, reset=False, started=True)
            return "failed" if dropped else "abandoned"
        await send({"type": "http.response.body", "body": completion.chunk(i), "more_body": True})
    if streaming:
        visit.tokens = total
        visit.text_sha256 = completion.text_sha256
        await send({"type": "http.response.body", "body": completion.end()})
        return "completed"
    if isinstance(fault, ErrorStatus):
        body, visit.status = error_body("fake error status", "server_error"), fault.status
    else:
        body, visit.status = completion.whole(), 200
        visit.tokens, visit.text_sha256 = total, completion.text_sha256
    kind = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": visit.status, "headers": kind + headers})
    if isinstance(fault, CloseMidBody):
        await send(
            {"type": "http.response.body", "body": body[: len(body) // 2], "more_body": True}
        )
        dropped = await _drop(send, watcher, reset=False, started=True)
        return "failed" if dropped else "abandoned"
    await send({"type": "http.response.body", "body": body})
    return "completed"
