"""SyncHedgedTransport and the process: a fork, a KeyboardInterrupt, its arguments.

The fork tests fork for real (multiprocessing's ``fork`` context), as gunicorn's
``--preload`` and Celery's prefork pool do; the interrupt test runs a script in a
subprocess and sends it SIGINT while its main thread waits in a request.
"""

from __future__ import annotations

import inspect
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

import httpx
import pytest

from hedgeclient import DnsReplicas, HedgedTransport, SyncHedgedTransport
from hedgeclient._sync.options import HedgeOptions
from hedgeclient.testing import FakeService

SERVICE = "http://svc"

# Python 3.12+ warns that forking a process with threads may deadlock; forking such a
# process is the very case tested (the fake service and the loop thread run).
forking = pytest.mark.filterwarnings("ignore:.*multi-threaded.*fork:DeprecationWarning")


def wait_for_received(svc: FakeService, n: int) -> None:
    """Until the replicas have received ``n`` requests (5 s at most)."""
    start = time.perf_counter()
    while svc.stats().received < n:
        assert time.perf_counter() - start < 5.0, "the request never arrived"
        time.sleep(0.005)


def _child(transport: SyncHedgedTransport, conn: Connection) -> None:
    """In the forked child: one request through the parent's client; send back what
    happened."""
    try:
        with httpx.Client(transport=transport, base_url=SERVICE, timeout=5.0) as client:
            response = client.get("/item")
            conn.send(("ok", response.status_code, os.getpid(), transport.engine is not None))
    except BaseException as exc:
        conn.send(("error", type(exc).__name__, str(exc), None))
    finally:
        conn.close()


def _in_child(
    transport: SyncHedgedTransport,
    target: Callable[[SyncHedgedTransport, Connection], None] = _child,
) -> tuple[Any, ...]:
    """Run ``target`` in a forked child; what it sent back (it must exit cleanly)."""
    context = multiprocessing.get_context("fork")
    parent_end, child_end = context.Pipe(duplex=False)
    process = context.Process(target=target, args=(transport, child_end))
    process.start()
    child_end.close()
    try:
        assert parent_end.poll(20.0), "the child sent nothing"
        result: tuple[Any, ...] = parent_end.recv()
    finally:
        process.join(10.0)
    assert process.exitcode == 0
    return result


@pytest.mark.slow
@forking
def test_a_client_used_before_a_fork_works_in_the_child() -> None:
    """The parent sends, then forks: the child's request goes through its own loop
    thread and connection pool, and the parent's client still works after."""
    with FakeService(replicas=2, latency=0.002) as svc:
        transport = SyncHedgedTransport(replicas={SERVICE: svc.origins}, metrics=False)
        with httpx.Client(transport=transport, base_url=SERVICE, timeout=5.0) as client:
            assert client.get("/item").status_code == 200
            parent_engine = transport.engine
            status, code, pid, _ = _in_child(transport)
            assert (status, code) == ("ok", 200)
            assert pid != os.getpid()
            assert client.get("/item").status_code == 200
            assert transport.engine is parent_engine  # the parent's is its own still
        assert svc.stats().received == 3


def _close_in_child(transport: SyncHedgedTransport, conn: Connection) -> None:
    """In the forked child: close the parent's client at once; send back how long."""
    start = time.perf_counter()
    try:
        transport.close()
        conn.send(("closed", time.perf_counter() - start))
    except BaseException as exc:
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()


@pytest.mark.slow
@forking
def test_a_child_closes_at_once_a_client_busy_in_the_parent_at_the_fork() -> None:
    """A request in flight in the parent as it forks (a Celery prefork worker closing
    its client at exit without a request of its own): the child's close() drops its
    copy of the parent's engine at once. It waited for the parent's request, which no
    thread of the child runs, for ever (a new user's test)."""
    with FakeService(replicas=2, latency=1.0) as svc:
        transport = SyncHedgedTransport(replicas={SERVICE: svc.origins}, metrics=False)
        client = httpx.Client(transport=transport, base_url=SERVICE, timeout=5.0)
        busy = threading.Thread(target=client.get, args=("/slow",))
        busy.start()
        wait_for_received(svc, 1)
        result = _in_child(transport, _close_in_child)
        busy.join(10.0)
        client.close()
    assert result[0] == "closed", result
    assert result[1] < 2.0  # at once; 2 s holds beside two burners


@pytest.mark.slow
@forking
def test_a_client_made_before_a_fork_and_never_used_works_in_the_child() -> None:
    """Made but not used in the parent (a module-level client under --preload): the
    child starts the loop thread itself, with the engine built in the parent."""
    with FakeService(replicas=2, latency=0.002) as svc:
        transport = SyncHedgedTransport(replicas={SERVICE: svc.origins}, metrics=False)
        assert _in_child(transport)[:2] == ("ok", 200)
        transport.close()


@pytest.mark.slow
@forking
def test_a_given_inner_transport_used_before_a_fork_is_refused_in_the_child() -> None:
    """An inner transport given by the user holds the parent's connections and cannot
    be rebuilt: the child's request raises RuntimeError saying why."""
    with FakeService(replicas=2, latency=0.002) as svc:
        transport = SyncHedgedTransport(
            httpx.AsyncHTTPTransport(), replicas={SERVICE: svc.origins}, metrics=False
        )
        with httpx.Client(transport=transport, base_url=SERVICE, timeout=5.0) as client:
            assert client.get("/item").status_code == 200
            status, kind, message, _ = _in_child(transport)
    assert (status, kind) == ("error", "RuntimeError")
    assert message.startswith("this SyncHedgedTransport sent requests before the process forked")
    assert "make the client in the child" in message


INTERRUPTED = """
import signal, sys, threading, time
import httpx
from hedgeclient import SyncHedgedTransport
from hedgeclient.testing import FakeService

if __name__ == "__main__":
    with FakeService(replicas=2, latency=5.0) as svc:
        before = set(threading.enumerate())
        transport = SyncHedgedTransport(
            replicas={"http://svc": svc.origins}, delay=1.0, metrics=False
        )
        client = httpx.Client(transport=transport, base_url="http://svc", timeout=30.0)
        print("ready", flush=True)
        start = time.perf_counter()
        try:
            client.get("/item")
        except KeyboardInterrupt:
            print("interrupted", round(time.perf_counter() - start, 1) < 5.0, flush=True)
        deadline = time.perf_counter() + 5.0
        while svc.stats().abandoned < 1 and time.perf_counter() < deadline:
            time.sleep(0.005)
        print("abandoned", svc.stats().abandoned, flush=True)
        client.close()
        print("threads", len(set(threading.enumerate()) - before), flush=True)
"""


@pytest.mark.slow
def test_keyboard_interrupt_cancels_the_request_and_propagates(tmp_path: Any) -> None:
    """SIGINT while the main thread waits in a request: KeyboardInterrupt reaches the
    caller at once (not after the replica's 5 s), the attempt is cancelled on the loop
    (its replica sees it leave), and close() leaves no thread."""
    script = tmp_path / "interrupted.py"
    script.write_text(textwrap.dedent(INTERRUPTED), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    with subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env
    ) as process:
        assert process.stdout is not None
        assert process.stdout.readline() == "ready\n"
        time.sleep(0.5)  # the request is on its way (its replica takes 5 s)
        process.send_signal(signal.SIGINT)
        out, _ = process.communicate(timeout=30)
    assert process.returncode == 0
    assert out.splitlines() == ["interrupted True", "abandoned 1", "threads 0"]


def test_the_options_are_exactly_hedged_transports() -> None:
    """HedgeOptions (what type checkers see) names every keyword argument of
    HedgedTransport, and nothing else."""
    keywords = [
        name
        for name, p in inspect.signature(HedgedTransport).parameters.items()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    ]
    assert list(HedgeOptions.__annotations__) == keywords


def test_an_inner_transport_of_the_wrong_kind_is_refused() -> None:
    """A sync inner transport on an event loop, an async one on threads: TypeError
    naming the one to pass instead; with no backend given, each picks its own."""
    sync, loop = httpx.HTTPTransport(), httpx.AsyncHTTPTransport()
    with pytest.raises(TypeError, match=r"^`transport` must be an httpx.AsyncBaseTransport"):
        SyncHedgedTransport(sync, backend="asyncio")
    with pytest.raises(TypeError, match=r"^`transport` must be a sync httpx transport"):
        SyncHedgedTransport(loop, backend="threads")
    on_threads, on_a_loop = SyncHedgedTransport(sync), SyncHedgedTransport(loop)
    assert isinstance(on_threads.engine.inner, httpx.AsyncBaseTransport)
    assert on_threads.engine.inner.sync is sync  # type: ignore[attr-defined]
    assert on_a_loop.engine.inner is loop
    on_threads.close()
    on_a_loop.close()


def test_a_sync_transport_speaking_http2_is_refused_on_threads() -> None:
    """httpx's sync HTTP/2 is not thread-safe: on threads (the default, or asked for) a
    sync transport with http2 is refused, naming the async one to pass; on a loop an
    async HTTP/2 transport is taken. Not an httpx transport at all: TypeError."""
    for transport in (
        httpx.HTTPTransport(http2=True),
        httpx.HTTPTransport(http1=False, http2=True),
    ):
        for backend in (None, "threads"):
            with pytest.raises(
                ValueError, match=r"^`transport`: httpx's sync HTTP/2 is not thread-safe"
            ):
                SyncHedgedTransport(transport, backend=backend)  # type: ignore[arg-type]
        transport.close()
    on_a_loop = SyncHedgedTransport(httpx.AsyncHTTPTransport(http2=True), metrics=False)
    assert isinstance(on_a_loop.engine.inner, httpx.AsyncHTTPTransport)
    on_a_loop.close()
    with pytest.raises(TypeError, match=r"^`transport` must be an httpx transport"):
        SyncHedgedTransport({"http://svc": ["http://a"]})  # type: ignore[arg-type]


def test_discovered_replicas_need_a_loop() -> None:
    """Discovered replicas: an event loop by default; backend='threads' refused."""
    replicas = {"http://svc": DnsReplicas("svc.example", port=8080)}
    transport = SyncHedgedTransport(replicas=replicas, metrics=False)
    assert isinstance(transport.engine.inner, httpx.AsyncHTTPTransport)
    transport.close()
    with pytest.raises(ValueError, match=r"^`backend='threads'` serves listed replicas only"):
        SyncHedgedTransport(replicas=replicas, backend="threads", metrics=False)


def test_an_unknown_backend_is_refused() -> None:
    """`backend` other than threads, asyncio or trio: ValueError naming the value."""
    with pytest.raises(
        ValueError, match=r"^`backend` must be 'threads', 'asyncio' or 'trio', got 'uv'$"
    ):
        SyncHedgedTransport(backend="uv", metrics=False)  # type: ignore[arg-type]


def test_a_bad_option_raises_what_hedged_transport_raises() -> None:
    """Options are checked by HedgedTransport itself, at construction."""
    with pytest.raises(ValueError, match=r"extra_load"):
        SyncHedgedTransport(extra_load=0.9, metrics=False)


def test_closing_a_transport_never_used_starts_nothing() -> None:
    """close() of a transport that never sent starts no thread and is idempotent."""
    transport = SyncHedgedTransport(metrics=False)
    started = time.perf_counter()
    transport.close()
    transport.close()
    assert time.perf_counter() - started < 1.0  # no loop was started to be stopped
    assert repr(transport).startswith("SyncHedgedTransport(name='default'")
