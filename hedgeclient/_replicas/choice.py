"""Where each attempt goes: the race's calls, and the attempts in flight they read.

:meth:`Choice.begin_primary` (chosen and booked), :meth:`Choice.backup` then
:meth:`Choice.started` (a veto may come between), :meth:`Choice.ended` (here and with the
selector). The :class:`~hedgeclient.ReplicaSelector` makes each choice;
``_replicas.avoidance`` says what it avoids, and when a replica is stalled or silent, on
the evidence kept here: the attempts on the wire per replica in the order sent, each
with the silence it spent beside an answered one (one in our own pool queue joins as it
leaves it, :meth:`Choice.on_wire`). Ejections are the selector's (``_replicas.health``);
the one effect of a request on others is :meth:`Choice.hedge_now`. Strictly private.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence, Set
from typing import Final, final

import httpx

from hedgeclient._attempt import CANCELLED, CONNECT_ERRORS, HEADERS, PENDING, Attempt
from hedgeclient._replicas.avoidance import EARLY, SILENT, BackupZone, backup_tiers, primary_tiers
from hedgeclient._replicas.avoidance import held_beside as _held_beside
from hedgeclient._replicas.selector import (
    AttemptResult,
    PowerOfTwoChoices,
    ReplicaSelector,
    not_a_replica,
)
from hedgeclient._replicas.services import Service

__all__ = ["BackupZone", "Choice"]

_NO_EXCLUSION: tuple[Collection[str]] = ((),)  # one tier that excludes nothing
_NONE: Final[frozenset[str]] = frozenset()


@final
class Choice:
    """Chooses the replica of each attempt of one transport, and keeps its attempts in
    flight by replica (see the module doc). Strictly private. With the transport's
    ``selector``; ``zone``, the caller's (primaries prefer it) or None; ``backup_zone``
    ``other`` (backups prefer another zone than the primary's) or ``any``;
    ``non_fatal``, its statuses that make headers an ``unhealthy_status``; ``queues``:
    its pool reports when an attempt leaves its queue (:meth:`on_wire`)."""

    __slots__ = (
        "_answered", "_by_replica", "_fresh", "_non_fatal", "_ours", "_paused", "_queues",
        "_quiet", "backup_zone", "selector", "zone",
    )  # fmt: skip

    def __init__(
        self,
        selector: ReplicaSelector,
        *,
        zone: str | None,
        backup_zone: BackupZone,
        non_fatal: Collection[int],
        queues: bool = False,
    ) -> None:
        self.selector = selector
        self.zone = zone
        self.backup_zone = backup_zone
        self._non_fatal = non_fatal
        self._ours = selector if isinstance(selector, PowerOfTwoChoices) else None
        self._by_replica: dict[str, dict[Attempt, float]] = {}  # in the order sent: held_beside
        self._answered: dict[str, float] = {}  # replica -> when it last gave headers
        self._paused: set[str] = set()  # seen stalled by two attempts, silent since
        self._fresh: dict[str, float] = {}  # replica -> latest on_wire it has answered
        self._quiet: dict[str, tuple[float, float, bool]] = {}  # replica -> (since, until, late)
        self._queues = queues  # attempts start in the client's own pool queue

    # -- the race's calls ---------------------------------------------------------------

    def begin_primary(self, attempt: Attempt, service: Service | None, delay: float | None) -> None:
        """Choose the primary ``attempt``'s replica (an unconfigured origin's stays) and
        book it as sent: one call of the default selector in the usual case. Finding a
        replica stalled wakes the primaries of other requests waiting there
        (:meth:`hedge_now`, before this returns: the cross-request effect). Raises
        ValueError: the selector chose a replica it was not given."""
        if service is None:
            return
        replicas, now, ours = service.replicas, attempt.started, self._ours
        stalled, silent = self._avoid(replicas, delay, now)
        if ours is not None and not silent and (self.zone is None or not service.zones):
            chosen = ours._choose_started(replicas, now, self._queues)
            replica = attempt.replica = replicas[0] if chosen is None else chosen
            if not self._queues:
                self._by_replica.setdefault(replica, {})[attempt] = 0.0
            return
        attempt.replica = self.primary(service, attempt.replica, delay, now, (stalled, silent))
        self.started(attempt)

    def primary(
        self, service: Service | None, origin: str, delay: float | None, now: float,
        avoid: tuple[Set[str], Set[str]] | None = None,
    ) -> str:  # fmt: skip
        """The replica a primary attempt goes to now, not booked (``origin`` itself for
        an unconfigured origin); ``avoid``: :meth:`_avoid`'s answer, if asked already.
        Raises ValueError: the selector chose a replica it was not given."""
        if service is None:
            return origin
        replicas = service.replicas
        stalled, silent = self._avoid(replicas, delay, now) if avoid is None else avoid
        if not silent and (self.zone is None or not service.zones):  # the usual case
            chosen = self._ask(replicas, _NO_EXCLUSION, now)
            return replicas[0] if chosen is None else chosen
        if stalled:
            self.hedge_now(stalled, delay)  # the cross-request effect
        chosen = self._ask(replicas, primary_tiers(service, self.zone, stalled, silent), now)
        return replicas[0] if chosen is None else chosen

    def started(self, attempt: Attempt) -> None:
        """``attempt`` is sent (the selector first: one that raises leaves no trace)."""
        replica, ours = attempt.replica, self._ours
        if ours is None:
            self.selector.attempt_started(replica)
        elif self._queues:
            ours.attempt_queued(replica)  # in flight, not ageing yet
        else:
            ours._started(replica, attempt.started)  # its own send time: no clock read
        if not self._queues:
            self._by_replica.setdefault(replica, {})[attempt] = 0.0

    def on_wire(self, attempt: Attempt) -> None:
        """The wire says ``attempt`` left the client's own pool queue (module doc)."""
        self._by_replica.setdefault(attempt.replica, {})[attempt] = 0.0
        if self._ours is not None:
            self._ours.attempt_on_wire(attempt.replica)

    def backup(
        self, service: Service | None, origin: str, attempts: Sequence[Attempt],
        delay: float | None, now: float,
    ) -> str | None:  # fmt: skip
        """A replica for the next backup (``_replicas.avoidance``), or ``None`` when every
        replica has an attempt of the request in flight. Raises ValueError: the selector
        chose a replica it was not given."""
        if service is None:  # an unconfigured origin: the same origin again
            return origin
        replicas = service.replicas
        if len(replicas) == 1:  # one address: the same one, over another connection
            return replicas[0]
        tried = {a.replica for a in attempts}
        stalled, silent = self._avoid(replicas, delay, now)
        other_zone = self.backup_zone == "other"
        if silent - tried or (other_zone and service.zones):  # silent: stalled included
            primary = attempts[0].replica
            tiers = backup_tiers(service, primary, tried, stalled, silent, other_zone=other_zone)
        else:  # the usual case: any replica not tried (the primary's may be stalled)
            tiers = [tried]
        chosen = self._ask(replicas, tiers, now)
        if chosen is None:  # every replica tried: one whose attempt has ended
            busy = {a.replica for a in attempts if a.state == PENDING}
            if busy != tried:
                chosen = self._ask(replicas, [busy], now)
        return chosen

    def ended(
        self, attempt: Attempt, replicas: Sequence[str], delay: float | None,
        winner: Attempt | None, *, stalled: bool = False,
    ) -> tuple[AttemptResult, bool]:  # fmt: skip
        """Book ``attempt``'s end (``state`` and ``ended`` set; ``replicas``: its peers
        now; ``delay``: the request's hedge delay, seconds, or ``None``; ``winner``: the
        request's so far; ``stalled``: its primary's replica is known stalled): it leaves
        the attempts in flight, the selector hears what it says of its replica. Return
        its :data:`~hedgeclient.AttemptResult`, and whether it is a primary its replica
        held (:meth:`stalled_besides`, or :meth:`waited_in_silence` for ``SILENT`` of
        the delay): its latency is the pause's, not the route's."""
        result, held = self._verdict(attempt, delay, winner), False
        attempts = self._by_replica.get(replica := attempt.replica)
        if attempt.number == 1 and delay is not None and not stalled:  # before it leaves
            paused = replica in self._paused or replica in self._quiet  # or hushed
            if not paused and attempts is not None and len(attempts) == 1 and attempt in attempts:
                held = attempts[attempt] >= EARLY * delay  # alone: all the calls below read
            else:
                held = self.stalled_besides(attempt, delay, attempt.ended, replicas)
                held = held or self.waited_in_silence(
                    attempt, SILENT * delay, attempt.ended, replicas
                )
        if attempts is not None and attempts.pop(attempt, None) is not None:  # it was on the wire
            if not attempts:
                del self._by_replica[replica]
        elif self._ours is not None:  # it ended in the client's own pool queue
            self._ours.attempt_on_wire(replica)  # (its count goes, not its age)
        if attempt.state == HEADERS:  # an answer, after a silence that held the rest
            answered = self._answered.get(replica, -math.inf)
            since = max(attempt.on_wire, answered)
            if attempts and self._peer_answered(replica, replicas, since):
                _held_beside(attempts, since, attempt.ended)
            self._answered[replica] = max(attempt.ended, answered)
            if attempt.on_wire > self._fresh.get(replica, -math.inf):  # NaN: never
                self._fresh[replica] = attempt.on_wire
            self._paused.discard(replica)
            self._quiet.pop(replica, None)
        elif attempt.state == CANCELLED:  # it may leave a hush
            self._hush(replica, attempt.on_wire, attempt.ended)
        self.selector.attempt_finished(replica, result=result)
        return result, held

    # -- the choice ---------------------------------------------------------------------

    def _avoid(
        self, replicas: Sequence[str], delay: float | None, now: float
    ) -> tuple[Set[str], Set[str]]:
        """The replicas stalled now, and those silent while their peers answer for
        :data:`SILENT` of ``delay`` (a superset); none without a delay."""
        if delay is None or not (self._by_replica or self._quiet):
            return _NONE, _NONE  # nothing in flight, nothing remembered: none
        stalled = self.stalled(replicas, delay, now)
        silent = self.silent(replicas, SILENT * delay, now)
        if silent:  # silent for EARLY of the delay with two attempts: stalled now
            stalled |= self.silent(replicas, EARLY * delay, now, two=True)
        return stalled, silent | stalled

    def _ask(
        self, replicas: Sequence[str], tiers: Sequence[Collection[str]], now: float
    ) -> str | None:
        """Ask the selector with each exclusion in turn; the first answer that is not
        an ejected replica, else the first answer."""
        fallback: str | None = None
        ours = self._ours
        for exclude in tiers:
            if ours is not None:  # one call says whether the answer is ejected
                chosen, ejected = ours._choose_checked(replicas, exclude, now)
            else:
                chosen, ejected = self.selector.choose(replicas, exclude), False
            if chosen is None:
                continue
            if chosen not in replicas:
                raise not_a_replica(self.selector, chosen, replicas)
            if not ejected:
                return chosen
            fallback = chosen if fallback is None else fallback
        return fallback

    def _verdict(
        self, attempt: Attempt, delay: float | None, winner: Attempt | None
    ) -> AttemptResult:
        """What ``attempt`` says of its replica's health (:data:`AttemptResult`)."""
        if attempt.dropped:  # it did no work: says nothing of the replica's health
            return "cancelled"
        if attempt.state == HEADERS:
            assert attempt.response is not None
            return "unhealthy_status" if attempt.response.status_code in self._non_fatal else "ok"
        error = attempt.error
        if error is None or isinstance(error, httpx.PoolTimeout):  # cancelled, or our own queue
            if delay is None:
                return "cancelled"
            if attempt.ended - attempt.connecting > delay:  # a black hole: connecting
                return "connect_stalled"
            if (  # another replica answered while this one, silent all along, waited
                winner is not None  # past the delay on the wire: slow once, or hung
                and winner.replica != attempt.replica  # when it happens every time
                and attempt.ended - attempt.on_wire > delay
                and not self._answered.get(attempt.replica, -math.inf) > attempt.on_wire
            ):
                return "outpaced"
            return "cancelled"
        return "connect_failed" if isinstance(error, CONNECT_ERRORS) else "failed"

    # -- the attempts in flight -----------------------------------------------------------

    def _hush(self, replica: str, wire: float, ended: float) -> None:
        """An attempt on ``replica`` since ``wire`` was cancelled at ``ended``, the replica
        silent since ``wire`` (or a *late* answer): a hush (``_replicas.avoidance``) if it
        holds another sent since its last answer (or a hush), or a peer answered later."""
        answered = self._answered.get(replica, -math.inf)
        if not (wire < ended and answered < ended):  # NaN: never
            return
        late, wire = answered > wire, max(wire, answered)  # silent since a later answer?
        ghost = self._quiet.get(replica)
        if ghost is not None and ended < ghost[1]:
            late, wire = late and ghost[2], min(wire, ghost[0])
        elif not any(a.on_wire > answered for a in self._by_replica.get(replica, ())) and not any(
            seen > wire for peer, seen in self._fresh.items() if peer != replica
        ):
            return  # alone, and no peer answered meanwhile: our own slowness, not its
        self._quiet[replica] = (wire, 2 * ended - wire, late)

    def stalled(self, replicas: Sequence[str], age: float, now: float) -> set[str]:
        """The replicas among ``replicas`` stalled at ``now`` for a hedge delay ``age``."""
        on, ask = self._by_replica, self._stalled  # only a replica with attempts on the wire
        return {r for r in replicas if r in on and ask(r, replicas, now - age, None, False)}

    def silent(
        self, replicas: Sequence[str], age: float, now: float, *, two: bool = False
    ) -> set[str]:
        """The replicas among ``replicas`` silent at ``now`` (``_replicas.avoidance``) for
        longer than ``age`` while a peer answered an attempt sent after the silence
        began; with ``two``, two attempts (or one and a hush) that old."""
        on, quiet, ask = self._by_replica, self._quiet, self._silent  # evidence: wire or hush
        return {
            r for r in replicas if (r in on or r in quiet) and ask(r, replicas, now - age, now, two)
        }

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
        if ghost is not None and now < ghost[1] and ghost[0] < horizon and not (two and ghost[2]):
            wires.append(ghost[0])
        if len(wires) < 1 + two:  # NaN (our own queue) is never on the wire
            return False
        since = max(min(wires), self._answered.get(replica, -math.inf))
        return since < horizon and self._peer_answered(replica, replicas, since)

    def _peer_answered(self, replica: str, replicas: Sequence[str], since: float) -> bool:
        """Whether a peer among ``replicas`` answered an attempt sent after ``since``."""
        fresh = self._fresh
        return any(fresh.get(r, -math.inf) > since for r in replicas if r != replica)

    def stalled_besides(
        self, attempt: Attempt, age: float, now: float, replicas: Sequence[str] = ()
    ) -> bool:
        """Whether ``attempt``'s replica is stalled at ``now`` by its other attempts: one
        older than ``age``, no answer for ``age``, a peer answering; or seen so before and
        silent since; or held beside another for ``EARLY`` of ``age`` (``held_beside``).
        Never by one slow attempt alone: a slow request and a pause look the same."""
        replica = attempt.replica
        if replica in self._paused:
            return True
        horizon = now - EARLY * age
        if self._stalled(replica, replicas, now - age, attempt, True) or (
            attempt.on_wire < horizon  # the cheap test first (NaN: our own queue)
            and self._silent(replica, replicas, horizon, now, two=True)
        ):
            self._paused.add(replica)
            return True
        return self._by_replica.get(replica, {}).get(attempt, 0.0) >= EARLY * age

    def waited_in_silence(
        self, attempt: Attempt, age: float, now: float, replicas: Sequence[str] = ()
    ) -> bool:
        """Whether ``attempt`` ends (at ``now``) in a silence of its replica that held it
        and another attempt (or a hush) for longer than ``age``. A freeze holds every
        attempt on its replica, a slow request only itself; a lone attempt never passes
        (at one request in flight it may be the only evidence of the route's tail),
        nor a silence no peer among ``replicas`` broke (``_replicas.avoidance``)."""
        replica = attempt.replica
        horizon = now - age
        answered = self._answered.get(replica, -math.inf)
        if not (answered < horizon and attempt.on_wire < horizon):  # NaN: never
            return False
        for other in self._by_replica.get(replica, ()):  # in the order sent
            if other.started >= horizon:
                break
            if other is not attempt and other.on_wire < horizon:  # NaN: our own queue
                since = max(min(other.on_wire, attempt.on_wire), answered)
                return self._peer_answered(replica, replicas, since)
        ghost = self._quiet.get(replica)
        if ghost is None or not (now < ghost[1] and ghost[0] < horizon):
            return False
        return self._peer_answered(replica, replicas, max(min(ghost[0], attempt.on_wire), answered))

    def _stalled(
        self, replica: str, peers: Sequence[str], horizon: float, at: Attempt | None, rel: bool
    ) -> bool:
        """An attempt on ``replica`` (not ``at``) on the wire since before ``horizon``, and
        no answer since; with ``rel``, a peer answered an attempt sent in that silence."""
        answered = self._answered.get(replica, -math.inf)
        for attempt in self._by_replica.get(replica, ()) if answered < horizon else ():
            if attempt.started >= horizon:
                return False  # this one and every later one are younger than the horizon
            if attempt.on_wire < horizon and attempt is not at:  # NaN: our own queue
                since = max(attempt.on_wire, answered)
                return not rel or self._peer_answered(replica, peers, since)
        return False

    def hedge_now(self, replicas: Set[str], age: float | None = None) -> None:
        """Start the backups of the primaries on ``replicas`` (stalled) now, for a delay
        ``age`` (a longer one's stays): each ``on_stall`` (``_attempt.EarlyHedge``) is
        cleared, then called after the scan (a backup adds attempts)."""
        due = []
        for replica in replicas:
            for attempt in self._by_replica.get(replica, ()):
                callback = attempt.on_stall
                if callback is not None and (age is None or attempt.hedge_delay <= age):
                    attempt.on_stall = None
                    due.append(callback)
        for callback in due:
            callback()

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
