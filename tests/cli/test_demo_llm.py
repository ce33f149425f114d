"""``hedgeclient demo --llm``: its options, and a small run end to end on loopback."""

from __future__ import annotations

import json

import pytest

from hedgeclient.cli import main
from hedgeclient.cli.demo import _llm


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--delay", "30ms"], "--llm does not take --delay: it takes --requests, "
            "--concurrency, --slowness, --seed, --backend and --json"),
        (["--fanout", "3", "--plot", "x.png"], "--llm does not take --fanout, --plot: it "
            "takes --requests, --concurrency, --slowness, --seed, --backend and --json"),
        (["--latency", "lab"], "--llm does not take --latency: it takes --requests, "
            "--concurrency, --slowness, --seed, --backend and --json"),
        (["--requests", "5"], "--requests must be an integer >= 20, got '5'"),
        (["--concurrency", "100"], "--concurrency must be an integer in [1, 64], got '100'"),
    ],
)  # fmt: skip
def test_llm_bad_input_is_one_line_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A user error of ``--llm`` prints one line naming the option, and exits 2."""
    assert main(["demo", "--llm", *argv]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"hedgeclient: error: {message}\n"


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_llm_run_reports_three_clients(
    backend: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A short run (10 warm-up rounds, 20 calls each): three clients, each call counted
    once; the plain client sends no extra request and wastes no token."""
    monkeypatch.setattr(_llm, "WARMUP", 10)
    argv = ["demo", "--llm", "--json", "--requests", "20", "--backend", backend]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert err == ""
    report = json.loads(out)
    assert report["config"]["calls"] == 20
    clients = {row["client"]: row for row in report["clients"]}
    assert list(clients) == ["plain", "headers", "first_byte"]
    assert [row["calls"] for row in clients.values()] == [20, 20, 20]
    assert clients["plain"]["extra_requests"] == 0
    assert clients["plain"]["wasted_tokens_per_hedge"] == 0
    for row in clients.values():
        assert 0 < row["ttft_p50"] <= row["ttft_p99"]
        assert 0 <= row["slow_fraction"] <= 1


def test_llm_text_report_shows_the_sdk_snippet(capsys: pytest.CaptureFixture[str]) -> None:
    """The printed report ends with the SDK configuration that does the same."""
    row = {
        "calls": 100, "ttft_p50": 0.045, "ttft_p99": 0.6, "slow_fraction": 0.05,
        "extra_requests": 0.0, "wasted_tokens_per_hedge": 0.0,
    }  # fmt: skip
    report = {
        "config": {"slowness": "server-owned", "calls": 100, "concurrency": 4},
        "clients": [
            {**row, "client": "plain"},
            {**row, "client": "headers"},
            {**row, "client": "first_byte", "ttft_p99": 0.15, "extra_requests": 0.05},
        ],
    }
    _llm._print(report)
    out = capsys.readouterr().out
    assert "p99 0.25x plain for 5.0% extra requests" in out
    assert out.rstrip().endswith(_llm.SDK_SNIPPET.rstrip())
