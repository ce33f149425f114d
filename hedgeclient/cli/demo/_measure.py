"""``hedgeclient demo``: start the servers, warm up, send the rounds, measure.

The demo starts :class:`~hedgeclient.testing.FakeService` in its own process (so that
the server does not compete with the measuring client for the GIL), warms up two
clients, then sends the same workload through each, in rounds that alternate which
client goes first: a plain ``httpx.AsyncClient`` that sends request ``i`` to replica
``i mod 3``, and one whose transport is :class:`~hedgeclient.HedgedTransport` over the
same replicas, with the library's defaults (the adaptive delay, the default budget). A
probe task in the client's event loop measures how late the loop wakes it: the client's
own scheduling delay, which every latency it measures also contains.

With ``--client sync`` the two clients are ``httpx.Client`` s, the hedged one through
:class:`~hedgeclient.SyncHedgedTransport` with the same settings, each driven from one
thread per request in flight (:mod:`._clients`, :mod:`._drive_sync`; a probe thread for
the lag) while this event loop only starts, paces and reads the rounds.

Strictly private: the command line is the interface.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import anyio
import anyio.to_thread

from hedgeclient import AdaptiveDelay
from hedgeclient.cli._args import UsageError
from hedgeclient.cli.demo._clients import SERVICE, Drive, clients
from hedgeclient.cli.demo._drive import Tally
from hedgeclient.cli.demo._model import Phase, Run
from hedgeclient.cli.demo._options import Options, usable_cores
from hedgeclient.cli.demo._progress import Progress, Tick
from hedgeclient.testing import FakeService

__all__ = ["REPLICAS", "SERVICE", "measure", "rounds", "start_metrics"]

REPLICAS = 3

_SETTLE = 0.1
"""Seconds to wait after a phase before reading the servers' accounting, so that a
backup sent just before the end (and cancelled at once) has reached its replica."""


@dataclass
class _Client:
    """One side of the comparison: how it sends, and what it measured. Strictly private."""

    phase: Phase
    run: Drive
    tick: Tick
    settle: bool  # wait for stragglers (cancelled backups) before reading the servers


async def measure(options: Options, progress: Progress) -> Run:
    """Start the servers, warm up both clients, run the rounds; return the measurements.

    Raises:
        UsageError: the service or the metrics server cannot start.
    """
    started = time.perf_counter()
    metrics_url, stop_metrics = start_metrics(options.metrics_port)
    try:
        service = FakeService(
            replicas=REPLICAS,
            latency=options.law,
            slowness=options.slowness,
            seed=options.seed,
            mode="process",
        )
        progress.note(
            f"Starting {REPLICAS} replicas ({options.latency} law, {options.slowness} "
            "slowness) in a subprocess"
        )
        if metrics_url is not None:  # on stderr: stdout is the report (or the JSON)
            print(f"hedgeclient demo: metrics on {metrics_url} while it runs", file=sys.stderr)
        try:
            await anyio.to_thread.run_sync(service.start)
        except (OSError, ImportError) as exc:  # a port, a time-out, or no uvicorn
            msg = f"cannot start the service: {exc}"
            raise UsageError(msg) from exc
        try:
            run = await _compare(service, options, progress)
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(service.stop)
    finally:
        stop_metrics()
    run.elapsed = time.perf_counter() - started
    run.metrics_url = metrics_url
    run.cores = usable_cores()
    run.load_average = _load_average()
    return run


def _load_average() -> tuple[float, float, float] | None:
    """The machine's load averages, or None where the OS has none (Windows)."""
    try:
        return os.getloadavg()
    except (AttributeError, OSError):  # pragma: no cover - no load average on Windows
        return None


async def _compare(svc: FakeService, options: Options, progress: Progress) -> Run:
    """Warm up a plain and a hedged client over ``svc``, then measure them in rounds.

    The clients are async (tasks on this loop) or sync (threads), as ``options.client``
    says. The plain client sends requests round-robin to the replicas: as evenly as the
    hedged client's load-aware choice spreads them, so both connection pools hold about
    as many connections (httpcore's pool costs CPU per request in proportion to them).
    Rounds alternate which client goes first, so a trend in the machine's load weighs
    on both alike.
    """
    paths = [f"/items/{i}" for i in range(options.requests)]
    warm_paths = [f"/warmup/{i}" for i in range(options.warmup)]
    tally = Tally()
    route = f"GET {SERVICE}"
    async with clients(svc, options, tally) as pair:
        policy = pair.policy
        for name, run in (("plain", pair.plain), ("hedged", pair.hedged)):
            # As many in flight as when measured, so that as many connections open.
            warm = Phase.empty(name, options.warmup, 1)
            tick = progress.bar(f"{name}: warm-up", options.warmup)
            every = range(options.warmup)
            await run(warm_paths, warm, every, 1, options.in_flight, tick, False)
        await anyio.sleep(_SETTLE)  # the warm-up's last cancelled backups
        warmup_delay = policy.hedge_delay(route)
        warmup_left = True
        if isinstance(policy, AdaptiveDelay):
            state = policy.statistics().routes.get(route)
            warmup_left = state is not None and not state.warming_up

        sides = (
            _Client(
                Phase.empty("plain", options.parents, options.fanout),
                pair.plain,
                progress.bar("plain", options.parents),
                settle=False,
            ),
            _Client(
                Phase.empty("hedged", options.parents, options.fanout),
                pair.hedged,
                progress.bar("hedged", options.parents),
                settle=True,
            ),
        )
        tally.reset()  # forget the warm-up's backups
        for number, block in enumerate(rounds(options.parents, options.rounds)):
            for side in sides if number % 2 == 0 else sides[::-1]:
                await anyio.to_thread.run_sync(svc.reset_stats)
                await side.run(
                    paths,
                    side.phase,
                    block,
                    options.fanout,
                    options.concurrency,
                    side.tick,
                    True,
                )
                if side.settle:
                    await anyio.sleep(_SETTLE)
                side.phase.received += (await anyio.to_thread.run_sync(svc.stats)).received
        hedged = sides[1].phase
        hedged.final_delay = policy.hedge_delay(route)
    hedged.backups, hedged.won, hedged.suppressed = tally.backups, tally.won, tally.suppressed
    for side in sides:
        side.phase.finish()
    return Run(
        options=options,
        plain=sides[0].phase,
        hedged=hedged,
        warmup_delay=warmup_delay,
        warmup_left=warmup_left,
    )


def rounds(parents: int, count: int) -> list[range]:
    """Split ``range(parents)`` into ``count`` consecutive blocks of near-equal size."""
    count = min(count, parents)
    edges = [parents * k // count for k in range(count + 1)]
    return [range(edges[k], edges[k + 1]) for k in range(count)]


def start_metrics(port: int | None) -> tuple[str | None, Callable[[], None]]:
    """Serve the default Prometheus registry on 127.0.0.1:``port``; return its URL and a stop.

    Raises:
        UsageError: the port cannot be bound.
    """
    if port is None:
        return None, lambda: None
    from prometheus_client import start_http_server  # lazy: only when asked

    try:
        server, thread = start_http_server(port, addr="127.0.0.1")
    except OSError as exc:
        msg = f"--metrics-port: cannot listen on 127.0.0.1:{port}: {exc.strerror or exc}"
        raise UsageError(msg) from None

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join()

    return f"http://127.0.0.1:{server.server_port}/metrics", stop
