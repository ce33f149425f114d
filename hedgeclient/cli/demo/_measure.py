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
thread per request in flight (:mod:`._drive_sync`, a probe thread for the lag) while
this event loop only starts, paces and reads the rounds.

Strictly private: the command line is the interface.
"""

from __future__ import annotations

import functools
import itertools
import os
import random
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.to_thread
import httpx

from hedgeclient import (
    AdaptiveDelay,
    DelayPolicy,
    HedgedTransport,
    PowerOfTwoChoices,
    SyncHedgedTransport,
)
from hedgeclient.cli._args import UsageError
from hedgeclient.cli.demo._drive import Send, Tally, drive
from hedgeclient.cli.demo._drive_sync import SyncSend, drive_sync
from hedgeclient.cli.demo._model import Phase, Run
from hedgeclient.cli.demo._options import Options, usable_cores
from hedgeclient.cli.demo._progress import Progress, Tick
from hedgeclient.testing import FakeService

__all__ = ["REPLICAS", "SERVICE", "measure", "rounds", "start_metrics"]

SERVICE = "http://demo"
"""The hedged client's logical origin; the transport maps it to the replicas."""

REPLICAS = 3

_SETTLE = 0.1
"""Seconds to wait after a phase before reading the servers' accounting, so that a
backup sent just before the end (and cancelled at once) has reached its replica."""


def _limits() -> httpx.Limits:
    # No cap on pooled connections, for both clients: the default keeps 20 idle
    # connections over all three replicas, so an uneven moment (or a closed loser)
    # would churn connections mid-run. docs/budget.md: size the pool for backups too.
    return httpx.Limits(max_connections=None, max_keepalive_connections=None, keepalive_expiry=60)


Drive = Callable[[Sequence[str], Phase, range, int, int, Tick, bool], Awaitable[None]]
"""Sends ``parents`` of ``paths`` into a phase through one client: the arguments of
:func:`~._drive.drive` after its ``send``, ``probe`` last."""


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


def _settings(svc: FakeService, options: Options, tally: Tally) -> dict[str, Any]:
    """The hedged client's settings, for either transport: the library's defaults, except
    what the options set (a fixed delay or a quantile)."""
    delay: float | AdaptiveDelay | None = options.delay
    if options.quantile is not None:
        delay = AdaptiveDelay(quantile=options.quantile)
    return {
        "replicas": {SERVICE: svc.origins},
        "delay": delay,
        "selector": PowerOfTwoChoices(rng=random.Random(options.seed)),  # seeded: replays
        "hooks": [tally],
        "metrics": options.metrics_port is not None,
        "name": "demo",
    }


def _hedged_transport(svc: FakeService, options: Options, tally: Tally) -> HedgedTransport:
    """The async hedged client's transport (:func:`_settings`)."""
    inner = httpx.AsyncHTTPTransport(limits=_limits())
    return HedgedTransport(inner, **_settings(svc, options, tally))


def _sync_hedged_transport(svc: FakeService, options: Options, tally: Tally) -> SyncHedgedTransport:
    """The sync hedged client's transport, with the async one's settings
    (:func:`_settings`) and its default engine, on the callers' threads."""
    inner = httpx.HTTPTransport(limits=_limits())
    return SyncHedgedTransport(inner, **_settings(svc, options, tally))


@dataclass
class _Pair:
    """The two clients under comparison, ready to drive. Strictly private."""

    plain: Drive
    hedged: Drive
    policy: DelayPolicy  # the hedged client's


def _on_loop(send: Send) -> Drive:
    """Drive an async client's ``send`` as tasks on this event loop."""

    async def run(
        paths: Sequence[str],
        phase: Phase,
        parents: range,
        fanout: int,
        concurrency: int,
        tick: Tick,
        probe: bool,
    ) -> None:
        await drive(send, paths, phase, parents, fanout, concurrency, tick, probe=probe)

    return run


def _on_threads(send: SyncSend) -> Drive:
    """Drive a sync client's ``send`` from threads while this event loop waits."""

    async def run(
        paths: Sequence[str],
        phase: Phase,
        parents: range,
        fanout: int,
        concurrency: int,
        tick: Tick,
        probe: bool,
    ) -> None:
        stop = threading.Event()
        work = functools.partial(
            drive_sync, send, paths, phase, parents, fanout, concurrency, tick,
            probe=probe, stop=stop,
        )  # fmt: skip
        try:
            # Abandoned on Ctrl-C (the loop cancels its task): ``stop`` then ends the
            # workers after their requests in flight instead of after the round.
            await anyio.to_thread.run_sync(work, abandon_on_cancel=True)
        finally:
            stop.set()

    return run


@asynccontextmanager
async def _async_clients(svc: FakeService, options: Options, tally: Tally) -> AsyncIterator[_Pair]:
    """A plain ``httpx.AsyncClient`` and one through :class:`HedgedTransport`."""
    replicas = itertools.cycle(svc.origins)
    transport = _hedged_transport(svc, options, tally)
    plain_transport = httpx.AsyncHTTPTransport(limits=_limits())
    async with (
        httpx.AsyncClient(transport=plain_transport) as plain_client,
        httpx.AsyncClient(transport=transport) as hedged_client,
    ):

        async def send_plain(path: str) -> httpx.Response:
            return await plain_client.get(next(replicas) + path)

        async def send_hedged(path: str) -> httpx.Response:
            return await hedged_client.get(SERVICE + path)

        yield _Pair(_on_loop(send_plain), _on_loop(send_hedged), transport.delay_policy)


@asynccontextmanager
async def _sync_clients(svc: FakeService, options: Options, tally: Tally) -> AsyncIterator[_Pair]:
    """A plain ``httpx.Client`` and one through :class:`SyncHedgedTransport`, each
    shared by the threads that drive it, as a sync service shares one."""
    replicas = itertools.cycle(svc.origins)
    turn = threading.Lock()  # the threads share the round-robin
    transport = _sync_hedged_transport(svc, options, tally)
    plain_transport = httpx.HTTPTransport(limits=_limits())
    # Closed on this loop's thread: nothing else runs on it meanwhile.
    with (
        httpx.Client(transport=plain_transport) as plain_client,
        httpx.Client(transport=transport) as hedged_client,
    ):

        def send_plain(path: str) -> httpx.Response:
            with turn:
                origin = next(replicas)
            return plain_client.get(origin + path)

        def send_hedged(path: str) -> httpx.Response:
            return hedged_client.get(SERVICE + path)

        yield _Pair(_on_threads(send_plain), _on_threads(send_hedged), transport.delay_policy)


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
    clients = _sync_clients if options.client == "sync" else _async_clients
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
