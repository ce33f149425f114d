"""Inputs a fresh reviewer found accepted, or refused with a traceback (issues 14, 15)."""

from __future__ import annotations

import pytest

from hedgeclient import AdaptiveDelay, HedgeBudget, HedgedTransport, PowerOfTwoChoices
from hedgeclient.cli import main as cli_main
from hedgeclient.testing import FakeService


@pytest.mark.parametrize(
    ("name", "cls"),
    [("selector", PowerOfTwoChoices), ("delay", AdaptiveDelay), ("budget", HedgeBudget)],
)
def test_a_class_instead_of_an_instance_is_refused_at_construction(name: str, cls: type) -> None:
    """``selector=PowerOfTwoChoices`` (no parentheses) fails at once, naming the fix,
    instead of at the first request deep in the race."""
    with pytest.raises(
        TypeError,
        match=rf"^`{name}` must be an instance, such as {cls.__name__}\(\), got the class$",
    ):
        HedgedTransport(metrics=False, **{name: cls})


def test_the_name_is_the_one_given() -> None:
    """The checks of ``delay``, ``selector`` and ``budget`` leave ``name`` alone."""
    assert HedgedTransport(metrics=False, name="catalog").name == "catalog"


def test_fake_service_replica_count_is_bounded() -> None:
    """``FakeService(replicas=10**9)`` is refused, not a constructor eating memory."""
    with pytest.raises(ValueError, match=r"^`replicas` must be in \[1, 256\], got 1000000000$"):
        FakeService(replicas=10**9)


def test_plan_fanout_is_bounded(capsys: pytest.CaptureFixture[str]) -> None:
    """A fan-out of 10**15 is a usage error, not a traceback from the arithmetic."""
    assert cli_main(["plan", "--preset", "lab", "--fanout", "1000000000000000"]) == 2
    assert capsys.readouterr().err.strip() == (
        "hedgeclient: error: --fanout must be an integer in [1, 1000000], got '1000000000000000'"
    )


@pytest.mark.parametrize("command", ["serve", "demo"])
def test_a_constant_latency_in_milliseconds_is_refused(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--latency 30`` (meant as 30 ms) is refused with the seconds it would mean."""
    assert cli_main([command, "--latency", "30"]) == 2
    assert capsys.readouterr().err.strip() == (
        "hedgeclient: error: --latency is in seconds: a constant latency of 30 s is above "
        "5 s (for 30 ms write '0.03'), got '30'"
    )
