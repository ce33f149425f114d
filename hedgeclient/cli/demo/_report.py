"""``hedgeclient demo``: every number of the report, in seconds and fractions.

:func:`build` turns a :class:`~._model.Run` into one dict (the ``--json`` form); the
printers in :mod:`._text` and :mod:`._plot` only format it.

- *law*: the replicas' latency law itself (exact quantiles), what a client with no
  overhead would see without hedging; the gap to *plain* is the client's own cost.
- *plain*, *hedged*: measured by the client, time to the full response.
- *predicted*: :mod:`hedgeclient.analysis` on the plain sample at the hedge delay the
  hedged client actually used (the median of the delays used when the adaptive delay
  moved), assuming a backup's latency is independent of its primary's. With fan-out, a
  parent waiting for n children completes by ``t`` with probability ``F(t)**n``, so its
  q-quantile is the children's ``q**(1/n)``-quantile.
- *verdict*, *client*, *p95*: see :mod:`._verdict`.

Strictly private: the command line is the interface.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence
from typing import Any

from hedgeclient import analysis
from hedgeclient.cli.demo._measure import REPLICAS
from hedgeclient.cli.demo._model import Phase, Run
from hedgeclient.cli.demo._verdict import (
    CLIENT_BUSY,
    CLIENT_LAG,
    NO_CHANGE,
    client_of,
    ms,
    p95_note,
    p95_of,
    pct,
    summary,
    verdict_of,
)
from hedgeclient.testing import Constant, Empirical, LatencyLaw

__all__ = [
    "CLIENT_BUSY",
    "CLIENT_LAG",
    "NO_CHANGE",
    "QUANTILES",
    "build",
    "ms",
    "p95_note",
    "pct",
    "summary",
]

QUANTILES = (("p50", 0.5), ("p90", 0.9), ("p95", 0.95), ("p99", 0.99), ("p99.9", 0.999))
"""The latency rows: label and quantile (the maximum follows them)."""


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
    lags = phase.lags or [0.0]
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
        "client_lag_seconds": {
            "p50": analysis.quantile(lags, 0.5),
            "p99": analysis.quantile(lags, 0.99),
        },
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
        "quantile": options.quantile,
        "after_warmup_seconds": run.warmup_delay,
        "left_warmup": run.warmup_left,
        "final_seconds": run.hedged.final_delay,
        "min_seconds": min(used, default=None),
        "max_seconds": max(used, default=None),
        "median_seconds": statistics.median_low(used) if used else None,
        "varied": len(counts) > 1,
        "suspended_requests": len(run.hedged.delays) - len(used),
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


def _fanout(run: Run, delay: float | None) -> dict[str, Any]:
    """The parent's p99 read off each child sample: the children's ``0.99**(1/n)``."""
    n = run.options.fanout
    child_q = analysis.child_quantile_for_parent(0.99, n)
    plain, hedged = run.plain.children, run.hedged.children
    return {
        "n": n,
        "parents": run.options.parents,
        "child_quantile_for_parent_p99": child_q,
        "parent_p99_from_children_seconds": {
            "law": run.options.law.quantile(child_q),
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
    options = run.options
    delay = _delay(run)
    report: dict[str, Any] = {
        "config": {
            "replicas": REPLICAS,
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
            "client": options.client,
        },
        "law": _law(options.law, options.fanout),
        "plain": _phase(run.plain),
        "hedged": {**_phase(run.hedged), "delay": delay},
        "prediction": _prediction(run, delay["predict_seconds"]),
        "elapsed_seconds": run.elapsed,
    }
    if options.fanout > 1:
        report["fanout"] = _fanout(run, delay["predict_seconds"])
    report["config"]["cores"] = run.cores
    report["client"] = client_of(report, run)
    report["verdict"] = verdict_of(report)
    report["summary"] = summary(report)
    report["p95"] = p95_of(report)
    return report
