"""``hedgeclient plan``: the hedging trade table of a latency sample, from the command line.

Reads a latency sample (a file, stdin or a preset), prints its unhedged percentiles and,
for each candidate hedge delay, the extra load and the hedged p50/p95/p99/p99.9; it can
recommend a delay under a load cap and size a fan-out. The arithmetic is
:mod:`hedgeclient.analysis`; this module only parses, converts units and prints. Tables
use ``rich`` on a terminal when it is installed, plain aligned text otherwise (so piped
output stays parsable), and ``--json`` prints the numbers in seconds.

Strictly private: the command line is the interface.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

from hedgeclient import analysis
from hedgeclient._cli import UsageError, print_table

__all__ = ["register", "run"]

_UNITS = {"ms": 1000.0, "s": 1.0}
"""Input units: how many of them make one second."""

_PRESET_DELAYS_MS = {"lab": (10, 12, 15, 20, 30, 50, 120)}
"""The candidate delays of each preset: for ``lab``, the rows of the lab table
(``docs/how-it-works.md``)."""

_FILE_DELAY_QUANTILES = ((0.5, "median"), (0.75, "p75"), (0.9, "p90"), (0.95, "p95"), (0.99, "p99"))
"""Default candidate delays for a sample file: these quantiles of the sample."""

_HEDGED_LABELS = ("p50", "p95", "p99", "p99.9")
"""Column names of :data:`hedgeclient.analysis.DEFAULT_QUANTILES`."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``plan`` subcommand to the ``hedgeclient`` parser."""
    parser = subparsers.add_parser(
        "plan",
        help="hedging trade table of a latency sample: extra load vs hedged tail",
        description=(
            "Print a latency sample's percentiles and, for each candidate hedge delay, "
            "the extra load P(X > d) and the hedged p50/p95/p99/p99.9 (exact on the "
            "sample, assuming independent attempts on different replicas; docs/how-it-works.md)."
        ),
    )
    parser.add_argument(
        "file",
        nargs="?",
        metavar="FILE",
        help="latencies, one per line (blank lines and # comments skipped), or a CSV "
        "file with --column; '-' reads stdin",
    )
    parser.add_argument(
        "--preset", choices=sorted(analysis.PRESETS), help="use a canonical sample instead"
    )
    parser.add_argument(
        "--unit",
        choices=sorted(_UNITS),
        default="ms",
        help="unit of FILE and --delays (default: ms); output is in ms",
    )
    parser.add_argument("--column", metavar="NAME", help="read FILE as CSV, this column")
    parser.add_argument(
        "--delays",
        metavar="LIST",
        help="candidate hedge delays, comma separated, in --unit (default: the preset's, "
        "or the sample's p50,p75,p90,p95,p99)",
    )
    parser.add_argument(
        "--max-extra-load",
        metavar="FRACTION",
        help="recommend the shortest delay whose extra load is at most this, in [0, 1]",
    )
    parser.add_argument(
        "--fanout", metavar="N", help="children a parent waits for: the quantile each needs"
    )
    parser.add_argument(
        "--target", metavar="Q", help="the parent's quantile for --fanout, in (0, 1) (0.99)"
    )
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON")
    parser.set_defaults(func=run)


@dataclass(frozen=True)
class _Plan:
    """Validated options, in seconds; ``labels[i]`` names ``delays[i]``. Strictly private."""

    source: str
    sample: tuple[float, ...] | None
    delays: tuple[float, ...]
    labels: tuple[str, ...]
    max_extra_load: float | None
    fanout: int | None
    target: float


def run(args: argparse.Namespace) -> int:
    """Run ``hedgeclient plan``; user errors raise :class:`~hedgeclient._cli.UsageError`."""
    plan = _validate(args)
    report = _report(plan)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _print_report(plan, report)
    return 0


# --- input ----------------------------------------------------------------------------


def _number(text: str, option: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        msg = f"{option} must be a number, got {text!r}"
        raise UsageError(msg)
    return value


def _validate(args: argparse.Namespace) -> _Plan:
    """Check every option and load the sample; raise :class:`UsageError` on bad input."""
    fanout, target = _fanout_options(args)
    max_extra_load = None
    if args.max_extra_load is not None:
        max_extra_load = _number(args.max_extra_load, "--max-extra-load")
        if not 0 <= max_extra_load <= 1:
            msg = f"--max-extra-load must be in [0, 1], got {args.max_extra_load!r}"
            raise UsageError(msg)
    delays: tuple[float, ...] = ()
    if args.delays is not None:
        scale = _UNITS[args.unit]
        delays = tuple(_delay(item, args.unit) / scale for item in args.delays.split(","))

    if args.file is None and args.preset is None:
        if fanout is None:
            msg = "give a latency FILE or --preset lab (or --fanout N alone)"
            raise UsageError(msg)
        if max_extra_load is not None or delays:
            msg = "--delays and --max-extra-load need a latency FILE or --preset"
            raise UsageError(msg)
        return _Plan("", None, (), (), None, fanout, target)
    source, sample = _load_sample(args)

    summary = analysis.summarize(sample)
    named = [(summary.p50, "median"), (summary.p95, "p95"), (summary.p99, "p99")]
    if not delays and args.preset is not None:
        delays = tuple(ms / 1000 for ms in _PRESET_DELAYS_MS[args.preset])
    elif not delays:
        named = [(analysis.quantile(sample, q), name) for q, name in _FILE_DELAY_QUANTILES]
        delays = tuple(dict.fromkeys(value for value, _ in named))
    labels = tuple(", ".join(name for value, name in named if value == d) for d in delays)
    return _Plan(source, sample, delays, labels, max_extra_load, fanout, target)


def _fanout_options(args: argparse.Namespace) -> tuple[int | None, float]:
    fanout = None
    if args.fanout is not None:
        try:
            fanout = int(args.fanout)
        except ValueError:
            fanout = 0
        if fanout < 1:
            msg = f"--fanout must be an integer >= 1, got {args.fanout!r}"
            raise UsageError(msg)
    target = 0.99
    if args.target is not None:
        if fanout is None:
            msg = "--target applies to --fanout; give --fanout N too"
            raise UsageError(msg)
        target = _number(args.target, "--target")
        if not 0 < target < 1:
            msg = f"--target must be in (0, 1), got {args.target!r}"
            raise UsageError(msg)
    return fanout, target


def _load_sample(args: argparse.Namespace) -> tuple[str, tuple[float, ...]]:
    """Return a description of the sample and the sample, in seconds."""
    if args.preset is None:
        source = "stdin" if args.file == "-" else args.file
        return source, tuple(_read_sample(args.file, args.unit, args.column))
    if args.file is not None:
        msg = "give a latency FILE or --preset, not both"
        raise UsageError(msg)
    if args.column is not None:
        msg = "--column applies to FILE, not to --preset"
        raise UsageError(msg)
    return f"preset {args.preset} (docs/how-it-works.md)", analysis.PRESETS[args.preset]


def _delay(text: str, unit: str) -> float:
    value = _number(text.strip(), "--delays")
    if value <= 0:
        msg = f"--delays must be positive numbers of {unit}, got {text.strip()!r}"
        raise UsageError(msg)
    return value


def _read_sample(path: str, unit: str, column: str | None) -> list[float]:
    """Read latencies from ``path`` (``-``: stdin), converted to seconds."""
    scale = _UNITS[unit]
    try:
        if path == "-":
            values = list(_parse(sys.stdin, path, unit, column))
        else:
            with open(path, encoding="utf-8", newline="") as stream:
                values = list(_parse(stream, path, unit, column))
    except OSError as exc:
        msg = f"cannot read {path!r}: {exc.strerror or exc}"
        raise UsageError(msg) from exc
    except UnicodeDecodeError as exc:
        msg = f"cannot read {path!r}: not UTF-8 text ({exc.reason})"
        raise UsageError(msg) from exc
    if not values:
        msg = f"{path}: no latency values (blank lines and # comments are skipped)"
        raise UsageError(msg)
    return [value / scale for value in values]


def _parse(stream: IO[str], path: str, unit: str, column: str | None) -> Iterator[float]:
    """Yield the latencies of ``stream``, in ``unit``, checking each one."""
    if column is None:
        for line_number, line in enumerate(stream, start=1):
            text = line.split("#", 1)[0].strip()
            if text:
                yield _latency(text, path, line_number, unit)
        return
    # Comment lines become empty rows, which are skipped but still counted in line_num.
    reader = csv.reader("\n" if line.lstrip().startswith("#") else line for line in stream)
    header = next((row for row in reader if row), None)
    if header is None:
        return
    names = [name.strip() for name in header]
    if column not in names:
        msg = f"{path}: no column {column!r}; columns: {', '.join(names)}"
        raise UsageError(msg)
    index = names.index(column)
    for row in reader:
        if row:
            text = row[index].strip() if index < len(row) else ""
            yield _latency(text, path, reader.line_num, unit)


def _latency(text: str, path: str, line_number: int, unit: str) -> float:
    try:
        value = float(text)
    except ValueError:
        msg = f"{path}, line {line_number}: expected a latency in {unit}, got {text!r}"
        raise UsageError(msg) from None
    if not math.isfinite(value) or value < 0:
        msg = f"{path}, line {line_number}: a latency must be finite and >= 0, got {text!r}"
        raise UsageError(msg)
    return value


# --- output ---------------------------------------------------------------------------


def _report(plan: _Plan) -> dict[str, Any]:
    """Everything the command prints, in seconds and fractions (the ``--json`` form)."""
    report: dict[str, Any] = {}
    if plan.sample is not None:
        summary = analysis.summarize(plan.sample)
        report["source"] = plan.source
        report["count"] = summary.count
        report["unhedged_seconds"] = {
            "p50": summary.p50,
            "p90": summary.p90,
            "p95": summary.p95,
            "p99": summary.p99,
            "p99.9": summary.p999,
            "max": summary.max,
        }
        report["trade_table"] = [
            _row(row) for row in analysis.trade_table(plan.sample, plan.delays)
        ]
        if plan.max_extra_load is not None:
            delay = analysis.recommend_delay(plan.sample, plan.max_extra_load)
            (row,) = analysis.trade_table(plan.sample, [delay])
            report["recommendation"] = {"max_extra_load": plan.max_extra_load, **_row(row)}
    if plan.fanout is not None:
        child = analysis.child_quantile_for_parent(plan.target, plan.fanout)
        report["fanout"] = {
            "fanout": plan.fanout,
            "target": plan.target,
            "child_quantile": child,
            "parent_miss_probability": analysis.parent_miss_probability(plan.target, plan.fanout),
            "samples_needed": analysis.samples_needed(child),
        }
    return report


def _row(row: analysis.TradeRow) -> dict[str, Any]:
    hedged = dict(
        zip(_HEDGED_LABELS, (row.hedged[q] for q in analysis.DEFAULT_QUANTILES), strict=True)
    )
    return {"delay_seconds": row.delay, "extra_load": row.extra_load, "hedged_seconds": hedged}


def _ms(seconds: float) -> str:
    """Seconds as milliseconds, to the microsecond, without trailing zeros."""
    return f"{seconds * 1000:.3f}".rstrip("0").rstrip(".")


def _percent(fraction: float) -> str:
    return f"{fraction * 100:.3g}%"


def _quantile_text(q: float) -> str:
    """A quantile close to 1 with three significant digits of ``1 - q``: ``0.9998995``."""
    decimals = max(2, 3 - math.floor(math.log10(1 - q)))
    return f"{q:.{decimals}f}"


def _print_report(plan: _Plan, report: dict[str, Any]) -> None:
    if plan.sample is not None:
        unhedged = report["unhedged_seconds"]
        print(f"Sample: {report['source']}, {report['count']} latencies")
        print("Unhedged: " + ", ".join(f"{k} {_ms(v)} ms" for k, v in unhedged.items()))
        print()
        headers = ["hedge delay (ms)", "extra load", *(f"hedged {q}" for q in _HEDGED_LABELS)]
        rows = []
        for row, name in zip(report["trade_table"], plan.labels, strict=True):
            label = _ms(row["delay_seconds"]) + (f" ({name})" if name else "")
            hedged = [_ms(v) for v in row["hedged_seconds"].values()]
            rows.append([label, _percent(row["extra_load"]), *hedged])
        print_table(headers, rows)
        print(
            "extra load = P(X > d), backups per request; hedged latencies assume\n"
            "independent attempts on different replicas (docs/how-it-works.md)"
        )
        if "recommendation" in report:
            advice = report["recommendation"]
            print()
            print(
                f"Recommended hedge delay for extra load <= "
                f"{_percent(advice['max_extra_load'])}: {_ms(advice['delay_seconds'])} ms "
                f"(extra load {_percent(advice['extra_load'])}, hedged p99 "
                f"{_ms(advice['hedged_seconds']['p99'])} ms)"
            )
    if "fanout" in report:
        fan = report["fanout"]
        child_text = _quantile_text(fan["child_quantile"])
        child_label = f"p{float(child_text) * 100:.{len(child_text) - 4}f}"
        target = f"p{fan['target'] * 100:g}"
        if plan.sample is not None:
            print()
        print(
            f"Fan-out {fan['fanout']}: for a parent {target}, each child must meet its "
            f"{child_label} (quantile {child_text}); estimating it takes about "
            f"{fan['samples_needed']:,} samples."
        )
        print(
            f"With children at their {target}, the parent misses its {target} "
            f"{fan['parent_miss_probability'] * 100:.1f}% of the time."
        )
