"""``hedgeclient demo``: one mode at most (--llm, --tied, --discovery), and each mode
refuses, by name, the flags it does not take."""

from __future__ import annotations

import pytest

from hedgeclient.cli import main
from hedgeclient.cli._main import build_parser
from hedgeclient.cli.demo._command import _FLAGS, _MODES


@pytest.mark.parametrize(
    ("first", "second"),
    [("--discovery", "--llm"), ("--discovery", "--tied"), ("--llm", "--tied")],
)
def test_two_modes_are_a_usage_error(
    capsys: pytest.CaptureFixture[str], first: str, second: str
) -> None:
    """Two modes at once exit with status 2 and say which clash (one used to run)."""
    with pytest.raises(SystemExit) as exit_info:
        main(["demo", first, second])
    assert exit_info.value.code == 2
    assert f"argument {second}: not allowed with argument {first}" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--discovery", "--requests", "5", "--fanout", "3"], "--discovery does not take "
            "--requests, --fanout: it takes --seconds, --concurrency, --latency, --seed, "
            "--backend and --json"),
        (["--discovery", "--utilisation", "0.5"], "--discovery does not take --utilisation: "
            "it takes --seconds, --concurrency, --latency, --seed, --backend and --json"),
        (["--tied", "--requests", "5", "--backend", "trio"], "--tied does not take "
            "--requests, --backend: it takes --utilisation, --seconds, --seed and --json"),
        (["--tied", "--client", "sync"], "--tied does not take --client: it takes "
            "--utilisation, --seconds, --seed and --json"),
        (["--discovery", "--client", "sync"], "--discovery does not take --client: it "
            "takes --seconds, --concurrency, --latency, --seed, --backend and --json"),
        (["--llm", "--client", "sync"], "--llm does not take --client: it takes "
            "--requests, --concurrency, --slowness, --seed, --backend and --json"),
    ],
)  # fmt: skip
def test_a_flag_a_mode_does_not_take_is_refused(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    """A flag the mode would ignore is one line on stderr and exit status 2."""
    assert main(["demo", *argv]) == 2
    assert capsys.readouterr().err == f"hedgeclient: error: {message}\n"


def test_every_demo_flag_is_known_to_the_check() -> None:
    """The list the check goes through holds every flag of ``demo`` but the modes."""
    parser = build_parser()
    demo = next(
        action.choices["demo"]
        for action in parser._actions
        if isinstance(action.choices, dict) and "demo" in action.choices
    )
    flags = {
        option for action in demo._actions for option in action.option_strings if option != "-h"
    }
    assert flags - {"--help"} == set(_FLAGS) | set(_MODES)
