"""Attempts in flight per replica, oldest first: which replicas are stalled *now*.

Server-owned slowness is correlated in time: a replica paused for garbage collection
is slow for everything it holds for the length of the pause (Dean & Barroso, "The
Tail at Scale", CACM 56(2), 2013). Its attempts in flight then age together while
it answers nothing. A replica is **stalled** at ``now`` for a request whose hedge
delay is ``age`` when

- one of its attempts in flight has been on the wire for longer than ``age``, and
- it has answered nothing (response headers of any status) for longer than ``age``.

The primaries already in flight on a replica found stalled get their backups at once
(:meth:`InFlight.hedge_now`), not at their own hedge delay: they would wait out the
pause. The second condition keeps one slow request (request-owned slowness) on a replica that
goes on answering others from marking it stalled. A stalled replica gets no new
primary (and no backup while another is free): the request would wait out its hedge
delay there. The count of attempts in flight alone cannot say this: a replica with
one attempt stuck for 80 ms looks less loaded than one with two that are 2 ms old.

Those rules wait a whole hedge delay. Earlier evidence is *relative*: a replica is
**silent** when it has had an attempt on the wire and no answer for a while, and
another replica of the service answered an attempt sent after that silence began (a
peer made a whole round trip meanwhile). A client that is slow itself (a saturated
event loop, a burst on a small pool) slows every replica at once, so it makes none
silent. A replica silent for :data:`SILENT` of the hedge delay gets no new attempt
while another may take it (free: no request is sent for it). One silent for
:data:`EARLY` of the delay with two attempts as old is stalled now, and a primary
ending there is left out of the delay's samples. An attempt cancelled in silence (the
loser of a race) while its replica holds another attempt sent since its last answer
leaves a *hush*: the replica counts as silent since that attempt was sent, for as
long again as it waited, or until it answers, as it may have no attempt left to show
it. One slow attempt alone leaves none: request-owned slowness must not steer
primaries away from a healthy replica.

Attempts are kept in the order they were sent, which is the order of their
``started`` instants, so a look-up stops at the first attempt sent less than ``age``
ago: it reads only the attempts that are already old. An attempt still queued for one
of the client's own pool connections (``on_wire`` NaN) is not on the replica yet and
never makes it stalled.

Strictly private.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import final

from hedgeclient._attempt import CANCELLED, HEADERS, Attempt

__all__ = ["EARLY", "SILENT", "InFlight"]

SILENT = 0.4
"""Of the hedge delay: a replica silent that long while its peers answer gets no new
attempt while another replica may take it."""
EARLY = 0.85
"""Of the hedge delay: a replica silent that long while its peers answer, with two
attempts that old, is stalled now, and a primary ending there is left out of the
delay's samples."""


@final
class InFlight:
    """The attempts in flight of one transport, by replica. Strictly private."""

    __slots__ = ("_answered", "_by_replica", "_fresh", "_paused", "_quiet")

    def __init__(self) -> None:
        self._by_replica: dict[str, dict[Attempt, None]] = {}  # insertion-ordered sets
        self._answered: dict[str, float] = {}  # replica -> when it last gave headers
        self._paused: set[str] = set()  # seen stalled by two attempts, silent since
        self._fresh: dict[str, float] = {}  # replica -> latest on_wire it has answered
        self._quiet: dict[str, tuple[float, float]] = {}  # replica -> (silent since, until)

    def add(self, attempt: Attempt) -> None:
        """``attempt`` was sent."""
        attempts = self._by_replica.get(attempt.replica)
        if attempts is None:
            attempts = self._by_replica[attempt.replica] = {}
        attempts[attempt] = None

    def discard(self, attempt: Attempt) -> None:
        """``attempt`` ended (its state and ``ended`` set); a response counts as an answer."""
        replica = attempt.replica
        attempts = self._by_replica.get(replica)
        if attempts is not None:
            attempts.pop(attempt, None)
            if not attempts:
                del self._by_replica[replica]
        if attempt.state == HEADERS:
            self._answered[replica] = max(attempt.ended, self._answered.get(replica, -math.inf))
            if attempt.on_wire > self._fresh.get(replica, -math.inf):  # NaN: never
                self._fresh[replica] = attempt.on_wire
            self._paused.discard(replica)
            self._quiet.pop(replica, None)
        elif attempt.state == CANCELLED:
            self._hush(replica, attempt.on_wire, attempt.ended)

    def _hush(self, replica: str, wire: float, ended: float) -> None:
        """An attempt on ``replica``, on the wire since ``wire``, was cancelled at
        ``ended``: if the replica said nothing meanwhile, while it holds another attempt
        sent since it last answered (or a hush already) or a peer answered an attempt
        sent after ``wire``, that silence outlives the attempt, for as long again: its
        replica may have no attempt left to show it, and new primaries must not walk
        into the rest of a freeze (issue 24: without this memory 3.7-4.3 % of requests
        were primaries sent into one). A lone slow request on a healthy replica costs a
        hush as long as it waited, ended by the replica's next answer."""
        answered = self._answered.get(replica, -math.inf)
        if not answered < wire < ended:  # NaN: never
            return
        ghost = self._quiet.get(replica)
        if ghost is not None and ended < ghost[1]:
            wire = min(wire, ghost[0])
        elif not any(a.on_wire > answered for a in self._by_replica.get(replica, ())) and not any(
            seen > wire for peer, seen in self._fresh.items() if peer != replica
        ):
            return  # alone, and no peer answered meanwhile: our own slowness, not its
        self._quiet[replica] = (wire, 2 * ended - wire)

    def stalled(self, replicas: Sequence[str], age: float, now: float) -> set[str]:
        """The replicas among ``replicas`` stalled at ``now`` for a hedge delay ``age``."""
        if not self._by_replica:
            return set()
        return {r for r in replicas if self._stalled(r, now - age, None)}

    def silent(
        self, replicas: Sequence[str], age: float, now: float, *, two: bool = False
    ) -> set[str]:
        """The replicas among ``replicas`` silent while their peers answer, at ``now``.

        A replica is silent when it has had an attempt on the wire, and no answer,
        for longer than ``age``, while another of ``replicas`` answered an attempt
        that went on the wire after that silence began: a peer made a whole round
        trip while this replica made none. A client that is itself slow (a saturated
        event loop, a burst) slows every replica at once, so none is silent relative
        to the others. An attempt cancelled in silence still counts (a *hush*, see
        :meth:`_hush`). With ``two``, two attempts (or one and a hush) must have been on
        the wire for longer than ``age``: one slow request is not enough.
        """
        if not self._by_replica and not self._quiet:
            return set()
        return {r for r in replicas if self._silent(r, replicas, now - age, now, two)}

    def _silent(
        self, replica: str, replicas: Sequence[str], horizon: float, now: float, two: bool
    ) -> bool:
        """:meth:`silent` for one replica, with a silence that began before ``horizon``."""
        wires = []
        for attempt in self._by_replica.get(replica, ()):  # in the order sent
            if attempt.started >= horizon:
                break  # this one and every later one went on the wire after the horizon
            if attempt.on_wire < horizon:  # NaN: our own queue
                wires.append(attempt.on_wire)
        ghost = self._quiet.get(replica)
        if ghost is not None and now < ghost[1] and ghost[0] < horizon:
            wires.append(ghost[0])
        if len(wires) < 1 + two:  # NaN (our own queue) is never on the wire
            return False
        since = max(min(wires), self._answered.get(replica, -math.inf))
        fresh = self._fresh
        return since < horizon and any(
            fresh.get(r, -math.inf) > since for r in replicas if r != replica
        )

    def stalled_besides(
        self, attempt: Attempt, age: float, now: float, replicas: Sequence[str] = ()
    ) -> bool:
        """Whether ``attempt``'s replica is stalled at ``now`` by the evidence of its other
        attempts: another one older than ``age``, and no answer for ``age``; or it was
        seen so before and has answered nothing since (the last of a stalled group).

        A slow attempt alone never makes its replica stalled here: a slow request and a
        paused replica look the same from one attempt.
        """
        replica = attempt.replica
        if replica in self._paused:
            return True
        horizon = now - EARLY * age
        if self._stalled(replica, now - age, attempt) or (
            attempt.on_wire < horizon  # the cheap test first (NaN: our own queue)
            and self._silent(replica, replicas, horizon, now, two=True)
        ):
            self._paused.add(replica)
            return True
        return False

    def waited_in_silence(self, attempt: Attempt, age: float, now: float) -> bool:
        """Whether ``attempt`` ends (at ``now``) in a silence of its replica that held it
        and another attempt (or a hush) for longer than ``age``: the replica answered
        nothing since ``now - age`` or before, while both were on the wire through it.
        A freeze holds every attempt on its replica, the ones already there when it
        began included; a slow request on a healthy replica holds only itself, and the
        replica's other attempts are answered meanwhile.

        A lone attempt with no other on its replica never passes: it stays a sample (at
        one request in flight it may be the only evidence of the route's tail, and
        leaving such out would pull the delay down).
        """
        replica = attempt.replica
        horizon = now - age
        answered = self._answered.get(replica, -math.inf)
        if not (answered < horizon and attempt.on_wire < horizon):  # NaN: never
            return False
        for other in self._by_replica.get(replica, ()):  # in the order sent
            if other.started >= horizon:
                break
            if other is not attempt and other.on_wire < horizon:  # NaN: our own queue
                return True
        ghost = self._quiet.get(replica)
        return ghost is not None and now < ghost[1] and ghost[0] < horizon

    def _stalled(self, replica: str, horizon: float, besides: Attempt | None) -> bool:
        attempts = self._by_replica.get(replica)
        if not attempts or self._answered.get(replica, -math.inf) >= horizon:
            return False
        for attempt in attempts:
            if attempt.started >= horizon:
                return False  # this one and every later one are younger than the horizon
            if attempt.on_wire < horizon and attempt is not besides:  # NaN: our own queue
                return True
        return False

    def hedge_now(self, replicas: set[str]) -> None:
        """Start the backups of the primaries in flight on ``replicas`` (stalled) now,
        rather than at their hedge delay: they wait for the end of the pause otherwise.
        Each primary is woken at most once."""
        due = []
        for replica in replicas:
            for attempt in self._by_replica.get(replica, ()):
                callback = attempt.on_stall
                if callback is not None:
                    attempt.on_stall = None
                    due.append(callback)
        for callback in due:  # after the loop: a backup adds attempts
            callback()

    def answered_since(self, replica: str, instant: float) -> bool:
        """Whether ``replica`` gave response headers to any attempt after ``instant``."""
        return self._answered.get(replica, -math.inf) > instant

    def oldest(self, replica: str, now: float) -> float:
        """Seconds on the wire of ``replica``'s oldest attempt in flight (0.0 if none)."""
        ages = [now - a.on_wire for a in self._by_replica.get(replica, ()) if a.on_wire <= now]
        return max(ages, default=0.0)

    def forget(self, replica: str) -> None:
        """``replica`` left: drop when it last answered (attempts in flight stay)."""
        self._answered.pop(replica, None)
        self._fresh.pop(replica, None)
        self._quiet.pop(replica, None)
        self._paused.discard(replica)
