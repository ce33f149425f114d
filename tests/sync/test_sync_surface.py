"""SyncHedgedTransport's surface without a server: its loop thread's name, and the
TypeError it raises under httpx.AsyncClient (as HedgedTransport does under
httpx.Client)."""

from __future__ import annotations

import re
import threading

import anyio
import httpx
import pytest

from hedgeclient import SyncHedgedTransport

NOT_ASYNC = (
    "SyncHedgedTransport is a sync transport (an httpx.BaseTransport): use it with "
    "httpx.Client; with httpx.AsyncClient use HedgedTransport, which takes the same "
    "arguments"
)


def loop_threads() -> list[str]:
    """The names of this process's hedgeclient loop threads."""
    return sorted(t.name for t in threading.enumerate() if t.name.startswith("hedgeclient-"))


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_loop_thread_is_named_after_the_transport(backend: str) -> None:
    """One loop thread per transport, ``hedgeclient-loop-<name>``, gone after close()."""
    first = SyncHedgedTransport(name="billing", backend=backend, metrics=False)  # type: ignore[arg-type]
    second = SyncHedgedTransport(name="search", backend=backend, metrics=False)  # type: ignore[arg-type]
    first.refresh_replicas()  # starts the loop thread, as a first request does
    second.refresh_replicas()
    assert loop_threads() == ["hedgeclient-loop-billing", "hedgeclient-loop-search"]
    first.close()
    second.close()
    assert loop_threads() == []


@pytest.mark.parametrize("step", ["enter", "request", "aclose"])
def test_under_an_async_client_it_raises_a_type_error_naming_hedged_transport(
    step: str,
) -> None:
    """``async with``, a request and ``aclose()`` of an ``httpx.AsyncClient`` each raise
    the TypeError that names the async transport, not an AttributeError."""
    transport = SyncHedgedTransport(metrics=False)
    client = httpx.AsyncClient(transport=transport)  # type: ignore[arg-type]

    async def run() -> None:
        if step == "enter":
            async with client:
                pass  # pragma: no cover - the entry raises
        elif step == "request":
            await client.get("http://svc/x")
        else:
            await client.aclose()

    with pytest.raises(TypeError, match=f"^{re.escape(NOT_ASYNC)}$"):
        anyio.run(run)
    transport.close()
    assert loop_threads() == []


def test_an_unknown_option_is_named_as_the_sync_transports() -> None:
    """``SyncHedgedTransport(timeout=5)``: the TypeError names the class the user
    called, not the async engine it builds (a new user's report)."""
    with pytest.raises(TypeError) as caught:
        SyncHedgedTransport(timeout=5)  # type: ignore[call-arg]
    assert str(caught.value) == "SyncHedgedTransport() got an unexpected keyword argument 'timeout'"


def test_a_negative_timeout_raises_value_error_as_httpx_client_does() -> None:
    """``client.get(timeout=-1)``: plain ``httpx.Client`` raises ValueError ("Timeout value
    out of range"); so does the hedged one, before anything is sent (the async engine
    would have timed out at once, as a ConnectTimeout)."""
    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200)

    transport = SyncHedgedTransport(httpx.MockTransport(handler), metrics=False)
    with httpx.Client(transport=transport) as client:
        with pytest.raises(ValueError, match=r"^Timeout value out of range: "):
            client.get("http://svc/x", timeout=-1)
        assert client.get("http://svc/x", timeout=1).status_code == 200
    assert len(sent) == 1
