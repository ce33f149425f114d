"""``hedgeclient serve``: origins on stdout, served until Ctrl-C; usage errors name the flag."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from hedgeclient.cli import main as cli_main
from hedgeclient.cli._laws import DEMO_LAW, latency_law
from hedgeclient.testing import parse_law

pytestmark = pytest.mark.slow


def _ctrl_c_as_a_terminal_sends_it() -> None:
    """In the child, before exec: SIGINT to its default action, as a terminal's
    foreground job has it. A test run started in the background (``make test &``, a
    CI step, nohup) inherits SIGINT ignored, and a Python started with SIGINT ignored
    never raises KeyboardInterrupt: Ctrl-C would not reach ``serve`` at all."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_cli_serves_until_interrupted() -> None:
    """``hedgeclient serve`` prints the origins, serves, and exits 0 on Ctrl-C."""
    command = [sys.executable, "-m", "hedgeclient", "serve", "--replicas", "2", "--latency", "0"]
    with subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=_ctrl_c_as_a_terminal_sends_it,
    ) as process:
        try:
            assert process.stdout is not None
            origins = [process.stdout.readline().decode().strip() for _ in range(2)]
            assert all(o.startswith("http://127.0.0.1:") for o in origins)
            assert httpx.get(origins[1]).headers["x-replica"] == "1"
            process.send_signal(signal.SIGINT)
            # It stops in well under a second; 30 s only bounds a hang on a loaded machine.
            _, err = process.communicate(timeout=30)
        finally:
            if process.poll() is None:  # failing already: never wait on it forever
                process.kill()
    assert process.returncode == 0, err


def test_cli_refuses_a_bad_law() -> None:
    """A bad --latency is a usage error: one line on stderr, exit status 2."""
    command = [sys.executable, "-m", "hedgeclient", "serve", "--latency", "constant:-1"]
    done = subprocess.run(command, capture_output=True, timeout=30, check=False)
    assert done.returncode == 2
    assert done.stderr.decode().strip() == (
        "hedgeclient: error: --latency 'constant:-1': "
        "`value` must be a finite number of seconds >= 0, got -1.0"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--replicas", "0"], "--replicas must be in [1, 256], got 0"),
        (["--port-base", "70000"], "--port-base must be 0 or in [1024, 65533], got 70000"),
        (
            ["--latency", "file:/nonexistent/sample.txt"],
            "--latency 'file:/nonexistent/sample.txt': "
            "cannot read '/nonexistent/sample.txt': No such file or directory",
        ),
    ],
)
def test_cli_errors_name_the_flag(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``serve``'s usage errors name the command-line flag, not the Python parameter."""
    assert cli_main(["serve", *argv]) == 2
    assert capsys.readouterr().err.strip() == f"hedgeclient: error: {message}"


def test_a_sample_file_in_milliseconds_read_as_seconds_gets_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--latency file:PATH` reads seconds; a file whose median is 12 "seconds" is
    probably milliseconds, and the warning says how to write that."""
    path = tmp_path / "ms.txt"
    path.write_text("10\n12\n30\n", encoding="utf-8")
    law = latency_law(f"file:{path}")
    assert law.quantile(0.5) == 12.0
    assert capsys.readouterr().err == (
        f"hedgeclient: warning: --latency 'file:{path}': the median latency is 12 seconds; "
        f"if the file holds milliseconds, write 'file:{path},unit=ms'\n"
    )
    assert latency_law(f"file:{path},unit=ms").quantile(0.5) == 0.012
    assert capsys.readouterr().err == ""


def test_demo_names_the_demos_law() -> None:
    """`--latency demo` is the demo's default law, for `serve` as for `demo`."""
    assert repr(latency_law("demo")) == repr(parse_law(DEMO_LAW))
