"""``hedgeclient demo --verbose``: how the numbers were measured, in a few paragraphs.

Strictly private: the command line is the interface.
"""

from __future__ import annotations

from typing import Any

from hedgeclient.cli._laws import DEMO_LAW
from hedgeclient.cli._output import docs_link
from hedgeclient.cli.demo._options import CONCURRENCY_PER_CORE, DEFAULT_CONCURRENCY
from hedgeclient.cli.demo._report import CLIENT_BUSY, CLIENT_LAG

__all__ = ["notes"]


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.1f}"


def notes(report: dict[str, Any]) -> list[str]:
    """The methodology, one paragraph per item, for the report ``report``."""
    config, hedged = report["config"], report["hedged"]
    delay = hedged["delay"]
    found = [
        _workload(config),
        _delay_note(delay),
        _prediction_note(report),
        "Latency: time to the full response, as the client measured it. Extra load: "
        "servers received / requests - 1 (backups sent per request: "
        f"{hedged['backups_per_request'] * 100:.1f}%; a backup cancelled before it "
        "reached a replica, because its primary answered first, costs the client but "
        "no server).",
        _client_note(report),
    ]
    if config["latency"].strip().lower() == "demo":
        found.append(
            f"The demo law ({DEMO_LAW}): 97% of calls log-normal around 25 ms, 3% a "
            "pause around 250 ms. Unlike the lab sample of the docs it has no atoms, so "
            "its p95 and p99 do not sit on the edge between two far-apart values, and "
            "two runs give the same verdict; at this scale the client's own delays of a "
            "few milliseconds weigh little beside the hedge delay."
        )
    if "fanout" in report:
        fan = report["fanout"]
        found.append(
            f"Fan-out: each parent waits for {fan['n']} concurrent children, so its p99 is "
            f"the children's {fan['child_quantile_for_parent_p99']:.5f} quantile "
            f"(F(t)^{fan['n']}); {fan['parents']:,} parents, "
            f"{config['concurrency']:,} in flight. A parent's requests leave in one "
            "burst, which the client sends one after another: later children start late."
        )
    if config["slowness"] == "request-owned":
        found.append(
            "Slowness is request-owned: a request is exactly as slow on every replica, so a "
            "backup answers no sooner than its primary. The prediction assumes independent "
            "attempts and does not hold here; the backups are pure extra load."
        )
    found.append(
        f"Run: {report['elapsed_seconds']:.1f} s, servers in a subprocess. More: "
        f"{docs_link('replicas', 'what-the-demo-shows')}"
    )
    return found


def _workload(config: dict[str, Any]) -> str:
    rounds = config["rounds"]
    how = (
        f"in {rounds} rounds, plain first in even ones, so that both saw the same machine load"
        if rounds > 1
        else "plain first, then hedged"
    )
    clients = ""
    if config.get("client") == "sync":
        clients = (
            " Sync clients: httpx.Client, the hedged one through SyncHedgedTransport with "
            "the async one's settings, its engine on the callers' threads; each request "
            "in flight is a thread of its own, sending one request after another, where "
            "the async mode has a task."
        )
    return (
        f"Measured {how}, after {config['warmup']:,} warm-up requests through each "
        "client (to open connections, and for the adaptive delay to leave its warm-up). "
        "The plain client sends request i to replica i mod 3, as evenly as the hedged "
        f"client spreads them, so both pools hold as many connections.{clients}"
    )


def _delay_note(delay: dict[str, Any]) -> str:
    if delay["kind"] == "fixed":
        return f"Hedge delay: fixed at {_ms(delay['predict_seconds'])} ms (--delay)."
    quantile = delay["quantile"]
    which = "the library's default" if quantile is None else f"--quantile {quantile}"
    state = "it had left" if delay["left_warmup"] else "it had NOT yet left"
    return (
        f"Hedge delay: the adaptive delay with {which} (100 ms until 100 samples, then "
        f"the p95 of the last 60 s, unless --quantile); {state} its warm-up at "
        f"{_ms(delay['after_warmup_seconds'])} ms."
    )


def _prediction_note(report: dict[str, Any]) -> str:
    prediction, delay = report["prediction"], report["hedged"]["delay"]
    if prediction is None:
        return "Predicted: nothing to predict from (no plain latencies, or no delay used)."
    basis = delay["basis"]
    if delay["varied"]:
        basis += (
            f"; the adaptive delay moved between {_ms(delay['min_seconds'])} and "
            f"{_ms(delay['max_seconds'])} ms"
        )
    return (
        f"Predicted: hedgeclient.analysis on the plain client's "
        f"{prediction['sample_size']:,} latencies at d = "
        f"{_ms(prediction['delay_seconds'])} ms ({basis}), assuming a backup is "
        "independent of its primary."
    )


def _client_note(report: dict[str, Any]) -> str:
    law = report["law"]["latency_seconds"]["p50"]
    sync = report["config"].get("client") == "sync"
    parts = []
    for name in ("plain", "hedged"):
        phase = report[name]
        p50 = phase["latency_seconds"]["p50"]
        busy = report["client"]["cpu_busy"][name]
        added = "-" if p50 is None else f"{(p50 - law) * 1000:+.1f} ms"
        lag = _ms(phase["client_lag_seconds"]["p50"])
        late = f"threads {lag} ms late" if sync else f"loop {lag} ms late"
        parts.append(f"{name} {added} at the median, {late}, CPU {busy:.0%} busy")
    client = report["client"]
    load = client["load_average"]
    machine = f"{client['cores']} usable core" + ("s" if client["cores"] > 1 else "")
    if load is not None:
        machine = f"load average {load[0]:.1f} at the end, on {machine}"
    probe = (
        "A probe thread beside the client's threads measures how late it is woken (the GIL, the OS)"
        if sync
        else "A probe task in the client's event loop measures how late the loop wakes it"
    )
    return (
        f"Client cost: {'; '.join(parts)} ({machine}). {probe}: that scheduling delay is "
        f"part of every latency. Above {CLIENT_BUSY:.0%} of a core, or a median delay above "
        f"{CLIENT_LAG:.0%} of the law's median (a machine busy with other work), the "
        f"report gives no verdict. {report['config']['concurrency']} in flight (by default "
        f"{CONCURRENCY_PER_CORE} per usable core, {DEFAULT_CONCURRENCY} at most) keeps the "
        "client's loop on time on a small machine; more measures the client's own queue."
    )
