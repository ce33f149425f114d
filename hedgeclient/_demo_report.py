"""The report of ``hedgeclient demo``: numbers, table, notes, closing line, JSON and plot.

:func:`build` turns the measurements of :mod:`hedgeclient._demo` into one dict of
numbers in seconds and fractions (the ``--json`` form); the printers only format it.

Columns of the table:

- *law*: the replicas' latency law itself (exact quantiles), what a client with no
  overhead would see without hedging; the gap to *plain* is the client's own cost.
- *plain*, *hedged*: measured by the client, time to the full response.
- *predicted*: :mod:`hedgeclient.analysis` on the plain sample at the hedge delay the
  hedged client actually used (the median of the delays used when the adaptive delay
  moved), assuming a backup's latency is independent of its primary's
  (``docs/how-it-works.md``). With fan-out, a parent waiting for n children completes by ``t``
  with probability ``F(t)**n``, so its q-quantile is the children's
  ``q**(1/n)``-quantile.

Strictly private: the command line is the interface.
"""

from __future__ import annotations

import json
import statistics
from bisect import bisect_right
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from hedgeclient import analysis
from hedgeclient._cli import print_table

if TYPE_CHECKING:
    from hedgeclient._demo import Phase, Run
    from hedgeclient.testing import LatencyLaw

__all__ = ["build", "plot", "print_json", "print_report"]

QUANTILES = (("p50", 0.5), ("p90", 0.9), ("p95", 0.95), ("p99", 0.99), ("p99.9", 0.999))
"""The latency rows: label and quantile (the maximum follows them)."""

NO_CHANGE = 0.20
"""A hedged p99 within 20 % of the plain one is reported as no clear gain: the client's
own queueing moves a measured p99 by several milliseconds on a busy machine, and a
hedge that works on the lab law halves it."""

BUSY_CLIENT = 0.005
"""Seconds the plain client may add to the law's median before the report warns that
the measurements are mostly the client's own queueing (it adds about 3 ms on a quiet
2-core VM at the default concurrency; the note always prints the figure)."""


# --- numbers ---------------------------------------------------------------------------


def _percentiles(sample: Sequence[float]) -> dict[str, float | None]:
    if not sample:
        return {label: None for label, _ in (*QUANTILES, ("max", 1.0))}
    result: dict[str, float | None] = {
        label: analysis.quantile(sample, q) for label, q in QUANTILES
    }
    result["max"] = max(sample)
    return result


def _law(law: LatencyLaw, fanout: int) -> dict[str, Any]:
    """The law's exact quantiles (and maximum, when it has one); with fan-out, a parent's."""
    from hedgeclient.testing import Constant, Empirical  # lazy: the 'cli' extra

    top = None
    if isinstance(law, Empirical):
        top = law.values[-1]
    elif isinstance(law, Constant):
        top = law.value
    result: dict[str, Any] = {}
    for key, n in (("latency_seconds", 1), ("parent_latency_seconds", fanout)):
        if key == "latency_seconds" or fanout > 1:
            quantiles: dict[str, float | None] = {
                label: law.quantile(q ** (1 / n)) for label, q in QUANTILES
            }
            result[key] = {**quantiles, "max": top}
    return result


def _phase(phase: Phase) -> dict[str, Any]:
    requests = phase.requests
    report: dict[str, Any] = {
        "requests": requests,
        "errors": phase.errors,
        "servers_received": phase.received,
        "extra_load": phase.received / requests - 1,
        "backups_sent": phase.backups,
        "backups_won": phase.won,
        "backups_suppressed": dict(sorted(phase.suppressed.items())),
        "backups_per_request": phase.backups / requests,
        "latency_seconds": _percentiles(phase.children),
        "elapsed_seconds": phase.elapsed,
        "client_cpu_seconds": phase.cpu,
    }
    if phase.parents is not None:
        report["parent_latency_seconds"] = _percentiles(phase.parents)
    return report


def _delay(run: Run) -> dict[str, Any]:
    """The hedged client's delay: what it was, and the one the prediction uses."""
    options = run.options
    used = [d for d in run.hedged.delays if d is not None]
    counts = Counter(used)
    fixed = options.delay is not None
    report: dict[str, Any] = {
        "kind": "fixed" if fixed else "adaptive",
        "quantile": None if fixed else options.quantile,
        "after_warmup_seconds": run.warmup_delay,
        "left_warmup": run.warmup_left,
        "final_seconds": run.hedged.final_delay,
        "min_seconds": min(used, default=None),
        "max_seconds": max(used, default=None),
        "median_seconds": statistics.median_low(used) if used else None,
        "varied": len(counts) > 1,
        "suspended_requests": len(run.hedged.delays) - len(used),
        "used": [[seconds, count] for seconds, count in sorted(counts.items())],
    }
    if fixed:
        report["basis"] = "fixed"
    elif len(counts) > 1:
        report["basis"] = "median of the delays used"
    else:
        report["basis"] = "the only delay used"
    report["predict_seconds"] = options.delay if fixed else report["median_seconds"]
    return report


def _prediction(run: Run, delay: float | None) -> dict[str, Any] | None:
    """Hedged quantiles and extra load predicted from the plain sample at ``delay``."""
    sample = run.plain.children
    if delay is None or not sample:
        return None
    prediction: dict[str, Any] = {
        "delay_seconds": delay,
        "sample_size": len(sample),
        "extra_load": analysis.extra_load(sample, delay),
        "latency_seconds": {
            label: analysis.hedged_quantile(sample, delay, q) for label, q in QUANTILES
        },
    }
    fanout = run.options.fanout
    if fanout > 1:
        prediction["parent_latency_seconds"] = {
            label: analysis.hedged_quantile(sample, delay, q ** (1 / fanout))
            for label, q in QUANTILES
        }
    return prediction


def _fanout(run: Run, law: LatencyLaw, delay: float | None) -> dict[str, Any]:
    """The parent's p99 read off each child sample: the children's ``0.99**(1/n)``."""
    n = run.options.fanout
    child_q = analysis.child_quantile_for_parent(0.99, n)
    plain, hedged = run.plain.children, run.hedged.children
    return {
        "n": n,
        "parents": run.options.parents,
        "child_quantile_for_parent_p99": child_q,
        "parent_p99_from_children_seconds": {
            "law": law.quantile(child_q),
            "plain": analysis.quantile(plain, child_q) if plain else None,
            "hedged": analysis.quantile(hedged, child_q) if hedged else None,
            "predicted": (
                analysis.hedged_quantile(plain, delay, child_q)
                if plain and delay is not None
                else None
            ),
        },
    }


def build(run: Run) -> dict[str, Any]:
    """Return every number the demo reports, in seconds and fractions (the JSON form)."""
    from hedgeclient.testing import parse_law  # lazy: the 'cli' extra, like the demo

    options = run.options
    law = parse_law(options.latency)
    delay = _delay(run)
    report: dict[str, Any] = {
        "config": {
            "replicas": 3,
            "latency": options.latency,
            "slowness": options.slowness,
            "requests": options.requests,
            "concurrency": options.concurrency,
            "fanout": options.fanout,
            "parents": options.parents,
            "rounds": min(options.rounds, options.parents),
            "warmup": options.warmup,
            "seed": options.seed,
            "backend": options.backend,
        },
        "law": _law(law, options.fanout),
        "plain": _phase(run.plain),
        "hedged": {**_phase(run.hedged), "delay": delay},
        "prediction": _prediction(run, delay["predict_seconds"]),
        "elapsed_seconds": run.elapsed,
    }
    if options.fanout > 1:
        report["fanout"] = _fanout(run, law, delay["predict_seconds"])
    report["summary"] = _summary(report)
    return report


# --- words -----------------------------------------------------------------------------


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.1f}"


def _pct(fraction: float | None) -> str:
    return "-" if fraction is None else f"{fraction * 100:.1f}%"


def _verdict(before: float, after: float) -> str:
    if after <= before * (1 - NO_CHANGE):
        return f"{before / after:.1f}x lower"
    if after >= before * (1 + NO_CHANGE):
        return f"{after / before:.1f}x higher"
    return f"no clear gain, within {NO_CHANGE:.0%}"


def _summary(report: dict[str, Any]) -> str:
    """The trade in one line: ``p99 120.6 -> 46.1 ms for 5.2% extra load (...)``."""
    plain, hedged = report["plain"], report["hedged"]
    key = "parent_latency_seconds" if "fanout" in report else "latency_seconds"
    what = "parent p99" if "fanout" in report else "p99"
    before, after = plain[key]["p99"], hedged[key]["p99"]
    if before is None or after is None:
        return "no successful requests to compare"
    return (
        f"{what} {_ms(before)} -> {_ms(after)} ms for {_pct(hedged['extra_load'])} extra "
        f"load ({_verdict(before, after)}; p50 {_ms(plain[key]['p50'])} -> "
        f"{_ms(hedged[key]['p50'])} ms)"
    )


def _rows(report: dict[str, Any]) -> list[list[str]]:
    law, plain, hedged = report["law"], report["plain"], report["hedged"]
    predicted = report["prediction"] or {}
    rows: list[list[str]] = []
    sections = [("latency_seconds", "")]
    if "fanout" in report:
        sections = [("parent_latency_seconds", "parent "), ("latency_seconds", "child ")]
    for key, prefix in sections:
        for label in (*(label for label, _ in QUANTILES), "max"):
            cells = [law[key].get(label), plain[key][label], hedged[key][label]]
            cells.append(predicted.get(key, {}).get(label))
            rows.append([f"{prefix}{label} (ms)", *map(_ms, cells)])
    if "fanout" in report:
        fan = report["fanout"]
        cells = fan["parent_p99_from_children_seconds"]
        label = f"parent p99 from children, F^{fan['n']} (ms)"
        rows.append([label, *(_ms(cells[k]) for k in ("law", "plain", "hedged", "predicted"))])
    received = (plain["servers_received"], hedged["servers_received"])
    backups_won = hedged["backups_won"]
    rows += [
        ["requests sent", "", f"{plain['requests']:,}", f"{hedged['requests']:,}", ""],
        ["servers received", "", f"{received[0]:,}", f"{received[1]:,}", ""],
        ["extra load", "", *(_pct(p.get("extra_load")) for p in (plain, hedged, predicted))],
        ["backups sent / won", "", "-", f"{hedged['backups_sent']:,} / {backups_won:,}", ""],
        ["backups suppressed", "", "-", _suppressed(hedged["backups_suppressed"]), ""],
    ]  # fmt: skip
    if plain["errors"] or hedged["errors"]:
        rows.append(["errors", "", f"{plain['errors']:,}", f"{hedged['errors']:,}", ""])
    delay = hedged["delay"]
    if delay["kind"] == "fixed":
        used = f"{_ms(delay['predict_seconds'])} (fixed)"
    elif delay["varied"]:
        used = (
            f"{_ms(delay['final_seconds'])} at end "
            f"({_ms(delay['min_seconds'])}-{_ms(delay['max_seconds'])})"
        )
    else:
        used = _ms(delay["final_seconds"])
    rows.append(["hedge delay (ms)", "", "-", used, _ms(delay["predict_seconds"])])
    return rows


def _suppressed(counts: dict[str, int]) -> str:
    if not counts:
        return "0"
    return ", ".join(f"{n:,} {reason}" for reason, n in counts.items())


def _notes(report: dict[str, Any]) -> list[str]:
    config, hedged = report["config"], report["hedged"]
    delay = hedged["delay"]
    notes = []
    rounds = config["rounds"]
    how = (
        f"in {rounds} rounds, plain first in even ones, so both saw the same machine load"
        if rounds > 1
        else "plain first, then hedged"
    )
    warm = f"Measured {how}, after {config['warmup']:,} warm-up requests through each client"
    if delay["kind"] == "adaptive":
        state = "it had left" if delay["left_warmup"] else "it had NOT yet left"
        warm += (
            f" (to open connections, and for the adaptive delay: 100 ms until 100 samples, "
            f"then the {delay['quantile']} quantile of the last 60 s; {state} its "
            f"warm-up at {_ms(delay['after_warmup_seconds'])} ms)."
        )
    else:
        warm += " (to open connections)."
    notes.append(warm)
    is_lab = config["latency"].strip().lower() == "lab"
    if delay["kind"] == "adaptive" and is_lab and delay["quantile"] == 0.94:
        notes.append(
            "Adaptive delay at quantile 0.94, not 0.95: on the lab law exactly 5% of calls "
            "are above 30 ms, so its p95 sits on an atom boundary and a rolling p95 estimate "
            "flips between ~30 and ~50 ms (at 50 ms the predicted hedged p99 is 62 ms, not "
            "45). Every q in (0.90, 0.95] is 30 ms on the exact law; 0.94 keeps the estimate "
            "off the edge for about 1 point of extra load. --quantile 0.95 shows the edge."
        )
    prediction = report["prediction"]
    if prediction is not None:
        basis = delay["basis"]
        if delay["varied"]:
            basis += (
                f"; the adaptive delay moved between {_ms(delay['min_seconds'])} and "
                f"{_ms(delay['max_seconds'])} ms"
            )
        notes.append(
            f"Predicted: hedgeclient.analysis on the plain client's "
            f"{prediction['sample_size']:,} latencies at d = "
            f"{_ms(prediction['delay_seconds'])} ms ({basis}), assuming a backup is "
            "independent of its primary."
        )
    notes.append(
        "Latency: time to the full response, as the client measured it. Extra load: "
        "servers received / requests - 1 (backups sent per request: "
        f"{_pct(hedged['backups_per_request'])}; a backup cancelled before it reached a "
        "replica, because its primary answered first, costs the client but no server)."
    )
    notes.append(_client_note(report))
    if "fanout" in report:
        fan = report["fanout"]
        notes.append(
            f"Fan-out: each parent waits for {fan['n']} concurrent children, so its p99 is "
            f"the children's {fan['child_quantile_for_parent_p99']:.5f} quantile "
            f"(F(t)^{fan['n']}); {fan['parents']:,} parents, "
            f"{config['concurrency']:,} in flight."
        )
    if config["slowness"] == "request-owned":
        notes.append(
            "Slowness is request-owned: a request is exactly as slow on every replica, so a "
            "backup answers no sooner than its primary. The prediction assumes independent "
            "attempts and does not hold here; the backups are pure extra load."
        )
    notes.append(f"Run: {report['elapsed_seconds']:.1f} s, servers in a subprocess.")
    return notes


def _client_note(report: dict[str, Any]) -> str:
    """How much the client itself added: its median over the law's, and how busy it was."""
    law = report["law"]["latency_seconds"]["p50"]
    parts = []
    for name in ("plain", "hedged"):
        phase = report[name]
        p50 = phase["latency_seconds"]["p50"]
        busy = phase["client_cpu_seconds"] / max(phase["elapsed_seconds"], 1e-9)
        added = "-" if p50 is None else f"{(p50 - law) * 1000:+.1f} ms"
        parts.append(f"{name} {added} at the median, CPU {busy:.0%} busy")
    note = f"Client cost: {'; '.join(parts)}."
    config = report["config"]
    if config["fanout"] > 1:
        note += (
            f" With fan-out a parent's {config['fanout']} requests leave in one burst, which "
            "the client sends one after another: later children start late."
        )
    plain_p50 = report["plain"]["latency_seconds"]["p50"]
    if config["fanout"] == 1 and plain_p50 is not None and plain_p50 - law > BUSY_CLIENT:
        note += (
            " The client adds more than 5 ms: this machine is busy or slow for "
            f"--concurrency {config['concurrency']}, so the latencies include the client's "
            "own queueing; a lower --concurrency measures the servers more closely."
        )
    return note


# --- printing ----------------------------------------------------------------------------


def print_json(report: dict[str, Any]) -> None:
    """Print ``report`` as indented JSON (seconds and fractions)."""
    print(json.dumps(report, indent=2))


def print_report(report: dict[str, Any]) -> None:
    """Print the title, the table, the notes and the closing line."""
    config = report["config"]
    what = "GET requests"
    if config["fanout"] > 1:
        what = f"parents of {config['fanout']} GET requests"
    print(
        f"hedgeclient demo: {config['replicas']} replicas ({config['latency']} law, "
        f"{config['slowness']} slowness), {config['parents']:,} {what} at concurrency "
        f"{config['concurrency']}, seed {config['seed']}"
    )
    print()
    print_table(["", "law", "plain", "hedged", "predicted"], _rows(report))
    print()
    for note in _notes(report):
        print(note)
    print()
    print(f"Trade: {report['summary']}.")


def _survival(sample: Sequence[float]) -> tuple[list[float], list[float]]:
    """The empirical ``1 - F`` at each distinct value (ms), the last point (0) dropped."""
    xs = sorted(sample)
    n = len(xs)
    points = sorted(set(xs))[:-1]
    return [x * 1000 for x in points], [(n - bisect_right(xs, x)) / n for x in points]


def _predicted_survival(sample: Sequence[float], delay: float) -> tuple[list[float], list[float]]:
    """``P(X > t) * P(X > t - d)`` (``P(X > t)`` for ``t <= d``) on its step grid, in ms."""
    xs = sorted(sample)
    n = len(xs)
    ts, ps = [], []
    for t in sorted({*xs, *(x + delay for x in xs)}):
        p = (n - bisect_right(xs, t)) / n
        if t > delay:
            p *= (n - bisect_right(xs, t - delay)) / n
        if p > 0:
            ts.append(t * 1000)
            ps.append(p)
    return ts, ps


def plot(run: Run, report: dict[str, Any], path: str) -> None:
    """Save the latency tails of both clients (``1 - F``, log y axis) to ``path`` (PNG).

    Raises:
        UsageError: ``path`` cannot be written.
    """
    import matplotlib  # lazy: the optional 'plot' extra

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 5))
    fanout = run.options.fanout
    curves = [("plain", run.plain.children, "C0"), ("hedged", run.hedged.children, "C1")]
    if fanout > 1:
        curves = [(f"{name} child", sample, color) for name, sample, color in curves]
        curves += [
            (f"plain parent (n={fanout})", run.plain.parents or [], "C2"),
            (f"hedged parent (n={fanout})", run.hedged.parents or [], "C3"),
        ]
    for label, sample, color in curves:
        if sample:
            axes.step(*_survival(sample), where="post", label=label, color=color)
    delay = report["hedged"]["delay"]["predict_seconds"]
    if delay is not None and run.plain.children:
        axes.step(
            *_predicted_survival(run.plain.children, delay),
            where="post",
            linestyle="--",
            color="C1",
            alpha=0.6,
            label="hedged child, predicted" if fanout > 1 else "hedged, predicted",
        )
        axes.axvline(delay * 1000, color="grey", linestyle=":", label=f"delay {_ms(delay)} ms")
    axes.set_yscale("log")
    axes.set_xlabel("latency, ms (time to the full response)")
    axes.set_ylabel("P(latency > x)")
    axes.set_title(f"hedgeclient demo: {report['summary']}", fontsize=9)
    axes.grid(visible=True, which="both", alpha=0.3)
    axes.legend()
    figure.tight_layout()
    try:
        figure.savefig(path, dpi=120)
    except OSError as exc:
        from hedgeclient._cli import UsageError

        msg = f"--plot: cannot write {path!r}: {exc.strerror or exc}"
        raise UsageError(msg) from None
    finally:
        plt.close(figure)
