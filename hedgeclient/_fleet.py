"""The replica side of a transport: services, discovery, choice and connections.

``HedgedTransport`` owns one :class:`Fleet`. It checks ``replicas=`` and ``zones=``
(``_discovery``), keeps discovered sets current, tells the selector about each set,
chooses each attempt's replica (``_replicas.choice``), and builds the second connection
pool through which a backup to the address its primary is still using (one address
behind a load balancer) goes when the first one multiplexes (HTTP/2), so that it
travels on another connection (``_compat.lanes``; the sender is given both pools).

Strictly private.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Final, Literal, final

import httpx

from hedgeclient._compat import Repairs, repairs_for, reports_queue
from hedgeclient._compat.lanes import close_idle, h2_over_tls_only, second_pool
from hedgeclient._discovery import Discovery, DiscoveryStatistics, parse_config
from hedgeclient._discovery._errors import DiscoveryFailure
from hedgeclient._replicas.choice import BackupZone, Choice
from hedgeclient._replicas.replica import Replica
from hedgeclient._replicas.selector import ReplicaSelector
from hedgeclient._replicas.services import Origin, Service, origin_of, origin_str
from hedgeclient._timer import now

__all__ = ["DiscoveryFailedError", "Fleet", "plaintext_replica"]

logger = logging.getLogger("hedgeclient")

_SWEEP_INTERVAL: Final = 0.05
"""Seconds between two looks at the removed replicas' connections that were busy at
their removal (on the request path, only while there are some)."""


class DiscoveryFailedError(Exception):
    """:meth:`HedgedTransport.refresh_replicas() <hedgeclient.HedgedTransport.refresh_replicas>`
    got no replica set for one or more discovered services.

    Its message names each failing logical origin, its source and why (the name does
    not resolve, the nameserver timed out, the source raised, ...), and what the
    service keeps: its last good set, or none yet (its requests then fail with
    ``httpx.ConnectError``). The services that did resolve have their new sets.

    Attributes:
        failures: logical origin (``"http://catalog"``) -> why its refresh failed,
            the text of :attr:`DiscoveryStatistics.last_error
            <hedgeclient.DiscoveryStatistics.last_error>`.

    .. versionadded:: 0.1.0
    """

    def __init__(self, message: str, failures: Mapping[str, str]) -> None:
        super().__init__(message)
        self.failures: dict[str, str] = dict(failures)


def plaintext_replica(service: Service, replicas: Sequence[Replica]) -> str | None:
    """The first http:// replica of an https:// logical origin, or ``None``: a request
    the caller addressed to ``https://`` would otherwise leave unencrypted, with
    nothing to tell it so (RFC 9110, section 4.2.2: the https scheme promises TLS)."""
    if service.logical[0] != "https":
        return None
    return next((r.origin for r in replicas if r.origin.startswith("http://")), None)


@final
class Fleet:
    """Services, their replicas, and where each attempt goes. Strictly private.

    Args:
        replicas, zones, zone, backup_zone, allow_plaintext: ``HedgedTransport``'s
            arguments.
        selector: the transport's selector.
        non_fatal: the transport's non-fatal statuses (an ``unhealthy_status`` of a
            replica, for its health).
        inner: the transport's inner transport.

    Attributes:
        lane: the second pool (``_compat.lanes``): a backup to the address its primary
            is still using goes through it when ``inner`` multiplexes (HTTP/2); else
            ``None``. The transport hands it to its sender.
        lane_repairs: its httpcore repairs, with ``lane``.

    Raises:
        ValueError: a static list maps an https:// logical origin to an http://
            replica without ``allow_plaintext`` (see :func:`plaintext_replica`).
    """

    __slots__ = (
        "_allow_plaintext",
        "_discovery",
        "_next_sweep",
        "_retired",
        "choice",
        "discovered",
        "inner",
        "lane",
        "lane_repairs",
        "services",
        "static",
    )

    def __init__(
        self,
        *,
        replicas: object,
        zones: object,
        zone: str | None,
        backup_zone: BackupZone,
        selector: ReplicaSelector,
        non_fatal: Collection[int],
        inner: httpx.AsyncBaseTransport,
        allow_plaintext: bool = False,
    ) -> None:
        config = parse_config(replicas, zones)
        self._allow_plaintext = allow_plaintext
        if not allow_plaintext:
            for service, static in config.static.values():
                plain = plaintext_replica(service, static)
                if plain is not None:
                    msg = (
                        f"`replicas[{service.given!r}]` maps an https:// origin to the "
                        f"http:// replica {plain!r}: its requests would travel in "
                        "plaintext. List https:// replicas, or pass allow_plaintext=True "
                        "if TLS ends before the replicas (a sidecar, a mesh)"
                    )
                    raise ValueError(msg)
        self.services: dict[Origin, Service] = config.services
        self.static = config.static
        queues = reports_queue(inner)  # an httpx pool: attempts queued until the wire says
        self.choice = Choice(
            selector, zone=zone, backup_zone=backup_zone, non_fatal=non_fatal, queues=queues
        )
        self._discovery = Discovery(
            config.sources, zone_of=config.zone_of, on_change=self._changed, check=self._check
        )
        self.discovered = bool(self._discovery)  # any service discovered (not listed)
        self.inner = inner
        self.lane = second_pool(inner)  # backups to an address their primary is using
        self._retired: set[str] = set()  # removed replicas with a connection still busy
        self._next_sweep = -math.inf
        self.lane_repairs: Repairs | None = repairs_for(self.lane) if self.lane else None
        for service, static in config.static.values():
            self._tell_selector(service, static)
        if h2_over_tls_only(inner):
            self._say_http11(config.static.values(), config.sources.values())
        for service in self.services.values():
            if service.single:
                logger.info(
                    "hedgeclient: replicas[%r] lists one address: its backups go to it over "
                    "another connection (docs/replicas.md, 'One address')",
                    service.given,
                )

    @staticmethod
    def _say_http11(
        static: Collection[tuple[Service, list[Replica]]],
        sources: Collection[tuple[Service, object]],
    ) -> None:
        """Warn once that the inner transport's ``http2=True`` stays HTTP/1.1 towards
        ``http://`` replicas (a discovered service is judged by its logical origin's
        scheme, which DNS sources keep)."""
        plain = [s.given for s, reps in static if any(r.origin[:7] == "http://" for r in reps)]
        plain += [s.given for s, _ in sources if s.logical[0] == "http"]
        if plain:
            logger.warning(
                "hedgeclient: the inner transport has http2=True beside http1=True, so it "
                "speaks HTTP/1.1 to the http:// replicas of %s (HTTP/2 without TLS needs "
                "prior knowledge: httpx.AsyncHTTPTransport(http1=False, http2=True); "
                "docs/quickstart.md, 'HTTP/2')",
                ", ".join(repr(name) for name in plain),
            )

    # -- per request --------------------------------------------------------------------

    async def pass_through(self, request: httpx.Request) -> httpx.Response:
        """Send a request for an origin not in ``replicas`` unchanged (``other_origins``).

        Raises:
            httpx.HTTPError: the inner transport's; a ``ConnectError`` with a note
                naming the logical origins configured (PEP 678).
        """
        try:
            return await self.inner.handle_async_request(request)
        except httpx.ConnectError as exc:
            logical = ", ".join(repr(s.route_suffix) for s in self.services.values())
            hint = (
                f"hedgeclient: {origin_str(origin_of(request.url))!r} is not one of the "
                f"logical origins in replicas= ({logical}); it was sent unchanged"
            )
            if hasattr(exc, "add_note"):  # Python 3.11+
                exc.add_note(hint)
            logger.info(hint)
            raise

    async def ensure(self, service: Service, request: httpx.Request) -> None:
        """Make sure ``service`` has replicas (see ``Discovery.ensure``); close the
        connections of removed replicas that were busy at their removal, once idle."""
        await self._discovery.ensure(service, request)
        if self._retired and now() >= self._next_sweep:
            self._next_sweep = now() + _SWEEP_INTERVAL
            await self._close(frozenset(self._retired))

    def after(self, service: Service, connect_failed: bool) -> None:
        """A race ended; a connection to a replica failed in it: refresh (rate-limited)."""
        if connect_failed:
            self._discovery.connect_failed(service)

    def placement(self, service: Service | None) -> Literal["other_replica", "other_connection"]:
        """Where ``service``'s backups go: another replica, or (a single address) the
        same one over another connection."""
        return "other_connection" if service is None or service.single else "other_replica"

    # -- membership ---------------------------------------------------------------------

    def _check(self, service: Service, replicas: list[Replica]) -> None:
        """Refuse a discovered set that would send an https:// service's requests in
        plaintext (unless ``allow_plaintext``): the last good set stays."""
        if self._allow_plaintext:
            return
        plain = plaintext_replica(service, replicas)
        if plain is not None:
            msg = (
                f"the http:// replica {plain!r} for the https:// origin "
                f"{service.route_suffix!r} would carry its requests in plaintext (pass "
                "allow_plaintext=True if TLS ends before the replicas)"
            )
            raise DiscoveryFailure(msg, kind="invalid")

    def _tell_selector(self, service: Service, replicas: Sequence[Replica]) -> None:
        changed: Callable[[str, Sequence[Replica]], None] | None = getattr(
            self.choice.selector, "replicas_changed", None
        )
        if changed is not None:
            changed(service.route_suffix, replicas)

    async def _changed(
        self, service: Service, replicas: list[Replica], removed: frozenset[str]
    ) -> None:
        """A discovered set changed: tell the selector, forget the removed replicas'
        stall state, close their idle pooled connections."""
        self._tell_selector(service, replicas)
        for origin in removed:
            self.choice.forget(origin)
        self._retired -= {r.origin for r in replicas}  # back in the set: keep its pool
        if removed:
            await self._close(removed)

    async def _close(self, removed: frozenset[str]) -> None:
        """Close the idle pooled connections of ``removed`` replicas; remember those with
        a connection still carrying a request (:meth:`ensure` closes it once idle: the
        pool would otherwise keep it until its keep-alive expiry)."""
        busy: set[str] = set()
        closed = await close_idle(self.inner, removed, busy)
        if self.lane is not None:
            closed += await close_idle(self.lane, removed, busy)
        self._retired = (self._retired - removed) | busy
        if closed:
            logger.debug("hedgeclient: closed %d idle connection(s) of removed replicas", closed)

    # -- lifecycle ----------------------------------------------------------------------

    async def refresh_now(self) -> None:
        """Refresh every discovered service now (see ``HedgedTransport.refresh_replicas``).

        Raises:
            DiscoveryFailedError: one or more gave no replica set.
        """
        outcome = await self._discovery.refresh_now()
        failures = {name: why for name, why in outcome.items() if why is not None}
        if not failures:
            return
        stats = self._discovery.statistics()
        parts = []
        for name, why in failures.items():
            kept = len(stats[name].replicas)
            keeps = f"keeps its last {kept} replica(s)" if kept else "has no replica yet"
            parts.append(f"{name!r} ({stats[name].source}): {why}; it {keeps}")
        msg = (
            f"hedgeclient: refreshing the replicas failed for {len(failures)} of "
            f"{len(outcome)} discovered service(s): {'; '.join(parts)}"
        )
        raise DiscoveryFailedError(msg, failures)

    async def aclose(self) -> None:
        """Stop discovery; close the second pool (the inner one is the transport's)."""
        self._discovery.aclose()
        if self.lane is not None:
            await self.lane.aclose()

    def statistics(self) -> dict[str, DiscoveryStatistics]:
        """Every service's source and replicas (static ones too)."""
        out = {
            name: DiscoveryStatistics(
                source="static",
                replicas=service.replicas,
                refreshes=0,
                changes=0,
                errors={},
                last_error=None,
            )
            for name, (service, _) in self.static.items()
        }
        out.update(self._discovery.statistics())
        return out
