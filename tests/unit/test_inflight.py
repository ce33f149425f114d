"""InFlight: which replicas are stalled now, from the age of their attempts in flight."""

from __future__ import annotations

import math

from hedgeclient._attempt import CANCELLED, HEADERS, Attempt
from hedgeclient._inflight import GROUP_SHARE, InFlight

A, B = "http://a", "http://b"


def sent(registry: InFlight, replica: str, at: float, number: int = 1) -> Attempt:
    """An attempt sent (and on the wire) at ``at``."""
    attempt = Attempt(number, "primary", replica, at)
    registry.add(attempt)
    return attempt


def end(registry: InFlight, attempt: Attempt, at: float, state: int = HEADERS) -> None:
    """End ``attempt`` at ``at`` in ``state``."""
    attempt.ended = at
    attempt.state = state
    registry.discard(attempt)


def test_an_old_attempt_on_a_silent_replica_is_a_stall() -> None:
    """An attempt older than the delay, and no answer for as long: stalled."""
    registry = InFlight()
    sent(registry, A, 0.0)
    assert registry.stalled([A, B], 0.030, 0.030) == set()  # exactly the delay: not yet
    assert registry.stalled([A, B], 0.030, 0.031) == {A}


def test_a_recent_answer_means_no_stall() -> None:
    """A replica that answered within the delay is not stalled by one slow attempt."""
    registry = InFlight()
    sent(registry, A, 0.0)
    end(registry, sent(registry, A, 0.010), 0.020)
    assert registry.stalled([A], 0.030, 0.045) == set()
    assert registry.stalled([A], 0.030, 0.051) == {A}


def test_a_cancelled_attempt_is_no_answer() -> None:
    """A loser cancelled on the replica does not count as the replica answering."""
    registry = InFlight()
    sent(registry, A, 0.0)
    end(registry, sent(registry, A, 0.005), 0.020, CANCELLED)
    assert registry.stalled([A], 0.030, 0.031) == {A}


def test_an_attempt_still_in_our_own_queue_is_not_on_the_replica() -> None:
    """on_wire NaN (queued for one of our pool connections) never makes a stall."""
    registry = InFlight()
    attempt = sent(registry, A, 0.0)
    attempt.on_wire = math.nan
    assert registry.stalled([A], 0.030, 1.0) == set()
    attempt.on_wire = 0.5
    assert registry.stalled([A], 0.030, 0.6) == {A}


def test_one_slow_attempt_alone_is_no_evidence_for_its_own_sample() -> None:
    """stalled_besides needs another old attempt; once seen, the group shares it until an
    answer."""
    registry = InFlight()
    first = sent(registry, A, 0.0)
    assert not registry.stalled_besides(first, 0.030, 0.050)
    second = sent(registry, A, 0.001, 2)
    assert registry.stalled_besides(first, 0.030, 0.050)
    end(registry, first, 0.050, CANCELLED)
    third = sent(registry, A, 0.049, 3)
    assert registry.stalled_besides(second, 0.030, 0.055)  # the last of the group
    end(registry, second, 0.055, CANCELLED)
    end(registry, third, 0.060)  # an answer ends the pause
    fourth = sent(registry, A, 0.061, 4)
    assert not registry.stalled_besides(fourth, 0.030, 0.100)


def test_hedge_now_wakes_each_primary_once() -> None:
    """The primaries in flight on a stalled replica are woken once, after the scan."""
    registry = InFlight()
    woken: list[int] = []
    attempts = [sent(registry, A, 0.0, n) for n in (1, 2)]
    for attempt in attempts:
        attempt.on_stall = lambda n=attempt.number: woken.append(n)
    other = sent(registry, B, 0.0, 3)
    other.on_stall = lambda: woken.append(3)
    registry.hedge_now({A})
    registry.hedge_now({A})
    assert woken == [1, 2]
    assert all(a.on_stall is None for a in attempts)


def test_oldest_and_forget() -> None:
    """oldest() gives the age on the wire of the oldest attempt; forget() the answer time."""
    registry = InFlight()
    sent(registry, A, 0.0)
    sent(registry, A, 0.010, 2)
    assert registry.oldest(A, 0.050) == 0.050
    assert registry.oldest(B, 0.050) == 0.0
    answered = sent(registry, B, 0.0, 3)
    sent(registry, B, 0.005, 4)
    end(registry, answered, 0.010)
    assert registry.stalled([B], 0.030, 0.039) == set()  # answered 29 ms ago
    registry.forget(B)
    assert registry.stalled([B], 0.030, 0.039) == {B}  # the answer is forgotten


def test_a_group_of_two_is_a_stall_at_half_the_delay() -> None:
    """Two attempts older than GROUP_SHARE of the delay on a silent replica: stalled at
    once (and its samples are then left out); one attempt alone waits for the delay."""
    assert GROUP_SHARE == 0.5
    registry = InFlight()
    first = sent(registry, A, 0.0)
    assert registry.stalled([A], 0.030, 0.020) == set()  # one attempt, 20 ms: not yet
    second = sent(registry, A, 0.002, 2)
    assert registry.stalled([A], 0.030, 0.016) == set()  # the second is 14 ms old
    assert registry.stalled([A], 0.030, 0.0171) == {A}  # both older than 15 ms
    assert registry.stalled_besides(second, 0.030, 0.018)  # the group was seen: paused
    assert registry.stalled_besides(first, 0.030, 0.018)


def test_a_group_needs_silence() -> None:
    """Two old attempts on a replica that answered within half the delay: no stall."""
    registry = InFlight()
    sent(registry, A, 0.0)
    sent(registry, A, 0.001, 2)
    end(registry, sent(registry, A, 0.005, 3), 0.010)
    assert registry.stalled([A], 0.030, 0.024) == set()  # answered 14 ms ago
    assert registry.stalled([A], 0.030, 0.026) == {A}  # 16 ms ago


def test_stalled_besides_counts_the_attempt_itself_in_a_group() -> None:
    """An attempt older than half the delay, with another as old on a silent replica, is
    a stalled sample; alone, or with a young companion, it is not."""
    registry = InFlight()
    first = sent(registry, A, 0.0)
    young = sent(registry, A, 0.010, 2)
    assert not registry.stalled_besides(first, 0.030, 0.020)  # the other is 10 ms old
    assert registry.stalled_besides(first, 0.030, 0.0251)  # both older than 15 ms
    assert registry.stalled_besides(young, 0.030, 0.0251)  # paused since


def test_attempts_sent_before_a_pause_ended_are_stalled_samples() -> None:
    """The answers that end a pause come in a burst: every attempt sent before the first
    of them is a stalled sample, one sent after it is not."""
    registry = InFlight()
    first = sent(registry, A, 0.0)
    second = sent(registry, A, 0.001, 2)
    third = sent(registry, A, 0.040, 3)
    assert registry.stalled([A], 0.030, 0.031) == {A}  # the group: paused
    end(registry, first, 0.090)  # the pause ends: answered
    assert registry.stalled_besides(second, 0.030, 0.091)
    end(registry, second, 0.091)
    assert registry.stalled_besides(third, 0.030, 0.092)  # sent during the pause
    end(registry, third, 0.092)
    later = sent(registry, A, 0.095, 4)
    assert not registry.stalled_besides(later, 0.030, 0.140)
    registry.forget(A)
    assert not registry.stalled_besides(third, 0.030, 0.093)


def test_silent_is_the_single_attempt_rule_on_a_shorter_horizon() -> None:
    """silent(): an attempt older than ``age`` on a replica silent for as long; it marks
    nothing paused (only steering), unlike a group."""
    registry = InFlight()
    attempt = sent(registry, A, 0.0)
    assert registry.silent([A, B], 0.012, 0.012) == set()
    assert registry.silent([A, B], 0.012, 0.013) == {A}
    assert not registry.stalled_besides(attempt, 0.030, 0.013)
    assert InFlight().silent([A], 0.012, 1.0) == set()
