"""Where each attempt goes: the primary, then backups to replicas not yet tried.

The :class:`~hedgeclient.ReplicaSelector` makes each choice; this module tells it what
to avoid, strongest preference first, and asks again with less when that leaves
nothing (each step only when it excludes more than the next):

- primary: silent and stalled replicas (``_replicas.stalls``) and, when the caller gave its
  zone, replicas of other zones; then silent and stalled replicas; then stalled
  replicas; then nothing;
- backup: replicas the request already tried, silent and stalled replicas and, with
  ``backup_zone="other"``, replicas in the primary's zone; then tried, silent and
  stalled; then tried and stalled; then tried; and only when every replica was tried,
  the ones with an attempt of the request still in flight.

A backup never goes to a replica with an attempt of the same request in flight: it
would share its slowness and buy nothing (docs/how-it-works.md). The one exception
is a service with a single address (one replica, or an origin that is not
configured): its backup goes to that address over another connection
(:attr:`Attempt.lane`), which an L4 load balancer may place on another backend.

With :class:`~hedgeclient.PowerOfTwoChoices`, an answer that is an ejected replica
(it returns one only when every candidate it was offered is ejected) also moves on
to the next step: a stalled or remote replica beats an ejected one; an ejected
replica not yet tried beats trying one again.

Strictly private.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Literal, final

from hedgeclient._attempt import PENDING, Attempt
from hedgeclient._replicas.selector import PowerOfTwoChoices, ReplicaSelector
from hedgeclient._replicas.services import Service
from hedgeclient._replicas.stalls import EARLY, SILENT, InFlight

__all__ = ["BackupZone", "Choice"]

_NO_EXCLUSION: tuple[Collection[str]] = ((),)  # one step that excludes nothing

BackupZone = Literal["other", "any"]
"""Where backups go by zone: ``other`` prefers a zone other than the primary's."""


@final
class Choice:
    """Chooses the replica of each attempt of one transport. Strictly private.

    Args:
        selector: the transport's selector.
        zone: the caller's zone, or None; primaries prefer replicas in it.
        backup_zone: ``other`` (backups prefer another zone than the primary's) or
            ``any``.
    """

    __slots__ = ("_ours", "backup_zone", "inflight", "selector", "zone")

    def __init__(
        self, selector: ReplicaSelector, *, zone: str | None, backup_zone: BackupZone
    ) -> None:
        self.selector = selector
        self.zone = zone
        self.backup_zone = backup_zone
        self.inflight = InFlight()
        self._ours = selector if isinstance(selector, PowerOfTwoChoices) else None

    # -- the two choices --------------------------------------------------------------

    def primary(self, service: Service | None, origin: str, delay: float | None, now: float) -> str:
        """The primary attempt's replica (``origin`` itself for an unconfigured origin).

        Raises:
            ValueError: the selector chose a replica it was not given.
        """
        if service is None:
            return origin
        replicas = service.replicas
        stalled: set[str] = set()
        silent: set[str] = set()  # stalled ones included
        if delay is not None:
            stalled, silent = self._avoid(replicas, delay, now)
        if not silent and (self.zone is None or not service.zones):  # the usual case
            chosen = self._ask(replicas, _NO_EXCLUSION)
            return replicas[0] if chosen is None else chosen
        if stalled:
            self.inflight.hedge_now(stalled)
        tiers: list[Collection[str]] = []
        if self.zone is not None and service.zones:
            local = {r for r in replicas if service.zones.get(r) == self.zone}
            if local and len(local) < len(replicas):
                tiers.append(silent.union(r for r in replicas if r not in local))
        if silent:
            tiers.append(silent)
        if stalled and stalled != silent:
            tiers.append(stalled)
        tiers.append(())
        chosen = self._ask(replicas, tiers)
        return replicas[0] if chosen is None else chosen

    def backup(
        self,
        service: Service | None,
        origin: str,
        attempts: Sequence[Attempt],
        delay: float | None,
        now: float,
    ) -> str | None:
        """A replica for the next backup (see the module doc), or ``None`` when every
        replica has an attempt of the request in flight.

        Raises:
            ValueError: the selector chose a replica it was not given.
        """
        if service is None:  # an unconfigured origin: the same origin again
            return origin
        replicas = service.replicas
        if len(replicas) == 1:  # one address: the same one, over another connection
            return replicas[0]
        tried = {a.replica for a in attempts}
        stalled: set[str] = set()
        silent: set[str] = set()  # stalled ones included
        if delay is not None:
            stalled, silent = self._avoid(replicas, delay, now)
        tiers: list[Collection[str]] = []
        if self.backup_zone == "other" and service.zones:
            zone = service.zones.get(attempts[0].replica)
            if zone is not None:
                tiers.append(tried | silent | {r for r in replicas if service.zones.get(r) == zone})
        if silent - tried:
            tiers.append(tried | silent)
        if stalled - tried and stalled != silent:
            tiers.append(tried | stalled)
        tiers.append(tried)
        chosen = self._ask(replicas, tiers)
        if chosen is None:  # every replica tried: one whose attempt has ended
            busy = {a.replica for a in attempts if a.state == PENDING}
            if busy != tried:
                chosen = self._ask(replicas, [busy])
        return chosen

    def _avoid(
        self, replicas: Sequence[str], delay: float, now: float
    ) -> tuple[set[str], set[str]]:
        """The replicas stalled now (``_replicas.stalls``), and those silent while their peers
        answer for :data:`~hedgeclient._replicas.stalls.SILENT` of ``delay`` (a superset)."""
        inflight = self.inflight
        stalled = inflight.stalled(replicas, delay, now)
        silent = inflight.silent(replicas, SILENT * delay, now)
        if silent:  # silent for EARLY of the delay with two attempts: stalled now
            stalled |= inflight.silent(replicas, EARLY * delay, now, two=True)
        return stalled, silent | stalled

    def _ask(self, replicas: Sequence[str], tiers: Sequence[Collection[str]]) -> str | None:
        """Ask the selector with each exclusion in turn; the first answer that is not
        an ejected replica, else the first answer."""
        fallback: str | None = None
        for exclude in tiers:
            chosen = self.selector.choose(replicas, exclude)
            if chosen is None:
                continue
            if chosen not in replicas:
                raise _not_a_replica(self.selector, chosen, replicas)
            ours = self._ours
            if ours is None or not ours.is_ejected(chosen, replicas):
                return chosen
            if fallback is None:
                fallback = chosen
        return fallback

    # -- attempts ---------------------------------------------------------------------

    def started(self, attempt: Attempt) -> None:
        """``attempt`` is sent (the selector first: one that raises leaves no trace)."""
        self.selector.attempt_started(attempt.replica)
        self.inflight.add(attempt)


def _not_a_replica(
    selector: ReplicaSelector, chosen: object, replicas: Sequence[str]
) -> ValueError:
    """The error for a selector that chose outside ``replicas`` (a bug in the selector)."""
    msg = (
        f"{selector!r}.choose() returned {chosen!r}: a ReplicaSelector must return one of "
        f"the replicas it is given ({list(replicas)!r}) or None"
    )
    return ValueError(msg)
