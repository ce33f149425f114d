"""What both DNS sources share: name and nameserver checks, the resolver, its queries.

Strictly private.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any, Final, Literal, NamedTuple

import anyio
import sniffio

from hedgeclient._checks import check_seconds, shown
from hedgeclient._discovery._errors import DiscoveryFailure

__all__ = ["MAX_TTL", "AddressFamily", "DnsSource", "Family", "FamilyFailure"]

Family = Literal["any", "ipv4", "ipv6"]
"""Which addresses of a name to use: A and AAAA (``any``), A only, AAAA only."""

AddressFamily = Literal["ipv4", "ipv6"]
"""One family of addresses: ``ipv4`` (A records) or ``ipv6`` (AAAA records)."""

_RDTYPE: Final[dict[AddressFamily, str]] = {"ipv4": "A", "ipv6": "AAAA"}
_FAMILIES: Final[dict[Family, tuple[AddressFamily, ...]]] = {
    "any": ("ipv4", "ipv6"),
    "ipv4": ("ipv4",),
    "ipv6": ("ipv6",),
}


class FamilyFailure(NamedTuple):
    """A family whose query failed in a resolution that the other family answered."""

    family: AddressFamily
    failure: DiscoveryFailure


_LABEL: Final = re.compile(r"^[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?$")
MAX_TTL: Final = 3600.0
_MAX_TIMEOUT: Final = 60.0


def _check_name(name: object, parameter: str) -> str:
    """A DNS name: ASCII labels of 1-63 letters, digits, ``-`` or ``_``, 253 at most."""
    if not isinstance(name, str):
        msg = f"`{parameter}` must be a DNS name (str), got {shown(name)}"
        raise TypeError(msg)
    text = name[:-1] if name.endswith(".") else name
    try:
        ipaddress.ip_address(text)
    except ValueError:
        pass
    else:
        msg = f"`{parameter}` must be a DNS name, got the IP address {name!r}"
        raise ValueError(msg)
    if not text or len(text) > 253 or not all(_LABEL.match(label) for label in text.split(".")):
        msg = (
            f"`{parameter}` must be a DNS name: dot-separated labels of 1 to 63 ASCII "
            f"letters, digits, '-' or '_', 253 characters at most, got {shown(name)}"
        )
        raise ValueError(msg)
    return name


def _check_nameserver(nameserver: object) -> tuple[str, int] | None:
    """``"10.0.0.2"``, ``"10.0.0.2:5353"``, ``"::1"``, ``"[::1]:5353"``, or None."""
    if nameserver is None:
        return None
    msg = (
        "`nameserver` must be an IP address with an optional port ('10.0.0.2', "
        f"'10.0.0.2:5353', '[::1]:5353') or None, got {shown(nameserver)}"
    )
    if not isinstance(nameserver, str):
        raise TypeError(msg)
    host, port = nameserver, 53
    if nameserver.startswith("["):
        host, _, rest = nameserver[1:].partition("]")
        if rest:
            if not rest.startswith(":") or not rest[1:].isdigit():
                raise ValueError(msg)
            port = int(rest[1:])
    elif nameserver.count(":") == 1:
        host, _, text = nameserver.partition(":")
        if not text.isdigit():
            raise ValueError(msg)
        port = int(text)
    try:
        ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(msg) from None
    if not 1 <= port <= 65535:
        raise ValueError(msg)
    return host, port


def _import_dns() -> Any:
    try:
        import dns.asyncbackend
        import dns.asyncresolver
        import dns.nameserver
        import dns.resolver
    except ImportError as exc:  # pragma: no cover - the extra is installed in tests
        msg = "DNS replica sources need dnspython: install the extra 'hedgeclient[dns]'"
        raise ImportError(msg, name="dns") from exc
    return dns


class DnsSource:
    """What both DNS sources share: the resolver, the TTL bounds. Strictly private."""

    __slots__ = (
        "_dns",
        "_resolver",
        "family",
        "max_ttl",
        "min_ttl",
        "name",
        "nameserver",
        "timeout",
    )

    def __init__(
        self,
        name: str | None,
        *,
        family: Family,
        nameserver: str | None,
        min_ttl: float,
        max_ttl: float,
        timeout: float,
    ) -> None:
        self.name = None if name is None else _check_name(name, "name")
        if family not in ("any", "ipv4", "ipv6"):
            msg = f"`family` must be 'any', 'ipv4' or 'ipv6', got {shown(family)}"
            raise ValueError(msg)
        self.family: Family = family
        self.min_ttl = check_seconds("min_ttl", min_ttl, low_open=True, high=MAX_TTL)
        self.max_ttl = check_seconds("max_ttl", max_ttl, low_open=True, high=MAX_TTL)
        if self.max_ttl < self.min_ttl:
            msg = f"`max_ttl` ({max_ttl!r}) must be >= `min_ttl` ({min_ttl!r})"
            raise ValueError(msg)
        self.timeout = check_seconds("timeout", timeout, low_open=True, high=_MAX_TIMEOUT)
        server = _check_nameserver(nameserver)
        self.nameserver = nameserver
        self._dns = _import_dns()
        resolver = self._dns.asyncresolver.Resolver(configure=server is None)
        if server is not None:
            resolver.nameservers = [self._dns.nameserver.Do53Nameserver(*server)]
        resolver.cache = None
        resolver.lifetime = self.timeout
        self._resolver = resolver

    def describe(self, host: str | None = None) -> str:
        """The source as in a message: what it resolves (``name``, or ``host``, the
        logical origin's, when it has none), and the settings that are not defaults."""
        name = self.name if self.name is not None else host
        parts = [repr(name) if name is not None else "name=<the origin's host>"]
        port = getattr(self, "port", None)
        if port is not None:
            parts.append(f"port={port!r}")
        parts.append(f"family={self.family!r}")
        if self.nameserver is not None:
            parts.append(f"nameserver={self.nameserver!r}")
        return f"{type(self).__name__}({', '.join(parts)})"

    def __repr__(self) -> str:
        return self.describe()

    def clamp(self, ttl: float) -> float:
        """``ttl`` (seconds) within [min_ttl, max_ttl]."""
        return min(self.max_ttl, max(self.min_ttl, ttl))

    async def _query(self, name: str, rdtype: str, *, missing_ok: bool) -> Any | None:
        """One query; a dnspython error becomes a :class:`DiscoveryFailure`."""
        resolver = self._dns.resolver
        # Per call: dnspython's default backend is the first event loop it ever saw.
        backend = self._dns.asyncbackend.get_backend(sniffio.current_async_library())
        try:
            return await self._resolver.resolve(name, rdtype, search=True, backend=backend)
        except resolver.NoAnswer:
            if missing_ok:
                return None
            msg = f"{name} has no {rdtype} record"
            raise DiscoveryFailure(msg, kind="empty") from None
        except resolver.NXDOMAIN:
            msg = f"{name} does not exist (NXDOMAIN)"
            raise DiscoveryFailure(msg, kind="not_found") from None
        except self._dns.exception.Timeout:
            msg = f"no answer for {name} in {self.timeout} s"
            raise DiscoveryFailure(msg, kind="timeout") from None
        except self._dns.exception.DNSException as exc:
            msg = f"{name} {rdtype}: {exc}"
            raise DiscoveryFailure(msg, kind="server_error") from None

    async def _addresses(self, name: str, failed: list[FamilyFailure]) -> tuple[list[str], float]:
        """The addresses of ``name`` (by ``family``) and the least TTL of their records.

        With ``family="any"`` the A and AAAA queries run at once, and a family whose
        query fails while the other gives addresses is left out: its failure is
        appended to ``failed`` (a nameserver that answers only A, such as dnsmasq
        without ``--local`` refusing AAAA, must not cost the replicas it did give).

        Raises:
            DiscoveryFailure: no address: a family failed (its failure, the A one
                first) or neither has a record (``empty``).
        """
        families = _FAMILIES[self.family]
        answers: dict[AddressFamily, Any] = {}
        failures: dict[AddressFamily, DiscoveryFailure] = {}

        async def ask(family: AddressFamily) -> None:
            try:
                answers[family] = await self._query(name, _RDTYPE[family], missing_ok=True)
            except DiscoveryFailure as failure:
                failures[family] = failure

        if len(families) == 1:
            await ask(families[0])
        else:  # concurrently, as getaddrinfo does: a slow AAAA must not delay the A
            async with anyio.create_task_group() as group:
                for family in families:
                    group.start_soon(ask, family)
        addresses: list[str] = []
        ttl = MAX_TTL
        for family in families:
            answer = answers.get(family)
            if answer is not None and answer.rrset is not None:
                ttl = min(ttl, float(answer.rrset.ttl))
                addresses.extend(r.address for r in answer.rrset)
        if not addresses:
            for family in families:
                if family in failures:
                    raise failures[family]
            record = " or ".join(_RDTYPE[f] for f in families)
            msg = f"{name} has no {record} record"
            raise DiscoveryFailure(msg, kind="empty")
        failed.extend(FamilyFailure(f, failures[f]) for f in families if f in failures)
        return addresses, ttl
