"""``hedgeclient plan``: the numbers (the ``--json`` form) and the printed report.

Latencies print in milliseconds with one number of decimals per table (the fewest that
show every value to the microsecond), extra loads in percent with one decimal at most.
A quantile the sample cannot show (fewer than one latency above it, so it is simply the
sample's largest value) is marked with ``*`` and a footnote.

Strictly private: the command line is the interface.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from hedgeclient import analysis
from hedgeclient.cli._output import docs_link, fixed, print_table

if TYPE_CHECKING:
    from hedgeclient.cli.plan._command import Plan

__all__ = ["build", "print_report"]

_UNHEDGED = (("p50", 0.5), ("p90", 0.9), ("p95", 0.95), ("p99", 0.99), ("p99.9", 0.999))
_HEDGED_LABELS = ("p50", "p95", "p99", "p99.9")
"""Column names of :data:`hedgeclient.analysis.DEFAULT_QUANTILES`."""

_LATENCY_DECIMALS = 3  # milliseconds to the microsecond
_PERCENT_DECIMALS = 1


def beyond_sample(count: int, q: float) -> bool:
    """Whether ``count`` latencies cannot show the q-quantile: fewer than one lies above it."""
    return count * (1 - q) < 1


def build(plan: Plan) -> dict[str, Any]:
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
        report["beyond_sample"] = [
            label for label, q in _UNHEDGED if beyond_sample(summary.count, q)
        ]
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


def _ms(values: list[float]) -> list[str]:
    return fixed(values, _LATENCY_DECIMALS, scale=1000)


def _percent(values: list[float]) -> list[str]:
    return [f"{text}%" for text in fixed(values, _PERCENT_DECIMALS, scale=100)]


def _quantile_text(q: float) -> str:
    """A quantile close to 1 with three significant digits of ``1 - q``: ``0.9998995``."""
    places = max(2, 3 - math.floor(math.log10(1 - q)))
    return f"{q:.{places}f}"


def print_report(plan: Plan, report: dict[str, Any]) -> None:
    """Print the sample's percentiles, the trade table, the advice and the fan-out."""
    if plan.sample is not None:
        _print_sample(report, plan.labels)
    if "fanout" in report:
        if plan.sample is not None:
            print()
        _print_fanout(report["fanout"])


def _print_sample(report: dict[str, Any], labels: tuple[str, ...]) -> None:
    count, beyond = report["count"], report["beyond_sample"]
    unhedged = report["unhedged_seconds"]
    print(f"Sample: {report['source']}, {count:,} latencies")
    cells = _ms(list(unhedged.values()))
    marks = ["*" if label in beyond else "" for label in unhedged]
    print(
        "Unhedged: "
        + ", ".join(
            f"{label} {cell} ms{mark}"
            for label, cell, mark in zip(unhedged, cells, marks, strict=True)
        )
    )
    print()
    table = report["trade_table"]
    headers = ["hedge delay (ms)", "extra load"]
    headers += [f"hedged {q}" + ("*" if q in beyond else "") for q in _HEDGED_LABELS]
    latencies = [[row["delay_seconds"], *row["hedged_seconds"].values()] for row in table]
    texts = _ms([value for row in latencies for value in row])
    width = len(_HEDGED_LABELS) + 1
    loads = _percent([row["extra_load"] for row in table])
    rows = []
    for index, name in enumerate(labels):
        delay, *hedged = texts[index * width : (index + 1) * width]
        rows.append([delay + (f" ({name})" if name else ""), loads[index], *hedged])
    print_table(headers, rows)
    arithmetic = docs_link("how-it-works", "the-arithmetic")
    print("extra load = P(X > d), backups per request; hedged latencies assume independent")
    print(f"attempts on different replicas: {arithmetic}")
    if beyond:
        first = beyond[0]
        q = dict(_UNHEDGED)[first]
        which = beyond[0] if len(beyond) == 1 else f"{', '.join(beyond[:-1])} and {beyond[-1]}"
        each = "it" if len(beyond) == 1 else "each"
        above = f"fewer than one lies above {each}"
        print(f"* beyond what {count:,} latencies can show: the {which} ({above});")
        print(
            f"  a {first} needs at least {analysis.samples_needed(q, beyond=1):,} latencies, "
            f"about {analysis.samples_needed(q):,} for a stable estimate"
        )
    if "recommendation" in report:
        advice = report["recommendation"]
        delay, p99 = _ms([advice["delay_seconds"], advice["hedged_seconds"]["p99"]])
        cap, load = _percent([advice["max_extra_load"], advice["extra_load"]])
        print()
        print(
            f"Recommended hedge delay for extra load <= {cap}: {delay} ms "
            f"(extra load {load}, hedged p99 {p99} ms)"
        )


def _print_fanout(fan: dict[str, Any]) -> None:
    child_text = _quantile_text(fan["child_quantile"])
    child_label = f"p{float(child_text) * 100:.{len(child_text) - 4}f}"
    target = f"p{fan['target'] * 100:g}"
    print(
        f"Fan-out {fan['fanout']}: for a parent {target}, each child must meet its "
        f"{child_label} (quantile {child_text}); estimating it takes about "
        f"{fan['samples_needed']:,} samples."
    )
    print(
        f"With children at their {target}, the parent misses its {target} "
        f"{fan['parent_miss_probability'] * 100:.1f}% of the time."
    )
