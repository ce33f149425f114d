"""``hedgeclient demo``: start the servers, warm up, send the rounds, measure.

The demo starts :class:`~hedgeclient.testing.FakeService` in its own process (so that
the server does not compete with the measuring client for the GIL), warms up two
clients, then sends the same workload through each, in rounds that alternate which
client goes first: a plain ``httpx.AsyncClient`` that sends request ``i`` to replica
``i mod 3``, and one whose transport is :class:`~hedgeclient.HedgedTransport` over the
same replicas, with the library's defaults (the adaptive delay, the default budget). A
probe task in the client's event loop measures how late the loop wakes it: the client's
own scheduling delay, which every latency it measures also contains.

Strictly private: the command line is the interface.
"""

from __future__ import annotations

import itertools
import os
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import anyio
import anyio.to_thread
import httpx

from hedgeclient import AdaptiveDelay, HedgedTransport, PowerOfTwoChoices
from hedgeclient.cli._args import UsageError
from hedgeclient.cli.demo._drive import Send, Tally, drive
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


@dataclass
class _Client:
    """One side of the comparison: how it sends, and what it measured. Strictly private."""

    phase: Phase
    send: Send
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


def _hedged_transport(svc: FakeService, options: Options, tally: Tally) -> HedgedTransport:
    """The library's defaults, except what the options set: a fixed delay or a quantile."""
    delay: float | AdaptiveDelay | None = options.delay
    if options.quantile is not None:
        delay = AdaptiveDelay(quantile=options.quantile)
    return HedgedTransport(
        httpx.AsyncHTTPTransport(limits=_limits()),
        replicas={SERVICE: svc.origins},
        delay=delay,
        selector=PowerOfTwoChoices(rng=random.Random(options.seed)),  # seeded: replays
        hooks=[tally],
        metrics=options.metrics_port is not None,
        name="demo",
    )


async def _compare(svc: FakeService, options: Options, progress: Progress) -> Run:
    """Warm up a plain and a hedged client over ``svc``, then measure them in rounds.

    The plain client sends requests round-robin to the replicas: as evenly as the hedged
    client's load-aware choice spreads them, so both connection pools hold about as
    many connections (httpcore's pool costs CPU per request in proportion to them).
    Rounds alternate which client goes first, so a trend in the machine's load weighs
    on both alike.
    """
    paths = [f"/items/{i}" for i in range(options.requests)]
    warm_paths = [f"/warmup/{i}" for i in range(options.warmup)]
    replicas = itertools.cycle(svc.origins)
    tally = Tally()
    transport = _hedged_transport(svc, options, tally)
    policy = transport.delay_policy
    route = f"GET {SERVICE}"
    plain_transport = httpx.AsyncHTTPTransport(limits=_limits())
    async with (
        httpx.AsyncClient(transport=plain_transport) as plain_client,
        httpx.AsyncClient(transport=transport) as hedged_client,
    ):

        async def send_plain(path: str) -> httpx.Response:
            return await plain_client.get(next(replicas) + path)

        async def send_hedged(path: str) -> httpx.Response:
            return await hedged_client.get(SERVICE + path)

        for name, send in (("plain", send_plain), ("hedged", send_hedged)):
            # As many in flight as when measured, so that as many connections open.
            warm = Phase.empty(name, options.warmup, 1)
            tick = progress.bar(f"{name}: warm-up", options.warmup)
            every = range(options.warmup)
            await drive(send, warm_paths, warm, every, 1, options.in_flight, tick, probe=False)
        await anyio.sleep(_SETTLE)  # the warm-up's last cancelled backups
        warmup_delay = policy.hedge_delay(route)
        warmup_left = True
        if isinstance(policy, AdaptiveDelay):
            state = policy.statistics().routes.get(route)
            warmup_left = state is not None and not state.warming_up

        clients = (
            _Client(
                Phase.empty("plain", options.parents, options.fanout),
                send_plain,
                progress.bar("plain", options.parents),
                settle=False,
            ),
            _Client(
                Phase.empty("hedged", options.parents, options.fanout),
                send_hedged,
                progress.bar("hedged", options.parents),
                settle=True,
            ),
        )
        tally.reset()  # forget the warm-up's backups
        for number, block in enumerate(rounds(options.parents, options.rounds)):
            for client in clients if number % 2 == 0 else clients[::-1]:
                await anyio.to_thread.run_sync(svc.reset_stats)
                await drive(
                    client.send,
                    paths,
                    client.phase,
                    block,
                    options.fanout,
                    options.concurrency,
                    client.tick,
                )
                if client.settle:
                    await anyio.sleep(_SETTLE)
                client.phase.received += (await anyio.to_thread.run_sync(svc.stats)).received
        hedged = clients[1].phase
        hedged.final_delay = policy.hedge_delay(route)
    hedged.backups, hedged.won, hedged.suppressed = tally.backups, tally.won, tally.suppressed
    for client in clients:
        client.phase.finish()
    return Run(
        options=options,
        plain=clients[0].phase,
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
