"""What a choice avoids, and in which order: stalled and silent replicas, other zones,
replicas already tried.

Server-owned slowness is correlated in time: a replica paused for garbage collection
is slow for everything it holds for the length of the pause (Dean & Barroso, "The
Tail at Scale", CACM 56(2), 2013). Its attempts in flight then age together while
it answers nothing. A replica is **stalled** at ``now`` for a request whose hedge
delay is ``age`` when

- one of its attempts in flight has been on the wire for longer than ``age``, and
- it has answered nothing (response headers of any status) for longer than ``age``.

The second condition keeps one slow request (request-owned slowness) on a replica
that goes on answering others from marking it stalled. A stalled replica gets no new
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
primaries away from a healthy replica. When the replica answered another attempt
after this one was sent, the hush runs from that answer (a freeze that began later
held the attempt all the same; without this it left none, and new primaries walked
into the rest of the freeze); such a hush steers, and counts for leaving samples out,
but is not one of the two attempts that make a replica stalled now: that spends
backups, and the attempt was not shown held from its start. An attempt still queued
for one of the client's own pool connections (``on_wire`` NaN) is not on the replica
yet and never makes it stalled: once the wire reports that queue (``Choice.on_wire``),
an attempt joins its replica's attempts only as it leaves the queue, after those
already there, and the selector counts it in flight meanwhile without ageing it. So a
look-up reads the attempts on the wire however many wait in the queue, and the queue's
wait is not taken for the replica's (issue 25: 10,000 queued behind a 4-connection pool
were read by every look-up; and aged from their start, the youngest replica won every
draw it was in for a millisecond at a time, sending long runs of one replica into the
queue, on which httpcore's pool closes and reopens connections, scanning its whole
queue each time).

A freeze ends in a burst of answers, each a moment after the one before: judged at
its own end, a primary answered late in the burst looks as if its replica had just
answered. So each answer also marks the attempts still in flight on its replica with
the silence they spent beside the one answered (:func:`held_beside`); a primary
marked for :data:`EARLY` of its delay was held by a stall already over, and is left
out of the delay's samples too (issue 24: this and the hush's start brought the stall
benchmark's lab law to its target in every seed).

**A sample is left out only on a peer's word.** Each rule that leaves a primary's
latency out of the delay's samples (two attempts stalled, a silence that held it beside
another or a hush, the span it was held beside an answer) also needs another replica of
the service to have answered an attempt sent after the silence began. A freeze stops
one replica while its peers answer; a service slower than the hedge delay (a client
still at its initial delay, a broad slowdown) keeps every replica that quiet, and its
latencies are what the delay must learn (issue 24: with a 250 ms service under the
100 ms initial delay, 98 % of the samples were left out and the delay never left its
warm-up). Steering away from a stalled replica and the early backups below do without
it: they cost a backup, not what the delay knows.

**The one cross-request effect.** The primaries already in flight on a replica that
a choice for *another* request finds stalled get their backups at once, not at their
own hedge delay (they would wait out the pause): ``Choice.begin_primary`` calls their
:data:`~hedgeclient._attempt.EarlyHedge` callbacks (``Choice.hedge_now``),
synchronously, before it returns.

The attempts in flight and the look-ups of this evidence are the choice's
(``_replicas.choice``, which owns them so that one choice reads one module and the
selector's). This module says what is avoided, in tiers, strongest preference first;
the choice asks the :class:`~hedgeclient.ReplicaSelector` with each tier's exclusion
in turn, and with less when that leaves nothing (a tier is listed only when it
excludes more than the next):

- primary: silent and stalled replicas and, when the caller gave its zone, replicas
  of other zones; then silent and stalled replicas; then stalled replicas; then
  nothing;
- backup: replicas the request already tried, silent and stalled replicas and, with
  ``backup_zone="other"``, replicas in the primary's zone; then tried, silent and
  stalled; then tried and stalled; then tried; and only when every replica was tried,
  the ones with an attempt of the request still in flight (the choice's last resort).

A backup never goes to a replica with an attempt of the same request in flight: it
would share its slowness and buy nothing (docs/how-it-works.md). The one exception
is a service with a single address (one replica, or an origin that is not
configured): its backup goes to that address over another connection
(:attr:`Attempt.lane`), which an L4 load balancer may place on another backend.

With :class:`~hedgeclient.PowerOfTwoChoices`, an answer that is an ejected replica
(it returns one only when every candidate it was offered is ejected) also moves on
to the next tier: a stalled or remote replica beats an ejected one; an ejected
replica not yet tried beats trying one again.

The tiers are built only when a replica is silent or stalled, or zones are in play;
otherwise a primary excludes nothing and a backup only the replicas its request tried.

Strictly private.
"""

from __future__ import annotations

from collections.abc import Collection, Set
from typing import TYPE_CHECKING, Final, Literal

from hedgeclient._replicas.services import Service

if TYPE_CHECKING:
    from hedgeclient._attempt import Attempt

__all__ = ["EARLY", "SILENT", "BackupZone", "backup_tiers", "held_beside", "primary_tiers"]

BackupZone = Literal["other", "any"]
"""Where backups go by zone: ``other`` prefers a zone other than the primary's."""

SILENT: Final = 0.4
"""Of the hedge delay: a replica silent that long while its peers answer gets no new
attempt while another replica may take it."""
EARLY: Final = 0.85
"""Of the hedge delay: a replica silent that long while its peers answer, with two
attempts that old, is stalled now, and a primary ending there is left out of the
delay's samples."""


def primary_tiers(
    service: Service, zone: str | None, stalled: Set[str], silent: Set[str]
) -> list[Collection[str]]:
    """The exclusions for a primary attempt, strongest first (see the module doc).

    Args:
        service: the request's service.
        zone: the caller's zone, or ``None``.
        stalled: its replicas stalled now.
        silent: its replicas silent now (the stalled ones included).
    """
    replicas = service.replicas
    tiers: list[Collection[str]] = []
    if zone is not None and service.zones:
        local = {r for r in replicas if service.zones.get(r) == zone}
        if local and len(local) < len(replicas):
            tiers.append(silent | {r for r in replicas if r not in local})
    if silent:
        tiers.append(silent)
    if stalled and stalled != silent:
        tiers.append(stalled)
    tiers.append(())
    return tiers


def backup_tiers(
    service: Service,
    primary: str,
    tried: set[str],
    stalled: Set[str],
    silent: Set[str],
    *,
    other_zone: bool,
) -> list[Collection[str]]:
    """The exclusions for a backup request, strongest first (see the module doc); the
    last resort (replicas whose attempt has ended) is the caller's.

    Args:
        service: the request's service.
        primary: the replica of the request's primary attempt.
        tried: the replicas the request already sent an attempt to.
        stalled: its replicas stalled now.
        silent: its replicas silent now (the stalled ones included).
        other_zone: backups prefer a zone other than the primary's.
    """
    tiers: list[Collection[str]] = []
    if other_zone and service.zones:
        zone = service.zones.get(primary)
        if zone is not None:
            same = {r for r in service.replicas if service.zones.get(r) == zone}
            tiers.append(tried | silent | same)
    if silent - tried:
        tiers.append(tried | silent)
    if stalled - tried and stalled != silent:
        tiers.append(tried | stalled)
    tiers.append(tried)
    return tiers


def held_beside(attempts: dict[Attempt, float], since: float, now: float) -> None:
    """A replica answers at ``now`` an attempt it held silent since ``since`` (its
    going on the wire, or the replica's answer before, if later): raise each of
    ``attempts``, the others in flight there, to the seconds it spent beside that one
    in the silence, from when both were on the wire (see the module doc).

    Args:
        attempts: the replica's other attempts in flight, each with the longest such
            span seen so far (seconds ≥ 0); updated in place.
        since: when the answered attempt's silence began (the loop's clock, seconds).
        now: when it was answered (same clock).
    """
    for other, held in attempts.items():
        wire = other.on_wire
        if wire < now:  # NaN (still in our own pool queue): never held by the replica
            beside = now - (wire if wire > since else since)
            if beside > held:
                attempts[other] = beside
