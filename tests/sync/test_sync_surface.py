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
