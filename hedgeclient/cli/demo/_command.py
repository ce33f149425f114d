"""``hedgeclient demo``: plain against hedged on the fake slow server, with the arithmetic.

Three replicas of the fake slow service run in a subprocess; the same workload goes
through a plain ``httpx.AsyncClient`` and through one whose transport is
:class:`~hedgeclient.HedgedTransport` with the library's defaults, in interleaved
rounds. The report puts the measured tails beside the law's and beside what
:mod:`hedgeclient.analysis` predicts from the plain run at the delay used; ``--verbose``
says how it was measured (:mod:`._notes`).

Prior art: Dean & Barroso, "The Tail at Scale", CACM 56(2), 2013 (hedged requests after
the 95th-percentile latency; fan-out amplification).

Strictly private: the command line is the interface.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import anyio

from hedgeclient.cli._laws import LATENCY_HELP, SLOWNESS_HELP
from hedgeclient.cli._output import HelpFormatter, docs_link
from hedgeclient.cli.demo import _measure, _report, _text
from hedgeclient.cli.demo._options import (
    DEFAULT_CONCURRENCY,
    DEFAULT_REQUESTS,
    DEFAULT_ROUNDS,
    DEFAULT_WARMUP,
    FANOUT_REQUESTS,
    MAX_DELAY,
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
            "defaults), and print both latency tails, the extra load, and what "
            "hedgeclient.analysis predicts from the plain run at the delay used."
        ),
        epilog=f"What it shows: {docs_link('replicas', 'what-the-demo-shows')}",
    )
    options: list[tuple[str, dict[str, Any]]] = [
        ("--requests", {"metavar": "N", "help": f"requests per client (default "
            f"{DEFAULT_REQUESTS}; with --fanout N, parents: max(20, {FANOUT_REQUESTS} // N))"}),
        ("--concurrency", {"metavar": "N", "help": "requests in flight (default "
            f"{DEFAULT_CONCURRENCY}; with --fanout N, parents: max(1, {DEFAULT_CONCURRENCY} // N))"
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
            "help": "the client's event loop (default asyncio)"}),
        ("--llm", {"action": "store_true", "help": "streamed chat completions on a fake "
            "model instead: plain, hedged on headers and hedged on the first body byte "
            "(time to first token, extra requests, wasted tokens); takes --requests, "
            "--concurrency, --slowness, --seed, --backend and --json"}),
    ]  # fmt: skip
    for flag, settings in options:
        parser.add_argument(flag, **settings)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``hedgeclient demo``; user errors raise :class:`~hedgeclient.cli._args.UsageError`."""
    if args.llm:
        from hedgeclient.cli.demo import _llm

        return _llm.run(args)
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
