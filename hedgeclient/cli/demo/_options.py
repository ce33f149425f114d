"""``hedgeclient demo``: its options, checked before anything starts.

Strictly private: the command line is the interface.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from typing import Literal

from hedgeclient.cli import _args
from hedgeclient.cli._args import UsageError
from hedgeclient.cli._laws import latency_law
from hedgeclient.testing import LatencyLaw

__all__ = [
    "CONCURRENCY_PER_CORE",
    "DEFAULT_CONCURRENCY",
    "DEFAULT_REQUESTS",
    "DEFAULT_ROUNDS",
    "DEFAULT_WARMUP",
    "FANOUT_REQUESTS",
    "MAX_DELAY",
    "Options",
    "default_concurrency",
    "parse_delay",
    "usable_cores",
    "validate",
]

DEFAULT_REQUESTS = 4000
"""HTTP requests per measured phase."""

DEFAULT_CONCURRENCY = 8
"""The most requests in flight the demo uses by default (:func:`default_concurrency`;
``--discovery`` always): about half a core of client CPU; at 20 the client measures its
own queue."""

CONCURRENCY_PER_CORE = 2
"""Requests in flight by default per core the client may use, up to
:data:`DEFAULT_CONCURRENCY`: on a 2-core machine, which also runs the replicas' process,
8 in flight made the client's event loop wake its tasks too late for a verdict
(:data:`~hedgeclient.cli.demo._verdict.CLIENT_LAG`), and 4 did not."""


def usable_cores() -> int:
    """The CPU cores this process may run on: its affinity mask where the OS has one
    (Linux), else the machine's count; at least 1."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - macOS and Windows have no affinity mask
        return os.cpu_count() or 1


def default_concurrency(cores: int | None = None) -> int:
    """Requests in flight by default: :data:`CONCURRENCY_PER_CORE` per core (``cores``,
    default :func:`usable_cores`), in [2, :data:`DEFAULT_CONCURRENCY`]."""
    count = usable_cores() if cores is None else cores
    return max(2, min(DEFAULT_CONCURRENCY, CONCURRENCY_PER_CORE * count))


FANOUT_REQUESTS = 2000
"""With ``--fanout N``, the default is ``max(20, FANOUT_REQUESTS // N)`` parents."""

DEFAULT_ROUNDS = 10
"""Measured rounds: each sends a tenth of the workload through each client."""

DEFAULT_WARMUP = 500
"""Warm-up requests through each client before it is measured."""

MAX_DELAY = 5.0
"""The largest ``--delay``, seconds. Both clients keep httpx's default timeout, 5 s: an
attempt not answered by then fails (ReadTimeout), so a longer hedge delay could never
send a backup in time. The bound also catches milliseconds written without ``ms``
(``--delay 30`` is 30 s)."""

Slowness = Literal["server-owned", "request-owned"]
_SLOWNESS: dict[str, Slowness] = {"server-owned": "server-owned", "request-owned": "request-owned"}

ClientKind = Literal["async", "sync"]
_CLIENTS: dict[str, ClientKind] = {"async": "async", "sync": "sync"}


@dataclass(frozen=True)
class Options:
    """Validated options; times in seconds. Strictly private.

    Attributes:
        parents: logical requests per phase (HTTP requests when ``fanout`` is 1).
        concurrency: logical requests in flight.
        fanout: sub-requests per logical request, >= 1.
        delay: the fixed hedge delay in seconds, or None for the library's default
            (the adaptive delay).
        quantile: the adaptive delay's quantile in (0, 1), or None for its default.
        slowness: ``server-owned`` or ``request-owned``.
        latency: the latency law's string form, as typed.
        law: the latency law itself.
        rounds: how many rounds the workload is split into, >= 1; each round sends its
            share through both clients, the plain one first in even rounds.
        warmup: warm-up requests per client, >= 0.
        seed: seeds the servers' latency draws (and the hedged client's replica choice).
        json: print JSON only.
        verbose: print the methodology and the accounting after the table.
        metrics_port: the Prometheus port, or None.
        plot: the PNG path, or None.
        backend: ``asyncio`` or ``trio``: the async clients' event loop.
        client: ``async`` (``httpx.AsyncClient`` and ``HedgedTransport``, tasks on one
            event loop) or ``sync`` (``httpx.Client`` and ``SyncHedgedTransport``, one
            thread per request in flight).
    """

    parents: int
    concurrency: int
    fanout: int
    delay: float | None
    quantile: float | None
    slowness: Slowness
    latency: str
    law: LatencyLaw
    rounds: int
    warmup: int
    seed: int
    json: bool
    verbose: bool
    metrics_port: int | None
    plot: str | None
    backend: str
    client: ClientKind = "async"

    @property
    def requests(self) -> int:
        """HTTP requests per measured phase (backups not counted)."""
        return self.parents * self.fanout

    @property
    def in_flight(self) -> int:
        """HTTP requests in flight at most (backups not counted)."""
        return self.concurrency * self.fanout


def parse_delay(text: str) -> float | None:
    """Parse ``--delay``: ``30ms``, ``0.03``/``0.03s`` (seconds) or ``adaptive`` (None).

    Returns:
        The delay in seconds, in [0, :data:`MAX_DELAY`], or None for ``adaptive``.

    Raises:
        UsageError: anything else, a value that is not finite, or one outside
            [0, :data:`MAX_DELAY`] seconds.
    """
    if text.strip().lower() == "adaptive":
        return None
    return _args.duration(text, "--delay", maximum=MAX_DELAY)


def validate(args: argparse.Namespace) -> Options:
    """Check every option; raise :class:`UsageError` (one line) on bad input, or on
    ``--client sync`` with ``--backend trio`` (the sync clients run on threads, with no
    event loop to choose)."""
    fanout = 1 if args.fanout is None else _args.integer(args.fanout, "--fanout", 1, 1000)
    if args.requests is None:
        parents = DEFAULT_REQUESTS if fanout == 1 else max(20, FANOUT_REQUESTS // fanout)
    else:
        parents = _args.integer(args.requests, "--requests", 1)
    if args.concurrency is None:
        concurrency = max(1, default_concurrency() // fanout)
    else:
        concurrency = _args.integer(args.concurrency, "--concurrency", 1, 10_000)
    delay = None if args.delay is None else parse_delay(args.delay)
    quantile = None
    if args.quantile is not None:
        if delay is not None:
            msg = "--quantile sets the adaptive delay; it does not apply with a fixed --delay"
            raise UsageError(msg)
        quantile = _args.probability(args.quantile, "--quantile")
    law = latency_law(args.latency)
    if args.plot is not None:
        check_plot(args.plot)
    metrics_port = None
    if args.metrics_port is not None:
        metrics_port = _args.integer(args.metrics_port, "--metrics-port", 0, 65535)
    backend = _args.choice(args.backend, "--backend", ("asyncio", "trio"))
    client = _CLIENTS[_args.choice(args.client, "--client", tuple(_CLIENTS))]
    if client == "sync" and backend != "asyncio":
        # Refused, not ignored: a run that says nothing of trio would pass for one on it.
        msg = (
            f"--client sync does not take --backend {backend}: it runs both clients on "
            "threads, with no event loop (SyncHedgedTransport's engine on the callers' "
            "threads); --backend chooses the async clients' loop"
        )
        raise UsageError(msg)
    return Options(
        parents=parents,
        concurrency=concurrency,
        fanout=fanout,
        delay=delay,
        quantile=quantile,
        slowness=_SLOWNESS[_args.choice(args.slowness, "--slowness", tuple(_SLOWNESS))],
        latency=args.latency,
        law=law,
        rounds=DEFAULT_ROUNDS if args.rounds is None else _args.integer(args.rounds, "--rounds", 1),
        warmup=DEFAULT_WARMUP if args.warmup is None else _args.integer(args.warmup, "--warmup", 0),
        seed=_args.integer(args.seed, "--seed", 0),
        json=args.json,
        verbose=args.verbose,
        metrics_port=metrics_port,
        plot=args.plot,
        backend=backend,
        client=client,
    )


def check_plot(path: str) -> None:
    """Check ``--plot`` before the run, which takes tens of seconds, rather than after it.

    Raises:
        UsageError: no matplotlib, a name not ending in ``.png``, or a file that cannot
            be written (its directory missing or not writable, or a directory).
    """
    try:
        import matplotlib  # noqa: F401 - the optional 'plot' extra
    except ImportError:
        msg = "--plot needs matplotlib: pip install 'hedgeclient[plot]'"
        raise UsageError(msg) from None
    if not path.lower().endswith(".png"):
        msg = f"--plot must name a .png file, got {path!r}"
        raise UsageError(msg)
    directory = os.path.dirname(path) or os.curdir
    if not os.path.isdir(directory):
        reason = f"no such directory {directory!r}"
    elif os.path.isdir(path):
        reason = "it is a directory"
    elif not (
        os.access(path, os.W_OK)
        if os.path.exists(path)
        else os.access(directory, os.W_OK | os.X_OK)
    ):
        reason = "permission denied"
    else:
        return
    msg = f"--plot: cannot write {path!r}: {reason}"
    raise UsageError(msg)
