"""``hedgeclient demo``: plain vs hedged on the fake slow server, with the arithmetic beside it.

The demo starts :class:`~hedgeclient.testing.FakeService` in its own process (so that
the server does not compete with the measuring client for the GIL): 3 replicas of the
``lab`` law of ``docs/how-it-works.md``, server-owned slowness by default. It warms up two
clients, then sends the same workload (5,000 GET requests, 8 in flight, by default)
through each: a plain ``httpx.AsyncClient`` that sends request ``i`` to replica
``i mod 3``, and one whose transport is :class:`~hedgeclient.HedgedTransport` over the
same replicas. The report (:mod:`hedgeclient._demo_report`) sets the measured hedged
latencies beside what :mod:`hedgeclient.analysis` predicts from the plain sample at
the hedge delay actually used.

Choices, and why:

- **Rounds.** The workload is split into 10 rounds; each round sends its share through
  both clients, plain first in even rounds and hedged first in odd ones. On a shared
  machine the background load drifts over seconds, and two phases run one after the
  other would compare two different machines (their medians differed by ±2-3 ms from
  run to run on a busy 2-core host); interleaved, both see the same load.
  ``--rounds 1`` runs plain, then hedged.
- **Concurrency 8**, not 20. The client's CPU cost per request on a 2-core VM, about
  0.95 ms plain and 1.3 ms hedged with one request in flight (1.1-1.5 ms with more;
  httpcore's pool bookkeeping is about half of it), times the ~1,080 requests/s that 20
  in flight sustain on the lab law, is more than one core: the client would measure its
  own queue (its median was 30-70 ms instead of 12). At 8 (~430/s) it is about half
  busy; the p99 is then about 125 ms plain and 55-60 ms hedged, in about 35 s.
- **Round-robin** for the plain client rather than a random replica: it spreads
  requests as evenly as the hedged client's load-aware choice does, so both connection
  pools hold about as many connections (httpcore's pool costs CPU per request in
  proportion to them), and neither client is favoured.
- **The adaptive delay's quantile.** On the lab law exactly 5 % of calls are above
  30 ms, so its p95 sits on an atom boundary: a rolling p95 estimate lands on the 30 ms
  atom or on the 50 ms one depending on whether its window holds a few calls more or
  fewer than 5 % above 30 ms, and at 50 ms the predicted hedged p99 is 62 ms instead of
  45 ms (in a simulation of the demo, 55 % of requests were hedged at ~50 ms with
  q = 0.95, 1 % with q = 0.94). Every quantile in (0.90, 0.95] is 30 ms on the exact
  law; the demo hedges the lab law at its 0.94 quantile, one percentage point away
  from the edge, for about one point more extra load. Other laws have no such atom and
  get the library's default, 0.95; ``--quantile`` overrides both.
- **Fan-out.** With ``--fanout N`` a logical request (the parent) sends N requests
  (its children) concurrently through the same client and completes with the last
  one (``docs/how-it-works.md``, "Fan-out"). ``--requests`` and ``--concurrency`` then count
  parents, and default to ``max(20, 2000 // N)`` and ``max(1, 8 // N)``: a parent
  waits for its slowest child (about 64 ms on average on the lab law at N = 10), so
  fewer parents keep the run about as short as the default one.

Prior art: Dean & Barroso, "The Tail at Scale", CACM 56(2), 2013 (hedged requests after
the 95th-percentile latency; fan-out amplification).

Strictly private: the command line is the interface.
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import random
import re
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import anyio
import anyio.to_thread
import httpx

from hedgeclient._adaptive import AdaptiveDelay
from hedgeclient._cli import UsageError
from hedgeclient._delay import FixedDelay
from hedgeclient._events import HedgeInfo, RequestRecord
from hedgeclient._replicas import PowerOfTwoChoices
from hedgeclient._transport import HedgedTransport

if TYPE_CHECKING:
    from hedgeclient.testing import FakeService

__all__ = ["register", "run"]

DEFAULT_REQUESTS = 5000
"""HTTP requests per measured phase."""

DEFAULT_CONCURRENCY = 8
"""Requests in flight (see the module docstring for why not 20)."""

FANOUT_REQUESTS = 2000
"""With ``--fanout N``, the default is ``max(20, FANOUT_REQUESTS // N)`` parents."""

DEFAULT_ROUNDS = 10
"""Measured rounds: each sends a tenth of the workload through each client."""

DEFAULT_WARMUP = 1000
"""Warm-up requests through each client before it is measured."""

LAB_QUANTILE = 0.94
"""The adaptive delay's quantile on the lab law: off the 30/50 ms atom boundary."""

SERVICE = "http://demo"
"""The hedged client's logical origin; the transport maps it to the replicas."""

REPLICAS = 3

_SLOWNESS: dict[str, Literal["server-owned", "request-owned"]] = {
    "server-owned": "server-owned",
    "request-owned": "request-owned",
}

_SETTLE = 0.1
"""Seconds to wait after a phase before reading the servers' accounting, so that a
backup sent just before the end (and cancelled at once) has reached its replica."""

MAX_DELAY = 5.0
"""The largest ``--delay``, seconds. Both clients keep httpx's default timeout, 5 s: an
attempt not answered by then fails (ReadTimeout), so a longer hedge delay could never send
a backup in time to race a slow primary. The lab law's largest latency is 0.300 s (its p99
0.120 s), so a delay that makes sense for the demo is tens of milliseconds; the bound
catches milliseconds written without ``ms`` (``--delay 30`` is 30 s, where
``hedgeclient plan --delays 30`` is 30 ms)."""

_DELAY_RE = re.compile(r"^\s*(?P<number>[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(?P<unit>ms|s)?\s*$")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``demo`` subcommand to the ``hedgeclient`` parser."""
    parser = subparsers.add_parser(
        "demo",
        help="plain vs hedged on the embedded fake slow server: the tail bought, the load paid",
        description=(
            "Start 3 replicas of the fake slow server (lab law of docs/how-it-works.md) in a "
            "subprocess, send the same workload through a plain httpx client and through "
            "HedgedTransport, and print both latency distributions, the extra load, and "
            "what hedgeclient.analysis predicts from the plain run at the delay used."
        ),
    )
    options: list[tuple[str, dict[str, Any]]] = [
        ("--requests", {"metavar": "N", "help": f"requests per phase (default {DEFAULT_REQUESTS}; "
            f"with --fanout N, parents: max(20, {FANOUT_REQUESTS} // N))"}),
        ("--concurrency", {"metavar": "N", "help": "requests in flight (default "
            f"{DEFAULT_CONCURRENCY}; with --fanout N, parents: max(1, {DEFAULT_CONCURRENCY} // N))"
            }),
        ("--delay", {"metavar": "D", "help": "a fixed hedge delay in seconds ('0.03'), or "
            f"in milliseconds with 'ms' ('30ms'), at most {MAX_DELAY:g} seconds; or 'adaptive' "
            "(default: the adaptive delay)"}),
        ("--quantile", {"metavar": "Q", "help": "the adaptive delay's quantile, in (0, 1) "
            f"(default {LAB_QUANTILE} on the lab law, see the note it prints; 0.95 otherwise)"}),
        ("--slowness", {"metavar": "{server-owned,request-owned}", "default": "server-owned",
            "help": "server-owned (default): each attempt draws its latency, so a backup is "
            "independent; request-owned: a request is as slow on every replica"}),
        ("--latency", {"metavar": "LAW", "default": "lab", "help": "the replicas' latency "
            "law, as for 'hedgeclient serve' (default: lab)"}),
        ("--fanout", {"metavar": "N", "help": "each logical request waits for N concurrent "
            "sub-requests: parent and child percentiles"}),
        ("--rounds", {"metavar": "N", "help": "alternate plain and hedged in N rounds so both "
            f"see the same machine load (default {DEFAULT_ROUNDS}; 1: plain, then hedged)"}),
        ("--warmup", {"metavar": "N", "help": "warm-up requests per client (default "
            f"{DEFAULT_WARMUP})"}),
        ("--seed", {"metavar": "N", "default": "0", "help": "seeds the servers' latency draws "
            "and the hedged client's replica choice (default 0)"}),
        ("--json", {"action": "store_true", "help": "print the numbers as JSON (seconds) only"}),
        ("--metrics-port", {"metavar": "PORT", "help": "serve the hedged client's Prometheus "
            "metrics on http://127.0.0.1:PORT/metrics while the demo runs"}),
        ("--plot", {"metavar": "FILE.png", "help": "plot both latency tails (1 - F, log "
            "scale); needs matplotlib: pip install 'hedgeclient[plot]'"}),
        ("--backend", {"metavar": "{asyncio,trio}", "default": "asyncio",
            "help": "the client's event loop (default asyncio)"}),
    ]  # fmt: skip
    for flag, settings in options:
        parser.add_argument(flag, **settings)
    parser.set_defaults(func=run)


# --- options ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Options:
    """Validated options; times in seconds. Strictly private.

    Attributes:
        parents: logical requests per phase (HTTP requests when ``fanout`` is 1).
        concurrency: logical requests in flight.
        fanout: sub-requests per logical request, ≥ 1.
        delay: the fixed hedge delay in seconds, or None for the adaptive one.
        quantile: the adaptive delay's quantile, in (0, 1).
        slowness: ``server-owned`` or ``request-owned``.
        latency: the latency law's string form.
        rounds: how many rounds the workload is split into, ≥ 1; each round sends its
            share through both clients, the plain one first in even rounds.
        warmup: warm-up requests per client, ≥ 0.
        seed: seeds the servers' latency draws (and the hedged client's replica choice).
        json: print JSON only.
        metrics_port: the Prometheus port, or None.
        plot: the PNG path, or None.
        backend: ``asyncio`` or ``trio``.
    """

    parents: int
    concurrency: int
    fanout: int
    delay: float | None
    quantile: float
    slowness: Literal["server-owned", "request-owned"]
    latency: str
    rounds: int
    warmup: int
    seed: int
    json: bool
    metrics_port: int | None
    plot: str | None
    backend: str

    @property
    def requests(self) -> int:
        """HTTP requests per measured phase (backups not counted)."""
        return self.parents * self.fanout

    @property
    def in_flight(self) -> int:
        """HTTP requests in flight at most (backups not counted)."""
        return self.concurrency * self.fanout


def _integer(text: str, option: str, minimum: int, maximum: int | None = None) -> int:
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < minimum or (maximum is not None and value > maximum):
        allowed = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
        msg = f"{option} must be an integer {allowed}, got {text!r}"
        raise UsageError(msg)
    return value


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
    match = _DELAY_RE.match(text)
    value = float(match["number"]) if match else math.nan
    if not math.isfinite(value):
        msg = f"--delay must be a duration such as '30ms' or '0.03' (seconds), got {text!r}"
        raise UsageError(msg)
    assert match is not None, "a finite value comes from a match"
    seconds = value / 1000 if match["unit"] == "ms" else value
    if seconds > MAX_DELAY:  # the pattern has no sign: never below 0
        msg = (
            f"--delay is in seconds and must be in [0, {MAX_DELAY:g}] "
            f"(write '30ms' for milliseconds), got {text!r}"
        )
        raise UsageError(msg)
    return seconds


def _choice(text: str, option: str, allowed: tuple[str, ...]) -> str:
    if text not in allowed:
        msg = f"{option} must be one of {', '.join(allowed)}, got {text!r}"
        raise UsageError(msg)
    return text


def _validate(args: argparse.Namespace) -> Options:
    """Check every option; raise :class:`UsageError` (one line) on bad input."""
    fanout = 1 if args.fanout is None else _integer(args.fanout, "--fanout", 1, 1000)
    if args.requests is None:
        parents = DEFAULT_REQUESTS if fanout == 1 else max(20, FANOUT_REQUESTS // fanout)
    else:
        parents = _integer(args.requests, "--requests", 1)
    if args.concurrency is None:
        concurrency = max(1, DEFAULT_CONCURRENCY // fanout)
    else:
        concurrency = _integer(args.concurrency, "--concurrency", 1, 10_000)
    delay = None if args.delay is None else parse_delay(args.delay)
    is_lab = args.latency.strip().lower() == "lab"
    quantile = LAB_QUANTILE if is_lab else 0.95
    if args.quantile is not None:
        if delay is not None:
            msg = "--quantile sets the adaptive delay; it does not apply with a fixed --delay"
            raise UsageError(msg)
        try:
            quantile = float(args.quantile)
        except ValueError:
            quantile = math.nan
        if not 0 < quantile < 1:
            msg = f"--quantile must be in (0, 1), got {args.quantile!r}"
            raise UsageError(msg)
    try:
        from hedgeclient.testing import parse_law  # lazy: the 'cli' extra

        parse_law(args.latency)
    except ValueError as exc:
        msg = f"--latency: {exc}"
        raise UsageError(msg) from None
    except ImportError as exc:
        msg = f"the demo needs the fake server: pip install 'hedgeclient[cli]' ({exc})"
        raise UsageError(msg) from None
    if args.plot is not None:
        _check_plot(args.plot)
    metrics_port = None
    if args.metrics_port is not None:
        metrics_port = _integer(args.metrics_port, "--metrics-port", 0, 65535)
    return Options(
        parents=parents,
        concurrency=concurrency,
        fanout=fanout,
        delay=delay,
        quantile=quantile,
        slowness=_SLOWNESS[_choice(args.slowness, "--slowness", tuple(_SLOWNESS))],
        latency=args.latency,
        rounds=DEFAULT_ROUNDS if args.rounds is None else _integer(args.rounds, "--rounds", 1),
        warmup=DEFAULT_WARMUP if args.warmup is None else _integer(args.warmup, "--warmup", 0),
        seed=_integer(args.seed, "--seed", 0),
        json=args.json,
        metrics_port=metrics_port,
        plot=args.plot,
        backend=_choice(args.backend, "--backend", ("asyncio", "trio")),
    )


def _check_plot(path: str) -> None:
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


# --- measurement -----------------------------------------------------------------------


@dataclass
class Phase:
    """What one client sent, got and cost over the measured rounds. Strictly private.

    Attributes:
        name: ``plain`` or ``hedged``.
        children: each HTTP request's time to full response, seconds, by request index
            (NaN for a request that failed; :meth:`finish` drops those).
        parents: with fan-out, each logical request's time until its last child
            finished, seconds, by parent index; else None.
        requests: HTTP requests sent by the caller (backups not counted).
        errors: HTTP requests that raised or got a status other than 200.
        received: requests the servers received during the phase's rounds (backups
            included).
        elapsed: wall-clock seconds spent in the phase's rounds.
        cpu: the client process's CPU seconds over those rounds (all its threads); with
            ``elapsed``, how busy the measuring client was.
        backups: backup requests sent (from the transport's records).
        won: requests whose backup answered first.
        suppressed: requests whose due backup was not sent, by reason.
        delays: ``HedgeInfo.delay`` of each hedged response, seconds (None: suspended).
        final_delay: the hedge delay the route's next request would get, seconds.
    """

    name: str
    children: list[float]
    parents: list[float] | None
    requests: int
    errors: int = 0
    received: int = 0
    elapsed: float = 0.0
    cpu: float = 0.0
    backups: int = 0
    won: int = 0
    suppressed: Counter[str] = field(default_factory=Counter)
    delays: list[float | None] = field(default_factory=list)
    final_delay: float | None = None

    @classmethod
    def empty(cls, name: str, parents: int, fanout: int) -> Phase:
        """A phase of ``parents`` logical requests of ``fanout`` HTTP requests, none sent."""
        return cls(
            name=name,
            children=[math.nan] * (parents * fanout),
            parents=[math.nan] * parents if fanout > 1 else None,
            requests=parents * fanout,
        )

    def finish(self) -> None:
        """Drop the entries of failed requests (and of parents with a failed child)."""
        self.children = [x for x in self.children if not math.isnan(x)]
        if self.parents is not None:
            self.parents = [x for x in self.parents if not math.isnan(x)]


@dataclass
class Run:
    """Everything measured by one demo run. Strictly private.

    Attributes:
        options: the validated options.
        plain: the plain client's phase.
        hedged: the hedged client's phase.
        warmup_delay: the hedge delay once the hedged client's warm-up ended, seconds.
        warmup_left: whether the adaptive delay left its warm-up before measurement.
        elapsed: the whole run's wall-clock seconds, server start and stop included.
        metrics_url: where the metrics were served, or None.
    """

    options: Options
    plain: Phase
    hedged: Phase
    warmup_delay: float | None
    warmup_left: bool
    elapsed: float
    metrics_url: str | None


class _Tally:
    """The hook that counts backups from :class:`RequestRecord` s. Strictly private."""

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


Tick = Callable[[], None]
Send = Callable[[str], Awaitable[httpx.Response]]


async def _drive(
    send: Send,
    paths: Sequence[str],
    phase: Phase,
    parents: range,
    fanout: int,
    concurrency: int,
    tick: Tick,
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
        elapsed = time.perf_counter() - started
        if response.status_code != 200:
            phase.errors += 1
            return
        phase.children[index] = elapsed
        info = response.extensions.get("hedge")
        if isinstance(info, HedgeInfo):
            phase.delays.append(info.delay)

    async def worker() -> None:
        for parent in pending:  # shared: each worker takes the next parent
            if phase.parents is None:
                await one(parent)
            else:
                started = time.perf_counter()
                async with anyio.create_task_group() as group:
                    for child in range(parent * fanout, (parent + 1) * fanout):
                        group.start_soon(one, child)
                if not any(
                    math.isnan(x) for x in phase.children[parent * fanout : (parent + 1) * fanout]
                ):
                    phase.parents[parent] = time.perf_counter() - started
            tick()

    started, cpu = time.perf_counter(), time.process_time()
    async with anyio.create_task_group() as group:
        for _ in range(min(concurrency, len(parents))):
            group.start_soon(worker)
    phase.elapsed += time.perf_counter() - started
    phase.cpu += time.process_time() - cpu


class _Progress:
    """Rich progress bars on a terminal; nothing otherwise. Strictly private."""

    def __init__(self, enabled: bool) -> None:
        self._progress: Any = None
        if enabled:
            try:
                from rich.progress import Progress  # lazy: the 'cli' extra
            except ImportError:  # no rich: no bars, the report still prints
                return
            self._progress = Progress(transient=True)

    def __enter__(self) -> _Progress:
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._progress is not None:
            self._progress.stop()

    def bar(self, description: str, total: int) -> Tick:
        """Add a bar of ``total`` steps; return the function that advances it by one."""
        progress = self._progress
        if progress is None:
            return lambda: None
        task = progress.add_task(description, total=total)
        return lambda: progress.advance(task)

    def note(self, text: str) -> None:
        """Print a line of commentary above the bars (on a terminal only)."""
        if self._progress is not None:
            self._progress.console.print(text, highlight=False)


def _limits() -> httpx.Limits:
    # No cap on pooled connections: the default keeps 20 idle connections over all three
    # replicas, so an uneven moment (or a closed loser) would churn connections mid-run.
    return httpx.Limits(max_connections=None, max_keepalive_connections=None, keepalive_expiry=60)


@dataclass
class _Client:
    """One side of the comparison: how it sends, and what it measured. Strictly private."""

    phase: Phase
    send: Send
    tick: Tick
    settle: bool  # wait for stragglers (cancelled backups) before reading the servers


async def _measure(options: Options, progress: _Progress) -> Run:
    """Start the servers, warm up both clients, run the rounds; return the measurements."""
    from hedgeclient.testing import FakeService  # lazy: the 'cli' extra

    started = time.perf_counter()
    metrics_url, stop_metrics = _start_metrics(options.metrics_port)
    try:
        service = FakeService(
            replicas=REPLICAS,
            latency=options.latency,
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
    return run


async def _compare(svc: FakeService, options: Options, progress: _Progress) -> Run:
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
    tally = _Tally()
    policy: AdaptiveDelay | FixedDelay
    if options.delay is None:
        policy = AdaptiveDelay(quantile=options.quantile)
    else:
        policy = FixedDelay(options.delay)
    transport = HedgedTransport(
        httpx.AsyncHTTPTransport(limits=_limits()),
        replicas={SERVICE: svc.origins},
        delay=policy,
        selector=PowerOfTwoChoices(rng=random.Random(options.seed)),
        hooks=[tally],
        metrics=options.metrics_port is not None,
        name="demo",
    )
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
            await _drive(send, warm_paths, warm, range(options.warmup), 1, options.in_flight, tick)
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
        for number, block in enumerate(_rounds(options.parents, options.rounds)):
            for client in clients if number % 2 == 0 else clients[::-1]:
                await anyio.to_thread.run_sync(svc.reset_stats)
                await _drive(
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
        elapsed=0.0,
        metrics_url=None,
    )


def _rounds(parents: int, rounds: int) -> list[range]:
    """Split ``range(parents)`` into ``rounds`` consecutive blocks of near-equal size."""
    rounds = min(rounds, parents)
    edges = [parents * k // rounds for k in range(rounds + 1)]
    return [range(edges[k], edges[k + 1]) for k in range(rounds)]


def _start_metrics(port: int | None) -> tuple[str | None, Callable[[], None]]:
    """Serve the default Prometheus registry on 127.0.0.1:``port``; return its URL and a stop."""
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


def run(args: argparse.Namespace) -> int:
    """Run ``hedgeclient demo``; user errors raise :class:`~hedgeclient._cli.UsageError`."""
    from hedgeclient import _demo_report  # lazy: keeps --help fast

    options = _validate(args)
    with _Progress(enabled=not options.json and sys.stdout.isatty()) as progress:
        measured = anyio.run(_measure, options, progress, backend=options.backend)
    report = _demo_report.build(measured)
    if options.json:
        _demo_report.print_json(report)
    else:
        _demo_report.print_report(report)
    if options.plot is not None:
        _demo_report.plot(measured, report, options.plot)
    return 0
