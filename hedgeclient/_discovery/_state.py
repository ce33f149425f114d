"""The run-time state of one discovered service, and its snapshot.

Strictly private, but for :class:`DiscoveryStatistics`, which ``hedgeclient`` exports.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import final

import anyio

from hedgeclient._discovery._dns import DnsReplicas, SrvReplicas
from hedgeclient._discovery._errors import KINDS, DiscoveryError
from hedgeclient._discovery._resolver import AddressFamily
from hedgeclient._discovery._sources import Source, WatchedReplicas
from hedgeclient._replicas.services import Service

__all__ = ["DiscoveryStatistics", "State", "longest", "wait_limit"]


@final
@dataclass(frozen=True, slots=True)
class DiscoveryStatistics:
    """A snapshot of one service's replica source.

    Attributes:
        source: what gives its replicas: ``"static"``, or the source's repr (for
            a DNS source, with the name it resolves and its nameserver, if given).
        replicas: its replica origins now (empty until a first set is known).
        refreshes: refreshes that gave a replica set.
        changes: refreshes that changed the set.
        errors: failed refreshes, by :data:`~hedgeclient.DiscoveryError`.
        last_error: the message of the latest failure, or ``None`` after a success.
        family_errors: for a DNS source with ``family="any"``, refreshes that gave a
            set although the query of one address family failed (a nameserver that
            refuses AAAA queries, say), by family: ``"ipv4"`` (A) or ``"ipv6"``
            (AAAA); the set is the other family's addresses. Empty for other
            sources. The Prometheus counter
            ``hedgeclient_discovery_family_errors_total`` has the same counts.

            .. versionadded:: 0.1.0

    .. versionadded:: 0.1.0
    """

    source: str
    replicas: tuple[str, ...]
    refreshes: int
    changes: int
    errors: dict[DiscoveryError, int]
    last_error: str | None
    family_errors: dict[AddressFamily, int] = field(default_factory=dict)


@final
class State:
    """One discovered service at run time. Strictly private."""

    __slots__ = (
        "changes",
        "errors",
        "expires",
        "failures",
        "family_errors",
        "label",
        "last_error",
        "last_refresh",
        "loop",
        "refreshes",
        "running",
        "scope",
        "service",
        "settled",
        "source",
    )

    def __init__(self, service: Service, source: Source) -> None:
        self.service = service
        self.source = source
        # The source in messages: a DNS source says what it resolves.
        self.label = (
            source.describe(service.logical[1])
            if isinstance(source, (DnsReplicas, SrvReplicas))
            else repr(source)
        )
        self.expires = -math.inf
        self.last_refresh = -math.inf
        self.failures = 0
        self.running = False  # a refresh or the watch task runs
        self.scope: anyio.CancelScope | None = None
        self.settled: anyio.Event | None = None  # set when the running refresh ends
        self.loop: int | None = None
        self.refreshes = 0
        self.changes = 0
        self.errors: dict[DiscoveryError, int] = dict.fromkeys(KINDS, 0)
        self.last_error: str | None = None
        # A DNS source's refreshes that left out a family whose query failed.
        self.family_errors: dict[AddressFamily, int] = (
            {"ipv4": 0, "ipv6": 0} if isinstance(source, (DnsReplicas, SrvReplicas)) else {}
        )


def wait_limit(source: Source) -> float:
    """Seconds a request waits for a service's first set."""
    return source.timeout + (0.5 if isinstance(source, (DnsReplicas, SrvReplicas)) else 0.0)


def longest(source: Source) -> float:
    """The longest time between refreshes: the cap of the retry back-off."""
    if isinstance(source, (DnsReplicas, SrvReplicas)):
        return source.max_ttl
    if isinstance(source, WatchedReplicas):
        return source.retry
    return source.interval
