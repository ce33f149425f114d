"""Where the fake service runs: a background thread, or a spawned subprocess.

Either way the replicas run on their own asyncio event loop, outside the caller's loop
(asyncio or trio). The loop's selector wakes timers to the microsecond: epoll rounds
its timeout *up* to whole milliseconds, which alone would make every latency up to
1 ms late; here the selector waits the whole milliseconds, then sleeps the remainder
in steps of at most 0.2 ms, checking for I/O between steps.

Process mode talks to its subprocess over a ``multiprocessing`` pipe (spawn context):
each call is one ``(method, args)`` message answered by ``("ok", result)`` or
``("error", exception)``. The pipe, unlike an HTTP control endpoint, works while a
replica is down and never shows up in the replicas' accounting. Once started, the
subprocess freezes its objects out of the garbage collector's scans (``gc.freeze``:
its own process, so this is safe), which keeps collection pauses well under 1 ms;
thread mode leaves the caller's process alone, so it is the less accurate of the two.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import gc
import math
import multiprocessing
import pickle
import selectors
import signal
import sys
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

from hedgeclient.testing._cluster import _Cluster, _Spec

_CALL_TIMEOUT = 30.0  # seconds; a control call is a snapshot or a server start/stop

if sys.platform == "linux":

    class _PreciseSelector(selectors.EpollSelector):
        """Strictly private: epoll with sub-millisecond timeouts (see module docstring)."""

        def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
            if timeout is None or timeout <= 0.0:
                return super().select(timeout)
            whole = math.floor(timeout * 1000.0)
            if whole >= 1:
                return super().select((whole - 0.5) / 1000.0)  # epoll rounds up: whole ms
            ready = super().select(0)
            if not ready:
                time.sleep(min(timeout, 2e-4))
                ready = super().select(0)
            return ready

    def _selector() -> selectors.BaseSelector:
        return _PreciseSelector()

else:  # pragma: no cover - kqueue and IOCP timeouts are already fine-grained

    def _selector() -> selectors.BaseSelector:
        return selectors.DefaultSelector()


class _ThreadRunner:
    """Strictly private: the cluster on an event loop in a daemon thread."""

    def __init__(self, spec: _Spec) -> None:
        self._spec = spec
        self._loop: asyncio.AbstractEventLoop | None = None
        self._cluster: _Cluster | None = None
        self._stopping = asyncio.Event()
        self._thread: threading.Thread | None = None

    def start(self, timeout: float) -> list[str]:
        ready: concurrent.futures.Future[list[str]] = concurrent.futures.Future()
        self._thread = threading.Thread(
            target=self._main, args=(ready,), name="hedgeclient-fake-service", daemon=True
        )
        self._thread.start()
        try:
            return ready.result(timeout)
        except concurrent.futures.TimeoutError:  # not the builtin TimeoutError before 3.11
            self.stop(timeout)
            msg = f"the fake service did not start within {timeout} s"
            raise TimeoutError(msg) from None
        except BaseException:
            self.stop(timeout)
            raise

    def _main(self, ready: concurrent.futures.Future[list[str]]) -> None:
        loop = asyncio.SelectorEventLoop(_selector())
        asyncio.set_event_loop(loop)  # this thread's own
        self._loop = loop
        try:
            loop.run_until_complete(self._serve(ready))
        finally:
            try:
                pending = asyncio.all_tasks(loop)
                for task in pending:
                    task.cancel()
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.run_until_complete(loop.shutdown_default_executor())
            finally:
                asyncio.set_event_loop(None)
                loop.close()

    async def _serve(self, ready: concurrent.futures.Future[list[str]]) -> None:
        try:
            cluster = _Cluster(self._spec)
            origins = await cluster.start()
        except BaseException as exc:  # handed to the thread that waits in start()
            ready.set_exception(exc)
            return
        self._cluster = cluster
        ready.set_result(origins)
        try:
            await self._stopping.wait()
        finally:
            await cluster.stop()

    def call(self, method: str, *args: Any) -> Any:
        """Run ``await cluster.<method>(*args)`` on the loop; return its result."""
        if self._loop is None or self._cluster is None:
            msg = "the fake service is not running"
            raise RuntimeError(msg)
        coroutine = getattr(self._cluster, method)(*args)
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(_CALL_TIMEOUT)

    def stop(self, timeout: float) -> None:
        if self._thread is None:
            return
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # closed in between: ending anyway
                loop.call_soon_threadsafe(self._stopping.set)
        self._thread.join(timeout)
        self._thread = None


def _portable(exc: Exception) -> Exception:
    """Return ``exc`` if it pickles, else a RuntimeError carrying its repr."""
    try:
        pickle.dumps(exc)
    except Exception:  # any pickling failure
        return RuntimeError(repr(exc))
    return exc


def _child_main(conn: Connection, spec: _Spec, timeout: float) -> None:
    """Strictly private: the subprocess of process mode (spawned, so importable)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    runner = _ThreadRunner(spec)
    try:
        origins = runner.start(timeout)
        # Park every object alive now (modules, servers) out of the collector's reach:
        # a full collection then scans only what requests left, a pause of ~1 ms
        # instead of ~20 ms, which would show as late responses.
        gc.collect()
        gc.freeze()
        conn.send(("ok", origins))
        while True:
            try:
                method, args = conn.recv()
            except EOFError:  # the parent is gone
                break
            if method == "stop":
                break
            try:
                result: tuple[str, Any] = ("ok", runner.call(method, *args))
            except Exception as exc:  # every error goes back to the caller
                result = ("error", _portable(exc))
            conn.send(result)
    except Exception as exc:  # start-up failed
        conn.send(("error", _portable(exc)))
    finally:
        runner.stop(timeout)
        with contextlib.suppress(OSError):  # the parent is gone
            conn.send(("ok", None))
        conn.close()


class _ProcessRunner:
    """Strictly private: the cluster in a spawned subprocess, driven over a pipe."""

    def __init__(self, spec: _Spec) -> None:
        self._spec = spec
        self._lock = threading.Lock()
        self._conn: Connection | None = None
        self._process: Any = None

    def start(self, timeout: float) -> list[str]:
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self._process = context.Process(
            target=_child_main,
            args=(child, self._spec, timeout),
            name="hedgeclient-fake-service",
            daemon=True,
        )
        self._process.start()
        child.close()
        try:
            origins: list[str] = self._receive(timeout)
        except BaseException:
            self.stop(timeout)
            raise
        return origins

    def _receive(self, timeout: float) -> Any:
        assert self._conn is not None, "start() first"
        if not self._conn.poll(timeout):
            msg = f"the fake service's subprocess did not answer within {timeout} s"
            raise TimeoutError(msg)
        try:
            status, value = self._conn.recv()
        except EOFError:
            msg = "the fake service's subprocess exited"
            exitcode = None
            if self._process is not None:
                self._process.join(1.0)  # reap it, to read its exit code
                exitcode = self._process.exitcode
            if exitcode is not None:
                msg += (
                    f" (exit code {exitcode}; its error is on stderr). Started from a "
                    "script? mode='process' spawns a fresh interpreter that imports the "
                    "script again: start the service under `if __name__ == '__main__':`"
                )
            raise RuntimeError(msg) from None
        if status == "error":
            raise value
        return value

    def call(self, method: str, *args: Any) -> Any:
        """Run ``await cluster.<method>(*args)`` in the subprocess; return its result."""
        with self._lock:
            if self._conn is None:
                msg = "the fake service is not running"
                raise RuntimeError(msg)
            self._conn.send((method, args))
            return self._receive(_CALL_TIMEOUT)

    def stop(self, timeout: float) -> None:
        with self._lock:
            if self._conn is None:
                return
            try:
                self._conn.send(("stop", ()))
                self._receive(timeout)
            except Exception:  # already gone, or failing: killed below if need be
                pass
            self._process.join(timeout)
            if self._process.is_alive():
                self._process.kill()
                self._process.join()
            self._process.close()
            self._conn.close()
            self._conn = None
