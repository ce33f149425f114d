"""``hedgeclient demo`` end to end on loopback: accounting, report structure, wide margins.

These tests run the real demo (fake service in a subprocess, real clock) with small
numbers and assert what must hold whatever the machine's load: the accounting
(requests, servers received, backups, extra load), the structure of the report, and
latency comparisons that have a wide, stated margin. They are marked ``slow``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hedgeclient.cli import main
from hedgeclient.cli.demo._options import default_concurrency

pytestmark = pytest.mark.slow

LATENCY_ROWS = ("p50", "p90", "p95", "p99", "p99.9", "max")


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    """Run ``hedgeclient demo --json ARGV``; return the report, checking stdout is JSON only."""
    assert main(["demo", "--json", *argv]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    report: dict[str, Any] = json.loads(out)
    return report


@pytest.mark.parametrize("client", ["async", "sync"])
def test_server_owned_lab_fixed_delay(capsys: pytest.CaptureFixture[str], client: str) -> None:
    """Lab law, fixed 30 ms delay: exact accounting, backups that answered first, and a
    verdict of a lower p99 unless the demo saw the machine too busy to measure one; the
    same through the sync clients (threads, SyncHedgedTransport) as the async ones.
    (That the delay halves the tail, exactly: tests/test_lab_tail.py, virtual time.)"""
    report = run_json(
        capsys,
        *("--latency", "lab", "--requests", "600", "--delay", "30ms"),
        *("--warmup", "0", "--rounds", "1", "--client", client),
    )
    plain, hedged, prediction = report["plain"], report["hedged"], report["prediction"]
    assert report["config"]["requests"] == 600
    assert report["config"]["client"] == client
    for phase in (plain, hedged):
        assert set(phase["latency_seconds"]) == set(LATENCY_ROWS)
        assert phase["requests"] == 600
        assert phase["errors"] == 0
    # The plain client sends each request once: the servers received exactly those.
    assert plain["servers_received"] == 600
    assert plain["extra_load"] == 0
    assert plain["backups_sent"] == plain["backups_won"] == 0
    # The hedged client's backups are its only extra requests. A backup cancelled while
    # it was being sent may never reach a replica, hence <= rather than ==.
    assert hedged["backups_sent"] > 0
    assert hedged["backups_per_request"] == hedged["backups_sent"] / 600
    assert 600 <= hedged["servers_received"] <= 600 + hedged["backups_sent"]
    assert hedged["extra_load"] == pytest.approx(hedged["servers_received"] / 600 - 1)
    assert 0 <= hedged["backups_won"] <= hedged["backups_sent"]
    delay = hedged["delay"]
    assert (delay["kind"], delay["basis"], delay["predict_seconds"]) == ("fixed", "fixed", 0.03)
    assert (delay["min_seconds"], delay["max_seconds"], delay["varied"]) == (0.03, 0.03, False)
    assert prediction["delay_seconds"] == 0.03
    assert prediction["sample_size"] == 600
    # With --warmup 0 and one round the plain phase makes each replica's first 200
    # draws (round-robin), so its latencies are fixed by --seed 0: 11 of the 600 draws
    # are 120 or 300 ms, more than 1 %, so its p99 is at least 120 ms on any machine.
    assert plain["latency_seconds"]["p99"] >= 0.120
    # The prediction is arithmetic on the plain phase's latencies: below its p99 on any
    # machine (a hedged request ends at min(X, d + Y) <= X).
    assert prediction["latency_seconds"]["p99"] < plain["latency_seconds"]["p99"]
    # About 12 primaries draw 120 or 300 ms; their backups, sent at 30 ms, answer first
    # (a backup loses to such a primary only if it takes 90 ms more than its own draw).
    assert hedged["backups_won"] >= 1
    # The measured hedged p99 (about 45-60 ms on a quiet machine) is the machine's as
    # much as the race's: a client stalled for most of 100 ms on 7 of its requests
    # moves it, and a loaded machine does that. The demo then says so instead of
    # comparing (its client lag or CPU bound): that, or a p99 at least 20 % lower.
    gain = plain["latency_seconds"]["p99"] / hedged["latency_seconds"]["p99"]
    assert report["verdict"]["gain"] == pytest.approx(gain)
    if report["client"]["bound"]:
        assert report["verdict"]["kind"] == "client bound"
        assert report["summary"].startswith("No verdict: the client")
    else:
        assert report["verdict"]["kind"] == "lower"
        assert gain >= 1.25  # hedged <= 0.8 x plain
        assert report["summary"].startswith("Hedged: p99 ")


def test_request_owned_slowness_costs_load_and_buys_nothing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Request-owned slowness: backups are sent (extra load) and the tail does not improve."""
    report = run_json(
        capsys,
        *("--latency", "lab", "--slowness", "request-owned"),
        *("--requests", "600", "--concurrency", "5"),
        *("--delay", "30ms", "--warmup", "0", "--rounds", "1"),
    )
    plain, hedged = report["plain"], report["hedged"]
    assert report["config"]["slowness"] == "request-owned"
    assert plain["servers_received"] == 600
    # 27 of these 600 paths take more than 30 ms on every replica (fixed by --seed 0).
    assert hedged["backups_sent"] >= 20
    assert hedged["extra_load"] > 0
    # A request is as slow on its backup's replica as on its primary's, so no hedged
    # latency is below the request's own; 9 of the 600 take 120 or 300 ms, hence a
    # hedged p99 of at least 120 ms on any machine.
    assert hedged["latency_seconds"]["p99"] >= 0.120
    # No claimed improvement: the verdict would be "lower" only for a hedged p99 at
    # least 20 % below the plain one, which needs the plain client alone to add 30 ms
    # at its p99 (it adds a few at 5 in flight; a loaded machine, in CI once, can add
    # that to the plain run alone, and then "lower" is the noise the verdict reports).
    kind, plain_p99 = report["verdict"]["kind"], plain["latency_seconds"]["p99"]
    assert kind in ("no clear gain", "higher", "client bound") or plain_p99 >= 0.150, (
        kind,
        plain_p99,
    )
    assert "lower" not in report["summary"] or plain_p99 >= 0.150


@pytest.mark.parametrize("client", ["async", "sync"])
def test_fanout_reports_parents_and_children(
    capsys: pytest.CaptureFixture[str], client: str
) -> None:
    """`--fanout 4`: parent and child percentiles; a parent is never faster than a child
    (its children sent at once from tasks, or from threads with `--client sync`)."""
    report = run_json(
        capsys,
        *("--fanout", "4", "--requests", "40", "--delay", "30ms", "--warmup", "0", "--rounds", "1"),
        *("--client", client),
    )
    assert report["config"]["parents"] == 40
    assert report["config"]["concurrency"] == max(1, default_concurrency() // 4)
    fan = report["fanout"]
    assert fan["n"] == 4
    assert fan["child_quantile_for_parent_p99"] == pytest.approx(0.99**0.25)
    assert set(fan["parent_p99_from_children_seconds"]) == {"law", "plain", "hedged", "predicted"}
    assert report["plain"]["servers_received"] == report["plain"]["requests"] == 160
    for phase in (report["plain"], report["hedged"]):
        parents, children = phase["parent_latency_seconds"], phase["latency_seconds"]
        # Each parent's time spans its children's, so every quantile is at least theirs.
        assert parents["p50"] >= children["p50"]
        assert parents["max"] >= children["max"]
    law = report["law"]
    assert law["parent_latency_seconds"]["p99"] >= law["latency_seconds"]["p99"]
    assert report["summary"].startswith(("Hedged: parent p99 ", "No verdict: the client"))


def test_verbose_text_report_with_adaptive_delay(capsys: pytest.CaptureFixture[str]) -> None:
    """`--verbose`: the title, the one-line verdict, a table row per percentile, the
    accounting rows, then the notes on how it was measured."""
    argv = ["demo", "--verbose", "--requests", "200", "--warmup", "150", "--rounds", "2"]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert err == ""
    lines = out.splitlines()
    assert lines[0] == (
        "hedgeclient demo: 3 replicas (demo law, server-owned slowness), 200 GET requests, "
        f"{default_concurrency()} in flight"
    )
    assert lines[2].startswith(("Hedged: p99 ", "No verdict: the client"))
    assert lines[4].split() == ["law", "plain", "hedged", "predicted"]
    assert [line.split()[0] for line in lines[5:11]] == list(LATENCY_ROWS)
    assert any(line.startswith("client CPU busy") for line in lines)
    assert any(
        line.startswith("Hedge delay: the adaptive delay with the library's default")
        for line in lines
    )
    assert any(line.startswith("Client cost: plain ") for line in lines)
    assert lines[-1].startswith("Run: ")
    assert "\x1b[" not in out  # no progress bar or colour when stdout is not a terminal


def test_plot_writes_a_png(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--plot FILE.png` writes a PNG of the two tails (when matplotlib is installed)."""
    pytest.importorskip("matplotlib")
    target = tmp_path / "tails.png"
    run_json(
        capsys,
        *("--requests", "90", "--delay", "30ms", "--warmup", "0", "--rounds", "1"),
        *("--plot", str(target)),
    )
    assert target.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def keys(value: object) -> object:
    """The shape of a report: its keys, nested, without the values (lists as one item)."""
    if isinstance(value, dict):
        return {key: keys(item) for key, item in value.items()}
    return None


def test_sync_clients_report_what_the_async_ones_do(capsys: pytest.CaptureFixture[str]) -> None:
    """`--client sync` gives the async report's every key, the same request counts, and
    a verdict of its own kinds: one report, whichever clients measured it."""
    argv = ("--requests", "90", "--delay", "30ms", "--warmup", "30", "--rounds", "2")
    sync = run_json(capsys, *argv, "--client", "sync")
    async_ = run_json(capsys, *argv)
    assert keys(sync) == keys(async_)
    assert {**sync["config"], "client": "async"} == async_["config"]
    for phase in ("plain", "hedged"):
        assert sync[phase]["requests"] == async_[phase]["requests"] == 90
        assert sync[phase]["errors"] == 0
        assert sync[phase]["client_lag_seconds"]["p50"] >= 0  # the probe thread woke
        assert sync[phase]["elapsed_seconds"] > 0
    # Each plain request reached a replica once, and a backup is the only other one.
    assert sync["plain"]["servers_received"] == 90
    assert 90 <= sync["hedged"]["servers_received"] <= 90 + sync["hedged"]["backups_sent"]
    assert sync["hedged"]["delay"]["predict_seconds"] == 0.03
    # 90 requests give no stable p99 (its one or two slowest decide it): any kind the
    # verdict has, and a summary that says it.
    kinds = ("lower", "higher", "no clear gain", "client bound")
    assert sync["verdict"]["kind"] in kinds
    assert sync["summary"].startswith(("Hedged: p99 ", "No verdict: the client"))


def test_sync_clients_text_report(capsys: pytest.CaptureFixture[str]) -> None:
    """`--client sync --verbose`: the title says the clients are sync, the accounting
    has the threads' lag, and the notes say how the sync clients were driven."""
    argv = ["demo", "--client", "sync", "--verbose", "--requests", "60", "--warmup", "0"]
    assert main([*argv, "--rounds", "1", "--delay", "30ms"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    lines = out.splitlines()
    assert lines[0] == (
        "hedgeclient demo: 3 replicas (demo law, server-owned slowness), 60 GET requests, "
        f"{default_concurrency()} in flight (sync: httpx.Client from threads)"
    )
    assert lines[2].startswith(("Hedged: p99 ", "No verdict: the client"))
    assert [line.split()[0] for line in lines[5:11]] == list(LATENCY_ROWS)
    assert any(line.startswith("client thread lag p50 (ms)") for line in lines)
    assert not any(line.startswith("client loop lag") for line in lines)
    assert any(" Sync clients: httpx.Client, the hedged one through " in line for line in lines)
    assert any(line.startswith("Client cost: plain ") and "probe thread" in line for line in lines)
