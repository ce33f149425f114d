"""``hedgeclient demo``: send a workload through one client, and time it.

Strictly private: the command line is the interface.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence

import anyio
import httpx

from hedgeclient import HedgeInfo, RequestRecord
from hedgeclient.cli.demo._model import Phase
from hedgeclient.cli.demo._progress import Tick

__all__ = ["PROBE_INTERVAL", "Send", "Tally", "drive", "record"]

PROBE_INTERVAL = 0.005
"""Seconds the lag probe sleeps between wake-ups (200 a second: negligible work)."""

Send = Callable[[str], Awaitable[httpx.Response]]


class Tally:
    """The hook that counts backups from :class:`RequestRecord` s. Strictly private.

    Under ``SyncHedgedTransport`` it is called from many threads, one at a time: hooks
    run as engine code, under the engine's lock (``docs/how-it-works.md``).
    """

    def __init__(self) -> None:
        self.backups = 0
        self.won = 0
        self.suppressed: Counter[str] = Counter()

    def __call__(self, record: RequestRecord, /) -> None:
        self.backups += len(record.attempts) - 1
        self.won += record.backup_won
        if record.suppressed is not None:
            self.suppressed[record.suppressed] += 1

    def reset(self) -> None:
        self.backups = self.won = 0
        self.suppressed = Counter()


def record(phase: Phase, index: int, elapsed: float, response: httpx.Response) -> None:
    """Enter request ``index``'s answer into ``phase``: its time to the full response
    (``elapsed``, seconds) and its hedge delay, or an error for a status other than 200."""
    if response.status_code != 200:
        phase.errors += 1
        return
    phase.children[index] = elapsed
    info = response.extensions.get("hedge")
    if isinstance(info, HedgeInfo):
        phase.delays.append(info.delay)


async def _probe(lags: list[float]) -> None:
    """Sleep :data:`PROBE_INTERVAL` again and again; record how late each wake-up is."""
    while True:
        started = time.perf_counter()
        await anyio.sleep(PROBE_INTERVAL)
        lags.append(max(0.0, time.perf_counter() - started - PROBE_INTERVAL))


async def drive(
    send: Send,
    paths: Sequence[str],
    phase: Phase,
    parents: range,
    fanout: int,
    concurrency: int,
    tick: Tick,
    probe: bool = True,
) -> None:
    """Send the logical requests ``parents``, ``concurrency`` at once, into ``phase``.

    Parent ``i`` is the HTTP requests ``paths[i * fanout : (i + 1) * fanout]``, sent
    concurrently; its latency is the time until the last of them finished.
    """
    pending = iter(parents)

    async def one(index: int) -> None:
        started = time.perf_counter()
        try:
            response = await send(paths[index])
        except httpx.HTTPError:
            phase.errors += 1
            return
        record(phase, index, time.perf_counter() - started, response)

    async def worker() -> None:
        for parent in pending:  # shared: each worker takes the next parent
            if phase.parents is None:
                await one(parent)
            else:
                started = time.perf_counter()
                async with anyio.create_task_group() as group:
                    for child in range(parent * fanout, (parent + 1) * fanout):
                        group.start_soon(one, child)
                children = phase.children[parent * fanout : (parent + 1) * fanout]
                if not any(math.isnan(x) for x in children):
                    phase.parents[parent] = time.perf_counter() - started
            tick()

    started, cpu = time.perf_counter(), time.process_time()
    async with anyio.create_task_group() as outer:
        if probe:
            outer.start_soon(_probe, phase.lags)
        async with anyio.create_task_group() as workers:
            for _ in range(min(concurrency, len(parents))):
                workers.start_soon(worker)
        outer.cancel_scope.cancel()
    phase.elapsed += time.perf_counter() - started
    phase.cpu += time.process_time() - cpu
