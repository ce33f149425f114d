"""What feeds a client's scrape-time gauges: callables given when the client is bound,
never the transport.

Prometheus scrapes on another thread than the requests, so each callable of a
:class:`GaugeReaders` reads only what is safe there: the budget's ``tokens`` float,
the delay policy's published :class:`~hedgeclient.DelaySnapshot` (never its live
structures), the loop lag's float, the selector's published ejected set, the replica
sets' counters and tuples.

Strictly private, but for :class:`MetricsSource`, which
``hedgeclient.instrumentation`` exports.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol, TypeVar, final, runtime_checkable

from hedgeclient._policy.delay import DelaySnapshot, SnapshotDelayPolicy

__all__ = [
    "Counts",
    "Ejections",
    "GaugeReaders",
    "MetricsSource",
    "ServiceReplicas",
    "TokenBalance",
    "distinct",
    "gauge_readers",
    "readers_of",
]

_T = TypeVar("_T")


class Counts(Protocol):
    """Counts by a closed set of names (a ``dict`` of them)."""

    def items(self) -> Iterable[tuple[str, int]]:
        """Each name and its count."""
        ...


class ServiceReplicas(Protocol):
    """One service's replica set as the gauges read it (a
    :class:`~hedgeclient.DiscoveryStatistics` is one)."""

    @property
    def source(self) -> str:
        """``"static"``, or what discovers the set."""
        ...

    @property
    def replicas(self) -> Sequence[str]:
        """The replica origins now."""
        ...

    @property
    def refreshes(self) -> int:
        """Refreshes that gave a set."""
        ...

    @property
    def errors(self) -> Counts:
        """Failed refreshes, by error."""
        ...

    @property
    def family_errors(self) -> Counts:
        """Refreshes that lost one address family, by family."""
        ...


@runtime_checkable
class Ejections(Protocol):
    """A selector's outlier ejection as the gauges read it (a
    :class:`~hedgeclient.HealthStatistics` is one)."""

    @property
    def ejected(self) -> Mapping[str, float]:
        """The replicas ejected now (with the end of their cool-down)."""
        ...

    @property
    def ejections(self) -> Counts:
        """Ejections since the selector was made, by cause."""
        ...

    @property
    def overflow(self) -> int:
        """Ejections refused by ``max_ejected``."""
        ...


@final
@dataclass(frozen=True, slots=True)
class GaugeReaders:
    """The scrape-time gauges of one bound transport, as callables and the parts whose
    identity the merge of a name's transports needs. Strictly private.

    Attributes:
        name: the ``client`` label.
        budget: the hedge budget, whose ``tokens`` is its main balance in backups
            (``hedgeclient_budget_tokens``); transports sharing it count it once.
        delay_snapshot: the delay policy's published snapshot
            (``hedgeclient_hedge_delay_seconds`` per route); ``None`` for a policy that
            publishes none (the gauge is then each route's latest request's delay).
        event_loop_lag: how late the client's loop typically runs, in seconds
            (``hedgeclient_event_loop_lag_seconds``); ``None``: no such series.
        replicas: each service's replica set, by logical origin
            (``hedgeclient_replicas``, ``hedgeclient_replica_ejected``, the discovery
            counters); ``None``: none.
        ejections: the selector's outlier ejection (``hedgeclient_replica_ejected``,
            ``hedgeclient_replica_ejections_total``, ...); ``None`` for a selector that
            reports none.
        selector: the selector ``ejections`` reads: transports sharing it count its
            ejections once.
        retries: the budget's retries allowed and refused (``try_retry``), as
            ``(allowed, refused)`` (``hedgeclient_budget_retries_total``,
            ``hedgeclient_budget_retries_refused_total``); ``None`` for a budget that
            counts none.
        route_budgets: each route's own budget, by route label, its ``tokens`` read at
            scrape time (``hedgeclient_route_budget_tokens``); empty: no route has one.
    """

    name: str
    budget: TokenBalance
    delay_snapshot: Callable[[], DelaySnapshot] | None = None
    event_loop_lag: Callable[[], float] | None = None
    replicas: Callable[[], Mapping[str, ServiceReplicas]] | None = None
    ejections: Callable[[], Ejections | None] | None = None
    selector: object = None
    retries: Callable[[], tuple[int, int]] | None = None
    route_budgets: Mapping[str, TokenBalance] = field(default_factory=dict)


class TokenBalance(Protocol):
    """A hedge budget as the metrics read it: its main balance, in backups."""

    @property
    def tokens(self) -> float:
        """Backups the main bucket holds (a float, read from the scrape thread)."""
        ...


class MetricsSource(Protocol):
    """What :meth:`PrometheusMetrics.bind` needs of a transport.

    :class:`~hedgeclient.HedgedTransport` satisfies it. :meth:`~PrometheusMetrics.bind`
    reads the name, the delay policy and the budget once; the gauges then read the
    budget and the policy's snapshots from the scrape thread (each must be safe to
    read there: plain attributes and floats are). The source is held by weak
    reference (so it must support ``weakref``): its gauges last as long as it does.
    Two optional members feed more gauges when present: ``event_loop_lag`` (a float)
    and ``replica_statistics()``, and ``selector.statistics()`` (safe from any thread,
    as :class:`~hedgeclient.PowerOfTwoChoices`'s is).

    .. versionadded:: 0.1.0
    """

    @property
    def name(self) -> str:
        """The ``client`` label of its metrics."""
        ...

    @property
    def delay_policy(self) -> object:
        """Its delay policy: a :class:`~hedgeclient.SnapshotDelayPolicy` has a gauge per
        route from its snapshots; any other, the delay of each route's latest request."""
        ...

    @property
    def budget(self) -> TokenBalance:
        """Its hedge budget (``hedgeclient_budget_tokens``)."""
        ...


def readers_of(source: MetricsSource) -> GaugeReaders:
    """The gauges of ``source`` (:meth:`PrometheusMetrics.bind`): its name, budget,
    delay policy and selector read once, now; its optional ``event_loop_lag`` and
    ``replica_statistics()`` through a weak reference, so that the readers never keep
    it alive."""
    ref = weakref.ref(source)
    lag: Callable[[], float] | None = None
    if isinstance(getattr(source, "event_loop_lag", None), float):  # an optional member

        def read_lag() -> float:
            seconds = getattr(ref(), "event_loop_lag", math.nan)
            return seconds if isinstance(seconds, float) else math.nan

        lag = read_lag
    replicas: Callable[[], Mapping[str, ServiceReplicas]] | None = None
    statistics = getattr(source, "replica_statistics", None)  # an optional member
    if callable(statistics):
        method = weakref.WeakMethod(statistics)

        def read_replicas() -> Mapping[str, ServiceReplicas]:
            bound = method()
            found: Mapping[str, ServiceReplicas] = {} if bound is None else bound()
            return found

        replicas = read_replicas
    return gauge_readers(
        source.name,
        source.budget,
        source.delay_policy,
        event_loop_lag=lag,
        replicas=replicas,
        selector=getattr(source, "selector", None),  # an optional member
    )


def gauge_readers(
    name: str,
    budget: TokenBalance,
    policy: object,
    *,
    event_loop_lag: Callable[[], float] | None = None,
    replicas: Callable[[], Mapping[str, ServiceReplicas]] | None = None,
    selector: object = None,
    route_budgets: Mapping[str, TokenBalance] | None = None,
) -> GaugeReaders:
    """The gauges of one client from its parts.

    Args:
        name: the ``client`` label.
        budget: its hedge budget.
        policy: its delay policy (a :class:`~hedgeclient.SnapshotDelayPolicy` has
            its snapshots read).
        event_loop_lag: reads its loop lag, or ``None``.
        replicas: reads its replica sets, or ``None``.
        selector: its replica selector: one with a ``statistics()`` that gives
            :class:`Ejections` feeds the ejection gauges.
        route_budgets: its routes' own budgets, by route label, or ``None``.
    """

    retries: Callable[[], tuple[int, int]] | None = None
    counts = getattr(budget, "statistics", None)  # HedgeBudget's: ints, safe to read here
    if callable(counts):

        def read_retries() -> tuple[int, int]:
            stats = counts()
            return getattr(stats, "retries", 0), getattr(stats, "retry_refusals", 0)

        retries = read_retries

    ejections: Callable[[], Ejections | None] | None = None
    statistics = getattr(selector, "statistics", None)  # optional in ReplicaSelector
    if callable(statistics):

        def read_ejections() -> Ejections | None:
            found = statistics()
            return found if isinstance(found, Ejections) else None

        ejections = read_ejections
    return GaugeReaders(
        name=name,
        budget=budget,
        delay_snapshot=policy.delay_snapshot if isinstance(policy, SnapshotDelayPolicy) else None,
        event_loop_lag=event_loop_lag,
        replicas=replicas,
        ejections=ejections,
        selector=selector if ejections is not None else None,
        retries=retries,
        # a copy: the routes are fixed once the transport is built
        route_budgets=MappingProxyType(dict(route_budgets or {})),
    )


def distinct(parts: Iterable[_T]) -> list[_T]:
    """``parts`` without repeats by identity (a budget two transports share, once)."""
    seen: dict[int, _T] = {}
    for part in parts:
        seen.setdefault(id(part), part)
    return list(seen.values())
