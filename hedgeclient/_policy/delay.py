"""The hedge-delay seam: how long to wait for the primary attempt before a backup request.

``HedgedTransport(delay=...)`` takes either a float (a fixed hedge delay, in seconds)
or any object implementing :class:`DelayPolicy`. The transport asks the policy for the
delay of a route when a hedgeable request starts, and reports every primary attempt's
latency back to it, including *censored* samples: a primary cancelled because its
backup won is recorded at its elapsed time, a lower bound on its true latency.

Prior art: tower's ``hedge`` middleware (a ``Policy`` plus a latency ``Record`` sink);
Dean & Barroso, "The Tail at Scale", CACM 56(2), 2013, section "Hedged requests".
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, Protocol, final, runtime_checkable

from hedgeclient._checks import as_seconds, check_delay, check_seconds, shown

__all__ = [
    "MAX_DELAY",
    "DelayPolicy",
    "DelaySnapshot",
    "Delays",
    "FixedDelay",
    "RoutedDelays",
    "SnapshotDelayPolicy",
    "routed_delays",
]

MAX_DELAY: Final = 5.0
"""The default cut-off, in seconds: :class:`FixedDelay` refuses a longer delay and
:class:`~hedgeclient.AdaptiveDelay` suspends hedging above it (``max_delay``). When the
primary has not answered in 5 s, a backup buys little and a delay that long is almost
always milliseconds written as seconds (``delay=30``)."""


def _out_of_range(value: object, seconds: float, max_delay: float) -> str:
    """The message for a fixed delay outside [0, ``max_delay``]: it names the unit, the
    range and, for a plausible delay above it, the fix."""
    msg = (
        f"`delay` (FixedDelay `seconds`) is in seconds and must be in [0, {max_delay:g}] "
        f"(`max_delay`), got {shown(value)}"
    )
    if not max_delay < seconds < math.inf:  # negative, NaN or infinite: no hint
        return msg
    if seconds >= 1e16:  # 1e308 stays "1e+308", not 309 digits; 2**63 is "9.223e+18"
        given = f"{seconds:.4g}"
    else:
        given = str(int(seconds)) if seconds.is_integer() else repr(seconds)
    as_ms = seconds / 1000.0
    if seconds >= 1.0 and as_ms <= max_delay:  # a whole number of seconds: ms meant?
        text = f"{as_ms:.3f}" if round(as_ms, 3) == as_ms else repr(as_ms)
        msg += f": for {given} ms write {text}"
    return msg + f"; to hedge after {given} s, use FixedDelay({given}, max_delay=math.inf)"


@final
@dataclass(frozen=True, slots=True)
class DelaySnapshot:
    """The delays of a :class:`DelayPolicy` at one instant, safe to read from any thread.

    A policy publishes a new snapshot when a delay changes and never mutates a published
    one: the metrics collector reads it from Prometheus's scrape thread while the event
    loop goes on.

    Attributes:
        routes: route -> delay in seconds (``None``: hedging suspended) for the routes
            the policy tracks; a read-only mapping.
        default: the delay of every other route, in seconds (``None``: suspended).
        tracks_routes: whether ``routes`` is every route the policy keeps a delay for,
            a route it evicted leaving it (an :class:`~hedgeclient.AdaptiveDelay`'s):
            the gauge ``hedgeclient_hedge_delay_seconds`` then shows these routes
            alone. Default ``False``: one delay for every route but those listed (a
            :class:`FixedDelay`'s), the gauge showing each route seen eligible for
            hedging, at most the metrics' ``max_routes``.

    .. versionadded:: 0.1.0
    .. versionchanged:: 0.2.0 ``tracks_routes``.
    """

    routes: Mapping[str, float | None]
    default: float | None
    tracks_routes: bool = False

    def delay(self, route: str) -> float | None:
        """Return the delay of ``route``, in seconds, as ``hedge_delay`` did then."""
        return self.routes.get(route, self.default)


_NO_ROUTES: Mapping[str, float | None] = MappingProxyType({})


@runtime_checkable
class DelayPolicy(Protocol):
    """Chooses the hedge delay of a route and learns from observed latencies.

    Implementations must be cheap: :meth:`hedge_delay` runs once per hedgeable request
    and :meth:`record` once per primary attempt, both on the event loop.

    .. versionadded:: 0.1.0
    """

    def hedge_delay(self, route: str) -> float | None:
        """Return the hedge delay for ``route`` in seconds (≥ 0).

        ``None`` means hedging is suspended for this route right now (for example the
        delay estimate is above a cutoff); the transport then sends no backup and counts
        a suppressed hedge with reason ``cutoff``.
        """
        ...

    def record(self, route: str, seconds: float, *, censored: bool) -> None:
        """Record one primary attempt's time to response headers, in seconds.

        ``censored`` is true when the attempt was cut short, its backup having won or its
        caller having left after the hedge delay: the value is then its elapsed time at
        cancellation, a lower bound on its latency.
        Must never raise into the request path.
        """
        ...


@runtime_checkable
class SnapshotDelayPolicy(Protocol):
    """A :class:`DelayPolicy` that also publishes its delays for the metrics.

    Optional: the Prometheus gauge ``hedgeclient_hedge_delay_seconds`` reads
    :meth:`delay_snapshot` from the scrape thread when the policy has it; for any other
    policy it shows the delay of each route's most recent request.

    .. versionadded:: 0.1.0
    """

    def delay_snapshot(self) -> DelaySnapshot:
        """Return the latest published :class:`DelaySnapshot`.

        Called from another thread: return an object published earlier, never build
        one from state the event loop is changing.
        """
        ...


@final
class FixedDelay:
    """A constant hedge delay, in seconds, for every route.

    ``HedgedTransport(delay=0.030)`` is shorthand for ``delay=FixedDelay(0.030)``.

    Args:
        seconds: the hedge delay in seconds; finite, ≥ 0 and ≤ ``max_delay``.
        max_delay: the longest delay accepted, in seconds: in [0, 3600], or
            ``math.inf`` for no bound. Default :data:`MAX_DELAY` (5 s), the default
            cut-off of :class:`~hedgeclient.AdaptiveDelay`: ``delay=30`` is refused
            with a message suggesting ``0.030``, rather than taken as 30 s.

    Raises:
        TypeError: ``seconds`` or ``max_delay`` is not a real number.
        ValueError: ``seconds`` is negative, NaN, infinite or above ``max_delay``
            (the message names ``delay``, the unit and the range [0, ``max_delay``]),
            or ``max_delay`` is out of range.

    .. versionadded:: 0.1.0
    """

    __slots__ = ("_seconds", "_snapshot")

    def __init__(self, seconds: float, *, max_delay: float = MAX_DELAY) -> None:
        limit = check_seconds("max_delay", max_delay, allow_inf=True)
        number = as_seconds(seconds)  # None: check_delay raises the TypeError
        if number is not None and limit < math.inf and not 0.0 <= number <= limit:
            raise ValueError(_out_of_range(seconds, number, limit))
        value = check_delay(seconds, "seconds", "a number of seconds")
        self._seconds = value
        self._snapshot = DelaySnapshot(routes=_NO_ROUTES, default=value)

    @property
    def seconds(self) -> float:
        """The fixed hedge delay, in seconds."""
        return self._seconds

    def hedge_delay(self, route: str) -> float:
        """Return the fixed delay, whatever the route."""
        return self._seconds

    def record(self, route: str, seconds: float, *, censored: bool) -> None:
        """Ignore the sample: a fixed delay does not learn."""

    def delay_snapshot(self) -> DelaySnapshot:
        """Return the (constant) snapshot: no route, the fixed delay as the default."""
        return self._snapshot

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._seconds!r})"  # a subclass names itself


@final
class RoutedDelays:
    """A transport's delay policy and its routes' own, as the delay gauge reads them.
    Strictly private.

    It asks and teaches the transport's policy only (the request path asks each
    route's own); :meth:`delay_snapshot` merges every policy's snapshot, a route's
    over the transport's, from any thread (each snapshot is published, never changed).

    Args:
        policies: the transport's policy, then each route's own (each a
            :class:`SnapshotDelayPolicy`), each with the route name it serves
            (``None``: the route keys it learns).
    """

    __slots__ = ("_policies",)

    def __init__(self, policies: tuple[tuple[SnapshotDelayPolicy, str | None], ...]) -> None:
        self._policies = policies

    def hedge_delay(self, route: str) -> float | None:
        """The transport's policy's delay for ``route``."""
        policy: DelayPolicy = self._policies[0][0]  # type: ignore[assignment]
        return policy.hedge_delay(route)

    def record(self, route: str, seconds: float, *, censored: bool) -> None:
        """Teach the transport's policy (never called by the request path)."""
        policy: DelayPolicy = self._policies[0][0]  # type: ignore[assignment]
        policy.record(route, seconds, censored=censored)

    def delay_snapshot(self) -> DelaySnapshot:
        """Every policy's delays, a route's own over the transport's."""
        snapshots = [(policy.delay_snapshot(), name) for policy, name in self._policies]
        routes: dict[str, float | None] = {}
        for snapshot, name in snapshots:
            routes.update(snapshot.routes)
            if name is not None:  # a route's fixed delay tracks no route: its name
                routes[name] = snapshot.delay(name)
        first = snapshots[0][0]  # the transport's: its routes are the ones it tracks
        return DelaySnapshot(MappingProxyType(routes), first.default, first.tracks_routes)


def routed_delays(
    policy: DelayPolicy, routes: tuple[tuple[DelayPolicy, str | None], ...]
) -> DelayPolicy:
    """What the delay gauge reads: ``policy`` itself when no route has a policy of its
    own (or one publishes no snapshot), else a :class:`RoutedDelays` over them all."""
    own = tuple((p, name) for p, name in routes if p is not policy)
    if not own:
        return policy
    every = ((policy, None), *own)
    if not all(isinstance(p, SnapshotDelayPolicy) for p, _ in every):
        return policy
    return RoutedDelays(every)  # type: ignore[arg-type]


class Delays(dict[str, float | None]):
    """Route -> hedge delay, seconds (``None``: suspended); a route not in it has the
    ``initial`` delay (``AdaptiveDelay``'s). Strictly private."""

    __slots__ = ("initial",)

    def __init__(self, initial: float) -> None:
        super().__init__()
        self.initial = initial

    def __missing__(self, route: str) -> float:
        return self.initial
