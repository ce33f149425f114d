"""Replica choice: where the primary attempt goes, and where each backup request goes.

The primary goes to the less loaded of two replicas drawn at random (the "power of two
choices" of Mitzenmacher, "The Power of Two Choices in Randomized Load Balancing",
IEEE TPDS 12(10), 2001), load being the attempts this selector has in flight on each.
A backup always goes to a replica with no attempt of the same request in flight: a
backup to the same replica shares its slowness and buys nothing (docs/how-it-works.md, "The
condition that decides whether any of it is real").

Replicas whose attempts keep failing are ejected for a growing cool-down, never more
than half of a service at once (``_replicas.health``: passive outlier detection after Envoy's).
When every candidate is ejected the selector still returns one of them: a request that
may fail beats a request never sent.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Final, Protocol, final, runtime_checkable

from hedgeclient._checks import check_clock, check_int, check_number, check_seconds, shown
from hedgeclient._replicas.health import CAUSES, AttemptResult, HealthStatistics, Outliers

if TYPE_CHECKING:
    from hedgeclient._replicas.replica import Replica

__all__ = ["AttemptResult", "HealthStatistics", "PowerOfTwoChoices", "ReplicaSelector"]

_FAILURES: Final = frozenset(CAUSES)
_RESULTS: Final = frozenset({"ok", "cancelled"}) | _FAILURES


@runtime_checkable
class ReplicaSelector(Protocol):
    """Chooses a replica for each attempt and learns from how attempts end.

    All three methods run on the event loop, once per attempt: keep them O(replicas).
    A selector may also define ``replicas_changed(service: str, replicas:
    Sequence[Replica]) -> None``: the transport then calls it with each service's
    replicas when it is built and whenever discovery changes them (weights, zones, and
    the moment to forget replicas that left). It is optional: the protocol checks
    only the three methods below.

    .. versionadded:: 0.1.0
    """

    def choose(self, replicas: Sequence[str], exclude: Collection[str]) -> str | None:
        """Return one of ``replicas`` that is not in ``exclude``, or ``None`` if none is.

        Args:
            replicas: the replica origins of one logical service, as known now.
            exclude: replicas the transport wants avoided: those that already have an
                attempt of this request in flight, and for a first try also stalled
                replicas and replicas outside the preferred zone (it asks again with
                fewer exclusions when that leaves nothing).

        A value that is not one of ``replicas`` (nor ``None``) is a bug in the selector:
        the request fails with a ``ValueError`` naming it when it was choosing the
        primary attempt; for a backup, the error is logged and no backup is sent
        (suppressed, reason ``selector_error``).
        """
        ...

    def attempt_started(self, replica: str) -> None:
        """An attempt was sent to ``replica``."""
        ...

    def attempt_finished(self, replica: str, *, result: AttemptResult) -> None:
        """An attempt on ``replica`` ended, as ``result`` says (see :data:`AttemptResult`)."""
        ...


@final
class PowerOfTwoChoices:
    """The default :class:`ReplicaSelector`: the less busy of two random replicas.

    Busy means the total age of the attempts this selector has in flight on a replica:
    the sum over them of the time since each was sent, in whole milliseconds (within
    a millisecond, the count of attempts decides). A replica frozen by a pause
    holds attempts that age together while it answers nothing, so it looks busier
    with every millisecond, long before its attempt count moves; a replica with two
    attempts sent a millisecond ago is less busy than one with a single attempt stuck
    for 30 ms. Attempts end in an order this selector is not told (only the replica),
    so an ending attempt takes away the mean start time of its replica's attempts: the
    total age is exact while nothing ends (a stall) and an estimate otherwise. An
    attempt waiting in the client's own pool queue is counted, and ages only from when
    it leaves the queue (:meth:`attempt_queued`): the queue's wait is not the
    replica's. Aged from its start, a queue of thousands made whichever replica's
    attempts were youngest win every draw it was in, a millisecond at a time; the long
    runs of one replica this sent into the queue made httpcore's pool close and reopen
    connections for each, scanning its whole queue each time (issue 25).

    Health, by :data:`AttemptResult`: ``connect_failed``, ``connect_stalled``,
    ``unhealthy_status`` and ``failed`` extend the replica's run of failures; ``ok``
    ends it and lifts its ejection; ``cancelled`` changes neither (a black-hole
    replica's attempts are cancelled when another answers first: that must not clear
    its failures). After ``failure_threshold`` failures in a row the replica is
    ejected: passed over for ``cooldown`` seconds, then ``2 * cooldown``, ``4 *
    cooldown``, ... (at most ``max_cooldown``) while it keeps failing as soon as it is
    tried again. Never more than ``max_ejected`` of one service's replicas are
    ejected at once (at least one may be): a broad failure leaves the load spread.
    ``failed`` counts as a failure, as Envoy's outlier detection counts local-origin
    errors (timeouts, resets) with connect failures. ``outpaced`` losses run in a
    count of their own: ``outpaced_threshold`` of them in a row, with no answer
    between, eject the replica as a failure run does (a replica that accepts
    connections and never answers loses every race it is in; a healthy one loses that
    way only when a request is slow, at most about 5 % of the time at the p95 delay).

    With weights (SRV records, or :class:`~hedgeclient.Replica` ``weight`` from a
    source), the two candidates are drawn in proportion to weight and compared by
    total age per unit of weight.

    Args:
        failure_threshold: consecutive failures after which a replica is ejected;
            int ≥ 1, default 3.
        outpaced_threshold: consecutive ``outpaced`` losses after which a replica is
            ejected; int ≥ 1, default 5 (a healthy replica losing 5 % of its
            attempts that way does it 5 times in a row once in about 3 million; with
            a hedge delay near the median, where a third of the requests hedge,
            raise it: 12 keeps the same odds).
        cooldown: seconds of the first ejection; in (0, 3600], default 5.0.
        max_cooldown: the longest ejection, seconds; in [cooldown, 3600], default 60.0.
        max_ejected: the largest share of a service's replicas ejected at once, in
            (0, 1], default 0.5 (Envoy's ``max_ejection_percent``); at least one
            replica may always be ejected.
        rng: the random source, for reproducible tests; default a new
            ``random.Random()``.
        clock: returns monotonic seconds; default ``anyio.current_time`` (which needs a
            running event loop).

    Raises:
        TypeError: a parameter has the wrong type (``rng`` not a ``random.Random``,
            ``clock`` not callable, ...).
        ValueError: ``failure_threshold`` or ``outpaced_threshold`` < 1, ``cooldown``
            not in (0, 3600], ``max_cooldown`` not in [cooldown, 3600],
            ``max_ejected`` not in (0, 1].

    .. versionadded:: 0.1.0
    """

    __slots__ = (
        "_clock",
        "_health",
        "_members",
        "_outstanding",
        "_queued",
        "_rng",
        "_sent_sum",
        "_weights",
    )

    def __init__(
        self,
        *,
        failure_threshold: int = 3,
        outpaced_threshold: int = 5,
        cooldown: float = 5.0,
        max_cooldown: float = 60.0,
        max_ejected: float = 0.5,
        rng: random.Random | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        threshold = check_int("failure_threshold", failure_threshold, 1)
        outpaced = check_int("outpaced_threshold", outpaced_threshold, 1)
        base = check_seconds("cooldown", cooldown, low_open=True)
        longest = check_seconds("max_cooldown", max_cooldown, low=base)
        share = check_number("max_ejected", max_ejected, low=0.0, high=1.0, low_open=True)
        if rng is not None and not isinstance(rng, random.Random):
            msg = f"`rng` must be a random.Random or None, got {shown(rng)}"
            raise TypeError(msg)
        self._rng = rng if rng is not None else random.Random()
        self._clock = check_clock(clock)
        self._outstanding: dict[str, int] = {}
        self._sent_sum: dict[str, float] = {}  # sum of the send instants in flight
        self._queued: dict[str, int] = {}  # of them, in the client's own pool queue
        self._weights: dict[str, float] = {}  # only weights other than 1
        self._members: dict[str, frozenset[str]] = {}  # service -> its replica origins
        self._health = Outliers(
            threshold=threshold,
            outpaced_threshold=outpaced,
            cooldown=base,
            max_cooldown=longest,
            max_ejected=share,
            clock=self._clock,
        )

    def choose(self, replicas: Sequence[str], exclude: Collection[str]) -> str | None:
        """Return the less loaded of two random eligible replicas (see the class doc)."""
        return self._choose_checked(replicas, exclude)[0]

    def _choose_checked(
        self, replicas: Sequence[str], exclude: Collection[str], now: float | None = None
    ) -> tuple[str | None, bool]:
        """:meth:`choose`, and whether its answer is an ejected replica (it is one only
        when every candidate is; the transport then asks with fewer exclusions): one
        call where :meth:`choose` then :meth:`is_ejected` make two. ``now``: the
        clock's reading if the caller has it. For ``_replicas.choice``; strictly
        private."""
        health = self._health  # its state is read here; only its calls change it
        if health.groups.get(id(replicas)) is not replicas:  # a replica set not seen yet
            health.learn(replicas)
        candidates = [r for r in replicas if r not in exclude] if exclude else list(replicas)
        if not candidates:
            return None, False
        if health.published:  # some replica is ejected: read the clock only then
            if now is None:
                now = self._clock()
            ejected = health.ejected(replicas, now)
            if ejected:
                healthy = [r for r in candidates if r not in ejected]
                if not healthy:  # all ejected: the one whose ejection ends first
                    return min(candidates, key=health.ends), True
                candidates = healthy
        n = len(candidates)
        if n == 1:
            return candidates[0], False
        if self._weights:
            return self._weighted(candidates, now), False
        # Two distinct indices, uniformly: cheaper than rng.sample on the hot path.
        i = int(self._rng.random() * n)
        j = int(self._rng.random() * (n - 1))
        a, b = candidates[i], candidates[j + 1 if j >= i else j]
        outstanding = self._outstanding
        if b not in outstanding:  # nothing in flight: as busy as can be, or less
            return (b if a in outstanding else a), False
        if a not in outstanding:
            return a, False
        if now is None:
            now = self._clock()
        return (a if self._busy(a, now) <= self._busy(b, now) else b), False

    def _choose_started(self, replicas: Sequence[str], now: float, queued: bool) -> str | None:
        """:meth:`choose` among every replica, its answer then counted in flight as
        :meth:`attempt_started` at ``now`` (or :meth:`attempt_queued`, ``queued``)
        counts it: a primary's choice and its start in one call, for
        ``_replicas.choice``; strictly private."""
        chosen = self._choose_checked(replicas, (), now)[0]
        if chosen is not None:
            if queued:
                self.attempt_queued(chosen)
            else:
                self._started(chosen, now)
        return chosen

    def _busy(self, replica: str, now: float, weight: float = 1.0) -> tuple[int, float]:
        """Total age of the attempts in flight on ``replica`` in whole milliseconds,
        then their count (which decides within a millisecond), per unit of weight."""
        count = self._outstanding.get(replica, 0)
        aged = count - self._queued.get(replica, 0)
        age = max(0.0, aged * now - self._sent_sum.get(replica, 0.0))
        return (math.floor(age * 1000.0 / weight), count / weight)

    def _weighted(self, candidates: list[str], now: float | None) -> str:
        """Two distinct candidates drawn in proportion to weight; the one with fewer
        attempts in flight per unit of weight (``now``: the clock, if read already)."""
        weights = [self._weights.get(r, 1.0) for r in candidates]
        a = self._draw(candidates, weights)
        index = candidates.index(a)
        b = self._draw(
            candidates[:index] + candidates[index + 1 :], weights[:index] + weights[index + 1 :]
        )
        if now is None:
            now = self._clock()
        load_a = self._busy(a, now, self._weights.get(a, 1.0))
        load_b = self._busy(b, now, self._weights.get(b, 1.0))
        return a if load_a <= load_b else b

    def _draw(self, items: list[str], weights: list[float]) -> str:
        point = self._rng.random() * sum(weights)
        for item, weight in zip(items, weights, strict=True):
            point -= weight
            if point < 0.0:
                return item
        return items[-1]

    def attempt_started(self, replica: str) -> None:
        """Count one more attempt in flight on ``replica``, sent now."""
        self._started(replica, self._clock())

    def _started(self, replica: str, now: float) -> None:
        """:meth:`attempt_started` at ``now`` (the attempt's own send time, which the
        transport has: no clock read). Strictly private."""
        self._outstanding[replica] = self._outstanding.get(replica, 0) + 1
        self._sent_sum[replica] = self._sent_sum.get(replica, 0.0) + now

    def attempt_finished(self, replica: str, *, result: AttemptResult) -> None:
        """Count the attempt done; track the replica's run of failures (see the class doc).

        Raises:
            ValueError: ``result`` is not an :data:`AttemptResult`.
        """
        count = self._outstanding.get(replica, 0)
        aged = count - self._queued.get(replica, 0)  # it is one (see attempt_on_wire)
        if count > 1:
            self._outstanding[replica] = count - 1
            if aged > 0:
                self._sent_sum[replica] -= self._sent_sum[replica] / aged  # the mean start
        else:
            self._outstanding.pop(replica, None)
            self._sent_sum.pop(replica, None)
            self._queued.pop(replica, None)
        health = self._health
        if result in _FAILURES:
            health.failed(replica, result)
        elif result == "ok":
            if replica in health.streak or replica in health.outpaced:  # a run to end
                health.succeeded(replica)
        elif result != "cancelled":
            msg = f"`result` must be one of {', '.join(sorted(_RESULTS))}, got {shown(result)}"
            raise ValueError(msg)

    def attempt_queued(self, replica: str) -> None:
        """Count one more attempt in flight on ``replica``, waiting in the client's own
        pool queue: it does not age until :meth:`attempt_on_wire`. ``HedgedTransport``
        calls this in place of :meth:`attempt_started` over an httpcore pool; strictly
        private."""
        self._outstanding[replica] = self._outstanding.get(replica, 0) + 1
        self._queued[replica] = self._queued.get(replica, 0) + 1

    def attempt_on_wire(self, replica: str) -> None:
        """An attempt on ``replica`` left the client's own pool queue (on the wire, or
        ended there, just before :meth:`attempt_finished`): it ages from now. Strictly
        private, as :meth:`attempt_queued`."""
        left = self._queued.get(replica, 0) - 1
        if left < 0:
            return
        if left:
            self._queued[replica] = left
        else:
            del self._queued[replica]
        self._sent_sum[replica] = self._sent_sum.get(replica, 0.0) + self._clock()

    def replicas_changed(self, service: str, replicas: Sequence[Replica]) -> None:
        """Take the weights of ``service``'s replicas now; forget replicas that left
        every service (their attempts in flight stay counted until they end)."""
        for replica in replicas:
            if replica.weight == 1:
                self._weights.pop(replica.origin, None)
            else:
                self._weights[replica.origin] = float(replica.weight)
        origins = tuple(r.origin for r in replicas)
        before = self._members.get(service, frozenset())
        self._members[service] = frozenset(origins)
        self._health.learn(origins)
        gone = before - self._members[service]
        if gone:
            still = frozenset().union(*self._members.values())
            for origin in gone - still:
                self._health.forget(origin)
                self._weights.pop(origin, None)

    def is_ejected(self, replica: str, replicas: Sequence[str]) -> bool:
        """Whether ``replica`` is passed over now among its service's ``replicas`` (its
        ejection counted within the ``max_ejected`` share)."""
        if self._health.ends(replica) <= 0.0:
            return False
        return replica in self._health.ejected(replicas, self._clock())

    def outstanding(self, replica: str) -> int:
        """Attempts this selector has in flight on ``replica``."""
        return self._outstanding.get(replica, 0)

    def cooling_down(self) -> frozenset[str]:
        """Replicas ejected right now because their attempts kept failing (before the
        ``max_ejected`` share is applied, which depends on the service)."""
        return self._health.cooling()

    def statistics(self) -> HealthStatistics:
        """A snapshot of the ejections: who is ejected until when, and why so far.
        Safe to call from any thread (the metrics' scrape)."""
        return self._health.statistics()


def not_a_replica(selector: ReplicaSelector, chosen: object, replicas: Sequence[str]) -> ValueError:
    """The error for a selector that chose outside ``replicas`` (a bug in the selector)."""
    msg = (
        f"{selector!r}.choose() returned {chosen!r}: a ReplicaSelector must return one of "
        f"the replicas it is given ({list(replicas)!r}) or None"
    )
    return ValueError(msg)
