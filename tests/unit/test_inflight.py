"""Choice's attempts in flight: which replicas are stalled now, from the age of their
attempts in flight."""

from __future__ import annotations

import math

import httpx
import pytest

from hedgeclient._attempt import CANCELLED, HEADERS, Attempt, new_attempt
from hedgeclient._replicas.avoidance import EARLY, SILENT
from hedgeclient._replicas.choice import Choice
from hedgeclient._replicas.services import Service
from hedgeclient.testing import FirstReplica

A, B, C = "http://a", "http://b", "http://c"
P = (A, B)  # a and its peer b


def new_registry() -> Choice:
    """A Choice over FirstReplica: its attempts in flight, by replica."""
    return Choice(FirstReplica(), zone=None, backup_zone="any", non_fatal={502, 503, 504})


def sent(registry: Choice, replica: str, at: float, number: int = 1) -> Attempt:
    """An attempt sent (and on the wire) at ``at``."""
    attempt = new_attempt(number, "primary", replica, at)
    registry.started(attempt)
    return attempt


def end(registry: Choice, attempt: Attempt, at: float, state: int = HEADERS) -> None:
    """End ``attempt`` at ``at`` in ``state`` (headers: a 200), with no hedge delay."""
    attempt.ended = at
    attempt.state = state
    if state == HEADERS:
        attempt.response = httpx.Response(200)
    registry.ended(attempt, (A, B, C), None, None)


def test_an_old_attempt_on_a_silent_replica_is_a_stall() -> None:
    """An attempt older than the delay, and no answer for as long: stalled."""
    registry = new_registry()
    sent(registry, A, 0.0)
    assert registry.stalled([A, B], 0.030, 0.030) == set()  # exactly the delay: not yet
    assert registry.stalled([A, B], 0.030, 0.031) == {A}


def test_a_recent_answer_means_no_stall() -> None:
    """A replica that answered within the delay is not stalled by one slow attempt."""
    registry = new_registry()
    sent(registry, A, 0.0)
    end(registry, sent(registry, A, 0.010), 0.020)
    assert registry.stalled([A], 0.030, 0.045) == set()
    assert registry.stalled([A], 0.030, 0.051) == {A}


def test_a_cancelled_attempt_is_no_answer() -> None:
    """A loser cancelled on the replica does not count as the replica answering."""
    registry = new_registry()
    sent(registry, A, 0.0)
    end(registry, sent(registry, A, 0.005), 0.020, CANCELLED)
    assert registry.stalled([A], 0.030, 0.031) == {A}


def test_an_attempt_still_in_our_own_queue_is_not_on_the_replica() -> None:
    """on_wire NaN (queued for one of our pool connections) never makes a stall."""
    registry = new_registry()
    attempt = sent(registry, A, 0.0)
    attempt.on_wire = math.nan
    assert registry.stalled([A], 0.030, 1.0) == set()
    attempt.on_wire = 0.5
    assert registry.stalled([A], 0.030, 0.6) == {A}


def test_one_slow_attempt_alone_is_no_evidence_for_its_own_sample() -> None:
    """stalled_besides needs another old attempt; once seen, the group shares it until an
    answer."""
    registry = new_registry()
    first = sent(registry, A, 0.0)
    assert not registry.stalled_besides(first, 0.030, 0.050)
    second = sent(registry, A, 0.001, 2)
    # Both silent, but no other replica answered meanwhile: the service as a whole is
    # slower than the delay (issue 24), not a stall of a.
    assert not registry.stalled_besides(first, 0.030, 0.050, (A, B))
    end(registry, sent(registry, B, 0.002, 5), 0.012)  # b answers meanwhile
    assert registry.stalled_besides(first, 0.030, 0.050, (A, B))
    end(registry, first, 0.050, CANCELLED)
    third = sent(registry, A, 0.049, 3)
    assert registry.stalled_besides(second, 0.030, 0.055)  # the last of the group
    end(registry, second, 0.055, CANCELLED)
    end(registry, third, 0.060)  # an answer ends the pause
    fourth = sent(registry, A, 0.061, 4)
    assert not registry.stalled_besides(fourth, 0.030, 0.100)


def test_hedge_now_wakes_each_primary_once() -> None:
    """The primaries in flight on a stalled replica are woken once, after the scan."""
    registry = new_registry()
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


def test_a_stall_hastens_only_the_primaries_of_routes_no_slower_than_its_evidence() -> None:
    """A silence of a 30 ms route's delay hastens its own primaries, never those of a
    900 ms route on the same replica (issue 27): they wait their own delay, or a
    silence as long."""
    registry = new_registry()
    woken: list[str] = []
    fast, slow = sent(registry, A, 0.0, 1), sent(registry, A, 0.0, 2)
    fast.hedge_delay, slow.hedge_delay = 0.030, 0.900
    fast.on_stall = lambda: woken.append("fast")
    slow.on_stall = lambda: woken.append("slow")
    registry.hedge_now({A}, 0.030)
    assert woken == ["fast"]
    assert slow.on_stall is not None  # kept for evidence of its own length
    registry.hedge_now({A}, 0.900)
    assert woken == ["fast", "slow"]


def test_oldest_and_forget() -> None:
    """oldest() gives the age on the wire of the oldest attempt; forget() the answer time."""
    registry = new_registry()
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


def test_a_replica_silent_while_its_peers_answer_is_silent() -> None:
    """Silent: an attempt on the wire and no answer for longer than the age, while a
    peer answered an attempt sent after that silence began."""
    registry = new_registry()
    sent(registry, A, 0.0)
    assert registry.silent([A, B], 0.010, 0.020) == set()  # no peer has answered yet
    end(registry, sent(registry, B, 0.001, 2), 0.012)
    assert registry.silent([A, B], 0.010, 0.020) == {A}
    assert registry.silent([A, B], 0.010, 0.010) == set()  # exactly the age: not yet
    assert registry.silent([A], 0.010, 0.020) == set()  # b is not one of its peers


def test_a_client_wide_slowdown_makes_no_replica_silent() -> None:
    """Every replica slow at once (a saturated client): a peer's answer to an attempt
    sent before the silence began proves nothing, and none is silent."""
    registry = new_registry()
    old_b = sent(registry, B, 0.0, 1)
    sent(registry, A, 0.001, 2)
    sent(registry, B, 0.002, 3)
    end(registry, old_b, 0.030)  # sent before a's attempt
    assert registry.silent([A, B], 0.010, 0.031) == set()


def test_silence_starts_at_the_last_answer() -> None:
    """A replica that answered since its oldest attempt was sent is silent only from
    that answer on."""
    registry = new_registry()
    sent(registry, A, 0.0)
    end(registry, sent(registry, A, 0.001, 2), 0.015)
    end(registry, sent(registry, B, 0.016, 3), 0.020)
    assert registry.silent([A, B], 0.010, 0.024) == set()  # silent for 9 ms
    assert registry.silent([A, B], 0.010, 0.026) == {A}


def test_a_silence_outlives_its_cancelled_attempts() -> None:
    """Attempts cancelled in a shared silence (a hush) keep their replica silent for as
    long again as they waited; an answer ends it. An attempt alone on its replica
    leaves one too when a peer answered meanwhile (issue 24: the memory of a freeze),
    and none when no peer did (the client's own slowness)."""
    registry = new_registry()
    unseen = sent(registry, A, 0.0)
    end(registry, sent(registry, B, -0.005, 2), 0.015)  # sent before it: no evidence
    end(registry, unseen, 0.020, CANCELLED)  # no peer answered anything sent later
    assert registry.silent([A, B], 0.010, 0.021) == set()
    registry = new_registry()
    lone = sent(registry, A, 0.0)
    end(registry, sent(registry, B, 0.005, 2), 0.015)
    end(registry, lone, 0.020, CANCELLED)  # alone in its silence: a hush until 0.040
    assert registry.silent([A, B], 0.010, 0.039) == {A}
    assert registry.silent([A, B], 0.010, 0.041) == set()
    stuck = sent(registry, A, 0.050, 3)
    other = sent(registry, A, 0.052, 4)
    end(registry, sent(registry, B, 0.055, 5), 0.060)
    end(registry, stuck, 0.090, CANCELLED)  # a hush since 0.050, until 0.130
    end(registry, other, 0.091, CANCELLED)  # ... extended: until 0.132
    assert registry.silent([A, B], 0.010, 0.131) == {A}
    assert registry.silent([A, B], 0.010, 0.133) == set()
    again = sent(registry, A, 0.134, 6)
    sent(registry, A, 0.135, 7)
    end(registry, again, 0.150, CANCELLED)
    end(registry, sent(registry, A, 0.151, 8), 0.160)  # a answers: the hush ends
    assert registry.silent([A, B], 0.010, 0.165) == set()


def test_a_freeze_that_began_after_the_attempt_left_still_hushes() -> None:
    """An attempt sent before its replica's last answer, then held by a freeze that began
    after that answer, leaves a hush from the answer on (issue 24: before, it left none,
    and new primaries walked into the rest of the freeze); not when the replica answered
    as it was cancelled."""
    registry = new_registry()
    held = sent(registry, A, 0.0)
    end(registry, sent(registry, A, 0.001, 2), 0.005)  # a answers, then freezes
    end(registry, sent(registry, B, 0.010, 3), 0.020)  # a peer answers meanwhile
    end(registry, held, 0.040, CANCELLED)  # silent since 0.005: a hush until 0.075
    assert registry.silent([A, B], 0.010, 0.074) == {A}
    assert registry.silent([A, B], 0.010, 0.076) == set()
    registry = new_registry()
    held = sent(registry, A, 0.0)
    end(registry, sent(registry, B, 0.010, 2), 0.020)
    end(registry, sent(registry, A, 0.001, 3), 0.040)  # a answers as it is cancelled
    end(registry, held, 0.040, CANCELLED)  # no silence: no hush
    assert registry.silent([A, B], 0.0, 0.041) == set()


def test_a_hush_from_a_later_answer_steers_but_is_not_one_of_two() -> None:
    """A hush that runs from the replica's answer after the cancelled attempt left
    steers new attempts away, but with one attempt as old it does not make the replica
    stalled now (that sends backups at once): the attempt was not shown held from its
    start."""
    registry = new_registry()
    held = sent(registry, A, 0.0)
    end(registry, sent(registry, A, 0.001, 2), 0.005)  # a answers, then freezes
    sent(registry, A, 0.006, 3)  # held there too
    end(registry, sent(registry, B, 0.010, 4), 0.020)
    end(registry, held, 0.040, CANCELLED)  # a late hush since 0.005, until 0.075
    assert registry.silent([A, B], 0.020, 0.070) == {A}
    assert registry.silent([A, B], 0.020, 0.070, two=True) == set()


def test_an_answer_after_a_freeze_shows_the_primaries_it_held() -> None:
    """A freeze ends in a burst of answers: the primary answered after the first one
    looks, at its own end, as if its replica had just answered (the silence rule misses
    it), but that first answer showed both held in one silence since 0.002: for EARLY
    of the delay, it was stalled. A shorter shared silence (a slow request beside
    another) is no evidence, nor an attempt sent after the silence ended, nor one still
    in our own pool queue."""
    delay = 0.030
    registry = new_registry()
    primary = sent(registry, A, 0.0)
    end(registry, sent(registry, A, 0.002, 2), 0.028)  # 26 ms beside, b silent too
    assert not registry.stalled_besides(primary, delay, 0.029)  # so: no evidence
    registry = new_registry()
    primary = sent(registry, A, 0.0)
    end(registry, sent(registry, B, 0.003, 9), 0.013)  # b answers in a's silence
    end(registry, sent(registry, A, 0.002, 2), 0.028)  # 26 ms beside the primary
    later = sent(registry, A, 0.028, 3)  # after the answer: not held beside it
    assert not registry.waited_in_silence(primary, SILENT * delay, 0.029)  # just answered
    assert registry.stalled_besides(primary, delay, 0.029)  # 26 ms >= 25.5 ms
    end(registry, primary, 0.029)
    assert not registry.stalled_besides(later, delay, 0.030)
    registry = new_registry()
    primary = sent(registry, A, 0.0)
    end(registry, sent(registry, B, 0.004, 9), 0.014)  # b answers in a's silence
    end(registry, sent(registry, A, 0.003, 2), 0.028)  # 25 ms beside: under EARLY
    assert not registry.stalled_besides(primary, delay, 0.029)
    registry = new_registry()
    queued = sent(registry, A, 0.0)
    queued.on_wire = math.nan  # still in our own pool queue: never held by the replica
    end(registry, sent(registry, A, 0.0, 2), 0.050)
    assert not registry.stalled_besides(queued, delay, 0.051)


def test_an_early_stall_needs_two_silent_attempts() -> None:
    """With ``two``, one slow attempt is not enough: two attempts on the wire for
    longer than the age (or one and a hush) are."""
    registry = new_registry()
    sent(registry, A, 0.0)
    end(registry, sent(registry, B, 0.001, 2), 0.011)
    assert registry.silent([A, B], 0.020, 0.030, two=True) == set()
    sent(registry, A, 0.005, 3)
    assert registry.silent([A, B], 0.020, 0.024, two=True) == set()  # 19 ms: not yet
    assert registry.silent([A, B], 0.020, 0.026, two=True) == {A}
    registry = new_registry()
    end(registry, sent(registry, B, 0.001, 1), 0.011)
    first, second = sent(registry, A, 0.0, 2), sent(registry, A, 0.001, 3)
    end(registry, first, 0.030, CANCELLED)  # a hush since 0.0
    end(registry, second, 0.030, CANCELLED)
    sent(registry, A, 0.031, 4)
    assert registry.silent([A, B], 0.020, 0.051, two=True) == set()
    assert registry.silent([A, B], 0.020, 0.052, two=True) == {A}


def test_a_primary_that_waited_in_a_frozen_replicas_silence_is_no_sample() -> None:
    """A primary that ends in a silence of its replica longer than the age, which held
    it and another attempt (or the hush of one) all along: it waited in a freeze, even
    one that began after it went on the wire. Not so when the replica answered within
    the age, or when the primary was alone there."""
    age = SILENT * 0.030
    registry = new_registry()
    primary = sent(registry, A, 0.0)
    end(registry, sent(registry, B, 0.003, 9), 0.013)  # b answers in a's silence
    assert not registry.waited_in_silence(primary, age, 0.040, P)  # alone: a sample
    other = sent(registry, A, 0.020, 2)
    assert not registry.waited_in_silence(primary, age, 0.031, P)  # 11 ms: not yet
    assert registry.waited_in_silence(primary, age, 0.033, P)  # 13 ms unanswered
    assert not registry.waited_in_silence(primary, age, 0.033, (A, C))  # c: no answer
    end(registry, other, 0.035)  # the replica answers: not frozen
    assert not registry.waited_in_silence(primary, age, 0.040, P)
    registry = new_registry()
    primary = sent(registry, A, 0.0)
    end(registry, sent(registry, B, 0.001, 2), 0.011)
    end(registry, sent(registry, A, 0.002, 3), 0.030, CANCELLED)  # a hush since 0.002
    assert registry.waited_in_silence(primary, age, 0.040, P)  # ... remembered
    registry = new_registry()  # a freeze that begins while the primary is on the wire
    primary = sent(registry, A, 0.0)
    end(registry, sent(registry, A, 0.001, 2), 0.005)  # a answers: alive until 0.005
    held = sent(registry, A, 0.006, 3)  # ... then holds this one, and the primary
    end(registry, sent(registry, B, 0.007, 9), 0.017)  # b answers in a's silence
    assert registry.waited_in_silence(primary, age, 0.040, P)  # silent since 0.005
    end(registry, held, 0.035)  # an answer within the last 12 ms: no freeze at 0.040
    assert not registry.waited_in_silence(primary, age, 0.040, P)


def test_two_silent_attempts_leave_a_primary_out_of_the_samples() -> None:
    """A primary ending on a replica silent for EARLY of the delay, with another attempt
    as old, while a peer answers, is stalled by that evidence; with no peer answering
    (our own slowdown), it is not."""
    delay = 0.030
    age = EARLY * delay
    registry = new_registry()
    primary = sent(registry, A, 0.0)
    sent(registry, A, 0.001, 2)
    assert not registry.stalled_besides(primary, delay, age + 0.002, [A, B, C])
    end(registry, sent(registry, C, 0.002, 3), 0.010)
    assert not registry.stalled_besides(primary, delay, age + 0.002)  # peers unknown
    assert registry.stalled_besides(primary, delay, age + 0.002, [A, B, C])


def test_the_early_stall_comes_after_the_silence_that_steers() -> None:
    """The fractions of the delay are ordered: steer first, then stall early."""
    assert 0.0 < SILENT < EARLY < 1.0


def _choice() -> tuple[Choice, Service]:
    """A Choice over a, b, c with FirstReplica (the first replica not excluded)."""
    replicas = [("http", r[7:], 80) for r in (A, B, C)]
    return new_registry(), Service(("http", "svc", 80), replicas)


def test_a_silent_replica_gets_no_new_primary_and_no_backup() -> None:
    """Silent for SILENT of the delay while a peer answers: primaries and backups go
    elsewhere, before the replica counts as stalled; the primary already there keeps
    waiting for its own hedge delay (one slow attempt is not a stall)."""
    choice, svc = _choice()
    delay = 0.050
    woken: list[int] = []
    stuck = sent(choice, A, 0.0)
    stuck.on_stall = lambda: woken.append(1)
    end(choice, sent(choice, B, 0.001, 2), 0.011)
    assert svc.replicas == (A, B, C)
    assert choice.primary(svc, "http://svc", delay, 0.019) == A  # silent 19 ms of 20
    assert choice.primary(svc, "http://svc", delay, 0.021) == B
    on_c = [new_attempt(1, "primary", C, 0.0)]
    assert choice.backup(svc, "http://svc", on_c, delay, 0.021) == B  # not a
    assert woken == []


def test_when_every_replica_is_silent_the_selector_chooses_freely() -> None:
    """Silent replicas are only passed over while another replica may take the attempt."""
    choice, svc = _choice()
    for number, replica in enumerate((A, B, C), 1):
        sent(choice, replica, 0.0, number)
    assert choice.primary(svc, "http://svc", 0.050, 0.100) == A


def test_two_silent_attempts_stall_a_replica_early() -> None:
    """Two attempts silent for EARLY of the delay while a peer answers: the replica is
    stalled now, and the primaries waiting there get their backups at once."""
    choice, svc = _choice()
    delay = 0.100
    woken: list[int] = []
    for number in (1, 2):
        attempt = sent(choice, A, 0.001 * number, number)
        attempt.on_stall = lambda n=number: woken.append(n)
    end(choice, sent(choice, B, 0.003, 3), 0.013)
    early = EARLY * delay  # both attempts must be that old
    assert choice.primary(svc, "http://svc", delay, 0.002 + early - 0.001) == B  # silent
    assert woken == []
    assert choice.primary(svc, "http://svc", delay, 0.002 + early + 0.001) == B
    assert woken == [1, 2]


def test_ended_books_the_result_and_says_whether_the_primary_was_held() -> None:
    """Choice.ended, the race's one call when an attempt ends: the result its selector
    hears, and whether a primary was held by its replica (here stalled by an older
    attempt of another request); a backup, or a request that knows already, is not
    looked at."""
    delay = 0.030
    registry = new_registry()
    sent(registry, A, 0.0, 5)  # another request's attempt, stuck on a
    primary = sent(registry, A, 0.001)
    winner = sent(registry, B, 0.031, 2)
    end(registry, winner, 0.040)
    primary.ended, primary.state = 0.040, CANCELLED
    assert registry.ended(primary, (A, B, C), delay, winner) == ("outpaced", True)
    backup = sent(registry, A, 0.041, 2)
    backup.ended, backup.state = 0.042, CANCELLED
    assert registry.ended(backup, (A, B, C), delay, None) == ("cancelled", False)
    known = sent(registry, A, 0.043)
    known.ended, known.state = 0.080, CANCELLED
    assert registry.ended(known, (A, B, C), delay, None, stalled=True) == ("cancelled", False)


def test_a_primary_left_alone_on_its_replica_is_held_by_its_silence_beside_another() -> None:
    """A primary held silent beside another attempt that its replica answered late, then
    ending alone on that replica, was held (a stall over) when that span reached EARLY
    of the delay, else not: what the stalled and silent look-ups say of it, read at once
    when no other attempt, pause or hush is on its replica."""
    delay = 0.030
    for answered_at, held in ((0.001 + EARLY * delay + 0.002, True), (0.002, False)):
        registry = new_registry()
        primary = sent(registry, A, 0.0)
        end(registry, sent(registry, B, 0.0012, 3), 0.0018)  # b answers in a's silence
        end(registry, sent(registry, A, 0.001, 2), answered_at)  # held it beside, silent
        primary.ended, primary.state = answered_at + 0.001, HEADERS
        primary.response = httpx.Response(200)
        alone = registry.stalled_besides(primary, delay, primary.ended, (A, B, C))
        assert alone is held
        assert registry.ended(primary, (A, B, C), delay, primary) == ("ok", held)


def test_a_queued_attempt_joins_its_replica_when_it_leaves_the_queue() -> None:
    """Issue 25: over a pool that reports its queue, an attempt starts queued: no look-up
    reads it and no stall wakes it; on the wire it joins its replica's attempts and is
    measured from there; one that ends in the queue leaves nothing behind."""
    registry = Choice(
        FirstReplica(), zone=None, backup_zone="any", non_fatal={502, 503, 504}, queues=True
    )
    woken: list[int] = []
    waiting = sent(registry, A, 0.0)  # started queued
    waiting.on_wire = math.nan
    waiting.on_stall = lambda: woken.append(1)
    old = sent(registry, A, 0.0, 2)
    registry.on_wire(old)  # on the wire since 0.0
    assert registry.stalled([A], 0.030, 0.031) == {A}
    registry.hedge_now({A})
    assert woken == []  # not on the stalled replica yet
    waiting.on_wire = 0.5
    registry.on_wire(waiting)
    end(registry, old, 0.5, CANCELLED)
    assert registry.stalled([A], 0.030, 0.530) == set()  # 30 ms on the wire: not yet
    assert registry.stalled([A], 0.030, 0.531) == {A}
    registry.hedge_now({A})
    assert woken == [1]
    never = sent(registry, B, 0.6, 3)
    never.on_wire = math.nan
    end(registry, never, 0.7, CANCELLED)  # cancelled in the queue
    assert registry.oldest(B, 0.8) == 0.0  # nothing of it on b
    assert registry.oldest(A, 0.8) == pytest.approx(0.3)  # the one on the wire since 0.5
