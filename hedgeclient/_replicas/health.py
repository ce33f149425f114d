"""Passive outlier ejection: which replicas to pass over, for how long, and why.

A replica whose attempts fail ``threshold`` times in a row is *ejected*: passed over
for a cool-down that doubles with each ejection while the fault persists (``cooldown``,
``2 * cooldown``, ``4 * cooldown``, ... up to ``max_cooldown``). When the cool-down
ends the replica is tried again, and its run of failures is still long: one more
failure ejects it again, for longer; one success ends the run and resets the cool-down
to ``cooldown``. A cancelled attempt (a loser, or a caller that gave up) proves nothing
either way and changes nothing, except one still *connecting* after the hedge delay
(``connect_stalled``, a black hole: its connections neither succeed nor fail).

A loser that was on the wire for longer than its hedge delay when another replica's
answer won (``outpaced``) runs in a separate count with its own, higher threshold: one
such loss is a slow request, which every healthy replica has, but a replica that
loses that way ``outpaced_threshold`` times in a row with no answer between accepts
connections and answers nothing (a hung process, a full accept queue). At the p95
hedge delay a healthy replica loses that way at most about 5 % of the time, so five
in a row happen about once in 3 million attempts.

Never more than ``max_ejected`` of a service's replicas are ejected at once (at least
one may always be): an ejection that would pass that share is refused and counted
(``overflow``), so a broad failure does not eject everything and the load stays spread
over the replicas that remain.

Prior art: Envoy's outlier detection (``consecutive_gateway_failure``,
``consecutive_local_origin_failure``, ``base_ejection_time`` growing with the number
of ejections, ``max_ejection_time``, ``max_ejection_percent`` that "will eject at
least one host regardless of the value"); Finagle's failure accrual.

Strictly private.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Literal, final

__all__ = ["CAUSES", "AttemptResult", "EjectionCause", "HealthStatistics", "Outliers"]

AttemptResult = Literal[
    "ok",
    "connect_failed",
    "connect_stalled",
    "unhealthy_status",
    "failed",
    "outpaced",
    "cancelled",
]
"""How an attempt on a replica ended, as
:meth:`~hedgeclient.ReplicaSelector.attempt_finished` hears it.

- ``ok``: response headers with a status the transport accepts (any status outside its
  non-fatal set: a 404 is ``ok``, the replica answered).
- ``connect_failed``: no connection (``httpx.ConnectError``, ``httpx.ConnectTimeout``).
- ``connect_stalled``: cancelled while still connecting (TCP or TLS), after connecting
  for longer than the request's hedge delay: the signature of a black hole, whose
  connections neither succeed nor fail. Known only through an httpcore pool (its
  ``trace`` extension); other transports never report it.
- ``unhealthy_status``: response headers with a status in the transport's non-fatal set
  (502, 503, 504 by default).
- ``failed``: any other transport error on the way to the headers (a read timeout, a
  reset, a protocol error).
- ``outpaced``: cancelled before its headers because another replica's attempt won,
  after waiting on the wire for longer than the request's hedge delay, while its own
  replica answered no other attempt of the transport. Once, it is a slow request;
  many times in a row with no answer between, a replica that accepts connections and
  answers nothing.
- ``cancelled``: cancelled before its headers otherwise, as a quick loser or by the
  caller: it proves nothing about the replica's health either way.

.. versionadded:: 0.1.0
"""

EjectionCause = Literal[
    "connect_failed", "connect_stalled", "unhealthy_status", "failed", "outpaced"
]
"""What ejected a replica: the :data:`AttemptResult` that ended its run of
failures (a closed set: the ``cause`` label of the ejection metric)."""

CAUSES: Final[tuple[EjectionCause, ...]] = (
    "connect_failed",
    "connect_stalled",
    "unhealthy_status",
    "failed",
    "outpaced",
)

_GROUPS_KEPT = 256  # replica sets remembered for the max_ejected share (then forgotten)


@final
@dataclass(frozen=True, slots=True)
class HealthStatistics:
    """A snapshot of a selector's outlier ejection.

    Attributes:
        ejected: the replicas ejected (as of the selector's last look at them), with
            the instant (monotonic seconds, the selector's clock) each one's cool-down
            ends; at most ``max_ejected`` of a service's replicas, the earliest
            ejected first, as the selector passes them over (after a service shrinks,
            more of its replicas may still be cooling down).
        ejections: ejections since the selector was made, by cause.
        overflow: ejections refused because ``max_ejected`` of the replica's service
            were ejected already.

    .. versionadded:: 0.1.0
    """

    ejected: dict[str, float]
    ejections: dict[EjectionCause, int]
    overflow: int


@final
class Outliers:
    """Runs of failures and ejections per replica. Strictly private.

    The selector reads some of its state on every choice and every answer, as look-ups
    rather than calls (only the methods here change it): ``groups`` (the replica sets
    learned, by identity), ``streak`` and ``outpaced`` (each replica's runs, which an
    answer ends) and ``published`` (the ejected replicas, as of the last look).

    Args:
        threshold: consecutive failures that eject, ≥ 1 (checked by the caller).
        outpaced_threshold: consecutive ``outpaced`` losses that eject, ≥ 1.
        cooldown: the first cool-down, seconds, > 0.
        max_cooldown: the longest cool-down, seconds, ≥ ``cooldown``.
        max_ejected: the largest share of a service's replicas ejected at once, in
            (0, 1]; at least one replica may always be ejected.
        clock: monotonic seconds.
    """

    __slots__ = (
        "_clock",
        "_cooldown",
        "_ejections",
        "_group",
        "_max_cooldown",
        "_max_ejected",
        "_outpaced_threshold",
        "_since",
        "_threshold",
        "_until",
        "by_cause",
        "groups",
        "outpaced",
        "overflow",
        "published",
        "streak",
    )

    def __init__(
        self,
        *,
        threshold: int,
        outpaced_threshold: int = 5,
        cooldown: float,
        max_cooldown: float,
        max_ejected: float,
        clock: Callable[[], float],
    ) -> None:
        self._threshold = threshold
        self._outpaced_threshold = outpaced_threshold
        self.outpaced: dict[str, int] = {}  # losses on the wire past the delay, in a row
        self._cooldown = cooldown
        self._max_cooldown = max_cooldown
        self._max_ejected = max_ejected
        self._clock = clock
        self.streak: dict[str, int] = {}  # failures in a row
        self._ejections: dict[str, int] = {}  # consecutive ejections, while failing
        self._until: dict[str, float] = {}  # ejected until (may lie in the past)
        self._since: dict[str, float] = {}  # when ejected, for the max_ejected order
        self._group: dict[str, Sequence[str]] = {}  # replica -> its service's replicas
        self.groups: dict[int, Sequence[str]] = {}  # the replica sets seen, by identity
        self.by_cause: dict[EjectionCause, int] = dict.fromkeys(CAUSES, 0)
        self.overflow = 0
        # Ejected, as of the last ejection or look: a frozen copy any thread may read.
        self.published: frozenset[str] = frozenset()

    # -- what the selector asks -------------------------------------------------------

    def allowed(self, replicas: Sequence[str]) -> int:
        """How many of ``replicas`` may be ejected at once (≥ 1)."""
        return max(1, math.floor(len(replicas) * self._max_ejected + 1e-9))

    def learn(self, replicas: Sequence[str]) -> None:
        """Remember that ``replicas`` are one service's replicas (for ``max_ejected``).

        Cheap when the same sequence object comes again (a service's replica set is
        one tuple until its membership changes).
        """
        key = id(replicas)
        if self.groups.get(key) is replicas:
            return
        if len(self.groups) >= _GROUPS_KEPT:
            self.groups.clear()
        self.groups[key] = replicas  # held, so that its id is not reused meanwhile
        for replica in replicas:
            self._group[replica] = replicas

    def ejected(self, replicas: Sequence[str], now: float) -> set[str]:
        """The replicas among ``replicas`` passed over at ``now``: those ejected, at
        most :meth:`allowed` of them (the earliest ejected first)."""
        until = self._until
        if not until:
            return set()
        out = []
        for replica in replicas:
            end = until.get(replica)
            if end is None:
                continue
            if end > now:
                out.append(replica)
            else:  # its cool-down is over: out of the table (its streak stays)
                del until[replica]
                self._since.pop(replica, None)
                self.published = frozenset(until)
        if len(out) > (allowed := self.allowed(replicas)):
            out.sort(key=lambda r: self._since.get(r, 0.0))
            del out[allowed:]
        return set(out)

    def ends(self, replica: str) -> float:
        """When ``replica``'s cool-down ends (0.0 if it was never ejected)."""
        return self._until.get(replica, 0.0)

    # -- what attempts report ---------------------------------------------------------

    def failed(self, replica: str, cause: EjectionCause) -> bool:
        """Count one failure of ``replica`` (an ``outpaced`` loss in its own run);
        return True if it ejected the replica."""
        if cause == "outpaced":
            run = self.outpaced[replica] = self.outpaced.get(replica, 0) + 1
            if run < self._outpaced_threshold:
                return False
        else:
            run = self.streak[replica] = self.streak.get(replica, 0) + 1
            if run < self._threshold:
                return False
        now = self._clock()
        if self._until.get(replica, 0.0) > now:  # ejected already: keep its cool-down
            return False
        group = self._group.get(replica)
        if group is not None and len(self.ejected(group, now)) >= self.allowed(group):
            self.overflow += 1
            return False
        count = self._ejections[replica] = self._ejections.get(replica, 0) + 1
        seconds = min(self._max_cooldown, self._cooldown * 2.0 ** min(count - 1, 60))
        self._until[replica] = now + seconds
        self._since[replica] = now
        self.by_cause[cause] += 1
        self.published = frozenset(self._until)
        return True

    def succeeded(self, replica: str) -> None:
        """``replica`` answered: end its runs of failures and its cool-down."""
        outpaced = self.outpaced.pop(replica, None) if self.outpaced else None
        if replica in self.streak or outpaced is not None:
            self.streak.pop(replica, None)
            self._ejections.pop(replica, None)
            if self._until.pop(replica, None) is not None:
                self.published = frozenset(self._until)
            self._since.pop(replica, None)

    def forget(self, replica: str) -> None:
        """``replica`` left every service: drop what is known of it."""
        tables = (self.streak, self.outpaced, self._ejections, self._until, self._since)
        for table in (*tables, self._group):
            table.pop(replica, None)
        self.published = frozenset(self._until)

    def cooling(self) -> frozenset[str]:
        """Replicas whose cool-down has not ended at the clock's now."""
        now = self._clock()
        return frozenset(r for r, t in list(self._until.items()) if t > now)

    def statistics(self) -> HealthStatistics:
        """A snapshot (see :class:`HealthStatistics`); safe from any thread: it reads the
        published set, so a cool-down that ended since the selector's last look at the
        replica still shows."""
        until = dict(self._until)  # C-level copies: each atomic under the GIL
        since, group = dict(self._since), dict(self._group)
        ejected = {r: until[r] for r in self.published if r in until}
        services: dict[int, tuple[Sequence[str], list[str]]] = {}
        for replica in ejected:
            members = group.get(replica)
            if members is not None:
                services.setdefault(id(members), (members, []))[1].append(replica)
        for members, same in services.values():  # the max_ejected share, as ejected() applies it
            same.sort(key=lambda r: since.get(r, 0.0))
            for extra in same[self.allowed(members) :]:
                del ejected[extra]
        return HealthStatistics(
            ejected=ejected,
            ejections=dict(self.by_cause),
            overflow=self.overflow,
        )
