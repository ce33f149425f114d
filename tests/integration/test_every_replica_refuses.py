"""When every replica refuses, the error says which they were (issue 23, item 18)."""

from __future__ import annotations

import re
import socket

import httpx
import pytest

from hedgeclient import HedgedTransport

pytestmark = pytest.mark.anyio

ATTEMPT = re.compile(r"attempt (\d) to (\S+) failed \(ConnectError: (.+)\)")


def refusing_origin() -> str:
    """An origin on 127.0.0.1 whose port was free a moment ago: nothing listens there,
    so a connection to it is refused at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


async def test_connect_error_names_every_refusing_replica() -> None:
    """Loopback, three replicas that refuse connections: the caller gets httpx's own
    ``ConnectError``, with a note naming each attempt's replica and error."""
    origins = [refusing_origin() for _ in range(3)]
    transport = HedgedTransport(replicas={"http://svc": origins}, max_hedges=2, metrics=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://svc") as client:
        with pytest.raises(httpx.ConnectError) as caught:
            await client.get("/")
    (note,) = caught.value.__notes__
    prefix = "hedgeclient: no replica answered: "
    assert note.startswith(prefix)
    parts = [ATTEMPT.fullmatch(part) for part in note.removeprefix(prefix).split("; ")]
    assert all(parts), note
    assert [m.group(1) for m in parts if m] == ["1", "2", "3"]
    assert sorted(m.group(2) for m in parts if m) == sorted(origins)  # each replica once
    # The error raised is the last attempt's own, with its own message (httpcore's
    # words differ between asyncio and trio).
    assert parts[-1] is not None
    assert str(caught.value) == parts[-1].group(3)
