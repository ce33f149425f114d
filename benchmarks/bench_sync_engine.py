"""A feasibility prototype (issue 26): hedgeclient's own async engine, unchanged, driven
on the caller's thread with sync httpcore, so that ``httpx.Client`` gets the one request
path (the same route, delay, budget, selector, race, report) at the CPU cost of a sync
client. Not library code: it reaches into the library's private modules.

Run from the repository root::

    .venv/bin/python benchmarks/bench_sync_engine.py            # both parts
    .venv/bin/python benchmarks/bench_sync_engine.py --quick    # fewer requests

**The idea.** The engine's request path (``RequestPath.handle``) is a coroutine that
awaits only a handful of things: the inner transport's send, a response's close, the
hedge timer's scopes and events, and its shielded waits. If each of those *blocks the
thread* instead of suspending, the coroutine never suspends: one ``coro.send(None)``
runs the whole request and raises ``StopIteration`` with the response. No event loop, no
hand-over to another thread. What runs concurrently (a backup) runs on a worker thread,
driven the same way. So that the engine keeps its single-threaded semantics (it was
written for one loop), a thread holds the transport's **engine lock** while it runs
engine code, and lets go of it only where it blocks: around the inner sync transport's
call, a response body's read or close, and an event's wait. The engine is then one
thread at a time, as on a loop, and the policy objects need no lock of their own.

The pieces (each small):

- :class:`ThreadTimer`, a ``HedgeTimer`` (``hedgeclient._timer.protocols``) for threads:
  the shared deadline heap (``_timer._deadlines``), scopes that stop an attempt by
  shutting down the socket its thread blocks on, events on ``threading.Event``, and
  ``spawn`` on a small pool of worker threads;
- **the hedge timer is the blocked read itself** (the prototype of
  ``bench_sync_threads.py``): a read on a watched stream waits at most until the
  earliest hedge deadline, then serves the due deadlines (under the engine lock) and
  reads on; a request that is never hedged costs no timer thread and no wake-up;
- :class:`ThreadInner`, the engine's inner transport: an ``httpx.HTTPTransport`` whose
  httpcore pool has a watched network backend (``httpx.HTTPTransport`` takes no
  ``network_backend``: the prototype swaps its private ``_pool``), called with the
  engine lock released; a scope cancelled meanwhile turns the attempt's end into a
  cancellation (``asyncio.CancelledError``, what anyio's asyncio backend names), as on
  a loop;
- a few private names of the engine patched for the prototype's threads only
  (``current_timer`` and the shielded waits; the clocks given to the policies are
  ``time.monotonic``). A library version would route these through ``_timer``.

Parts:

1. **cpu**: CPU per unhedged request (``time.process_time()``, sequential; 3 replicas of
   ``FakeService(latency=0.001, mode="process")``; a 50 ms delay that no request reaches),
   interleaved repetitions, medians of the per-repetition ratios to plain
   ``httpx.Client``: plain ``httpx.Client``, the engine driven on threads (metrics off,
   then on), and ``SyncHedgedTransport`` (metrics off). Target (issue 26): at most 1.3x.
2. **works**: the engine on threads hedging for real: the log-normal law (median 12 ms,
   p95 30 ms), 3 replicas, a fixed 30 ms delay, 4 threads sharing one client, beside
   plain ``httpx.Client``: p99, extra load, losers seen leaving by the replicas, threads
   and pool connections left after ``close()``.

Results: printed, and written to ``benchmarks/results/<output>.json``
(``sync_engine.json``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import contextvars
import heapq
import math
import os
import random
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import httpcore
import httpx
import sniffio
from _common import (
    SERVICE,
    command,
    machine,
    on_threads,
    per_request,
    print_table,
    quantile,
    verdict,
    write_json,
)

import hedgeclient._race.race as _race_module
import hedgeclient._request as _request_module
from hedgeclient import FixedDelay, HedgeBudget, HedgedTransport, SyncHedgedTransport
from hedgeclient._timer import LoopLag
from hedgeclient._timer._deadlines import Entry, Heap, run_due
from hedgeclient.testing import FakeService

LIMITS = httpx.Limits(max_connections=100, max_keepalive_connections=100)
NO_HEDGE = 0.050  # far above a request to a 1 ms replica (~2 ms)
DELAY = 0.030
LAW = "lognormal:median=0.012,sigma=0.56"
THREADS = 4

_T = TypeVar("_T")
_local = threading.local()  # .timer: the engine this thread drives; .scope: its attempt's


# -- driving a coroutine that never suspends ------------------------------------------------


def drive(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run ``coro`` to its end in this thread: every await in it blocks, none suspends."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    coro.close()
    msg = "the engine suspended on a thread (an await that does not block)"
    raise RuntimeError(msg)


# -- the timer over threads -------------------------------------------------------------------


class ThreadScope:
    """A cancel scope of one attempt's thread: cancelling it shuts down the socket the
    thread blocks on (its read returns at once); the attempt then ends as cancelled."""

    __slots__ = ("_prev", "cancel_called", "sock")

    def __init__(self) -> None:
        self.cancel_called = False
        self.sock: socket.socket | None = None
        self._prev: ThreadScope | None = None

    def __enter__(self) -> ThreadScope:
        self._prev = getattr(_local, "scope", None)
        _local.scope = self
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        _local.scope = self._prev
        return bool(
            self.cancel_called
            and exc_type is not None
            and issubclass(exc_type, asyncio.CancelledError)
        )

    def cancel(self) -> None:
        self.cancel_called = True
        sock = self.sock
        if sock is not None:
            with contextlib.suppress(OSError):  # closed meanwhile: nothing to stop
                sock.shutdown(socket.SHUT_RDWR)


class ThreadFlag:
    """An event whose ``wait`` blocks the thread, the engine lock let go meanwhile."""

    __slots__ = ("_event", "_lock")

    def __init__(self, lock: threading.Lock) -> None:
        self._event = threading.Event()
        self._lock = lock

    def set(self) -> None:
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    async def wait(self) -> None:
        if self._event.is_set():
            return
        self._lock.release()
        try:
            self._event.wait()
        finally:
            self._lock.acquire()


class ThreadTimer:
    """``HedgeTimer`` for threads: the deadline heap, served by blocked reads (see the
    module doc); backups on a pool of worker threads."""

    def __init__(self, lock: threading.Lock, workers: int = 8) -> None:
        self.lock = lock
        self.time: Callable[[], float] = time.monotonic
        self.deadline: Callable[[], float] = lambda: math.inf
        self.lag = LoopLag()
        self._heap: Heap = []
        self._sequence = 0
        self._workers = workers
        self._pool: ThreadPoolExecutor | None = None

    def call_at(self, deadline: float, callback: Callable[[], None]) -> Entry:
        self._sequence += 1
        entry = Entry((callback,))
        heapq.heappush(self._heap, (deadline, self._sequence, entry))
        return entry

    def next_due(self) -> float:
        """The earliest live deadline (read without the lock: a stale answer only makes
        a read wake once for nothing)."""
        heap = self._heap
        try:
            head = heap[0]
        except IndexError:
            return math.inf
        return head[0]

    def serve(self) -> None:
        """Serve the due deadlines (a blocked read's wake-up), under the engine lock."""
        with self.lock:
            now = time.monotonic()
            run_due(self._heap, now, self.lag, now)

    def primary_scope(self) -> ThreadScope:
        return ThreadScope()

    cancel_scope = primary_scope

    def event(self) -> ThreadFlag:
        return ThreadFlag(self.lock)

    def spawn(
        self,
        context: contextvars.Context,
        fn: Callable[[], Coroutine[Any, Any, None]],
        *,
        guarded: bool = False,
    ) -> None:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._workers, "hedgeclient-backup")
        self._pool.submit(context.run, self._run, fn)

    def _run(self, fn: Callable[[], Coroutine[Any, Any, None]]) -> None:
        with self.lock, engine_thread(self):
            drive(fn())

    def call_soon_threadsafe(self, callback: Callable[[], None]) -> None:
        raise NotImplementedError

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)


@contextlib.contextmanager
def engine_thread(timer: ThreadTimer) -> Iterator[None]:
    """This thread drives ``timer``'s engine: anyio's asyncio backend names its
    cancellation (``asyncio.CancelledError``) and the engine finds ``timer``."""
    old_timer, old_name = getattr(_local, "timer", None), sniffio.thread_local.name
    _local.timer, sniffio.thread_local.name = timer, "asyncio"
    try:
        yield
    finally:
        _local.timer, sniffio.thread_local.name = old_timer, old_name


# The engine's look-ups, patched for the prototype's threads only.
_real_current_timer = _request_module.current_timer
_real_run_shielded = _race_module.run_shielded
_real_wait_shielded = _race_module.wait_shielded


def _current_timer() -> Any:
    timer = getattr(_local, "timer", None)
    return _real_current_timer() if timer is None else timer


async def _run_shielded(fn: Callable[[], Any]) -> None:
    if getattr(_local, "timer", None) is None:
        await _real_run_shielded(fn)
        return
    scope, _local.scope = getattr(_local, "scope", None), None  # nothing stops it
    try:
        await fn()
    finally:
        _local.scope = scope


async def _wait_shielded(event: Any) -> None:
    if getattr(_local, "timer", None) is None:
        await _real_wait_shielded(event)
        return
    await event.wait()


_request_module.current_timer = _current_timer  # type: ignore[assignment]
_race_module.run_shielded = _run_shielded  # type: ignore[assignment]
_race_module.wait_shielded = _wait_shielded  # type: ignore[assignment]


# -- the watched network backend --------------------------------------------------------------


class WatchedStream(httpcore.NetworkStream):
    """``SyncBackend``'s stream; notes its socket on the calling thread's scope, and is
    the hedge timer of the thread's engine (module doc)."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner
        self._sock: socket.socket = inner.get_extra_info("socket")

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        scope: ThreadScope | None = getattr(_local, "scope", None)
        if scope is None:  # a body read after the race, or a shielded close
            return self._inner.read(max_bytes, timeout)
        scope.sock = self._sock
        try:
            if scope.cancel_called:  # stopped before it blocked
                raise httpcore.ReadError("attempt stopped: another attempt won")
            timer: ThreadTimer | None = getattr(_local, "timer", None)
            if timer is None:
                return self._inner.read(max_bytes, timeout)
            end = math.inf if timeout is None else time.monotonic() + timeout
            while True:
                due, now = timer.next_due(), time.monotonic()
                if due <= now:
                    timer.serve()
                    continue
                if end <= due:  # the caller's own timeout comes first
                    return self._inner.read(max_bytes, None if end == math.inf else end - now)
                try:
                    return self._inner.read(max_bytes, due - now)
                except httpcore.ReadTimeout:  # a hedge deadline, not the caller's
                    continue
        finally:
            scope.sock = None

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        scope: ThreadScope | None = getattr(_local, "scope", None)
        if scope is not None and scope.cancel_called:
            raise httpcore.WriteError("attempt stopped: another attempt won")
        self._inner.write(buffer, timeout)

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        return WatchedStream(self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class WatchedBackend(httpcore.NetworkBackend):
    def __init__(self) -> None:
        self._inner = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        return WatchedStream(
            self._inner.connect_tcp(host, port, timeout, local_address, socket_options)
        )

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        return WatchedStream(self._inner.connect_unix_socket(path, timeout, socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


# -- the engine's inner transport -------------------------------------------------------------


class AsyncOfSync(httpx.AsyncByteStream):
    """A sync response body seen by the engine: each read and the close block the
    thread, the engine lock let go meanwhile."""

    def __init__(self, stream: httpx.SyncByteStream, lock: threading.Lock) -> None:
        self.sync = stream
        self._lock = lock

    async def __aiter__(self) -> AsyncIterator[bytes]:
        iterator = iter(self.sync)
        while True:
            self._lock.release()
            try:
                chunk = next(iterator, None)
            finally:
                self._lock.acquire()
            if chunk is None:
                return
            yield chunk

    async def aclose(self) -> None:
        self._lock.release()
        try:
            self.sync.close()
        finally:
            self._lock.acquire()


class ThreadInner(httpx.AsyncBaseTransport):
    """The engine's inner transport: sync httpx over a watched pool, called with the
    engine lock let go (module doc)."""

    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock
        self.sync = httpx.HTTPTransport(limits=LIMITS)
        self.sync._pool = httpcore.ConnectionPool(  # the prototype's one private write
            max_connections=LIMITS.max_connections,
            max_keepalive_connections=LIMITS.max_keepalive_connections,
            keepalive_expiry=LIMITS.keepalive_expiry,
            network_backend=WatchedBackend(),
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        scope: ThreadScope | None = getattr(_local, "scope", None)
        lock = self._lock
        lock.release()
        try:
            response = self.sync.handle_request(request)
        except Exception as exc:
            lock.acquire()
            if scope is not None and scope.cancel_called:
                raise asyncio.CancelledError from exc
            raise
        lock.acquire()
        if scope is not None and scope.cancel_called:  # it lost while its headers came
            response.close()
            raise asyncio.CancelledError
        assert isinstance(response.stream, httpx.SyncByteStream)
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=AsyncOfSync(response.stream, lock),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        self.sync.close()


class EngineOnThreads(httpx.BaseTransport):
    """``HedgedTransport`` for ``httpx.Client``, its engine driven on the caller's thread."""

    def __init__(self, **options: Any) -> None:
        self._lock = threading.Lock()
        self.inner = ThreadInner(self._lock)
        self.timer = ThreadTimer(self._lock)
        self.engine = HedgedTransport(self.inner, **options)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        with self._lock, engine_thread(self.timer):
            response = drive(self.engine.handle_async_request(request))
        stream = response.stream
        assert isinstance(stream, AsyncOfSync)
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=stream.sync,
            extensions=response.extensions,
        )

    def close(self) -> None:
        self.timer.close()
        self.inner.sync.close()

    def checked_out(self) -> int:
        return sum(1 for c in self.inner.sync._pool.connections if not c.is_idle())


def options(origins: list[str], delay: float, *, metrics: bool) -> dict[str, Any]:
    return {
        "replicas": {SERVICE: origins},
        "delay": FixedDelay(delay),
        "max_hedges": 1,
        "budget": HedgeBudget(ratio=1.0, burst=1_000_000, min_per_second=0, clock=time.monotonic),
        "metrics": metrics,
        "opentelemetry": False,
    }


# -- 1. cpu -----------------------------------------------------------------------------------

NAMES = (
    "plain httpx.Client",
    "engine on threads, metrics off",
    "engine on threads, metrics on",
    "SyncHedgedTransport, metrics off",
)


def make(name: str, origins: list[str], delay: float) -> httpx.Client:
    if name == "plain httpx.Client":
        return httpx.Client(limits=LIMITS)
    if name.startswith("engine on threads"):
        transport = EngineOnThreads(**options(origins, delay, metrics=name.endswith("on")))
        return httpx.Client(transport=transport, base_url=SERVICE)
    if name == "SyncHedgedTransport, metrics off":
        hedged = SyncHedgedTransport(
            httpx.AsyncHTTPTransport(limits=LIMITS),
            replicas={SERVICE: origins},
            delay=delay,
            max_hedges=1,
            budget=HedgeBudget(ratio=1.0, burst=1_000_000, min_per_second=0),
            metrics=False,
            opentelemetry=False,
        )
        return httpx.Client(transport=hedged, base_url=SERVICE)
    raise ValueError(name)


def cpu(reps: int, n: int) -> dict[str, Any]:
    samples: dict[str, list[float]] = {name: [] for name in NAMES}
    walls: dict[str, list[float]] = {name: [] for name in NAMES}
    loads: dict[str, list[float]] = {name: [] for name in NAMES}
    with FakeService(replicas=3, latency=0.001, mode="process") as svc:
        origins = svc.origins
        clients = {name: make(name, origins, NO_HEDGE) for name in NAMES}

        def run(name: str, count: int) -> float:
            client = clients[name]
            plain = name == "plain httpx.Client"
            begin = time.process_time()
            for i in range(count):
                url = origins[i % 3] + "/item" if plain else "/item"
                client.get(url).raise_for_status()
            return time.process_time() - begin

        for name in NAMES:
            run(name, 200)  # warm-up: connections, caches
        for rep in range(reps):
            for name in NAMES if rep % 2 == 0 else list(reversed(NAMES)):
                wall = time.perf_counter()
                samples[name].append(run(name, n) / n)
                walls[name].append((time.perf_counter() - wall) / n)
                loads[name].append(os.getloadavg()[0])
        for client in clients.values():
            client.close()
    plain = samples["plain httpx.Client"]
    rows: dict[str, dict[str, Any]] = dict(per_request(samples, walls, loads, "plain httpx.Client"))
    for name, values in samples.items():
        rows[name]["ratios"] = [round(v / p, 3) for v, p in zip(values, plain, strict=True)]
    out: dict[str, Any] = {"requests_per_rep": n, "reps": reps, "clients": rows}
    ratio = rows["engine on threads, metrics on"]["ratio_to_plain"]
    out["engine_on_threads_to_plain"] = ratio
    out["verdict"] = verdict(ratio <= 1.3)
    return out


# -- 2. works ---------------------------------------------------------------------------------


def works(total: int) -> dict[str, Any]:
    out: dict[str, Any] = {"law": LAW, "delay_ms": DELAY * 1000, "threads": THREADS}
    threads_before = threading.active_count()
    with FakeService(replicas=3, latency=LAW, mode="process", seed=31, keep=5_000) as svc:
        origins = svc.origins
        for name in ("plain httpx.Client", "engine on threads, metrics on"):
            transport = None
            if name == "plain httpx.Client":
                client = httpx.Client(limits=LIMITS)
            else:
                transport = EngineOnThreads(**options(origins, DELAY, metrics=True))
                client = httpx.Client(transport=transport, base_url=SERVICE)
            svc.reset_stats()
            latencies: list[float] = []
            hedges = [0]
            lock = threading.Lock()
            rng = random.Random(7)

            def one(i: int, name: str = name, client: httpx.Client = client) -> None:
                if name == "plain httpx.Client":
                    with lock:
                        url = rng.choice(origins) + "/item"
                else:
                    url = "/item"
                begin = time.perf_counter()
                response = client.get(url, headers={"x-request-id": f"{name}-{i}"})
                response.raise_for_status()
                elapsed = time.perf_counter() - begin
                info = response.extensions.get("hedge")
                with lock:
                    latencies.append(elapsed)
                    hedges[0] += info is not None and info.attempts > 1

            on_threads(total, one, THREADS)
            deadline = time.perf_counter() + 5.0
            while time.perf_counter() < deadline:  # losers finish or leave
                stats = svc.stats()
                if sum(r.in_flight for r in stats.replicas) == 0:
                    break
                time.sleep(0.02)
            checked_out = None if transport is None else transport.checked_out()
            client.close()
            extra = stats.received - total
            out[name] = {
                "requests": total,
                "p50_ms": quantile(latencies, 0.5) * 1000,
                "p99_ms": quantile(latencies, 0.99) * 1000,
                "max_ms": max(latencies) * 1000,
                "extra_load": extra / total,
                "hedged_requests": hedges[0],
                "losers_left_share": stats.abandoned / extra if extra else None,
                "connections_checked_out_before_close": checked_out,
                "threads_left_after_close": threading.active_count() - threads_before,
                "loadavg_1m": os.getloadavg()[0],
            }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer requests")
    parser.add_argument("--skip", nargs="*", default=[], choices=("cpu", "works"))
    parser.add_argument("--output", default="sync_engine", help="results/<output>.json")
    args = parser.parse_args()
    out: dict[str, Any] = {"machine": machine(), "command": command()}
    if "works" not in args.skip:
        out["works"] = works(600 if args.quick else 3_000)
        rows = [
            [
                name,
                r["p50_ms"],
                r["p99_ms"],
                r["extra_load"],
                r["hedged_requests"],
                r["losers_left_share"],
                r["connections_checked_out_before_close"],
                r["threads_left_after_close"],
            ]
            for name, r in out["works"].items()
            if isinstance(r, dict)
        ]
        print_table(
            f"{LAW}, 3 replicas, {THREADS} threads, delay {DELAY * 1000:.0f} ms",
            ["client", "p50 ms", "p99 ms", "extra load", "hedged", "losers left", "busy conns",
             "threads"],  # fmt: skip
            rows,
        )
    if "cpu" not in args.skip:
        reps, n = (3, 300) if args.quick else (9, 1_000)
        out["cpu"] = cpu(reps, n)
        c = out["cpu"]
        print_table(
            "CPU per unhedged request",
            ["client", "CPU µs/req", "× plain", "wall µs/req", "load 1m"],
            [
                [
                    name,
                    r["us_per_request"],
                    r["ratio_to_plain"],
                    r["wall_us_per_request"],
                    r["loadavg_1m"],
                ]
                for name, r in c["clients"].items()
            ],
        )
        print(f"engine on threads / plain: {c['engine_on_threads_to_plain']:.2f} {c['verdict']}")
    print(write_json(args.output, out))


if __name__ == "__main__":
    main()
