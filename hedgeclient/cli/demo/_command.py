"""``hedgeclient demo``: plain against hedged on the fake slow server, with the arithmetic.

Three replicas of the fake slow service run in a subprocess; the same workload goes
through a plain ``httpx.AsyncClient`` and through one whose transport is
:class:`~hedgeclient.HedgedTransport` with the library's defaults, in interleaved
rounds (``--client sync``: two ``httpx.Client`` s driven from threads, the hedged one
through :class:`~hedgeclient.SyncHedgedTransport`). The report puts the measured tails
beside the law's and beside what :mod:`hedgeclient.analysis` predicts from the plain run
at the delay used; ``--verbose`` says how it was measured (:mod:`._notes`).

``--tied`` runs another comparison instead (:mod:`._tied`): plain, hedged and tied
requests at equal offered load on replicas that queue, behind
:class:`~hedgeclient.server.HedgeMiddleware`. ``--discovery`` runs replicas behind one
DNS name, one joining and one leaving mid-run (:mod:`._discovery`).

Prior art: Dean & Barroso, "The Tail at Scale", CACM 56(2), 2013 (hedged requests after
the 95th-percentile latency; fan-out amplification).

Strictly private: the command line is the interface.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import anyio

from hedgeclient.cli._args import UsageError
from hedgeclient.cli._laws import LATENCY_HELP, SLOWNESS_HELP
from hedgeclient.cli._output import HelpFormatter, docs_link
from hedgeclient.cli.demo import _measure, _report, _text
from hedgeclient.cli.demo._options import (
    CONCURRENCY_PER_CORE,
    DEFAULT_CONCURRENCY,
    DEFAULT_REQUESTS,
    DEFAULT_ROUNDS,
    DEFAULT_WARMUP,
    FANOUT_REQUESTS,
    MAX_DELAY,
    default_concurrency,
    validate,
)
from hedgeclient.cli.demo._progress import Progress

__all__ = ["register", "run"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``demo`` subcommand to the ``hedgeclient`` parser."""
    parser = subparsers.add_parser(
        "demo",
        formatter_class=HelpFormatter,
        help="plain vs hedged on the embedded fake slow server: the tail bought, the load paid",
        description=(
            "Start 3 replicas of the fake slow server in a subprocess, send the same "
            "workload through a plain httpx client and through HedgedTransport (library "
            "defaults; SyncHedgedTransport with --client sync), and print both latency "
            "tails, the extra load, and what "
            "hedgeclient.analysis predicts from the plain run at the delay used."
        ),
        epilog=f"What it shows: {docs_link('replicas', 'what-the-demo-shows')}",
    )
    options: list[tuple[str, dict[str, Any]]] = [
        ("--requests", {"metavar": "N", "help": f"requests per client (default "
            f"{DEFAULT_REQUESTS}; with --fanout N, parents: max(20, {FANOUT_REQUESTS} // N))"}),
        ("--concurrency", {"metavar": "N", "help": "requests in flight (default "
            f"{CONCURRENCY_PER_CORE} per usable core, from 2 to {DEFAULT_CONCURRENCY}: "
            f"{default_concurrency()} here; with --fanout N, parents: that // N, at least 1)"
            }),
        ("--delay", {"metavar": "DURATION", "help": "a fixed hedge delay in seconds "
            f"('0.03'), or in milliseconds with 'ms' ('30ms'), at most {MAX_DELAY:g} seconds; "
            "or 'adaptive' (default: the adaptive delay)"}),
        ("--quantile", {"metavar": "Q", "help": "the adaptive delay's quantile, in (0, 1) "
            "(default: the library's, 0.95)"}),
        ("--slowness", {"metavar": "{server-owned,request-owned}", "default": "server-owned",
            "help": SLOWNESS_HELP}),
        ("--latency", {"metavar": "LAW", "default": "demo", "help": LATENCY_HELP
            + " (default: demo, 97%% log-normal around 25 ms and 3%% pauses around 250 ms)"}),
        ("--fanout", {"metavar": "N", "help": "each logical request waits for N concurrent "
            "sub-requests: parent and child percentiles"}),
        ("--rounds", {"metavar": "N", "help": "alternate plain and hedged in N rounds so both "
            f"see the same machine load (default {DEFAULT_ROUNDS}; 1: plain, then hedged)"}),
        ("--warmup", {"metavar": "N", "help": "warm-up requests per client (default "
            f"{DEFAULT_WARMUP})"}),
        ("--seed", {"metavar": "N", "default": "0", "help": "seeds the servers' latency draws "
            "and the hedged client's replica choice (default 0)"}),
        ("--verbose", {"action": "store_true", "help": "also print how it was measured, and "
            "the accounting: requests, backups, the client's own cost"}),
        ("--json", {"action": "store_true", "help": "print the numbers as JSON (seconds) only"}),
        ("--metrics-port", {"metavar": "PORT", "help": "serve the hedged client's Prometheus "
            "metrics on http://127.0.0.1:PORT/metrics while the demo runs"}),
        ("--plot", {"metavar": "FILE", "help": "plot both latency tails (1 - F, log scale) "
            "to FILE, a .png; needs matplotlib: pip install 'hedgeclient[plot]'"}),
        ("--backend", {"metavar": "{asyncio,trio}", "default": "asyncio",
            "help": "the async clients' event loop (default asyncio)"}),
        ("--client", {"metavar": "{async,sync}", "default": "async", "help": "async: "
            "httpx.AsyncClient, hedged through HedgedTransport, tasks on one event loop "
            "(default); sync: httpx.Client, hedged through SyncHedgedTransport with the "
            "same settings, one thread per request in flight (--concurrency threads, times "
            "--fanout), no event loop, so no --backend. Same requests, rounds and report; "
            "the client's lag is then how late its threads wake (the GIL, the OS)"}),
        ("--llm", {"action": "store_true", "help": "streamed chat completions on a fake "
            "model instead: plain, hedged on headers and hedged on the first body byte "
            "(time to first token, extra requests, wasted tokens); takes --requests, "
            "--concurrency, --slowness, --seed, --backend and --json"}),
        ("--tied", {"action": "store_true", "help": "instead: plain, hedged at the p95 and "
            "tied requests at equal offered load, on replicas that serve one request at a "
            "time and queue the rest behind hedgeclient.server.HedgeMiddleware"}),
        ("--utilisation", {"metavar": "FRACTION", "default": "0.7", "help": "with --tied: "
            "the offered load, a fraction of the replicas' capacity in (0, 1) (default 0.7)"}),
        ("--seconds", {"metavar": "DURATION", "help": "with --tied: the time measured per "
            "mode (default 20 seconds); with --discovery: the run's length, at least 6 "
            "(default 12 seconds)"}),
        ("--discovery", {"action": "store_true", "help": "instead: 4 replicas behind one DNS "
            "name served by an embedded nameserver (TTL 1 s), found by DnsReplicas; one "
            "joins the name at a quarter of the run, one leaves it at half: when each change "
            "is seen, the new replica's primaries, attempts to the one that left, failed "
            "requests; takes --seconds, --concurrency, --latency, --seed, --backend and "
            "--json"}),
    ]  # fmt: skip
    modes = parser.add_mutually_exclusive_group()  # each runs another demo
    for flag, settings in options:
        (modes if flag in _MODES else parser).add_argument(flag, **settings)
    parser.set_defaults(func=run)


_MODES = ("--llm", "--tied", "--discovery")
"""The flags that run another demo instead: one at most."""


def refuse_others(args: argparse.Namespace, mode: str, takes: tuple[str, ...]) -> None:
    """Refuse, by name, the flags given that ``mode`` does not take.

    A flag counts as given when its value differs from its default (a flag given with
    its default value cannot be told apart, and changes nothing).

    Raises:
        UsageError: one or more such flags, listed.
    """
    defaults = {"--latency": "demo", "--slowness": "server-owned", "--seed": "0",
        "--utilisation": "0.7", "--backend": "asyncio", "--client": "async"}  # fmt: skip
    given = []
    for flag in _FLAGS:
        if flag in takes or flag in _MODES:
            continue
        value = getattr(args, flag[2:].replace("-", "_"))
        if value not in (None, False, defaults.get(flag)):
            given.append(flag)
    if given:
        allowed = ", ".join(takes[:-1]) + f" and {takes[-1]}"
        msg = f"{mode} does not take {', '.join(given)}: it takes {allowed}"
        raise UsageError(msg)


_FLAGS = ("--requests", "--concurrency", "--delay", "--quantile", "--slowness", "--latency",
    "--fanout", "--rounds", "--warmup", "--seed", "--verbose", "--json", "--metrics-port",
    "--plot", "--backend", "--client", "--utilisation", "--seconds")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    """Run ``hedgeclient demo``; user errors raise :class:`~hedgeclient.cli._args.UsageError`."""
    if args.llm:
        from hedgeclient.cli.demo import _llm

        return _llm.run(args)
    if args.tied:
        takes: tuple[str, ...] = ("--utilisation", "--seconds", "--seed", "--json")
        refuse_others(args, "--tied", takes)
        return _run_tied(args)
    if args.discovery:
        from hedgeclient.cli.demo import _discovery

        takes = ("--seconds", "--concurrency", "--latency", "--seed", "--backend", "--json")
        refuse_others(args, "--discovery", takes)

        return _discovery.run(args)
    options = validate(args)
    with Progress(enabled=not options.json and sys.stdout.isatty()) as progress:
        measured = anyio.run(_measure.measure, options, progress, backend=options.backend)
    report = _report.build(measured)
    if options.json:
        _text.print_json(report)
    else:
        _text.print_report(report, verbose=options.verbose)
    if options.plot is not None:
        from hedgeclient.cli.demo._plot import plot  # lazy: matplotlib

        plot(measured, report, options.plot)
    return 0


def _run_tied(args: argparse.Namespace) -> int:
    """``hedgeclient demo --tied``: print (or ``--json``) the comparison of :mod:`._tied`."""
    import json

    from hedgeclient.cli import _args
    from hedgeclient.cli._output import print_table
    from hedgeclient.cli.demo._tied import TiedOptions, compare, rows

    utilisation = _args.probability(args.utilisation, "--utilisation")
    seconds = _args.duration(args.seconds or "20", "--seconds", maximum=3600.0)
    seed = _args.integer(args.seed, "--seed", 0)
    options = TiedOptions(utilisation=utilisation, seconds=seconds, seed=seed)
    progress = not args.json and sys.stdout.isatty()
    note = (lambda text: print(f"... {text}", file=sys.stderr)) if progress else (lambda _: None)
    results = anyio.run(compare, options, note)
    if args.json:
        print(json.dumps({"utilisation": utilisation, "results": results}, indent=2))
        return 0
    print(
        f"{options.replicas} replicas x {options.concurrency} slot, service times "
        f"mean {options.mean * 1000:g} ms; offered {utilisation:.0%} of "
        f"{options.capacity:g} requests/s"
    )
    print_table(*rows(results))
    return 0
