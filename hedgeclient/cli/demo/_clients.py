"""``hedgeclient demo``: the two clients it compares, async or sync, ready to drive.

:func:`clients` gives a plain client and a hedged one over the same replicas, as
``options.client`` says: two ``httpx.AsyncClient`` s driven as tasks on the caller's
event loop (:mod:`._drive`), the hedged one through :class:`~hedgeclient.HedgedTransport`;
or two ``httpx.Client`` s driven from threads (:mod:`._drive_sync`), the hedged one
through :class:`~hedgeclient.SyncHedgedTransport` with the same settings
(:func:`_settings`) and its default engine, on the callers' threads. Either way the
rounds, the accounting and the report are :mod:`._measure` 's.

Strictly private: the command line is the interface.
"""

from __future__ import annotations

import functools
import itertools
import random
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
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
from hedgeclient.cli.demo._drive import Send, Tally, drive
from hedgeclient.cli.demo._drive_sync import SyncSend, drive_sync
from hedgeclient.cli.demo._model import Phase
from hedgeclient.cli.demo._options import Options
from hedgeclient.cli.demo._progress import Tick
from hedgeclient.testing import FakeService

__all__ = ["SERVICE", "Drive", "Pair", "clients"]

SERVICE = "http://demo"
"""The hedged client's logical origin; the transport maps it to the replicas."""


def _limits() -> httpx.Limits:
    # No cap on pooled connections, for both clients: the default keeps 20 idle
    # connections over all three replicas, so an uneven moment (or a closed loser)
    # would churn connections mid-run. docs/budget.md: size the pool for backups too.
    return httpx.Limits(max_connections=None, max_keepalive_connections=None, keepalive_expiry=60)


Drive = Callable[[Sequence[str], Phase, range, int, int, Tick, bool], Awaitable[None]]
"""Sends ``parents`` of ``paths`` into a phase through one client: the arguments of
:func:`~._drive.drive` after its ``send``, ``probe`` last."""


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
class Pair:
    """The two clients under comparison, ready to drive. Strictly private."""

    plain: Drive
    hedged: Drive
    policy: DelayPolicy  # the hedged client's


def _on_loop(send: Send) -> Drive:
    """Drive an async client's ``send`` as tasks on this event loop (``drive`` itself)."""
    return functools.partial(drive, send)


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
async def _async_clients(svc: FakeService, options: Options, tally: Tally) -> AsyncIterator[Pair]:
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

        yield Pair(_on_loop(send_plain), _on_loop(send_hedged), transport.delay_policy)


@asynccontextmanager
async def _sync_clients(svc: FakeService, options: Options, tally: Tally) -> AsyncIterator[Pair]:
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

        yield Pair(_on_threads(send_plain), _on_threads(send_hedged), transport.delay_policy)


def clients(svc: FakeService, options: Options, tally: Tally) -> AbstractAsyncContextManager[Pair]:
    """The plain and the hedged client over ``svc``'s replicas, async or sync as
    ``options.client`` says; ``tally`` counts the hedged one's backups. Closed on exit."""
    make = _sync_clients if options.client == "sync" else _async_clients
    return make(svc, options, tally)
