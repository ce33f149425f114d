"""``hedgeclient demo``: the printed report, a headline and a table.

By default: the title, the verdict in one line, the table of latencies, extra load and
hedge delay. With ``--verbose``: the accounting rows (requests, backups, the client's
own cost) and the notes on how it was measured. When the client was CPU bound, or its
event loop late, the verdict line says which instead of comparing latencies that
measure the client's own queueing, and the table is printed only with ``--verbose``.
Under the table, a hedged p95 above the plain one gets a line saying why.

Strictly private: the command line is the interface.
"""

from __future__ import annotations

import json
from typing import Any

from hedgeclient.cli._output import print_table
from hedgeclient.cli.demo._notes import notes
from hedgeclient.cli.demo._report import QUANTILES, ms, p95_note, pct

__all__ = ["print_json", "print_report"]


def _latency_rows(report: dict[str, Any]) -> list[list[str]]:
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
            rows.append([f"{prefix}{label} (ms)", *map(ms, cells)])
    if "fanout" in report:
        fan = report["fanout"]
        cells = fan["parent_p99_from_children_seconds"]
        label = f"parent p99 from children, F^{fan['n']} (ms)"
        rows.append([label, *(ms(cells[k]) for k in ("law", "plain", "hedged", "predicted"))])
    extra = [pct(p.get("extra_load")) for p in (plain, hedged, predicted)]
    rows.append(["extra load", "-", *extra])
    delay = hedged["delay"]
    if delay["kind"] == "fixed":
        used = f"{ms(delay['predict_seconds'])} (fixed)"
    elif delay["varied"]:
        used = (
            f"{ms(delay['final_seconds'])} at end "
            f"({ms(delay['min_seconds'])}-{ms(delay['max_seconds'])})"
        )
    else:
        used = ms(delay["final_seconds"])
    rows.append(["hedge delay (ms)", "-", "-", used, ms(delay["predict_seconds"])])
    return rows


def _accounting_rows(report: dict[str, Any]) -> list[list[str]]:
    plain, hedged = report["plain"], report["hedged"]
    received = (plain["servers_received"], hedged["servers_received"])
    won = hedged["backups_won"]
    rows = [
        ["requests sent", "", f"{plain['requests']:,}", f"{hedged['requests']:,}", ""],
        ["servers received", "", f"{received[0]:,}", f"{received[1]:,}", ""],
        ["backups sent / won", "", "-", f"{hedged['backups_sent']:,} / {won:,}", ""],
        ["backups suppressed", "", "-", _suppressed(hedged["backups_suppressed"]), ""],
    ]
    if plain["errors"] or hedged["errors"]:
        rows.append(["errors", "", f"{plain['errors']:,}", f"{hedged['errors']:,}", ""])
    waker = "thread" if report["config"].get("client") == "sync" else "loop"
    for label, q in (("p50", "p50"), ("p99", "p99")):
        lags = [ms(p["client_lag_seconds"][q]) for p in (plain, hedged)]
        rows.append([f"client {waker} lag {label} (ms)", "", *lags, ""])
    busy = report["client"]["cpu_busy"]
    rows.append(["client CPU busy", "", f"{busy['plain']:.0%}", f"{busy['hedged']:.0%}", ""])
    return rows


def _suppressed(counts: dict[str, int]) -> str:
    if not counts:
        return "0"
    return ", ".join(f"{n:,} {reason}" for reason, n in counts.items())


def print_json(report: dict[str, Any]) -> None:
    """Print ``report`` as indented JSON (seconds and fractions)."""
    print(json.dumps(report, indent=2))


def print_report(report: dict[str, Any], *, verbose: bool) -> None:
    """Print the title, the verdict and the table; with ``verbose``, the notes too."""
    config = report["config"]
    what = "GET requests"
    if config["fanout"] > 1:
        what = f"parents of {config['fanout']} GET requests"
    print(
        f"hedgeclient demo: {config['replicas']} replicas ({config['latency']} law, "
        f"{config['slowness']} slowness), {config['parents']:,} {what}, "
        f"{config['concurrency']} in flight"
        + (" (sync: httpx.Client from threads)" if config.get("client") == "sync" else "")
    )
    print()
    print(report["summary"])
    bound = report["verdict"]["kind"] == "client bound"
    if verbose or not bound:
        print()
        rows = _latency_rows(report)
        if verbose:
            rows += _accounting_rows(report)
        print_table(["", "law", "plain", "hedged", "predicted"], rows)
        note = p95_note(report)
        if note is not None:
            print(note)
    print()
    if verbose:
        for note in notes(report):
            print(note)
    else:
        print("How this was measured, and the accounting: hedgeclient demo --verbose")
