"""Replica choice: where the primary attempt goes, and where each backup request goes.

The primary goes to the less loaded of two replicas drawn at random (the "power of two
choices" of Mitzenmacher, "The Power of Two Choices in Randomized Load Balancing",
IEEE TPDS 12(10), 2001), load being the attempts this selector has in flight on each.
A backup always goes to a replica with no attempt of the same request in flight: a
backup to the same replica shares its slowness and buys nothing (docs/how-it-works.md, "The
condition that decides whether any of it is real").

A replica whose attempts fail ``failure_threshold`` times in a row (it refuses
connections, answers with a non-fatal status such as 503, or fails otherwise) is passed
over for ``cooldown`` seconds, then tried again (one more failure sends it straight back
to cool-down; one success clears it). A cancelled attempt proves nothing about health
either way and changes nothing. When every candidate is cooling down the selector still
returns one of them: a request that may fail beats a request never sent.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection, Sequence
from typing import Final, Literal, Protocol, final, runtime_checkable

from hedgeclient._checks import check_int, check_seconds
from hedgeclient._clock import check_clock

__all__ = ["AttemptResult", "PowerOfTwoChoices", "ReplicaSelector"]

AttemptResult = Literal["ok", "connect_failed", "unhealthy_status", "failed", "cancelled"]
"""How an attempt on a replica ended, as :meth:`ReplicaSelector.attempt_finished` hears it.

- ``ok``: response headers with a status the transport accepts (any status outside its
  non-fatal set: a 404 is ``ok``, the replica answered).
- ``connect_failed``: no connection (``httpx.ConnectError``, ``httpx.ConnectTimeout``).
- ``unhealthy_status``: response headers with a status in the transport's non-fatal set
  (502, 503, 504 by default).
- ``failed``: any other transport error on the way to the headers (a read timeout, a
  reset, a protocol error).
- ``cancelled``: cancelled before its headers, as a losing attempt or by the caller:
  it proves nothing about the replica's health either way.

.. versionadded:: 0.1.0
"""

_FAILURES: Final = frozenset({"connect_failed", "unhealthy_status", "failed"})
_RESULTS: Final = frozenset({"ok", "cancelled"}) | _FAILURES


@runtime_checkable
class ReplicaSelector(Protocol):
    """Chooses a replica for each attempt and learns from how attempts end.

    All three methods run on the event loop, once per attempt: keep them O(replicas).

    .. versionadded:: 0.1.0
    """

    def choose(self, replicas: Sequence[str], exclude: Collection[str]) -> str | None:
        """Return one of ``replicas`` that is not in ``exclude``, or ``None`` if none is.

        Args:
            replicas: the replica origins of one logical service, as configured.
            exclude: replicas that already have an attempt of this request in flight.

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
    """The default :class:`ReplicaSelector`: least outstanding of two random replicas.

    Health, by :data:`AttemptResult`: ``connect_failed``, ``unhealthy_status`` and
    ``failed`` extend the replica's run of failures; ``ok`` ends it and lifts its
    cool-down; ``cancelled`` changes neither (a black-hole replica's attempts are
    cancelled when another answers first: that must not clear its failures). ``failed``
    counts as a failure, as Envoy's outlier detection counts local-origin errors
    (timeouts, resets) with connect failures: a replica that times out or resets three
    times in a row while no attempt on it succeeds is as unhelpful as one that refuses
    connections; a request that is slow everywhere does not cool a replica down as long
    as other requests succeed on it.

    Args:
        failure_threshold: consecutive failures after which a replica is passed over;
            int ≥ 1, default 3.
        cooldown: seconds a failing replica is passed over; in (0, 3600], default 5.0.
        rng: the random source, for reproducible tests; default a new
            ``random.Random()``.
        clock: returns monotonic seconds; default ``anyio.current_time`` (which needs a
            running event loop).

    Raises:
        TypeError: a parameter has the wrong type (``rng`` not a ``random.Random``,
            ``clock`` not callable, ...).
        ValueError: ``failure_threshold`` < 1, or ``cooldown`` not in (0, 3600].

    .. versionadded:: 0.1.0
    """

    __slots__ = (
        "_clock",
        "_cooldown",
        "_cooling_until",
        "_failures",
        "_outstanding",
        "_rng",
        "_threshold",
    )

    def __init__(
        self,
        *,
        failure_threshold: int = 3,
        cooldown: float = 5.0,
        rng: random.Random | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self._threshold = check_int("failure_threshold", failure_threshold, 1)
        self._cooldown = check_seconds("cooldown", cooldown, low_open=True)
        if rng is not None and not isinstance(rng, random.Random):
            msg = f"`rng` must be a random.Random or None, got {rng!r}"
            raise TypeError(msg)

        self._rng = rng if rng is not None else random.Random()
        self._clock = check_clock(clock)
        self._outstanding: dict[str, int] = {}
        self._failures: dict[str, int] = {}
        self._cooling_until: dict[str, float] = {}

    def _now(self) -> float:
        return self._clock()

    def choose(self, replicas: Sequence[str], exclude: Collection[str]) -> str | None:
        """Return the less loaded of two random eligible replicas (see the class doc)."""
        candidates = [r for r in replicas if r not in exclude] if exclude else list(replicas)
        if not candidates:
            return None
        if self._cooling_until:
            now = self._now()
            healthy = [r for r in candidates if self._cooling_until.get(r, 0.0) <= now]
            if healthy:
                candidates = healthy
            else:  # all cooling down: the one whose cool-down ends first
                return min(candidates, key=lambda r: self._cooling_until.get(r, 0.0))
        n = len(candidates)
        if n == 1:
            return candidates[0]
        # Two distinct indices, uniformly: cheaper than rng.sample on the hot path.
        i = int(self._rng.random() * n)
        j = int(self._rng.random() * (n - 1))
        a, b = candidates[i], candidates[j + 1 if j >= i else j]
        outstanding = self._outstanding
        return a if outstanding.get(a, 0) <= outstanding.get(b, 0) else b

    def attempt_started(self, replica: str) -> None:
        """Count one more attempt in flight on ``replica``."""
        self._outstanding[replica] = self._outstanding.get(replica, 0) + 1

    def attempt_finished(
        self,
        replica: str,
        *,
        result: AttemptResult,
    ) -> None:
        """Count the attempt done; track the replica's run of failures (see the class doc).

        Raises:
            ValueError: ``result`` is not an :data:`AttemptResult`.
        """
        self._outstanding[replica] = max(0, self._outstanding.get(replica, 0) - 1)
        if result in _FAILURES:
            failures = self._failures.get(replica, 0) + 1
            self._failures[replica] = failures
            if failures >= self._threshold:
                self._cooling_until[replica] = self._now() + self._cooldown
        elif result == "ok":
            if replica in self._failures:
                del self._failures[replica]
                self._cooling_until.pop(replica, None)
        elif result != "cancelled":
            msg = f"`result` must be one of {', '.join(sorted(_RESULTS))}, got {result!r}"
            raise ValueError(msg)

    def outstanding(self, replica: str) -> int:
        """Attempts this selector has in flight on ``replica``."""
        return self._outstanding.get(replica, 0)

    def cooling_down(self) -> frozenset[str]:
        """Replicas passed over right now because their attempts kept failing."""
        now = self._now()
        return frozenset(r for r, until in self._cooling_until.items() if until > now)
