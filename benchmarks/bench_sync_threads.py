"""A feasibility prototype (issue 26): hedging for ``httpx.Client`` with the primary
attempt in the caller's thread on sync httpcore, a backup on a worker thread and the
loser stopped by shutting its socket down. What would its CPU per unhedged request be
against plain ``httpx.Client``? Not library code: the library's sync client
(``SyncHedgedTransport``) runs the async engine on a loop thread instead.

Run from the repository root::

    .venv/bin/python benchmarks/bench_sync_threads.py            # both parts
    .venv/bin/python benchmarks/bench_sync_threads.py --quick    # fewer requests

The prototype (:class:`ThreadHedged`, an ``httpx.BaseTransport``):

- an ``httpcore.ConnectionPool`` built with the public ``network_backend=``: a
  :class:`WatchedBackend` around ``httpcore.SyncBackend`` whose streams note, for the
  attempt the calling thread runs (a thread-local :class:`Slot`), the socket it is about
  to block on (``get_extra_info("socket")``, public);
- **the hedge timer is the primary's own read**: while the hedge deadline has not
  passed, the primary's read waits at most until it (``NetworkStream.read``'s
  ``timeout``); when that read times out, the stream starts the backup on a worker
  thread and reads on with what is left of the caller's timeout. No timer thread, no
  wake-up for a request that is never hedged. (A primary still connecting, or queued
  for a connection of a full pool, hedges late: its next read hedges at once.)
- the first attempt with response headers wins, under the race's lock; the loser is
  stopped by ``socket.shutdown(SHUT_RDWR)``: its blocked read returns at once, httpcore
  closes that connection (the replica sees the client leave) and frees its pool slot,
  and its thread goes on (the caller's) or returns to the pool (a worker);
- a minimal policy behind one lock (:class:`MiniPolicy`): the delay read, a budget
  deposit and a replica chosen round robin at the start, one latency sample recorded
  at the end; a backup draws one token.

Parts:

1. **cpu**: CPU per unhedged request (``time.process_time()`` of this process,
   sequential requests; 3 replicas of ``FakeService(latency=0.001, mode="process")``
   in another process; a hedge delay of 50 ms, which a request of about 2 ms does not
   reach, the hedges that fired all the same counted), interleaved repetitions,
   medians of the per-repetition ratios to plain ``httpx.Client``: plain
   ``httpx.Client``, the prototype, the prototype with a timer thread instead of the
   read's timeout (:class:`HeapTimer`: one thread for all requests, a heap of
   deadlines; it wakes once per request, hedged or not), and ``SyncHedgedTransport``
   (metrics off) for reference; the load average beside each. Target (issue 26): at
   most 1.3x plain ``httpx.Client``.
2. **works**: the prototype hedging for real, the log-normal law of ``bench_sync.py``
   (median 12 ms, p95 30 ms), 3 replicas, a fixed 30 ms delay, 4 threads sharing one
   client, beside plain ``httpx.Client``: p99, extra load, losers seen leaving by the
   replicas, threads and pool connections left after ``close()``.

Results: printed, and written to ``benchmarks/results/<output>.json``
(``sync_threads.json``).
"""

from __future__ import annotations

import argparse
import contextlib
import heapq
import os
import random
import socket
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpcore
import httpx
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

from hedgeclient import HedgeBudget, SyncHedgedTransport
from hedgeclient.testing import FakeService

LIMITS = httpx.Limits(max_connections=100, max_keepalive_connections=100)
# Far above a request to a 1 ms replica (~2 ms), so that no hedge fires, yet short enough
# that a timer thread's deadlines come due within its own repetition (it wakes for each).
NO_HEDGE = 0.050
DELAY = 0.030
LAW = "lognormal:median=0.012,sigma=0.56"
THREADS = 4

# httpcore's exceptions as httpx raises them (httpx's own map is private).
_ERRORS: tuple[tuple[type[Exception], type[httpx.HTTPError]], ...] = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.ProtocolError, httpx.ProtocolError),
    (httpcore.NetworkError, httpx.NetworkError),
)


def _as_httpx(exc: Exception) -> Exception:
    for theirs, ours in _ERRORS:
        if isinstance(exc, theirs):
            error = ours(str(exc))
            error.__cause__ = exc
            return error
    return exc


# -- the attempt a thread runs, and the stream that watches it ------------------------------


class Slot:
    """One attempt: the socket it blocks on, whether it was stopped, its hedge deadline
    (``time.perf_counter``) and what starts the backup."""

    __slots__ = ("done", "hedge", "hedge_at", "sock", "stopped")

    def __init__(self, hedge_at: float | None = None, hedge: Any = None) -> None:
        self.sock: socket.socket | None = None
        self.stopped = False
        self.done = False
        self.hedge_at = hedge_at
        self.hedge = hedge

    def stop(self) -> None:
        """Stop the attempt from another thread (under the race's lock): a blocked read
        returns at once, the next one fails."""
        self.stopped = True
        sock = self.sock
        if sock is not None and not self.done:
            with contextlib.suppress(OSError):  # closed meanwhile: nothing to stop
                sock.shutdown(socket.SHUT_RDWR)


_STOPPED = "attempt stopped: another attempt won"
_local = threading.local()  # .slot: the attempt this thread runs, or None


class WatchedStream(httpcore.NetworkStream):
    """``SyncBackend``'s stream; notes the socket for the calling thread's attempt, and
    is the primary's hedge timer."""

    __slots__ = ("_inner", "_sock")

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner
        self._sock: socket.socket = inner.get_extra_info("socket")

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        slot: Slot | None = getattr(_local, "slot", None)
        if slot is None:  # a body read after the race: no attempt to watch
            return self._inner.read(max_bytes, timeout)
        slot.sock = self._sock
        if slot.stopped:  # stopped before it blocked (the shutdown found no socket)
            raise httpcore.ReadError(_STOPPED)
        while slot.hedge_at is not None:
            start = time.perf_counter()
            wait = slot.hedge_at - start
            if wait > 0 and (timeout is None or wait < timeout):
                try:
                    return self._inner.read(max_bytes, wait)
                except httpcore.ReadTimeout:  # the hedge deadline, not the caller's
                    if timeout is not None:
                        timeout -= time.perf_counter() - start
            slot.hedge_at = None
            slot.hedge()
        return self._inner.read(max_bytes, timeout)

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        slot: Slot | None = getattr(_local, "slot", None)
        if slot is not None:
            slot.sock = self._sock
            if slot.stopped:
                raise httpcore.WriteError(_STOPPED)
        self._inner.write(buffer, timeout)

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: Any,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        return WatchedStream(self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class WatchedBackend(httpcore.NetworkBackend):
    """``httpcore.SyncBackend`` whose streams are :class:`WatchedStream`."""

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
        stream = self._inner.connect_tcp(host, port, timeout, local_address, socket_options)
        return WatchedStream(stream)

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        return WatchedStream(self._inner.connect_unix_socket(path, timeout, socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


# -- the policy: one lock ---------------------------------------------------------------------


class MiniPolicy:
    """The least shared state a hedging client touches per request, behind one lock: the
    delay (fixed here), a budget (10 % deposits, a token per backup) and a round-robin
    replica choice at the start; a latency sample at the end."""

    def __init__(self, delay: float, replicas: int) -> None:
        self._lock = threading.Lock()
        self._delay = delay
        self._tokens = 10.0
        self._replicas = replicas
        self._next = 0
        self.samples: deque[float] = deque(maxlen=1_000)

    def begin(self) -> tuple[float, int]:
        with self._lock:
            self._tokens = min(self._tokens + 0.1, 100.0)
            self._next = (self._next + 1) % self._replicas
            return self._delay, self._next

    def try_backup(self) -> bool:
        with self._lock:
            if self._tokens < 1.0:
                return False
            self._tokens -= 1.0
            return True

    def record(self, latency: float) -> None:
        with self._lock:
            self.samples.append(latency)


# -- the transport ----------------------------------------------------------------------------


class HeapTimer:
    """The other way to time a hedge: one timer thread for every request, a heap of
    deadlines behind a condition; cancelled entries are dropped when their deadline
    comes (one wake-up of the thread per request, hedged or not)."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._heap: list[tuple[float, int, list[Any]]] = []
        self._seq = 0
        self._thread: threading.Thread | None = None
        self._closed = False

    def call_at(self, deadline: float, fn: Any) -> list[Any]:
        """Call ``fn()`` on the timer thread at ``deadline``; set ``entry[0] = None`` on
        the entry returned to cancel."""
        entry = [fn]
        with self._cond:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="hedge-timer")
                self._thread.start()
            self._seq += 1
            heapq.heappush(self._heap, (deadline, self._seq, entry))
            if self._heap[0][2] is entry:  # a new earliest deadline: wake the thread
                self._cond.notify()
        return entry

    def _run(self) -> None:
        with self._cond:
            while not self._closed:
                if not self._heap:
                    self._cond.wait()
                    continue
                wait = self._heap[0][0] - time.perf_counter()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
                fn = heapq.heappop(self._heap)[2][0]
                if fn is not None:
                    self._cond.release()
                    try:
                        fn()
                    finally:
                        self._cond.acquire()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
            thread = self._thread
        if thread is not None:
            thread.join()


class _Body(httpx.SyncByteStream):
    def __init__(self, stream: Iterable[bytes]) -> None:
        self._stream = stream

    def __iter__(self) -> Iterator[bytes]:
        try:
            yield from self._stream
        except httpcore.NetworkError as exc:  # (and its other errors, as httpx maps them)
            raise _as_httpx(exc) from exc

    def close(self) -> None:
        close = getattr(self._stream, "close", None)
        if close is not None:
            close()


class _Race:
    """One request's two attempts: the first with headers wins; the other is stopped."""

    __slots__ = ("backup", "done", "error", "lock", "primary", "response", "winner")

    def __init__(self, primary: Slot) -> None:
        self.lock = threading.Lock()
        self.primary = primary
        self.backup: Slot | None = None
        self.winner: Slot | None = None
        self.response: httpcore.Response | None = None  # the backup's, if it won
        self.error: Exception | None = None  # the backup's, if it failed
        self.done = threading.Event()  # the backup ended

    def claim(self, slot: Slot) -> bool:
        """``slot`` has its headers: True if it wins (then the other is stopped)."""
        with self.lock:
            slot.done = True
            if self.winner is not None:
                return False
            self.winner = slot
            other = self.backup if slot is self.primary else self.primary
            if other is not None:
                other.stop()
            return True


class ThreadHedged(httpx.BaseTransport):
    """The prototype: see the module docstring. ``origins``: the replicas of
    :data:`SERVICE`; ``workers``: the threads backups may hold at once."""

    def __init__(
        self, origins: list[str], delay: float, *, workers: int = 8, timer: str = "read"
    ) -> None:
        self._pool = httpcore.ConnectionPool(
            max_connections=LIMITS.max_connections,
            max_keepalive_connections=LIMITS.max_keepalive_connections,
            keepalive_expiry=LIMITS.keepalive_expiry,
            network_backend=WatchedBackend(),
        )
        self._origins = [httpx.URL(o) for o in origins]
        self._policy = MiniPolicy(delay, len(origins))
        self._workers = workers
        self._executor: ThreadPoolExecutor | None = None  # started by the first backup
        self._executor_lock = threading.Lock()
        self.hedges = 0
        self._timer = HeapTimer() if timer == "thread" else None

    def _core_request(self, request: httpx.Request, replica: int, backup: bool) -> httpcore.Request:
        target = self._origins[replica]
        headers = request.headers.raw
        if backup:
            headers = [*headers, (b"hedge-attempt", b"2")]
        return httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=target.raw_scheme,
                host=target.raw_host,
                port=target.port,
                target=request.url.raw_path,
            ),
            headers=headers,
            content=request.stream,
            extensions=request.extensions,
        )

    def _send(self, request: httpcore.Request, slot: Slot) -> httpcore.Response:
        _local.slot = slot
        try:
            return self._pool.handle_request(request)
        finally:
            _local.slot = None

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        start = time.perf_counter()
        delay, replica = self._policy.begin()
        hedgeable = request.method in ("GET", "HEAD", "OPTIONS")
        timer = self._timer
        primary = Slot(start + delay if hedgeable and timer is None else None)
        race = _Race(primary)
        hedge = primary.hedge = lambda: self._hedge(race, request, replica)
        entry = None if timer is None or not hedgeable else timer.call_at(start + delay, hedge)
        try:
            response = self._send(self._core_request(request, replica, False), primary)
        except Exception as exc:
            with race.lock:
                primary.done = True
                backup = race.backup
            if entry is not None:
                entry[0] = None
            if backup is None:  # no backup went: the primary's own error
                raise _as_httpx(exc) from exc
            race.done.wait()  # (a stopped primary: the backup won or failed)
            if race.response is None:  # both failed: the last attempt's own error
                error = race.error or exc
                raise _as_httpx(error) from error
            response = race.response
        except BaseException:  # KeyboardInterrupt: the backup must not run on
            with race.lock:
                primary.done = True
                if race.backup is not None:
                    race.backup.stop()
            raise
        else:
            if entry is not None:
                entry[0] = None  # the timer's entry: the primary answered, no backup
            if race.claim(primary):
                self._policy.record(time.perf_counter() - start)
            else:  # the backup won while the primary's headers came in
                response.close()
                race.done.wait()
                assert race.response is not None
                response = race.response
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_Body(response.stream),  # type: ignore[arg-type]
            extensions=response.extensions,
        )

    def _hedge(self, race: _Race, request: httpx.Request, primary: int) -> None:
        """In the primary's thread, at the hedge deadline: start the backup, if the
        budget and a worker allow."""
        if not self._policy.try_backup():
            return
        with self._executor_lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(self._workers, "hedge-backup")
        slot = Slot()
        with race.lock:
            if race.winner is not None:
                return
            race.backup = slot
        self.hedges += 1
        core = self._core_request(request, (primary + 1) % len(self._origins), True)
        self._executor.submit(self._run_backup, race, core, slot)

    def _run_backup(self, race: _Race, core: httpcore.Request, slot: Slot) -> None:
        try:
            response = self._send(core, slot)
        except Exception as exc:
            with race.lock:
                slot.done = True
            race.error = exc
            race.done.set()
            return
        if race.claim(slot):
            race.response = response
        else:
            response.close()
        race.done.set()

    def close(self) -> None:
        with self._executor_lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)
        if self._timer is not None:
            self._timer.close()
        self._pool.close()

    def checked_out(self) -> int:
        """Connections of the pool not idle (in use, or a request's)."""
        return sum(1 for c in self._pool.connections if not c.is_idle())


# -- 1. cpu -----------------------------------------------------------------------------------


def make(name: str, origins: list[str], delay: float) -> httpx.Client:
    if name == "plain httpx.Client":
        return httpx.Client(limits=LIMITS)
    if name == "prototype (threads)":
        return httpx.Client(transport=ThreadHedged(origins, delay), base_url=SERVICE)
    if name == "prototype, timer thread":
        transport = ThreadHedged(origins, delay, timer="thread")
        return httpx.Client(transport=transport, base_url=SERVICE)
    if name == "SyncHedgedTransport":
        transport = SyncHedgedTransport(
            httpx.AsyncHTTPTransport(limits=LIMITS),
            replicas={SERVICE: origins},
            delay=delay,
            max_hedges=1,
            budget=HedgeBudget(ratio=1.0, burst=1_000_000, min_per_second=0),
            metrics=False,
            opentelemetry=False,
        )
        return httpx.Client(transport=transport, base_url=SERVICE)
    raise ValueError(name)


NAMES = (
    "plain httpx.Client",
    "prototype (threads)",
    "prototype, timer thread",
    "SyncHedgedTransport",
)


def cpu(reps: int, n: int) -> dict[str, Any]:
    samples: dict[str, list[float]] = {name: [] for name in NAMES}
    walls: dict[str, list[float]] = {name: [] for name in NAMES}
    loads: dict[str, list[float]] = {name: [] for name in NAMES}
    with FakeService(replicas=3, latency=0.001, mode="process") as svc:
        origins = svc.origins
        clients = {name: make(name, origins, NO_HEDGE) for name in NAMES}
        hedges = dict.fromkeys(NAMES, 0)

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
        for name, client in clients.items():
            transport = client._transport  # a benchmark's look: the prototype's counter
            if isinstance(transport, ThreadHedged):
                hedges[name] = transport.hedges
            client.close()
    plain = samples["plain httpx.Client"]
    rows: dict[str, dict[str, Any]] = dict(per_request(samples, walls, loads, "plain httpx.Client"))
    for name, values in samples.items():
        rows[name]["ratios"] = [round(v / p, 3) for v, p in zip(values, plain, strict=True)]
        rows[name]["hedges_fired"] = hedges[name]
    out: dict[str, Any] = {"requests_per_rep": n, "reps": reps, "clients": rows}
    ratio = out["clients"]["prototype (threads)"]["ratio_to_plain"]
    out["prototype_to_plain"] = ratio
    out["verdict"] = verdict(ratio <= 1.3)
    return out


# -- 2. works ---------------------------------------------------------------------------------


def _threaded(client: httpx.Client, name: str, origins: list[str], total: int) -> list[float]:
    """``total`` requests on :data:`THREADS` threads sharing ``client``; their latencies."""
    latencies: list[float] = []
    lock = threading.Lock()
    rng = random.Random(7)

    def one(i: int) -> None:
        if name == "plain httpx.Client":
            with lock:
                url = rng.choice(origins) + "/item"
        else:
            url = "/item"
        begin = time.perf_counter()
        client.get(url, headers={"x-request-id": f"{name}-{i}"}).raise_for_status()
        with lock:
            latencies.append(time.perf_counter() - begin)

    on_threads(total, one, THREADS)
    return latencies


def works(total: int) -> dict[str, Any]:
    out: dict[str, Any] = {"law": LAW, "delay_ms": DELAY * 1000, "threads": THREADS}
    threads_before = threading.active_count()
    with FakeService(replicas=3, latency=LAW, mode="process", seed=31, keep=5_000) as svc:
        origins = svc.origins
        for name in ("plain httpx.Client", "prototype (threads)", "prototype, timer thread"):
            timer = "thread" if "timer" in name else "read"
            transport = (
                ThreadHedged(origins, DELAY, timer=timer) if name != "plain httpx.Client" else None
            )
            client = (
                make(name, origins, DELAY)
                if transport is None
                else httpx.Client(transport=transport, base_url=SERVICE)
            )
            svc.reset_stats()
            latencies = _threaded(client, name, origins, total)
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
                "over_100ms": sum(1 for x in latencies if x > 0.100),
                "extra_load": extra / total,
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
    parser.add_argument("--output", default="sync_threads", help="results/<output>.json")
    args = parser.parse_args()
    out: dict[str, Any] = {"machine": machine(), "command": command()}
    if "works" not in args.skip:
        out["works"] = works(600 if args.quick else 3_000)
        rows = [
            [
                name,
                r["p50_ms"],
                r["p99_ms"],
                r["over_100ms"],
                r["extra_load"],
                r["losers_left_share"],
                r["connections_checked_out_before_close"],
                r["threads_left_after_close"],
            ]
            for name, r in out["works"].items()
            if isinstance(r, dict)
        ]
        print_table(
            f"{LAW}, 3 replicas, {THREADS} threads, delay {DELAY * 1000:.0f} ms",
            [
                "client",
                "p50 ms",
                "p99 ms",
                "> 100 ms",
                "extra load",
                "losers left",
                "busy conns",
                "threads",
            ],
            rows,
        )
    if "cpu" not in args.skip:
        reps, n = (3, 300) if args.quick else (9, 1_000)
        out["cpu"] = cpu(reps, n)
        c = out["cpu"]
        print_table(
            "CPU per unhedged request",
            ["client", "CPU µs/req", "× plain", "wall µs/req", "load 1m", "hedges"],
            [
                [
                    name,
                    r["us_per_request"],
                    r["ratio_to_plain"],
                    r["wall_us_per_request"],
                    r["loadavg_1m"],
                    r["hedges_fired"],
                ]
                for name, r in c["clients"].items()
            ],
        )
        print(f"prototype / plain httpx.Client: {c['prototype_to_plain']:.2f} {c['verdict']}")
    print(write_json(args.output, out))


if __name__ == "__main__":
    main()
