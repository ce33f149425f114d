"""InFlight: which replicas are stalled now, from the age of their attempts in flight."""

from __future__ import annotations

import math

from hedgeclient._attempt import CANCELLED, HEADERS, Attempt
from hedgeclient._inflight import InFlight

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
