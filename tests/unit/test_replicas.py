"""PowerOfTwoChoices: how each AttemptResult moves the failure streak and the cool-down."""

from __future__ import annotations

import random
from typing import Any, get_args

import pytest

from hedgeclient import AttemptResult, PowerOfTwoChoices, Replica, ReplicaSelector
from hedgeclient.testing import FirstReplica

A, B, C = "http://a", "http://b", "http://c"
FAILURES = ["connect_failed", "connect_stalled", "unhealthy_status", "failed"]


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
    assert set(get_args(AttemptResult)) == {*FAILURES, "outpaced", "ok", "cancelled"}


def test_five_outpaced_losses_in_a_row_eject_in_a_run_of_their_own() -> None:
    """Races lost while waiting past the delay eject at ``outpaced_threshold`` (5), not
    at the failure threshold, and neither run adds to the other."""
    chooser = selector(FakeClock())
    finish(chooser, A, "outpaced", "outpaced", "outpaced", "outpaced")
    finish(chooser, A, "failed", "failed")
    assert chooser.cooling_down() == frozenset()
    finish(chooser, A, "outpaced")
    assert chooser.cooling_down() == {A}
    assert chooser.statistics().ejections["outpaced"] == 1


def test_an_answer_ends_the_outpaced_run_and_lifts_its_ejection() -> None:
    """One success between slow losses starts the count again; after an ejection by
    ``outpaced``, one success lifts it at once."""
    chooser = selector(FakeClock(), outpaced_threshold=2)
    finish(chooser, A, "outpaced", "ok", "outpaced", "cancelled", "ok", "outpaced")
    assert chooser.cooling_down() == frozenset()
    finish(chooser, A, "outpaced")
    assert chooser.cooling_down() == {A}
    finish(chooser, A, "ok")
    assert chooser.cooling_down() == frozenset()


def test_after_an_outpaced_ejection_one_more_loss_sends_it_back() -> None:
    """Once its cool-down ends, the hung replica's next slow loss ejects it again, for
    twice as long."""
    clock = FakeClock()
    chooser = selector(clock, outpaced_threshold=2)
    finish(chooser, A, "outpaced", "outpaced")
    clock.now = 5.0
    assert chooser.cooling_down() == frozenset()
    finish(chooser, A, "outpaced")
    assert chooser.cooling_down() == {A}
    clock.now = 14.9
    assert chooser.cooling_down() == {A}
    clock.now = 15.0
    assert chooser.cooling_down() == frozenset()


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
    assert chooser.choose([A], ()) == A
    assert chooser.choose([A, B], {A}) == B


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
        match=r"^`result` must be one of cancelled, connect_failed, connect_stalled, failed, "
        r"ok, outpaced, unhealthy_status, got 'timeout'$",
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
        (
            {"cooldown": 10.0, "max_cooldown": 5.0},
            ValueError,
            r"^`max_cooldown` must be a number of seconds in \[10, 3600\], got 5.0$",
        ),
        ({"max_ejected": 0}, ValueError, r"^`max_ejected` must be in \(0, 1\], got 0$"),
        ({"max_ejected": 1.5}, ValueError, r"^`max_ejected` must be in \(0, 1\], got 1.5$"),
    ],
)
def test_invalid_parameters_are_rejected(
    kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    """Bad arguments raise, naming the parameter, its unit and the range."""
    with pytest.raises(error, match=message):
        PowerOfTwoChoices(**kwargs)


def test_cool_down_doubles_while_the_fault_persists() -> None:
    """Each ejection in a row lasts twice the one before, up to max_cooldown."""
    clock = FakeClock()
    chooser = selector(clock, cooldown=1.0, max_cooldown=3.0)
    finish(chooser, A, "connect_failed", "connect_failed", "connect_failed")
    assert chooser.statistics().ejected == {A: 1.0}
    clock.now = 1.0
    finish(chooser, A, "connect_failed")
    assert chooser.statistics().ejected == {A: 3.0}
    clock.now = 3.0
    finish(chooser, A, "connect_failed")
    assert chooser.statistics().ejected == {A: 6.0}  # 4 s capped at 3 s
    finish(chooser, A, "ok")
    clock.now = 10.0
    finish(chooser, A, "failed", "failed", "failed")
    assert chooser.statistics().ejected == {A: 11.0}  # back to the first cool-down


def test_never_more_than_half_of_a_service_is_ejected() -> None:
    """With four replicas all failing, two are ejected; the rest still get attempts."""
    clock = FakeClock()
    chooser = selector(clock)
    replicas = [A, B, C, "http://d"]
    assert chooser.choose(replicas, ()) in replicas  # the selector learns the service
    for replica in replicas:
        finish(chooser, replica, "connect_failed", "connect_failed", "connect_failed")
    stats = chooser.statistics()
    assert set(stats.ejected) == {A, B}
    assert stats.ejections["connect_failed"] == 2
    assert stats.overflow == 2
    assert {chooser.choose(replicas, ()) for _ in range(50)} == {C, "http://d"}


def test_one_replica_of_two_or_three_may_be_ejected() -> None:
    """The share rounds down, but one replica may always be ejected (as in Envoy)."""
    chooser = selector(FakeClock())
    chooser.choose([A, B, C], ())
    for replica in (A, B):
        finish(chooser, replica, "unhealthy_status", "unhealthy_status", "unhealthy_status")
    assert set(chooser.statistics().ejected) == {A}
    assert {chooser.choose([A, B, C], ()) for _ in range(50)} == {B, C}


def test_the_share_applies_when_a_service_shrinks() -> None:
    """Two of four ejected, then the service shrinks to three: only the first stays out."""
    clock = FakeClock()
    chooser = selector(clock)
    chooser.choose([A, B, C, "http://d"], ())
    finish(chooser, A, *FAILURES[:3])
    clock.now = 1.0
    finish(chooser, B, *FAILURES[:3])
    assert set(chooser.statistics().ejected) == {A, B}
    assert {chooser.choose([A, B, C], ()) for _ in range(50)} == {B, C}
    assert set(chooser.statistics().ejected) == {A}  # what the metrics show: B is chosen


def test_ejections_are_counted_by_cause() -> None:
    """The result that ends a run of failures names the ejection's cause."""
    chooser = selector(FakeClock())
    chooser.choose([A, B, C, "http://d"], ())
    finish(chooser, A, "connect_failed", "failed", "connect_stalled")
    finish(chooser, B, "failed", "failed", "unhealthy_status")
    assert chooser.statistics().ejections == {
        "connect_failed": 0,
        "connect_stalled": 1,
        "unhealthy_status": 1,
        "failed": 0,
        "outpaced": 0,
    }


def test_weights_bias_the_draw() -> None:
    """With nothing in flight, primaries follow the weights (9 of 11 to weight 9)."""
    chooser = selector(FakeClock())
    chooser.replicas_changed("http://svc", [Replica(A, weight=9), Replica(B), Replica(C)])
    chosen = [chooser.choose([A, B, C], ()) for _ in range(2000)]
    # A tie goes to the first candidate drawn, which is drawn in proportion to weight:
    # 9 / 11 = 0.818; +-0.04 is about 5 standard errors of 2,000 draws.
    assert 0.78 < chosen.count(A) / len(chosen) < 0.86


def test_weights_divide_the_load() -> None:
    """Attempts in flight are compared per unit of weight."""
    chooser = selector(FakeClock())
    chooser.replicas_changed("http://svc", [Replica(A, weight=4), Replica(B)])
    for _ in range(3):
        chooser.attempt_started(A)
    assert chooser.choose([A, B], ()) == B  # 3 / 4 > 0 / 1
    chooser.attempt_started(B)
    assert chooser.choose([A, B], ()) == A  # 3 / 4 < 1 / 1
    chooser.attempt_started(A)
    chooser.attempt_started(A)
    assert chooser.choose([A, B], ()) == B  # 5 / 4 > 1


def test_replicas_that_leave_are_forgotten() -> None:
    """A replica removed from its only service loses its ejection and weight."""
    chooser = selector(FakeClock())
    chooser.replicas_changed("http://svc", [Replica(A, weight=2), Replica(B), Replica(C)])
    finish(chooser, A, *FAILURES[:3])
    assert chooser.cooling_down() == {A}
    chooser.replicas_changed("http://other", [Replica(B)])
    chooser.replicas_changed("http://svc", [Replica(B), Replica(C)])
    assert chooser.cooling_down() == frozenset()
    chooser.replicas_changed("http://svc", [Replica(C)])
    chooser.replicas_changed("http://svc", [Replica(A), Replica(C)])
    assert chooser.choose([A, C], {C}) == A


def test_in_flight_count_is_dropped_at_zero() -> None:
    """A replica with nothing in flight keeps no entry (no growth under churn)."""
    chooser = selector(FakeClock())
    finish(chooser, A, "ok", "cancelled")
    chooser.attempt_finished(B, result="ok")  # more ends than starts: never negative
    assert chooser.outstanding(A) == 0
    assert chooser.outstanding(B) == 0


def test_an_attempt_in_the_clients_own_queue_counts_but_does_not_age() -> None:
    """Issue 25: attempts waiting in the client's own pool queue count in flight, and
    age only from when they leave it; the queue's wait is not the replica's."""
    clock = FakeClock()
    chooser = selector(clock)
    chooser.attempt_queued(A)
    chooser.attempt_queued(A)
    chooser.attempt_started(B)
    clock.now = 0.030
    # a: two attempts queued 30 ms (no age); b: one on the wire for 30 ms
    assert chooser.outstanding(A) == 2
    assert chooser.choose([A, B], ()) == A
    chooser.attempt_on_wire(A)  # one leaves the queue at 0.030
    clock.now = 0.050
    assert chooser.choose([A, B], ()) == A  # 20 ms of age against 50
    clock.now = 0.080
    assert chooser.choose([A, B], ()) == A  # 50 against 80
    chooser.attempt_started(A)  # a third, on the wire at once: 50 + 0 against 80
    clock.now = 0.120
    assert chooser.choose([A, B], ()) == B  # 90 + 40 against 120: b is less busy now
    chooser.attempt_on_wire(A)  # the second leaves the queue (ages from 0.120) ...
    chooser.attempt_finished(A, result="ok")  # ... and one ends at once
    assert chooser.outstanding(A) == 2
    chooser.attempt_on_wire(B)  # no attempt of b is queued: nothing to do
    chooser.attempt_finished(B, result="ok")
    assert chooser.outstanding(B) == 0
    chooser.attempt_queued(B)
    chooser.attempt_on_wire(B)  # it ended in the queue: its count goes, not its age
    chooser.attempt_finished(B, result="cancelled")
    for _ in range(2):
        chooser.attempt_finished(A, result="ok")
    assert chooser.outstanding(A) == chooser.outstanding(B) == 0
