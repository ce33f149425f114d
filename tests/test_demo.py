"""``hedgeclient demo``: its options, its user errors, and end-to-end runs on loopback.

The end-to-end tests run the real demo (fake service in a subprocess, real clock) with
small numbers and assert what must hold whatever the machine's load: the accounting
(requests, servers received, backups, extra load), the structure of the report, and
latency comparisons that have a wide, stated margin. They are marked ``slow``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import types
from pathlib import Path
from typing import Any

import httpx
import pytest

from hedgeclient import _demo
from hedgeclient._cli import UsageError, build_parser, main
from hedgeclient.testing._cluster import _missing
from hedgeclient.testing._service import FakeService

LATENCY_ROWS = ("p50", "p90", "p95", "p99", "p99.9", "max")


def options(*argv: str) -> _demo.Options:
    """The demo's validated options for ``argv``, without running anything."""
    args = build_parser().parse_args(["demo", *argv])
    assert isinstance(args, argparse.Namespace)
    return _demo._validate(args)


async def must_not_run(*args: object) -> None:
    """Stands for :func:`_demo._measure` in tests whose error must come before the run."""
    msg = "the demo ran: the error should have come first"
    raise AssertionError(msg)


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    """Run ``hedgeclient demo --json ARGV``; return the report, checking stdout is JSON only."""
    assert main(["demo", "--json", *argv]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    report: dict[str, Any] = json.loads(out)
    return report


# --- options ------------------------------------------------------------------------------


def test_defaults_are_the_documented_ones() -> None:
    """No arguments: 5,000 requests, 8 in flight, adaptive delay at q 0.94 on the lab law."""
    opts = options()
    assert (opts.parents, opts.fanout, opts.requests, opts.concurrency) == (5000, 1, 5000, 8)
    assert (opts.delay, opts.quantile, opts.latency) == (None, 0.94, "lab")
    assert (opts.slowness, opts.rounds, opts.warmup, opts.seed) == ("server-owned", 10, 1000, 0)
    assert (opts.json, opts.metrics_port, opts.plot, opts.backend) == (False, None, None, "asyncio")


def test_other_laws_hedge_at_the_library_default_quantile() -> None:
    """The 0.94 quantile is the lab law's (its atom boundary); other laws get 0.95."""
    assert options("--latency", "lognormal:median=0.01,sigma=1").quantile == 0.95
    assert options("--quantile", "0.95").quantile == 0.95


def test_fanout_scales_parents_and_concurrency_down() -> None:
    """`--fanout 10`: 200 parents of 10 requests, one parent in flight."""
    opts = options("--fanout", "10")
    assert (opts.parents, opts.requests, opts.concurrency, opts.in_flight) == (200, 2000, 1, 10)
    assert options("--fanout", "1000").parents == 20
    assert options("--fanout", "4", "--requests", "30", "--concurrency", "3").requests == 120


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30ms", 0.030),
        ("30 ms", 0.030),
        ("0.03", 0.030),
        ("0.03s", 0.030),
        ("1.5e-2", 0.015),
        ("0", 0.0),
        ("5", 5.0),
        ("5000ms", 5.0),
        ("adaptive", None),
    ],
)
def test_delay_forms(text: str, seconds: float | None) -> None:
    """`--delay` takes milliseconds with `ms`, else seconds, or `adaptive`."""
    assert _demo.parse_delay(text) == (None if seconds is None else pytest.approx(seconds))


@pytest.mark.parametrize(
    "text", ["30 parsecs", "", "ms", "-5ms", "-0.5", "nan", "inf", "1e999", "-inf"]
)
def test_bad_delays(text: str) -> None:
    """Anything but a finite, non-negative duration is a usage error naming `--delay`."""
    with pytest.raises(UsageError, match=r"^--delay must be a duration such as '30ms'"):
        _demo.parse_delay(text)


@pytest.mark.parametrize("text", ["30", "5.001", "30000ms", "1e3s"])
def test_delays_above_the_clients_timeout_are_rejected(text: str) -> None:
    """`--delay 30` is 30 seconds, not 30 ms: past the 5 s timeout, a usage error."""
    with pytest.raises(UsageError) as caught:
        _demo.parse_delay(text)
    assert str(caught.value) == (
        f"--delay is in seconds and must be in [0, 5] (write '30ms' for milliseconds), got {text!r}"
    )


def test_delay_help_names_the_unit(capsys: pytest.CaptureFixture[str]) -> None:
    """`demo --help` says that a bare `--delay` number is seconds, and the largest one."""
    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--delay D a fixed hedge delay in seconds ('0.03')" in help_text
    assert "at most 5 seconds" in help_text


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--requests", "0"], "--requests must be an integer >= 1, got '0'"),
        (["--requests", "-5"], "--requests must be an integer >= 1, got '-5'"),
        (["--requests", "many"], "--requests must be an integer >= 1, got 'many'"),
        (["--concurrency", "0"], "--concurrency must be an integer in [1, 10000], got '0'"),
        (["--delay", "30 parsecs"], "--delay must be a duration such as '30ms' or '0.03' "
            "(seconds), got '30 parsecs'"),
        (["--fanout", "0"], "--fanout must be an integer in [1, 1000], got '0'"),
        (["--quantile", "1.5"], "--quantile must be in (0, 1), got '1.5'"),
        (["--delay", "30ms", "--quantile", "0.9"], "--quantile sets the adaptive delay; it "
            "does not apply with a fixed --delay"),
        (["--slowness", "sometimes"], "--slowness must be one of server-owned, request-owned, "
            "got 'sometimes'"),
        (["--backend", "curio"], "--backend must be one of asyncio, trio, got 'curio'"),
        (["--rounds", "0"], "--rounds must be an integer >= 1, got '0'"),
        (["--warmup", "-1"], "--warmup must be an integer >= 0, got '-1'"),
        (["--metrics-port", "70000"], "--metrics-port must be an integer in [0, 65535], "
            "got '70000'"),
        (["--plot", "tails.svg"], "--plot must name a .png file, got 'tails.svg'"),
        (["--delay", "30"], "--delay is in seconds and must be in [0, 5] (write '30ms' for "
            "milliseconds), got '30'"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A user error prints one line on stderr, no traceback, and exits with status 2."""
    assert main(["demo", *argv]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"hedgeclient: error: {message}\n"


def test_bad_latency_law_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    """An unknown law is reported on one line, before any server starts."""
    assert main(["demo", "--latency", "bogus:1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("hedgeclient: error: --latency: ")
    assert err.count("\n") == 1


def test_plot_without_matplotlib_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--plot` without matplotlib: one line naming `pip install 'hedgeclient[plot]'`."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` fail
    assert main(["demo", "--plot", "tails.png"]) == 2
    assert capsys.readouterr().err == (
        "hedgeclient: error: --plot needs matplotlib: pip install 'hedgeclient[plot]'\n"
    )


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("missing/tails.png", "no such directory {parent!r}"),
        ("folder.png", "it is a directory"),
        ("tails.png", "permission denied"),
    ],
)
def test_plot_that_cannot_be_written_fails_before_the_run(
    name: str,
    reason: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`--plot` into a missing or read-only directory is refused before the ~35 s run."""
    monkeypatch.setitem(sys.modules, "matplotlib", types.ModuleType("matplotlib"))
    monkeypatch.setattr(_demo, "_measure", must_not_run)
    (tmp_path / "folder.png").mkdir()
    if reason == "permission denied":  # chmod would not stop root: os.access answers no
        monkeypatch.setattr(os, "access", lambda path, mode: False)
    path = tmp_path / name
    assert main(["demo", "--plot", str(path)]) == 2
    message = f"--plot: cannot write {str(path)!r}: {reason.format(parent=str(path.parent))}"
    assert capsys.readouterr() == ("", f"hedgeclient: error: {message}\n")


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (
            _missing(ModuleNotFoundError("No module named 'uvicorn'", name="uvicorn")),
            "the fake service needs 'uvicorn': install the extra 'hedgeclient[testing]'",
        ),
        (OSError(98, "Address already in use"), "[Errno 98] Address already in use"),
    ],
)
def test_service_that_cannot_start_is_a_usage_error(
    error: Exception,
    reason: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Without uvicorn (no 'cli'/'testing' extra) the demo names the extra: one line, 2."""

    def start(self: FakeService) -> None:
        raise error

    monkeypatch.setattr(FakeService, "start", start)
    assert main(["demo", "--requests", "10", "--warmup", "0", "--rounds", "1"]) == 2
    assert capsys.readouterr() == ("", f"hedgeclient: error: cannot start the service: {reason}\n")


def test_metrics_server_serves_and_stops() -> None:
    """`--metrics-port 0` serves the registry on 127.0.0.1, and the stop releases the port."""
    url, stop = _demo._start_metrics(0)
    assert url is not None
    try:
        response = httpx.get(url)
        assert response.status_code == 200
        assert "python_info" in response.text or "process_" in response.text
    finally:
        stop()
    with pytest.raises(httpx.ConnectError):
        httpx.get(url)


def test_metrics_port_in_use_is_a_usage_error() -> None:
    """A port already taken is reported as a usage error naming the address."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(
            UsageError, match=rf"^--metrics-port: cannot listen on 127\.0\.0\.1:{port}: "
        ):
            _demo._start_metrics(port)


# --- end to end, on loopback ------------------------------------------------------------


@pytest.mark.slow
def test_server_owned_lab_fixed_delay_halves_the_tail(capsys: pytest.CaptureFixture[str]) -> None:
    """Lab law, fixed 30 ms delay: exact accounting, and a hedged p99 below the plain one."""
    report = run_json(
        capsys,
        *("--requests", "600", "--delay", "30ms", "--warmup", "0", "--rounds", "1"),
    )
    plain, hedged, prediction = report["plain"], report["hedged"], report["prediction"]
    assert report["config"]["requests"] == 600
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
    assert delay["used"] == [[0.03, 600]]
    assert prediction["delay_seconds"] == 0.03
    assert prediction["sample_size"] == 600
    # With --warmup 0 and one round the plain phase makes each replica's first 200
    # draws (round-robin), so its latencies are fixed by --seed 0: 11 of the 600 draws
    # are 120 or 300 ms, more than 1 %, so its p99 is at least 120 ms on any machine.
    assert plain["latency_seconds"]["p99"] >= 0.120
    # A hedged request is slower than ~120 ms only if its primary is 120+ ms and its
    # backup 90+ ms (p = 0.02 * 0.02; 0.24 such requests expected, 7 needed to move the
    # p99), or if the client stalls for most of 100 ms on 7 requests. The hedged
    # p99 is about 45-60 ms on a quiet machine; "below the plain p99" has a wide margin.
    assert hedged["latency_seconds"]["p99"] < plain["latency_seconds"]["p99"]
    assert prediction["latency_seconds"]["p99"] < plain["latency_seconds"]["p99"]
    assert report["summary"].startswith("p99 ")
    assert "extra load" in report["summary"]


@pytest.mark.slow
def test_request_owned_slowness_costs_load_and_buys_nothing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Request-owned slowness: backups are sent (extra load) and the tail does not improve."""
    report = run_json(
        capsys,
        *("--slowness", "request-owned", "--requests", "600", "--concurrency", "5"),
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
    # No claimed improvement: the summary would say "x lower" only for a hedged p99 at
    # least 20 % below the plain one, which needs the plain client alone to add 30 ms
    # at its p99 (it adds a few at 5 in flight).
    assert "lower" not in report["summary"]
    assert "no clear gain" in report["summary"] or "higher" in report["summary"]


@pytest.mark.slow
def test_fanout_reports_parents_and_children(capsys: pytest.CaptureFixture[str]) -> None:
    """`--fanout 4`: parent and child percentiles; a parent is never faster than a child."""
    report = run_json(
        capsys,
        *("--fanout", "4", "--requests", "40", "--delay", "30ms", "--warmup", "0", "--rounds", "1"),
    )
    assert report["config"]["parents"] == 40
    assert report["config"]["concurrency"] == 2
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
    assert report["summary"].startswith("parent p99 ")


@pytest.mark.slow
def test_text_report_with_adaptive_delay(capsys: pytest.CaptureFixture[str]) -> None:
    """Without --json: the title, a table row per percentile, the notes, the trade line."""
    argv = ["demo", "--requests", "200", "--warmup", "150", "--rounds", "2"]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert err == ""
    lines = out.splitlines()
    assert lines[0].startswith("hedgeclient demo: 3 replicas (lab law, server-owned slowness)")
    assert lines[2].split() == ["law", "plain", "hedged", "predicted"]
    assert [line.split()[0] for line in lines[3:9]] == list(LATENCY_ROWS)
    assert any(line.startswith("Adaptive delay at quantile 0.94, not 0.95") for line in lines)
    assert any(line.startswith("Client cost: plain ") for line in lines)
    assert lines[-1].startswith("Trade: p99 ")
    assert "\x1b[" not in out  # no progress bar or colour when stdout is not a terminal


@pytest.mark.slow
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
