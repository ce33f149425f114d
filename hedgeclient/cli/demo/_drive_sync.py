"""``hedgeclient demo --client sync``: send a workload through one sync client, on threads.

:func:`drive_sync` is :func:`~hedgeclient.cli.demo._drive.drive` for an ``httpx.Client``:
the same parents, the same phase, the same accounting (:func:`~._drive.record`), with a
thread where the async driver has a task. ``concurrency`` worker threads each take the
next logical request and send it on their own thread, as each async worker does on its
task; with fan-out, a parent's children are sent at once from a pool of ``concurrency *
fanout`` threads (one per HTTP request in flight, as the async driver starts a task per
child). A probe thread sleeps again and again and records how late it wakes: the
client's own scheduling delay (the GIL and the OS), as the async probe measures its
event loop's.

Strictly private: the command line is the interface.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import httpx

from hedgeclient.cli.demo._drive import PROBE_INTERVAL, record
from hedgeclient.cli.demo._model import Phase
from hedgeclient.cli.demo._progress import Tick

__all__ = ["SyncSend", "drive_sync"]

SyncSend = Callable[[str], httpx.Response]


def _probe(lags: list[float], stop: threading.Event) -> None:
    """Sleep :data:`PROBE_INTERVAL` until ``stop``; record how late each wake-up is."""
    while True:
        started = time.perf_counter()
        if stop.wait(PROBE_INTERVAL):
            return
        lags.append(max(0.0, time.perf_counter() - started - PROBE_INTERVAL))


def drive_sync(
    send: SyncSend,
    paths: Sequence[str],
    phase: Phase,
    parents: range,
    fanout: int,
    concurrency: int,
    tick: Tick,
    *,
    probe: bool = True,
    stop: threading.Event | None = None,
) -> None:
    """Send the logical requests ``parents``, ``concurrency`` at once, into ``phase``,
    each from a thread of its own (blocks until all are answered).

    Parent ``i`` is the HTTP requests ``paths[i * fanout : (i + 1) * fanout]``, sent
    concurrently; its latency is the time until the last of them finished. Once
    ``stop`` is set, the workers take no further parent (the caller gave up: Ctrl-C).
    """
    pending = iter(parents)
    lock = threading.Lock()  # the workers share the parents and the phase's counts
    stop = stop or threading.Event()

    def one(index: int) -> None:
        started = time.perf_counter()
        try:
            response = send(paths[index])
        except httpx.HTTPError:
            with lock:
                phase.errors += 1
            return
        elapsed = time.perf_counter() - started
        with lock:
            record(phase, index, elapsed, response)

    def worker(children: ThreadPoolExecutor, timings: list[float] | None) -> None:
        while not stop.is_set():
            with lock:
                parent = next(pending, None)
            if parent is None:
                return
            if timings is None:
                one(parent)
            else:
                started = time.perf_counter()
                batch = range(parent * fanout, (parent + 1) * fanout)
                for future in [children.submit(one, child) for child in batch]:
                    future.result()
                if not any(math.isnan(phase.children[child]) for child in batch):
                    timings[parent] = time.perf_counter() - started
            tick()

    workers = max(1, min(concurrency, len(parents)))  # an executor needs one thread
    done = threading.Event()
    prober = threading.Thread(target=_probe, args=(phase.lags, done), name="demo-probe")
    started, cpu = time.perf_counter(), time.process_time()
    if probe:
        prober.start()
    try:
        # The children's pool starts its threads as they are needed: none without fan-out.
        with (
            ThreadPoolExecutor(workers, f"demo-{phase.name}") as pool,
            ThreadPoolExecutor(workers * fanout, f"demo-{phase.name}-child") as children,
        ):
            futures = [pool.submit(worker, children, phase.parents) for _ in range(workers)]
            for future in futures:
                future.result()  # a worker's own failure (not an HTTP error) propagates
    finally:
        done.set()
        if probe:
            prober.join()
    phase.elapsed += time.perf_counter() - started
    phase.cpu += time.process_time() - cpu
