"""``hedgeclient plan``: the numbers (the ``--json`` form) and the printed report.

Latencies print in milliseconds with one number of decimals for the whole report (the
fewest that show every value printed to the microsecond), extra loads in percent with
one number of decimals for the whole report, one at most. The headline is the trade at
the library's default delay (the adaptive delay's quantile, the p95, of the sample). A
quantile the sample cannot show (fewer than one latency above it, so it is simply the
sample's largest value) is marked with ``*`` and a footnote; an extra load above what
the default hedge budget allows is marked with ``†`` and a footnote saying the budget
would refuse most of those backups.

Strictly private: the command line is the interface.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from hedgeclient import AdaptiveDelay, HedgeBudget, analysis
from hedgeclient.cli._output import decimals, docs_link, print_table

if TYPE_CHECKING:
    from hedgeclient.cli.plan._command import Plan

__all__ = ["build", "print_report"]

_UNHEDGED = (("p50", 0.5), ("p90", 0.9), ("p95", 0.95), ("p99", 0.99), ("p99.9", 0.999))
_HEDGED_LABELS = ("p50", "p95", "p99", "p99.9")
"""Column names of :data:`hedgeclient.analysis.DEFAULT_QUANTILES`."""

_LATENCY_DECIMALS = 3  # milliseconds to the microsecond
_PERCENT_DECIMALS = 1
_OVER_BUDGET = "†"
"""Marks an extra load above the default hedge budget's ratio."""


def default_quantile() -> float:
    """The quantile of the library's default delay (``AdaptiveDelay()``: 0.95)."""
    return AdaptiveDelay().quantile


def default_budget_ratio() -> float:
    """The backups per request the library's default budget allows (``HedgeBudget()``)."""
    return HedgeBudget().ratio


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
        ratio = default_budget_ratio()
        report["default_budget_ratio"] = ratio
        report["trade_table"] = [
            _row(row, ratio) for row in analysis.trade_table(plan.sample, plan.delays)
        ]
        q = default_quantile()
        (row,) = analysis.trade_table(plan.sample, [analysis.quantile(plan.sample, q)])
        report["default_delay"] = {"quantile": q, **_row(row, ratio)}
        if plan.max_extra_load is not None:
            delay = analysis.recommend_delay(plan.sample, plan.max_extra_load)
            (row,) = analysis.trade_table(plan.sample, [delay])
            report["recommendation"] = {
                "max_extra_load": plan.max_extra_load,
                **_row(row, ratio),
            }
    if plan.retries is not None:
        r = plan.retries
        report["retries"] = {
            "retries": r.retries,
            "hedges": r.hedges,
            "worst_case_multiplier": (r.retries + 1) * (r.hedges + 1),
            "budget_ratio": r.ratio,
            "budget_burst": r.burst,
            # Never above the worst case: a budget bounds what is sent, it adds nothing.
            "bounded_multiplier": min((r.retries + 1) * (r.hedges + 1), 1 + r.ratio),
        }
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


def _row(row: analysis.TradeRow, ratio: float) -> dict[str, Any]:
    hedged = dict(
        zip(_HEDGED_LABELS, (row.hedged[q] for q in analysis.DEFAULT_QUANTILES), strict=True)
    )
    return {
        "delay_seconds": row.delay,
        "extra_load": row.extra_load,
        "hedged_seconds": hedged,
        "above_default_budget": row.extra_load > ratio,
    }


class _Numbers:
    """One number of decimals for every latency of a report, one for every percentage."""

    def __init__(self, latencies: list[float], fractions: list[float]) -> None:
        self._ms = decimals([x * 1000 for x in latencies], _LATENCY_DECIMALS)
        self._pct = decimals([x * 100 for x in fractions], _PERCENT_DECIMALS)

    def ms(self, seconds: float) -> str:
        return f"{seconds * 1000:.{self._ms}f}"

    def pct(self, fraction: float) -> str:
        return f"{fraction * 100:.{self._pct}f}%"


def _numbers(report: dict[str, Any]) -> _Numbers:
    """The precision of everything :func:`_print_sample` prints."""
    rows = [*report["trade_table"], report["default_delay"]]
    fractions = [report["default_budget_ratio"]]
    if "recommendation" in report:
        rows.append(report["recommendation"])
        fractions.append(report["recommendation"]["max_extra_load"])
    latencies = list(report["unhedged_seconds"].values())
    for row in rows:
        latencies += [row["delay_seconds"], *row["hedged_seconds"].values()]
        fractions.append(row["extra_load"])
    return _Numbers(latencies, fractions)


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
    if "retries" in report:
        if plan.sample is not None or "fanout" in report:
            print()
        _print_retries(report["retries"])


def _print_retries(r: dict[str, Any]) -> None:
    """The worst case of a retry policy around hedging, and the shared budget's bound."""
    retries, hedges, ratio = r["retries"], r["hedges"], r["budget_ratio"]
    print(f"Retries {retries} around hedging, max_hedges {hedges}: when every attempt fails,")
    print(
        f"  a call sends up to ({retries} + 1) x ({hedges} + 1) = "
        f"{r['worst_case_multiplier']}x the requests of a plain client."
    )
    print(
        f"One hedge budget for the retries and the backups (ratio {ratio:g}, burst "
        f"{r['budget_burst']:g}) bounds a run"
    )
    if r["bounded_multiplier"] < r["worst_case_multiplier"]:
        print(
            f"  to 1 + {ratio:g} = {r['bounded_multiplier']:g}x the requests of a plain "
            f"client, plus its burst ({r['budget_burst']:g}) and floor:"
        )
    else:  # the budget allows more than the worst case: it never binds
        print(
            f"  to the worst case, {r['bounded_multiplier']:g}x the requests of a plain client: "
            f"the budget allows 1 + {ratio:g} = {1 + ratio:g}x, plus its burst "
            f"({r['budget_burst']:g}) and floor, and never binds here:"
        )
    print(f"  {docs_link('budget', 'one-budget-for-retries-and-backups')}")


def _print_sample(report: dict[str, Any], labels: tuple[str, ...]) -> None:
    count, beyond = report["count"], report["beyond_sample"]
    unhedged = report["unhedged_seconds"]
    numbers = _numbers(report)
    print(f"Sample: {report['source']}, {count:,} latencies")
    print(
        "Unhedged: "
        + ", ".join(
            f"{label} {numbers.ms(value)} ms" + ("*" if label in beyond else "")
            for label, value in unhedged.items()
        )
    )
    default = report["default_delay"]
    which = f"p{default['quantile'] * 100:g}"
    print(
        f"Hedged at the {which}, the default delay ({numbers.ms(default['delay_seconds'])} "
        f"ms): p99 {numbers.ms(unhedged['p99'])} -> "
        f"{numbers.ms(default['hedged_seconds']['p99'])} ms for "
        f"{numbers.pct(default['extra_load'])} extra load"
    )
    print()
    table = report["trade_table"]
    over = any(row["above_default_budget"] for row in table)
    headers = ["hedge delay (ms)", "extra load"]
    headers += [f"hedged {q}" + ("*" if q in beyond else "") for q in _HEDGED_LABELS]
    rows = []
    for row, name in zip(table, labels, strict=True):
        mark = _OVER_BUDGET if row["above_default_budget"] else " " if over else ""
        rows.append(
            [
                numbers.ms(row["delay_seconds"]) + (f" ({name})" if name else ""),
                numbers.pct(row["extra_load"]) + mark,
                *(numbers.ms(value) for value in row["hedged_seconds"].values()),
            ]
        )
    print_table(headers, rows)
    arithmetic = docs_link("how-it-works", "the-arithmetic")
    print("extra load = P(X > d), backups per request; hedged latencies assume independent")
    print(f"attempts on different replicas: {arithmetic}")
    ratio = report["default_budget_ratio"]
    if over:
        loads = [row["extra_load"] for row in table if row["above_default_budget"]]
        _print_budget_note(numbers, ratio, loads)
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
        mark = _OVER_BUDGET if advice["above_default_budget"] else ""
        print()
        print(
            f"Recommended hedge delay for extra load <= {numbers.pct(advice['max_extra_load'])}"
            f": {numbers.ms(advice['delay_seconds'])} ms (extra load "
            f"{numbers.pct(advice['extra_load'])}{mark}, hedged p99 "
            f"{numbers.ms(advice['hedged_seconds']['p99'])} ms)"
        )
        if mark and not over:
            _print_budget_note(numbers, ratio, [advice["extra_load"]])


def _print_budget_note(numbers: _Numbers, ratio: float, loads: list[float]) -> None:
    """The footnote of extra loads above the default budget's ``ratio``, ``loads`` the
    marked ones: in a steady stream the budget sends ``ratio`` backups per request, so it
    refuses ``1 - ratio / load`` of them (its burst and its floor of one a second aside)."""
    top, budget = max(loads), numbers.pct(ratio)
    refused = f"{(1 - ratio / top) * 100:.0f}%"  # an approximation: whole percent
    print(
        f"{_OVER_BUDGET} above the default hedge budget, backups for {budget} of requests: "
        "it would refuse"
    )
    print(
        f"  about 1 - {budget}/extra load of these backups ({refused} of them at "
        f"{numbers.pct(top)}), and the tail"
    )
    print("  would stay above these figures; HedgedTransport(extra_load=...) sets both together")


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
