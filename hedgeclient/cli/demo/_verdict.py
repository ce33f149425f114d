"""``hedgeclient demo``: the verdict, the client's own cost, and the p95 line.

- *verdict*: the p99 (a parent's with fan-out) plain over hedged, unless the client was
  CPU bound or its event loop woke its tasks late (a machine busy with other work):
  then the latencies measure the client's own queueing, and the verdict says which,
  with the load average, instead of comparing them. The sync clients (``--client
  sync``) are judged alike: their threads share one core's worth of Python (the GIL),
  as the async clients' loop does, and a probe thread's late wake-ups stand for the
  loop's (cause ``"late loop"`` in the JSON either way).
- *p95*: plain, hedged and predicted. The arithmetic never puts the hedged p95 above
  the plain one (a hedged request ends at ``min(X, d + Y)`` <= ``X``:
  ``docs/how-it-works.md``), so a measured rise is a cost outside the arithmetic: the
  CPU the hedged client and its backups (sent, served, cancelled) take on the machine,
  which a busy machine makes dear. The report says so.

Strictly private: the command line is the interface.
"""

from __future__ import annotations

from typing import Any

from hedgeclient.cli.demo._model import Run

__all__ = [
    "CLIENT_BUSY",
    "CLIENT_LAG",
    "NO_CHANGE",
    "client_of",
    "ms",
    "p95_note",
    "p95_of",
    "pct",
    "summary",
    "verdict_of",
]

NO_CHANGE = 0.20
"""A hedged p99 within 20 % of the plain one is reported as no clear gain."""

CLIENT_BUSY = 0.60
"""The client is called CPU bound when, in either phase, its process used more than this
fraction of one core: its event loop is then a queue near saturation, and the time a
response waits in it (about ``busy / (1 - busy)`` times the CPU cost of a request on
average, several times that at the p99) is part of every latency it measures."""

CLIENT_LAG = 0.10
"""... or when its event loop woke a sleeping task later, at the median, than this
fraction of the law's median latency (a machine busy with other work shows this)."""


def client_of(report: dict[str, Any], run: Run) -> dict[str, Any]:
    """How much the client's own scheduling delay weighs, and whether it is bound: by
    its CPU (``cause`` ``"cpu"``), or by an event loop that woke it late while the CPU
    was not the cause (``"late loop"``: the machine ran other work), or not (None)."""
    names = ("plain", "hedged")
    law_p50 = report["law"]["latency_seconds"]["p50"]
    lag = max(report[name]["client_lag_seconds"]["p50"] for name in names)
    lag_p99 = max(report[name]["client_lag_seconds"]["p99"] for name in names)
    busy = {
        name: report[name]["client_cpu_seconds"] / max(report[name]["elapsed_seconds"], 1e-9)
        for name in names
    }
    cause = None
    if max(busy.values()) > CLIENT_BUSY:
        cause = "cpu"
    elif lag > CLIENT_LAG * law_p50:
        cause = "late loop"
    return {
        "lag_p50_seconds": lag,
        "lag_p99_seconds": lag_p99,
        "law_p50_seconds": law_p50,
        "cpu_busy": busy,
        "cores": run.cores,
        "load_average": None if run.load_average is None else list(run.load_average),
        "bound": cause is not None,
        "cause": cause,
    }


def p95_of(report: dict[str, Any]) -> dict[str, Any]:
    """The p95 (a parent's with fan-out): plain, hedged, predicted, and whether it rose."""
    key = "parent_latency_seconds" if "fanout" in report else "latency_seconds"
    plain, hedged = report["plain"][key]["p95"], report["hedged"][key]["p95"]
    prediction = report["prediction"]
    predicted = None if prediction is None else prediction[key]["p95"]
    rose = plain is not None and hedged is not None and hedged > plain
    return {
        "plain_seconds": plain,
        "hedged_seconds": hedged,
        "predicted_seconds": predicted,
        "rose": rose,
    }


def p95_note(report: dict[str, Any]) -> str | None:
    """One line on a hedged p95 above the plain one, and why: None when it did not rise."""
    p95 = report["p95"]
    if not p95["rose"]:
        return None
    what = "parent p95" if "fanout" in report else "p95"
    predicted = p95["predicted_seconds"]
    said = "" if predicted is None else f" (predicted {ms(predicted)})"
    return (
        f"The {what} rose, {ms(p95['plain_seconds'])} -> {ms(p95['hedged_seconds'])} ms"
        f"{said}: hedging makes no request slower (it ends at the earlier of its primary "
        "and its backup), so the rise is a cost outside the arithmetic: the CPU the hedged "
        "client and its backups take on this machine."
    )


def verdict_of(report: dict[str, Any]) -> dict[str, Any]:
    """Plain p99 over hedged p99, and what to call it."""
    key = "parent_latency_seconds" if "fanout" in report else "latency_seconds"
    before, after = report["plain"][key]["p99"], report["hedged"][key]["p99"]
    if before is None or after is None:
        return {"kind": "no data", "gain": None}
    gain = before / after if after > 0 else None
    if report["client"]["bound"]:
        kind = "client bound"
    elif after <= before * (1 - NO_CHANGE):
        kind = "lower"
    elif after >= before * (1 + NO_CHANGE):
        kind = "higher"
    else:
        kind = "no clear gain"
    return {"kind": kind, "gain": gain}


def ms(seconds: float | None) -> str:
    """Seconds as milliseconds with one decimal, or ``-``."""
    return "-" if seconds is None else f"{seconds * 1000:.1f}"


def pct(fraction: float | None) -> str:
    """A fraction as a percentage with one decimal, or ``-``."""
    return "-" if fraction is None else f"{fraction * 100:.1f}%"


def summary(report: dict[str, Any]) -> str:
    """The verdict in one line: ``p99 131.2 -> 36.9 ms (3.6x lower) for 5.1% extra load``."""
    plain, hedged, verdict = report["plain"], report["hedged"], report["verdict"]
    if verdict["kind"] == "no data":
        return "No successful requests to compare."
    if verdict["kind"] == "client bound":
        client = report["client"]
        busy = max(client["cpu_busy"].values())
        lower = max(1, report["config"]["concurrency"] // 2)
        late = (
            f"{ms(client['lag_p50_seconds'])} ms late at the median and "
            f"{ms(client['lag_p99_seconds'])} ms at the p99"
        )
        # The sync clients have threads where the async ones have an event loop.
        sync = report["config"].get("client") == "sync"
        if client["cause"] == "cpu":
            woke = f"its threads woken {late}" if sync else f"its event loop {late}"
            return (
                f"No verdict: the client was CPU bound (busy {busy:.0%} of a core, {woke}), "
                f"so its latencies measure its own queueing: try "
                f"--concurrency {lower} or a quieter machine."
            )
        load = client["load_average"]
        machine = f"{client['cores']} cores" if client["cores"] > 1 else "1 core"
        if load is not None:
            machine = f"load average {load[0]:.1f} on {machine}"
        woke = (
            "the client's threads woke late"
            if sync
            else "the client's event loop woke its tasks late"
        )
        return (
            f"No verdict: {woke} ({late}, beside the "
            f"law's {ms(client['law_p50_seconds'])} ms median) while it used {busy:.0%} of a "
            f"core: the machine was busy with other work ({machine}), so the latencies "
            f"measure its scheduling: try a quieter machine or --concurrency {lower}."
        )
    key = "parent_latency_seconds" if "fanout" in report else "latency_seconds"
    what = "parent p99" if "fanout" in report else "p99"
    before, after = plain[key]["p99"], hedged[key]["p99"]
    gain = verdict["gain"]
    if verdict["kind"] == "lower":
        said = f"{gain:.1f}x lower"
    elif verdict["kind"] == "higher":
        said = f"{1 / gain:.1f}x higher"
    else:
        said = f"no clear gain: within {NO_CHANGE:.0%}"
    return (
        f"Hedged: {what} {ms(before)} -> {ms(after)} ms ({said}) for "
        f"{pct(hedged['extra_load'])} extra load; p50 {ms(plain[key]['p50'])} -> "
        f"{ms(hedged[key]['p50'])} ms."
    )
