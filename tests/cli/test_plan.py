"""``hedgeclient plan``: the trade table from the command line, and its user errors."""

from __future__ import annotations

import errno
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hedgeclient import analysis
from hedgeclient.cli import main
from hedgeclient.cli._output import DOCS_URL

# HEDGING.md's lab table as the command prints it: delay label, extra load, hedged ms.
# An extra load above the default budget's 10% is marked †.
LAB_ROWS = [
    ["10", "60%†", "12", "22", "30", "50"],
    ["12 (median)", "35%†", "12", "24", "30", "50"],
    ["15", "20%†", "12", "27", "30", "50"],
    ["20", "10%", "12", "30", "35", "50"],
    ["30 (p95)", "5%", "12", "30", "45", "60"],
    ["50", "2%", "12", "30", "62", "80"],
    ["120 (p99)", "1%", "12", "30", "120", "140"],
]


def table_rows(out: str) -> list[list[str]]:
    """The rows of the plain-text trade table: cells split on runs of 2+ spaces."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("hedge delay")) + 1
    rows = []
    for line in lines[start:]:
        if not line or not line[0].isdigit():
            break
        rows.append(re.split(r"\s{2,}", line.strip()))
    return rows


def lab_file(tmp_path: Path, *, scale: float = 1.0, name: str = "lab.txt") -> Path:
    """The lab sample written one value per line, with comments and blank lines."""
    values = [f"{value * 1000 * scale:g}" for value in analysis.lab_sample()]
    values[45] += "  # an inline comment"
    lines = ["# lab sample, HEDGING.md", "", *values[:30], "   ", *values[30:]]
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_preset_lab_prints_the_hedging_md_table(capsys: pytest.CaptureFixture[str]) -> None:
    """`plan --preset lab` prints exactly the rows of HEDGING.md, plus the percentiles."""
    assert main(["plan", "--preset", "lab"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert "Unhedged: p50 12 ms, p90 20 ms, p95 30 ms, p99 120 ms, p99.9 300 ms*, max 300 ms" in out
    assert table_rows(out) == LAB_ROWS
    header = out.splitlines()[4].split("  ")
    assert [cell.strip() for cell in header if cell.strip()] == [
        "hedge delay (ms)",
        "extra load",
        "hedged p50",
        "hedged p95",
        "hedged p99",
        "hedged p99.9*",
    ]


def test_preset_lab_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    """`--json` prints the same numbers in seconds and fractions."""
    assert main(["plan", "--preset", "lab", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["count"] == 100
    assert report["unhedged_seconds"]["p99"] == 0.120
    row = report["trade_table"][4]
    assert row == {
        "delay_seconds": 0.030,
        "extra_load": 0.05,
        "hedged_seconds": {"p50": 0.012, "p95": 0.030, "p99": 0.045, "p99.9": 0.060},
        "above_default_budget": False,
    }
    assert report["default_delay"] == {"quantile": 0.95, **row}
    assert report["default_budget_ratio"] == 0.1
    assert [r["above_default_budget"] for r in report["trade_table"]] == [True] * 3 + [False] * 4
    assert len(report["trade_table"]) == 7
    assert "fanout" not in report
    assert "recommendation" not in report


def test_file_defaults_to_the_sample_percentiles_as_delays(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A sample file gets candidate delays at its p50, p75, p90, p95 and p99."""
    path = lab_file(tmp_path)
    assert main(["plan", str(path), "--unit", "ms"]) == 0
    out = capsys.readouterr().out
    assert f"Sample: {path}, 100 latencies" in out
    assert [row[0] for row in table_rows(out)] == [
        "12 (median)",
        "15 (p75)",
        "20 (p90)",
        "30 (p95)",
        "120 (p99)",
    ]
    assert table_rows(out)[3] == ["30 (p95)", "5%", "12", "30", "45", "60"]


def test_file_in_seconds_by_default_with_explicit_delays(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file is read in seconds, as everything on the command line; bare `--delays` are
    in the same unit, `ms` ones in milliseconds; output stays in ms."""
    path = lab_file(tmp_path, scale=0.001)
    assert main(["plan", str(path), "--delays", "0.010, 30ms"]) == 0
    out, err = capsys.readouterr()
    assert table_rows(out) == [LAB_ROWS[0], LAB_ROWS[4]]
    assert err == ""


@pytest.mark.parametrize("unit", ["ms", "s"])
def test_delays_take_a_unit_whatever_the_file_unit(
    unit: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--delays 30ms` and `--delays 0.03s` mean the same whatever `--unit` says."""
    path = lab_file(tmp_path, scale=1.0 if unit == "ms" else 0.001)
    assert main(["plan", str(path), "--unit", unit, "--delays", "30ms,0.05s"]) == 0
    assert table_rows(capsys.readouterr().out) == [LAB_ROWS[4], LAB_ROWS[5]]


def test_identical_default_delays_are_merged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """When two sample percentiles coincide, the delay appears once with both names."""
    path = tmp_path / "flat.txt"
    path.write_text("5\n" * 98 + "7\n9\n", encoding="utf-8")
    assert main(["plan", str(path), "--unit", "ms"]) == 0
    assert [row[0] for row in table_rows(capsys.readouterr().out)] == [
        "5 (median, p75, p90, p95)",
        "7 (p99)",
    ]


def test_csv_column(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--column` reads one column of a CSV file; comment lines are skipped."""
    path = tmp_path / "calls.csv"
    rows = [f"/api,{value * 1000:g}" for value in analysis.lab_sample()]
    path.write_text("# exported\nroute, latency_ms\n" + "\n".join(rows) + "\n", encoding="utf-8")
    argv = ["plan", str(path), "--column", "latency_ms", "--unit", "ms", "--delays", "30"]
    assert main(argv) == 0
    assert table_rows(capsys.readouterr().out) == [LAB_ROWS[4]]


def test_stdin(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """FILE `-` reads the sample from stdin."""
    monkeypatch.setattr(sys, "stdin", io.StringIO("0.010\n0.020\n0.030\n"))
    assert main(["plan", "-", "--delays", "10ms"]) == 0
    out = capsys.readouterr().out
    assert "Sample: stdin, 3 latencies" in out
    assert table_rows(out) == [["10", "66.7%†", "20", "30", "30", "30"]]


def test_max_extra_load_recommends_a_delay(capsys: pytest.CaptureFixture[str]) -> None:
    """`--max-extra-load 0.05` recommends the p95, 30 ms, with its hedged p99."""
    assert main(["plan", "--preset", "lab", "--max-extra-load", "0.05"]) == 0
    out = capsys.readouterr().out
    assert (
        "Recommended hedge delay for extra load <= 5%: 30 ms (extra load 5%, hedged p99 45 ms)"
        in out
    )


def test_fanout_prints_the_child_quantile_and_the_parent_miss(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`--fanout 100 --target 0.99`: children need 0.999899..., a p99 parent misses 63.4%."""
    assert main(["plan", "--preset", "lab", "--fanout", "100", "--target", "0.99"]) == 0
    out = capsys.readouterr().out
    assert "each child must meet its p99.98995 (quantile 0.9998995)" in out
    assert "about 99,505 samples" in out
    assert "With children at their p99, the parent misses its p99 63.4% of the time." in out


def test_fanout_alone_needs_no_sample(capsys: pytest.CaptureFixture[str]) -> None:
    """`--fanout` without a sample prints only the fan-out figures (target 0.99)."""
    assert main(["plan", "--fanout", "10"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Fan-out 10: for a parent p99, each child must meet its p99.8995")
    assert "misses its p99 9.6% of the time" in out
    assert "hedge delay" not in out


def test_retries_print_the_worst_case_and_the_shared_budgets_bound(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`--retries 2` (stamina's 3 attempts) around one backup: 6x at worst; a shared
    budget of ratio 0.1 bounds a run to 1.1x, plus its burst."""
    assert main(["plan", "--retries", "2"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[:4] == [
        "Retries 2 around hedging, max_hedges 1: when every attempt fails,",
        "  a call sends up to (2 + 1) x (1 + 1) = 6x the requests of a plain client.",
        "One hedge budget for the retries and the backups (ratio 0.1, burst 10) bounds a run",
        "  to 1 + 0.1 = 1.1x the requests of a plain client, plus its burst (10) and floor:",
    ]
    assert "budget/#one-budget-for-retries-and-backups" in out


@pytest.mark.parametrize("json_out", [False, True])
def test_the_budgets_bound_is_never_above_the_worst_case(
    capsys: pytest.CaptureFixture[str], json_out: bool
) -> None:
    """No retry and no backup: 1x at worst, and the budget's 1.1x does not bind: the
    bound printed is the worst case, 1x, never above it."""
    assert main(["plan", "--retries", "0", "--hedges", "0", *(["--json"] * json_out)]) == 0
    out = capsys.readouterr().out
    if json_out:
        retries = json.loads(out)["retries"]
        assert (retries["worst_case_multiplier"], retries["bounded_multiplier"]) == (1, 1)
        return
    assert out.splitlines()[:4] == [
        "Retries 0 around hedging, max_hedges 0: when every attempt fails,",
        "  a call sends up to (0 + 1) x (0 + 1) = 1x the requests of a plain client.",
        "One hedge budget for the retries and the backups (ratio 0.1, burst 10) bounds a run",
        "  to the worst case, 1x the requests of a plain client: the budget allows 1 + 0.1 "
        "= 1.1x, plus its burst (10) and floor, and never binds here:",
    ]


def test_retries_as_json_with_a_budget_of_ones_own(capsys: pytest.CaptureFixture[str]) -> None:
    """The retry figures are in the JSON report; --hedges and the budget's own settings."""
    argv = ["plan", "--retries", "3", "--hedges", "2", "--budget-ratio", "0.05"]
    assert main([*argv, "--budget-burst", "20", "--json"]) == 0
    retries = json.loads(capsys.readouterr().out)["retries"]
    assert retries == {
        "retries": 3,
        "hedges": 2,
        "worst_case_multiplier": 12,
        "budget_ratio": 0.05,
        "budget_burst": 20.0,
        "bounded_multiplier": 1.05,
    }


def test_fanout_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    """The fan-out figures are in the JSON report, unrounded."""
    assert main(["plan", "--fanout", "69", "--json"]) == 0
    fan = json.loads(capsys.readouterr().out)["fanout"]
    assert fan["fanout"] == 69
    assert fan["target"] == 0.99
    assert round(fan["parent_miss_probability"], 3) == 0.500
    assert fan["child_quantile"] == analysis.child_quantile_for_parent(0.99, 69)


def test_a_terminal_gets_a_rich_table(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """On a terminal the table is drawn by rich, with the same cells."""
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    monkeypatch.setenv("COLUMNS", "120")
    assert main(["plan", "--preset", "lab"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"30 \(p95\)\W+5%\W+12\W+30\W+45\W+60", out)


def test_a_terminal_without_rich_gets_plain_text(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without the optional rich package a terminal gets the plain table."""
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    monkeypatch.setitem(sys.modules, "rich.console", None)
    assert main(["plan", "--preset", "lab"]) == 0
    assert table_rows(capsys.readouterr().out) == LAB_ROWS


@pytest.mark.parametrize(
    ("content", "extra", "message"),
    [
        ("", [], "{path}: no latency values (blank lines and # comments are skipped)"),
        (
            "# only\n\n  \n",
            [],
            "{path}: no latency values (blank lines and # comments are skipped)",
        ),
        ("10\n12\nabc\n", [], "{path}, line 3: expected a latency in s, got 'abc'"),
        ("10\n-5\n", [], "{path}, line 2: a latency must be finite and >= 0, got '-5'"),
        (
            "# c\nnan\n",
            ["--unit", "s"],
            "{path}, line 2: a latency must be finite and >= 0, got 'nan'",
        ),
        ("10\n", ["--delays", "10,0"], "--delays must be durations > 0, got '0'"),
        ("10\n", ["--delays", "0ms"], "--delays must be durations > 0, got '0ms'"),
        (
            "10\n",
            ["--delays", "-5"],
            "--delays must be a duration such as '30ms' or '0.03' (seconds), got '-5'",
        ),
        (
            "10\n",
            ["--delays", "10,x"],
            "--delays must be a duration such as '30ms' or '0.03' (seconds), got 'x'",
        ),
        ("10\n", ["--fanout", "10", "--target", "1.5"], "--target must be in (0, 1), got '1.5'"),
        ("10\n", ["--fanout", "10", "--target", "0"], "--target must be in (0, 1), got '0'"),
        ("10\n", ["--fanout", "10", "--target", "inf"], "--target must be a number, got 'inf'"),
        ("10\n", ["--target", "0.99"], "--target applies to --fanout; give --fanout N too"),
        ("10\n", ["--fanout", "0"], "--fanout must be an integer in [1, 1000000], got '0'"),
        ("10\n", ["--fanout", "ten"], "--fanout must be an integer in [1, 1000000], got 'ten'"),
        ("10\n", ["--max-extra-load", "5"], "--max-extra-load must be in [0, 1], got '5'"),
        ("10\n", ["--preset", "lab"], "give a latency FILE or --preset, not both"),
        ("a,b\n1,2\n", ["--column", "ms"], "{path}: no column 'ms'; columns: a, b"),
        (
            "# c\nms\n1\n\n,\n",
            ["--column", "ms"],
            "{path}, line 5: expected a latency in s, got ''",
        ),
        (
            "id, ms\n1, 2\n2\n",
            ["--column", "ms"],
            "{path}, line 3: expected a latency in s, got ''",
        ),
        (
            "# nothing\n",
            ["--column", "ms"],
            "{path}: no latency values (blank lines and # comments are skipped)",
        ),
    ],
)
def test_bad_input_is_one_line_on_stderr(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    content: str,
    extra: list[str],
    message: str,
) -> None:
    """Each user error prints one `hedgeclient: error:` line and exits with status 2."""
    path = tmp_path / "sample.txt"
    path.write_text(content, encoding="utf-8")
    assert main(["plan", str(path), *extra]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"hedgeclient: error: {message.format(path=path)}\n"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["plan"], "give a latency FILE or --preset lab (or --fanout N or --retries N alone)"),
        (["plan", "--hedges", "2"], "--hedges applies to --retries; give --retries N too"),
        (
            ["plan", "--retries", "2", "--budget-ratio", "0"],
            "--budget-ratio must be in (0, 1], got '0'",
        ),
        (
            ["plan", "--retries", "2", "--budget-ratio", "1.5"],
            "--budget-ratio must be in (0, 1], got '1.5'",
        ),
        (
            ["plan", "--retries", "2", "--budget-ratio", "-0.1"],
            "--budget-ratio must be in (0, 1], got '-0.1'",
        ),
        (
            ["plan", "--retries", "2", "--budget-burst", "0.5"],
            "--budget-burst must be a number >= 1, got '0.5'",
        ),
        (["plan", "--retries", "-1"], "--retries must be an integer in [0, 100], got '-1'"),
        (
            ["plan", "--retries", "2", "--hedges", "5"],
            "--hedges must be an integer in [0, 4], got '5'",
        ),
        (
            ["plan", "--fanout", "10", "--delays", "10"],
            "--delays and --max-extra-load need a latency FILE or --preset",
        ),
        (
            ["plan", "--preset", "lab", "--column", "ms"],
            "--column applies to FILE, not to --preset",
        ),
    ],
)
def test_bad_options_without_a_file(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    """Inconsistent options are user errors too, not tracebacks."""
    assert main(argv) == 2
    assert capsys.readouterr().err == f"hedgeclient: error: {message}\n"


def test_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A file that does not exist is reported by name, without a traceback."""
    path = tmp_path / "missing.txt"
    assert main(["plan", str(path)]) == 2
    err = capsys.readouterr().err
    assert err == f"hedgeclient: error: cannot read {str(path)!r}: No such file or directory\n"


def test_binary_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A file that is not UTF-8 text is a user error."""
    path = tmp_path / "sample.bin"
    path.write_bytes(b"\xff\xfe\x00\x01")
    assert main(["plan", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"hedgeclient: error: cannot read {str(path)!r}: not UTF-8 text (")
    assert err.count("\n") == 1


@pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "unbuffered"])
def test_a_closed_stdout_ends_quietly(buffered: bool) -> None:
    """`hedgeclient plan ... | head -0`: no BrokenPipeError traceback, exit status 1."""
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the command writes its first line
    env = {name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"}
    if not buffered:  # every print reaches the pipe at once, rather than in the last flush
        env["PYTHONUNBUFFERED"] = "1"
    try:
        result = subprocess.run(
            [sys.executable, "-m", "hedgeclient", "plan", "--preset", "lab"],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write)
    assert (result.returncode, result.stderr) == (1, "")


class _ClosedPipe(io.StringIO):
    """A stdout whose reader has gone: every write fails as on a closed pipe."""

    def write(self, text: str) -> int:
        raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))


def test_a_closed_stdout_in_process(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """main() turns a BrokenPipeError from any subcommand's output into exit status 1."""
    monkeypatch.setattr(sys, "stdout", _ClosedPipe())
    assert main(["plan", "--preset", "lab"]) == 1
    assert capsys.readouterr().err == ""


def test_a_table_has_one_number_of_decimals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Latencies in a table share one number of decimals (the fewest that show them all),
    extra loads another: the columns line up."""
    path = tmp_path / "sample.txt"
    path.write_text("0.0125\n" * 50 + "0.020\n" * 45 + "0.0401\n" * 5, encoding="utf-8")
    assert main(["plan", str(path), "--delays", "12.5ms,20ms"]) == 0
    out = capsys.readouterr().out
    assert "Unhedged: p50 12.5 ms, p90 20.0 ms, p95 20.0 ms, p99 40.1 ms, p99.9 40.1 ms*" in out
    assert table_rows(out) == [
        ["12.5 (median)", "50%†", "12.5", "20.0", "32.5", "40.1"],
        ["20.0 (p95)", "5%", "12.5", "20.0", "40.0", "40.1"],
    ]


def test_the_whole_report_has_one_number_of_decimals(capsys: pytest.CaptureFixture[str]) -> None:
    """Every percentage of the report shares one number of decimals, every latency
    another: a table of whole percentages beside a recommendation of 2.5% prints them
    all with one decimal (it printed 35% beside 2.5%)."""
    argv = ["plan", "--preset", "lab", "--delays", "12ms,30ms", "--max-extra-load", "0.025"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert [row[1] for row in table_rows(out)] == ["35.0%†", "5.0%"]
    assert "Hedged at the p95, the default delay (30 ms): p99 120 -> 45 ms for 5.0% extra" in out
    assert (
        "Recommended hedge delay for extra load <= 2.5%: 50 ms (extra load 2.0%, hedged p99 "
        "62 ms)" in out
    )


def test_a_headline_without_max_extra_load(capsys: pytest.CaptureFixture[str]) -> None:
    """Without --max-extra-load the report still opens with the trade at the library's
    default delay, the sample's p95: HEDGING.md's 120 -> 45 ms for 5%."""
    assert main(["plan", "--preset", "lab"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2] == (
        "Hedged at the p95, the default delay (30 ms): p99 120 -> 45 ms for 5% extra load"
    )
    assert lines[3] == ""


def test_rows_above_the_default_budget_say_it_would_refuse_most_backups(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A delay whose extra load is above the default budget's 10% is marked, and the
    footnote says the budget would refuse 1 - 10%/load of those backups (83% at 60%)."""
    assert main(["plan", "--preset", "lab", "--delays", "10ms,20ms"]) == 0
    out = capsys.readouterr().out
    assert [row[1] for row in table_rows(out)] == ["60%†", "10%"]  # 10% is within it
    assert (
        "† above the default hedge budget, backups for 10% of requests: it would refuse\n"
        "  about 1 - 10%/extra load of these backups (83% of them at 60%), and the tail\n"
        "  would stay above these figures; HedgedTransport(extra_load=...) sets both "
        "together\n" in out
    )
    assert main(["plan", "--preset", "lab", "--delays", "30ms"]) == 0
    assert "†" not in capsys.readouterr().out


def test_quantiles_beyond_the_sample_are_marked(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With 3 latencies, the p90 and above are only the sample's maximum: starred, with a
    footnote saying how many latencies they need."""
    monkeypatch.setattr(sys, "stdin", io.StringIO("0.010\n0.020\n0.030\n"))
    assert main(["plan", "-", "--delays", "10ms"]) == 0
    out = capsys.readouterr().out
    assert "Unhedged: p50 20 ms, p90 30 ms*, p95 30 ms*, p99 30 ms*, p99.9 30 ms*, max 30 ms" in out
    assert "hedged p50  hedged p95*  hedged p99*  hedged p99.9*" in out
    assert out.endswith(
        "* beyond what 3 latencies can show: the p90, p95, p99 and p99.9 (fewer than one lies "
        "above each);\n  a p90 needs at least 10 latencies, about 100 for a stable estimate\n"
    )


def test_beyond_the_sample_in_json(capsys: pytest.CaptureFixture[str]) -> None:
    """The JSON names the quantiles the sample cannot show: the lab sample's p99.9."""
    assert main(["plan", "--preset", "lab", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["beyond_sample"] == ["p99.9"]


def test_footers_cite_the_published_docs(capsys: pytest.CaptureFixture[str]) -> None:
    """The output cites pages a pip-installed user can open, never a repository path."""
    assert main(["plan", "--preset", "lab"]) == 0
    out = capsys.readouterr().out
    assert "docs/" not in out.replace(DOCS_URL, "")
    assert f"{DOCS_URL}how-it-works/#the-arithmetic" in out


@pytest.mark.parametrize(
    ("content", "argv", "warning"),
    [
        (
            "0.012\n0.015\n0.030\n",
            ["--unit", "ms"],
            "{path}: the median latency is 0.015 ms; if the values are seconds, drop --unit ms",
        ),
        (
            "0.012\n0.015\n0.030\n",
            ["--delays", "30"],
            "--delays '30' is 30 seconds, beyond the slowest latency of the sample (0.03 s); "
            "write '30ms' for milliseconds",
        ),
    ],
)
def test_values_that_look_like_the_other_unit_get_a_warning(
    content: str,
    argv: list[str],
    warning: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A sample or a delay that looks like the other unit prints a warning on stderr,
    naming the flag that fixes it; the table still prints."""
    path = tmp_path / "sample.txt"
    path.write_text(content, encoding="utf-8")
    assert main(["plan", str(path), *argv]) == 0
    out, err = capsys.readouterr()
    assert err == f"hedgeclient: warning: {warning.format(path=path)}\n"
    assert table_rows(out)


def test_milliseconds_read_as_seconds_by_default_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file whose median is 1 or more, read without --unit, is refused (it printed a
    warning, then 748560 ms): the user says which unit it is; --unit s is taken at its
    word, --unit ms reads it as milliseconds."""
    path = tmp_path / "sample.txt"
    path.write_text("12\n15\n748.56\n", encoding="utf-8")
    assert main(["plan", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        f"hedgeclient: error: {path}: read as seconds (the default), the median latency is "
        "15 s: give --unit ms if the values are milliseconds, --unit s if they are seconds\n"
    )
    assert main(["plan", str(path), "--unit", "ms"]) == 0
    out, err = capsys.readouterr()
    assert "Unhedged: p50 15.00 ms" in out
    assert err == ""
    assert main(["plan", str(path), "--unit", "s"]) == 0
    out, err = capsys.readouterr()
    assert "Unhedged: p50 15000 ms" in out
    assert err == ""
