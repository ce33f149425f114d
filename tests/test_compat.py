"""The httpcore repairs say when they cannot apply: one warning at construction.

``hedgeclient._compat.repairs_for`` gates the repairs to the httpcore versions the tests
ran and to a pool whose private structure they know. Where they cannot apply to an
httpx transport, the transport logs one warning when it is built, naming what will go
wrong; a transport that needs no repair (``httpx.MockTransport``, a custom transport)
gets none, and neither does the default transport on the pinned httpcore.
"""

from __future__ import annotations

import logging
import types
from collections.abc import Callable
from typing import Any

import httpcore
import httpx
import pytest

import hedgeclient._compat
from hedgeclient import HedgedTransport
from hedgeclient._compat import TESTED_HTTPCORE, repairs_for

UNTESTED = (
    "hedgeclient: httpcore {version} is outside the versions its repairs were tested with "
    "(1.0.5 to 1.0.9); they are off: cancelled losers may leak pool slots "
    "(encode/httpcore#1093) and, over HTTP/2, damage neighbouring streams."
)
UNKNOWN_POOL = (
    "hedgeclient: this httpcore's connection pool is not the one its repairs know "
    "(httpcore {version}); cancelled losers may leak pool slots (encode/httpcore#1093) "
    "and, over HTTP/2, damage neighbouring streams. Pin httpcore>=1.0.5,<1.1."
)


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The hedgeclient warnings logged so far."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "hedgeclient" and r.levelno == logging.WARNING
    ]


def test_tested_range_is_the_pinned_one() -> None:
    """The gate is httpcore 1.0.5 to 1.0.9, and the installed httpcore is inside it."""
    assert TESTED_HTTPCORE == ((1, 0, 5), (1, 0, 9))
    installed = tuple(int(p) for p in httpcore.__version__.split(".")[:3])
    assert TESTED_HTTPCORE[0] <= installed <= TESTED_HTTPCORE[1]


@pytest.mark.parametrize("version", ["1.1.0", "1.0.4", "2.0.0rc1"])
def test_untested_httpcore_turns_repairs_off_with_one_warning(
    version: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An httpcore outside the tested range: the repairs are off, and one warning says
    so and what goes wrong (leaked pool slots, damaged HTTP/2 streams)."""
    repairs = repairs_for(httpx.AsyncHTTPTransport(), version=version)
    assert (repairs.active, repairs.traced) == (False, True)
    assert warnings_of(caplog) == [UNTESTED.format(version=version)]


def test_tested_httpcore_applies_repairs_silently(caplog: pytest.LogCaptureFixture) -> None:
    """The last tested httpcore: the repairs apply, nothing is logged."""
    repairs = repairs_for(httpx.AsyncHTTPTransport(), version="1.0.9")
    assert (repairs.active, repairs.traced) == (True, True)
    assert warnings_of(caplog) == []


def test_pool_without_the_attributes_repairs_read_warns(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An httpx transport whose ``_pool`` lacks what the repairs read: one warning when
    the HedgedTransport is built, and the repairs are off."""
    inner = httpx.AsyncHTTPTransport()
    inner._pool = types.SimpleNamespace(connections=[])  # type: ignore[assignment]
    transport = HedgedTransport(inner, metrics=False)
    assert warnings_of(caplog) == [UNKNOWN_POOL.format(version=httpcore.__version__)]
    assert transport._repairs.active is False


def test_untested_httpcore_warns_at_construction(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A HedgedTransport built over the installed httpcore when it is outside the gate
    logs the warning once, at construction, before any request."""
    monkeypatch.setattr(hedgeclient._compat, "TESTED_HTTPCORE", ((1, 0, 0), (1, 0, 4)))
    transport = HedgedTransport(metrics=False)
    expected = UNTESTED.format(version=httpcore.__version__).replace(
        "(1.0.5 to 1.0.9)", "(1.0.0 to 1.0.4)"
    )
    assert warnings_of(caplog) == [expected]
    assert transport._repairs.active is False


class Custom(httpx.AsyncBaseTransport):
    """A transport of the user's own, with no httpcore pool."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return httpx.Response(200)  # pragma: no cover - never sent


@pytest.mark.parametrize(
    "inner",
    [
        pytest.param(lambda: httpx.MockTransport(lambda r: httpx.Response(200)), id="mock"),
        pytest.param(Custom, id="custom"),
        pytest.param(lambda: None, id="default"),
    ],
)
def test_no_warning_when_no_repair_is_needed_or_all_apply(
    inner: Callable[[], httpx.AsyncBaseTransport | None], caplog: pytest.LogCaptureFixture
) -> None:
    """``httpx.MockTransport`` and a custom transport need no repair; the default
    transport on the pinned httpcore gets them all: no warning in any case."""
    HedgedTransport(inner(), metrics=False)
    assert warnings_of(caplog) == []


def _closed_stream_on_an_active_connection() -> tuple[Any, Any, Any]:
    """An httpcore pool stream marked closed (its request has left the pool) whose
    HTTP/1.1 connection is ACTIVE: the pool, the stream and the connection."""
    from httpcore._async.connection_pool import AsyncPoolRequest, PoolByteStream
    from httpcore._async.http11 import HTTPConnectionState

    origin = httpcore.URL("http://a:80").origin
    protocol = httpcore.AsyncHTTP11Connection(origin, stream=types.SimpleNamespace())  # type: ignore[arg-type]
    protocol._state = HTTPConnectionState.ACTIVE
    connection = httpcore.AsyncHTTPConnection(origin)
    connection._connection = protocol
    pool = httpcore.AsyncConnectionPool()
    pool._connections = [connection]
    request = AsyncPoolRequest(httpcore.Request("GET", "http://a/"))
    request.assign_to_connection(connection)
    stream = PoolByteStream([], request, pool)
    stream._closed = True
    return pool, stream, connection


@pytest.mark.anyio
async def test_a_reclaim_never_closes_the_next_request_s_connection() -> None:
    """The reclaim of an interrupted close runs later, in a task of its own. A stream
    whose connection is still ACTIVE with no request on it was interrupted (#1115);
    one whose connection another request of the pool is on now was not: its clean-up
    finished and the pool handed the connection on (closing it then closed that
    request's socket: "this socket was already closed", seen once on trio)."""
    from httpcore._async.connection_pool import AsyncPoolRequest

    from hedgeclient._compat.pool import _interrupted

    pool, stream, connection = _closed_stream_on_an_active_connection()
    assert _interrupted(stream)
    following = AsyncPoolRequest(httpcore.Request("GET", "http://a/next"))
    following.assign_to_connection(connection)
    pool._requests = [following]
    assert not _interrupted(stream)
