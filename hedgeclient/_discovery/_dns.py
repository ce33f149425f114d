"""DNS replica sources: every address of a name (A/AAAA), or SRV records.

Resolution uses dnspython's async resolver (``dns.asyncresolver``), which runs on
asyncio and trio alike (its backend is picked per call, through ``sniffio``: dnspython
would otherwise keep the first event loop library it saw), with its own cache off:
every refresh asks the nameserver, so a change is seen within one TTL. dnspython is an
optional dependency (``hedgeclient[dns]``), imported when a source is built.

Prior art: a Kubernetes headless Service answers one A record per ready pod (TTL 5 to
30 s); Consul answers SRV records with each instance's port; RFC 2782 (SRV: the lowest
priority is used first, weights share the load within it); gRPC's DNS resolver (which
re-resolves at most every 30 s).

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import final

from hedgeclient._checks import check_optional_int
from hedgeclient._discovery._errors import DiscoveryFailure
from hedgeclient._discovery._resolver import DnsSource, Family, FamilyFailure
from hedgeclient._replicas.replica import Replica
from hedgeclient._replicas.services import Origin, origin_str

__all__ = ["DnsReplicas", "Family", "SrvReplicas"]

logger = logging.getLogger("hedgeclient")


@final
class DnsReplicas(DnsSource):
    """The replicas of a logical origin: every address of a DNS name.

    A Kubernetes headless Service is the usual case: its name answers one A (or AAAA)
    record per ready pod. Each address becomes a replica origin with the logical
    origin's scheme and port (or ``port``); requests keep the logical ``Host`` header
    and, for https, the logical name for TLS (SNI and the certificate check). The name
    is resolved again when its TTL (clamped to [``min_ttl``, ``max_ttl``]) runs out,
    and at once (at most once a second) after a connection to a replica fails. A name
    with a single address is still hedged: the backup goes to that address over
    another connection (``docs/replicas.md``, "One address").

    Args:
        name: the DNS name; default (``None``) the logical origin's host (an origin
            whose host is an IP address is refused when the transport is built).
            Dot-separated labels of ASCII letters, digits, ``-`` and ``_``, not an IP
            address; a relative name is tried with the resolver's search domains, as
            ``getaddrinfo`` does.
        port: the replicas' port, in [1, 65535]; default the logical origin's.
        family: ``"any"`` (A and AAAA, default), ``"ipv4"`` or ``"ipv6"``. With
            ``"any"`` both queries go out together; when one fails (REFUSED,
            SERVFAIL, no answer in time) and the other gives addresses, those are
            used, and the failed family is logged and counted
            (:attr:`DiscoveryStatistics.family_errors
            <hedgeclient.DiscoveryStatistics.family_errors>`).
        nameserver: the nameserver to ask, an IP address with an optional port
            (``"10.96.0.10"``, ``"127.0.0.1:5353"``, ``"[::1]:53"``); default the
            system's (``/etc/resolv.conf``).
        min_ttl: the shortest time between resolutions, seconds, in (0, 3600];
            default 1.
        max_ttl: the longest, seconds, in [min_ttl, 3600]; default 30 (the figure
            gRPC's resolver never goes below).
        timeout: seconds one resolution may take (dnspython's ``lifetime``), in
            (0, 60]; default 2.

    Raises:
        TypeError: a parameter of the wrong type.
        ValueError: a malformed name (or an IP address) or nameserver, a port outside
            [1, 65535], a TTL bound or timeout out of range, or ``max_ttl`` <
            ``min_ttl``.
        ImportError: dnspython is not installed (``pip install 'hedgeclient[dns]'``).

    Example usage::

        headless = DnsReplicas("catalog-headless.shop.svc.cluster.local")
        transport = HedgedTransport(replicas={"http://catalog:8080": headless})

    .. versionadded:: 0.1.0
    """

    __slots__ = ("port",)

    def __init__(
        self,
        name: str | None = None,
        *,
        port: int | None = None,
        family: Family = "any",
        nameserver: str | None = None,
        min_ttl: float = 1.0,
        max_ttl: float = 30.0,
        timeout: float = 2.0,
    ) -> None:
        check_optional_int("port", port, 1, 65535)
        super().__init__(
            name,
            family=family,
            nameserver=nameserver,
            min_ttl=min_ttl,
            max_ttl=max_ttl,
            timeout=timeout,
        )
        self.port = port

    async def resolve(self, logical: Origin) -> tuple[list[Replica], float]:
        """The replicas now, and seconds until they should be resolved again.

        Raises:
            DiscoveryFailure: the name does not resolve (its ``kind`` says why).
        """
        return await self._lookup(logical, [])

    async def _lookup(
        self, logical: Origin, failed: list[FamilyFailure]
    ) -> tuple[list[Replica], float]:
        """:meth:`resolve`, appending to ``failed`` each family left out (strictly private)."""
        scheme, host, logical_port = logical
        addresses, ttl = await self._addresses(self.name or host, failed)
        port = self.port or logical_port
        return [Replica(origin_str((scheme, a, port))) for a in addresses], self.clamp(ttl)


@final
class SrvReplicas(DnsSource):
    """The replicas of a logical origin: the targets of DNS SRV records (RFC 2782).

    Each SRV record names a target host, a port, a priority and a weight (Consul
    answers them for ``<service>.service.consul``, Kubernetes for
    ``_<port>._<proto>.<service>.<namespace>.svc.cluster.local``). The records of the
    lowest priority are used (the others are a fallback RFC 2782 leaves to the
    client: they are used only when no target of the lowest priority resolves); each
    target's addresses become replicas on the record's port, with the record's weight
    (a weight of 0 counts as 0.01 beside others, and as 1 when all are 0). A target of
    ``"."`` means "no service" and is skipped, and so is a target that does not
    resolve (a pod being deleted: logged at debug level); the resolution fails only
    when no target resolves. Re-resolution follows the least TTL of the SRV and
    address records, as for :class:`DnsReplicas`.

    Args:
        name: the SRV name, e.g. ``"_http._tcp.search.service.consul"``; labels as
            for :class:`DnsReplicas`. Required.
        family: as for :class:`DnsReplicas`, for the targets' addresses.
        nameserver: as for :class:`DnsReplicas`.
        min_ttl: as for :class:`DnsReplicas`.
        max_ttl: as for :class:`DnsReplicas`.
        timeout: as for :class:`DnsReplicas`, for each query (the SRV one, then each
            target's).

    Raises:
        TypeError: as for :class:`DnsReplicas`, and ``name`` is ``None``.
        ValueError: as for :class:`DnsReplicas`.
        ImportError: as for :class:`DnsReplicas`.

    .. versionadded:: 0.1.0
    """

    __slots__ = ()

    def __init__(
        self,
        name: str,
        *,
        family: Family = "any",
        nameserver: str | None = None,
        min_ttl: float = 1.0,
        max_ttl: float = 30.0,
        timeout: float = 2.0,
    ) -> None:
        if name is None:
            msg = "`name` must be the SRV name (str), got None"
            raise TypeError(msg)
        super().__init__(
            name,
            family=family,
            nameserver=nameserver,
            min_ttl=min_ttl,
            max_ttl=max_ttl,
            timeout=timeout,
        )

    async def resolve(self, logical: Origin) -> tuple[list[Replica], float]:
        """The replicas now, and seconds until they should be resolved again.

        A target that does not resolve (NXDOMAIN, no address: a pod being deleted) is
        skipped and logged at debug level; the records of the next priority are used
        only when no target of a lower one resolves.

        Raises:
            DiscoveryFailure: the name has no SRV record, every target is ``"."``, or
                no target resolves (the message names them).
        """
        return await self._lookup(logical, [])

    async def _lookup(
        self, logical: Origin, failed: list[FamilyFailure]
    ) -> tuple[list[Replica], float]:
        """:meth:`resolve`, appending to ``failed`` each family left out (strictly private)."""
        assert self.name is not None
        answer = await self._query(self.name, "SRV", missing_ok=False)
        assert answer is not None
        ttl = float(answer.rrset.ttl)
        records = [r for r in answer.rrset if r.target.to_text() != "."]
        if not records:
            msg = f"{self.name}: every SRV target is '.' (no service)"
            raise DiscoveryFailure(msg, kind="empty")
        failures: list[DiscoveryFailure] = []
        for priority in sorted({r.priority for r in records}):
            chosen = [r for r in records if r.priority == priority]
            weights = _weights([r.weight for r in chosen])
            replicas: list[Replica] = []
            for record, weight in zip(chosen, weights, strict=True):
                target = record.target.to_text()
                try:
                    addresses, address_ttl = await self._addresses(target, failed)
                except DiscoveryFailure as failure:  # a target briefly gone is normal
                    logger.debug("hedgeclient: SRV target of %s skipped: %s", self.name, failure)
                    failures.append(failure)
                    continue
                ttl = min(ttl, address_ttl)
                replicas.extend(
                    Replica(origin_str((logical[0], a, record.port)), weight=weight)
                    for a in addresses
                )
            if replicas:
                return replicas, self.clamp(ttl)
        kinds = {f.kind for f in failures}
        msg = f"{self.name}: no SRV target resolves ({'; '.join(map(str, failures))})"
        raise DiscoveryFailure(msg, kind=kinds.pop() if len(kinds) == 1 else "empty")


def _weights(raw: Sequence[int]) -> list[float]:
    """SRV weights as replica weights: 0 is a very small share, unless all are 0."""
    if not any(raw):
        return [1.0] * len(raw)
    return [float(w) if w > 0 else 0.01 for w in raw]
