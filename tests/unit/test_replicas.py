"""PowerOfTwoChoices: how each AttemptResult moves the failure streak and the cool-down."""

from __future__ import annotations

import random
from typing import Any, get_args

import pytest

from hedgeclient import AttemptResult, PowerOfTwoChoices, ReplicaSelector
from hedgeclient.testing import FirstReplica

A, B, C = "http://a", "http://b", "http://c"
FAILURES = ["connect_failed", "unhealthy_status", "failed"]


class FakeClock:
    """A settable clock, in seconds."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def selector(clock: FakeClock, **kwargs: Any) -> PowerOfTwoChoices:
    """A seeded selector with threshold 3 and a 5 s cool-down."""
    return PowerOfTwoChoices(rng=random.Random(1), clock=clock, **kwargs)


def finish(chooser: PowerOfTwoChoices, replica: str, *results: AttemptResult) -> None:
    """Start and finish one attempt on ``replica`` per result."""
    for result in results:
        chooser.attempt_started(replica)
        chooser.attempt_finished(replica, result=result)


def test_attempt_result_values() -> None:
    """AttemptResult is the closed set the race reports."""
    assert set(get_args(AttemptResult)) == {*FAILURES, "ok", "cancelled"}


@pytest.mark.parametrize("result", FAILURES)
def test_three_failures_in_a_row_cool_a_replica_down(result: AttemptResult) -> None:
    """Connect failures, 503-like statuses and other errors all count toward the streak."""
    clock = FakeClock()
    chooser = selector(clock)
    finish(chooser, A, result, result)
    assert chooser.cooling_down() == frozenset()
    finish(chooser, A, result)
    assert chooser.cooling_down() == {A}
    assert {chooser.choose([A, B, C], ()) for _ in range(50)} == {B, C}
    clock.now = 5.0
    assert chooser.cooling_down() == frozenset()


def test_unhealthy_statuses_and_connect_failures_mix_in_one_streak() -> None:
    """A 503, a refused connection and a timeout in a row are three failures."""
    chooser = selector(FakeClock())
    finish(chooser, A, "unhealthy_status", "connect_failed", "failed")
    assert chooser.cooling_down() == {A}


def test_ok_clears_the_streak_and_the_cool_down() -> None:
    """One success ends the run of failures and lifts the cool-down at once."""
    chooser = selector(FakeClock())
    finish(chooser, A, "failed", "failed", "ok", "failed", "failed")
    assert chooser.cooling_down() == frozenset()
    finish(chooser, A, "failed")
    assert chooser.cooling_down() == {A}
    finish(chooser, A, "ok")
    assert chooser.cooling_down() == frozenset()


def test_cancelled_attempts_change_nothing() -> None:
    """A cancelled attempt neither ends a streak nor lifts a cool-down (the black hole)."""
    chooser = selector(FakeClock())
    finish(chooser, A, "connect_failed", "cancelled", "connect_failed", "cancelled")
    assert chooser.cooling_down() == frozenset()
    finish(chooser, A, "connect_failed", "cancelled", "cancelled")
    assert chooser.cooling_down() == {A}
    assert chooser.outstanding(A) == 0


def test_after_the_cool_down_one_more_failure_sends_it_back() -> None:
    """Once the cool-down ends, the next failure cools the replica down again."""
    clock = FakeClock()
    chooser = selector(clock)
    finish(chooser, A, "unhealthy_status", "unhealthy_status", "unhealthy_status")
    clock.now = 6.0
    assert chooser.cooling_down() == frozenset()
    finish(chooser, A, "unhealthy_status")
    assert chooser.cooling_down() == {A}


def test_every_replica_cooling_down_still_gives_one() -> None:
    """With all candidates cooling down, the one whose cool-down ends first is chosen."""
    clock = FakeClock()
    chooser = selector(clock)
    finish(chooser, A, *FAILURES)
    clock.now = 1.0
    finish(chooser, B, *FAILURES)
    assert chooser.choose([A, B], ()) == A


def test_outstanding_counts_every_result() -> None:
    """Every result, cancelled included, ends one attempt in flight."""
    chooser = selector(FakeClock())
    for _ in range(5):
        chooser.attempt_started(A)
    for result in get_args(AttemptResult):
        chooser.attempt_finished(A, result=result)
    assert chooser.outstanding(A) == 0


def test_unknown_result_is_refused() -> None:
    """A result outside AttemptResult is a bug in the caller: a ValueError naming it."""
    chooser = selector(FakeClock())
    with pytest.raises(
        ValueError,
        match=r"^`result` must be one of cancelled, connect_failed, failed, ok, "
        r"unhealthy_status, got 'timeout'$",
    ):
        chooser.attempt_finished(A, result="timeout")  # type: ignore[arg-type]


def test_selectors_satisfy_the_protocol() -> None:
    """PowerOfTwoChoices and the testing FirstReplica are ReplicaSelectors."""
    assert isinstance(PowerOfTwoChoices(), ReplicaSelector)
    first = FirstReplica()
    assert isinstance(first, ReplicaSelector)
    first.attempt_finished(A, result="unhealthy_status")
    assert first.choose([A, B], {A}) == B


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"failure_threshold": 0}, ValueError, r"^`failure_threshold` must be >= 1, got 0$"),
        (
            {"cooldown": 0},
            ValueError,
            r"^`cooldown` must be a number of seconds in \(0, 3600\], got 0$",
        ),
        (
            {"cooldown": 5000},
            ValueError,
            r"^`cooldown` must be a number of seconds in \(0, 3600\], got 5000$",
        ),
        (
            {"cooldown": "5s"},
            TypeError,
            r"^`cooldown` must be a number of seconds in \(0, 3600\], got '5s'$",
        ),
    ],
)
def test_invalid_parameters_are_rejected(
    kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    """Bad arguments raise, naming the parameter, its unit and the range."""
    with pytest.raises(error, match=message):
        PowerOfTwoChoices(**kwargs)
