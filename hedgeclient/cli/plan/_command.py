"""``hedgeclient plan``: the hedging trade table of a latency sample, from the command line.

Reads a latency sample (a file, stdin or a preset), prints its unhedged percentiles and,
for each candidate hedge delay, the extra load and the hedged p50/p95/p99/p99.9; it can
recommend a delay under a load cap, size a fan-out, and bound a retry policy around
hedging (``--retries``: its worst-case load, and the shared budget's bound). The
arithmetic is
:mod:`hedgeclient.analysis`; this package only parses, converts units and prints.
Tables use ``rich`` on a terminal when it is installed, plain aligned text otherwise
(so piped output stays parsable), and ``--json`` prints the numbers in seconds.

Strictly private: the command line is the interface.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from hedgeclient import HedgeBudget, analysis
from hedgeclient.cli import _args
from hedgeclient.cli._args import UsageError
from hedgeclient.cli._output import HelpFormatter, docs_link, warn
from hedgeclient.cli.plan._report import build, print_report
from hedgeclient.cli.plan._sample import UNITS, check_unit, read_sample

__all__ = ["Plan", "register", "run"]

_PRESETS = {"lab": analysis.lab_sample()}
"""The samples ``--preset`` names, in seconds."""

_PRESET_DELAYS = {"lab": (0.010, 0.012, 0.015, 0.020, 0.030, 0.050, 0.120)}
"""The candidate delays of each preset, seconds: for ``lab``, the rows of the lab table."""

_FILE_DELAY_QUANTILES = ((0.5, "median"), (0.75, "p75"), (0.9, "p90"), (0.95, "p95"), (0.99, "p99"))
"""Default candidate delays for a sample file: these quantiles of the sample."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``plan`` subcommand to the ``hedgeclient`` parser."""
    parser = subparsers.add_parser(
        "plan",
        formatter_class=HelpFormatter,
        help="hedging trade table of a latency sample: extra load vs hedged tail",
        description=(
            "Print a latency sample's percentiles and, for each candidate hedge delay, "
            "the extra load P(X > d) and the hedged p50/p95/p99/p99.9 (exact on the "
            "sample, assuming independent attempts on different replicas: "
            f"{docs_link('how-it-works', 'the-arithmetic')})."
        ),
    )
    options: list[tuple[str, dict[str, Any]]] = [
        ("file", {"nargs": "?", "metavar": "FILE", "help": "latencies, one per line "
            "(blank lines and # comments skipped), or a CSV file with --column; '-' reads "
            "stdin"}),
        ("--preset", {"metavar": "{lab}", "choices": sorted(_PRESETS),
            "help": "use a canonical sample instead of FILE; lab: the 100 calls of "
            f"{docs_link('how-it-works', 'the-lab-table')}"}),
        ("--unit", {"metavar": "{s,ms}", "choices": sorted(UNITS, reverse=True),
            "help": "unit of the numbers in FILE and of bare --delays (default s, "
            "seconds, as everywhere on the command line; a FILE whose median is 1 or more "
            "needs --unit said); output is in ms"}),
        ("--column", {"metavar": "NAME", "help": "read FILE as CSV, this column"}),
        ("--delays", {"metavar": "DURATIONS", "help": "candidate hedge delays, comma "
            "separated: '20ms,30ms' or '0.02,0.03' (bare numbers in --unit; default: the "
            "preset's, or the sample's p50,p75,p90,p95,p99)"}),
        ("--max-extra-load", {"metavar": "FRACTION", "help": "recommend the shortest delay "
            "whose extra load is at most FRACTION, in [0, 1]"}),
        ("--fanout", {"metavar": "N", "help": "children a parent waits for: the quantile "
            "each child needs"}),
        ("--target", {"metavar": "Q", "help": "the parent's quantile for --fanout, in "
            "(0, 1) (default 0.99)"}),
        ("--retries", {"metavar": "N", "help": "retries a retry library makes around the "
            "hedged client (attempts - 1): the worst-case load multiplier (N + 1) x "
            "(hedges + 1), and what a hedge budget shared by retries and backups bounds it "
            f"to ({docs_link('budget', 'one-budget-for-retries-and-backups')})"}),
        ("--hedges", {"metavar": "N", "help": "backups per request, max_hedges, for "
            "--retries (default 1)"}),
        ("--budget-ratio", {"metavar": "FRACTION", "help": "the shared budget's ratio for "
            "--retries, in (0, 1] (default HedgeBudget()'s, 0.1)"}),
        ("--budget-burst", {"metavar": "N", "help": "the shared budget's burst for "
            "--retries, >= 1 (default HedgeBudget()'s, 10)"}),
        ("--json", {"action": "store_true", "help": "print the numbers as JSON (seconds)"}),
    ]  # fmt: skip
    for flag, settings in options:
        parser.add_argument(flag, **settings)
    parser.set_defaults(func=run)


@dataclass(frozen=True)
class Plan:
    """Validated options, in seconds; ``labels[i]`` names ``delays[i]``. Strictly private."""

    source: str
    sample: tuple[float, ...] | None
    delays: tuple[float, ...]
    labels: tuple[str, ...]
    max_extra_load: float | None
    fanout: int | None
    target: float
    retries: Retries | None = None


@dataclass(frozen=True)
class Retries:
    """``--retries`` and its budget. Strictly private."""

    retries: int
    hedges: int
    ratio: float
    burst: float


def run(args: argparse.Namespace) -> int:
    """Run ``hedgeclient plan``; user errors raise :class:`UsageError`."""
    retries = _retry_options(args)
    plan = _validate(args)
    if retries is not None:
        plan = dataclasses.replace(plan, retries=retries)
    report = build(plan)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_report(plan, report)
    return 0


def _validate(args: argparse.Namespace) -> Plan:
    """Check every option and load the sample; raise :class:`UsageError` on bad input."""
    fanout, target = _fanout_options(args)
    max_extra_load = None
    if args.max_extra_load is not None:
        max_extra_load = _args.probability(args.max_extra_load, "--max-extra-load", closed=True)
    unit = args.unit or "s"
    typed = [] if args.delays is None else [item.strip() for item in args.delays.split(",")]
    delays = tuple(_delay(item, unit) for item in typed)

    if args.file is None and args.preset is None:
        if fanout is None and args.retries is None:
            msg = "give a latency FILE or --preset lab (or --fanout N or --retries N alone)"
            raise UsageError(msg)
        if max_extra_load is not None or delays:
            msg = "--delays and --max-extra-load need a latency FILE or --preset"
            raise UsageError(msg)
        return Plan("", None, (), (), None, fanout, target)
    source, sample = _load_sample(args, unit)
    if unit == "s":
        _check_delay_units(typed, delays, sample)

    summary = analysis.summarize(sample)
    named = [(summary.p50, "median"), (summary.p95, "p95"), (summary.p99, "p99")]
    if not delays and args.preset is not None:
        delays = _PRESET_DELAYS[args.preset]
    elif not delays:
        named = [(analysis.quantile(sample, q), name) for q, name in _FILE_DELAY_QUANTILES]
        delays = tuple(dict.fromkeys(value for value, _ in named))
    labels = tuple(", ".join(name for value, name in named if value == d) for d in delays)
    return Plan(source, sample, delays, labels, max_extra_load, fanout, target)


def _fanout_options(args: argparse.Namespace) -> tuple[int | None, float]:
    # A parent of more than 10**6 children needs a child quantile closer to 1 than a
    # float tells apart from 1 at useful targets: refused, not a traceback.
    fanout = None if args.fanout is None else _args.integer(args.fanout, "--fanout", 1, 10**6)
    target = 0.99
    if args.target is not None:
        if fanout is None:
            msg = "--target applies to --fanout; give --fanout N too"
            raise UsageError(msg)
        target = _args.probability(args.target, "--target")
    return fanout, target


def _retry_options(args: argparse.Namespace) -> Retries | None:
    """``--retries`` with its ``--hedges`` and budget, or None; the others need it."""
    if args.retries is None:
        for flag, value in (
            ("--hedges", args.hedges),
            ("--budget-ratio", args.budget_ratio),
            ("--budget-burst", args.budget_burst),
        ):
            if value is not None:
                msg = f"{flag} applies to --retries; give --retries N too"
                raise UsageError(msg)
        return None
    retries = _args.integer(args.retries, "--retries", 0, 100)
    hedges = 1 if args.hedges is None else _args.integer(args.hedges, "--hedges", 0, 4)
    default = HedgeBudget()
    ratio = default.ratio
    if args.budget_ratio is not None:
        ratio = _args.number(args.budget_ratio, "--budget-ratio")
        if not 0 < ratio <= 1:  # HedgeBudget's own range: 0 would earn no token
            msg = f"--budget-ratio must be in (0, 1], got {args.budget_ratio!r}"
            raise UsageError(msg)
    burst = default.burst
    if args.budget_burst is not None:
        burst = _args.number(args.budget_burst, "--budget-burst")
        if burst < 1:
            msg = f"--budget-burst must be a number >= 1, got {args.budget_burst!r}"
            raise UsageError(msg)
    return Retries(retries, hedges, ratio, burst)


def _load_sample(args: argparse.Namespace, unit: str) -> tuple[str, tuple[float, ...]]:
    """Return a description of the sample and the sample, in seconds."""
    if args.preset is None:
        source = "stdin" if args.file == "-" else args.file
        sample = tuple(read_sample(args.file, unit, args.column))
        check_unit(sample, unit, source, explicit=args.unit is not None)
        return source, sample
    if args.file is not None:
        msg = "give a latency FILE or --preset, not both"
        raise UsageError(msg)
    if args.column is not None:
        msg = "--column applies to FILE, not to --preset"
        raise UsageError(msg)
    return f"preset {args.preset}", _PRESETS[args.preset]


def _delay(text: str, unit: str) -> float:
    seconds = _args.duration(text, "--delays", unit=unit)
    if seconds <= 0:
        msg = f"--delays must be durations > 0, got {text!r}"
        raise UsageError(msg)
    return seconds


def _check_delay_units(
    typed: list[str], delays: tuple[float, ...], sample: tuple[float, ...]
) -> None:
    """Warn about a bare delay (seconds) beyond every latency of the sample: ms meant?"""
    slowest = max(sample)
    for text, seconds in zip(typed, delays, strict=True):
        if seconds > slowest and not text.rstrip().endswith("s"):
            warn(
                f"--delays {text!r} is {seconds:g} seconds, beyond the slowest latency of "
                f"the sample ({slowest:g} s); write '{text}ms' for milliseconds"
            )
