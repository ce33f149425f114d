"""Services: logical origins and their replica origins.

``HedgedTransport(replicas={"http://catalog": ["http://10.0.0.7:8080", ...]})`` maps a
logical origin (scheme, host, port) to replica origins. Origins are compared after
httpx's normalisation, with default ports made explicit (RFC 9110, section 4.2).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import final

import httpx

from hedgeclient._checks import redacted, shown

__all__ = ["Origin", "Service", "origin_of", "origin_str", "parse_origin", "parse_replicas"]

Origin = tuple[str, str, int]
_DEFAULT_PORTS = {"http": 80, "https": 443}


def origin_of(url: httpx.URL) -> Origin:
    """Return ``(scheme, host, port)`` of ``url``, with the default port made explicit."""
    port = url.port if url.port is not None else _DEFAULT_PORTS.get(url.scheme, 0)
    return (url.scheme, url.host, port)


def origin_str(origin: Origin) -> str:
    """Return the canonical text of ``origin`` (``"http://10.0.0.7:8080"``)."""
    scheme, host, port = origin
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    if _DEFAULT_PORTS.get(scheme) == port:
        return f"{scheme}://{host}"
    return f"{scheme}://{host}:{port}"


def parse_origin(value: object, parameter: str) -> Origin:
    """Parse an absolute http(s) origin such as ``"http://10.0.0.7:8080"``."""
    if not isinstance(value, str):
        msg = f"`{parameter}` must be an origin string like 'http://host:port', got {shown(value)}"
        raise TypeError(msg)
    try:
        url = httpx.URL(value)
    except httpx.InvalidURL as exc:
        reason = redacted(str(exc))  # httpx's reason quotes the part it refused
        reason = reason if len(reason) <= 40 else f"{reason[:37]}..."
        msg = f"`{parameter}` must be an absolute http(s) origin, got {shown(value)} ({reason})"
        raise ValueError(msg) from None
    if url.scheme not in _DEFAULT_PORTS or not url.host:
        msg = f"`{parameter}` must be an absolute http:// or https:// origin, got {shown(value)}"
        raise ValueError(msg)
    if url.path not in ("", "/") or url.query or url.fragment or url.userinfo:
        msg = (
            f"`{parameter}` must be an origin (scheme, host and port only, no path, "
            f"query or credentials), got {shown(value)}"
        )
        raise ValueError(msg)
    if url.port is not None and not 1 <= url.port <= 65535:  # RFC 6335, section 6
        msg = f"`{parameter}` must have a port in [1, 65535], got {shown(value)}"
        raise ValueError(msg)
    return origin_of(url)


@final
class Service:
    """A logical origin and its replicas now. Strictly private.

    The replicas change as discovery sees them come and go: :meth:`update` swaps
    ``replicas``, ``replica_urls`` and ``zones`` in one step (no await in between), so a
    request reads either the old set or the new one. A request reads ``replicas``
    afresh for each attempt: one removed while it is in flight gets no new attempt.
    """

    __slots__ = (
        "given",
        "logical",
        "logical_host",
        "replica_urls",
        "replicas",
        "route_suffix",
        "single",
        "sni",
        "zones",
    )

    def __init__(
        self,
        logical: Origin,
        replicas: Sequence[Origin],
        *,
        given: str = "",
        zones: Mapping[str, str] | None = None,
    ) -> None:
        self.given = given  # as the caller wrote it, for messages
        self.logical = logical
        self.logical_host = logical[1]
        self.route_suffix = origin_str(logical)
        self.replicas: tuple[str, ...] = ()
        self.replica_urls: dict[str, httpx.URL] = {}
        self.zones: dict[str, str] = {}
        self.sni: dict[str, bool] = {}  # replica -> its TLS name is not the logical host
        self.single = False
        self.update([origin_str(r) for r in replicas], zones or {})

    def update(self, replicas: Sequence[str], zones: Mapping[str, str]) -> None:
        """Make ``replicas`` (canonical origin strings) the replicas, with their known
        ``zones``."""
        urls = {r: self.replica_urls.get(r) or httpx.URL(r) for r in replicas}
        self.replicas, self.replica_urls, self.zones, self.sni = (
            tuple(replicas),
            urls,
            {r: z for r, z in zones.items() if r in urls},
            {r: u.scheme == "https" and u.host != self.logical_host for r, u in urls.items()},
        )
        self.single = len(self.replicas) == 1

    def url(self, replica: str) -> httpx.URL:
        """The URL of ``replica``, also after it left the set."""
        url = self.replica_urls.get(replica)
        return url if url is not None else httpx.URL(replica)


def parse_replicas(replicas: Mapping[str, Sequence[str]] | None) -> dict[Origin, Service]:
    """Validate ``HedgedTransport(replicas=...)``; return the services by logical origin.

    Raises:
        TypeError: not a mapping of origin strings to lists of origin strings.
        ValueError: an origin that is not an absolute http(s) origin (or whose port is
            not in [1, 65535]), an empty replica list, a replica listed twice, or one
            logical origin given twice (``"http://catalog"`` and
            ``"http://catalog:80"`` are the same origin).
    """
    if replicas is None:
        return {}
    if not isinstance(replicas, Mapping):
        msg = f"`replicas` must be a mapping of origin to replica origins, got {shown(replicas)}"
        raise TypeError(msg)
    services: dict[Origin, Service] = {}
    for logical, origins in replicas.items():
        key = parse_origin(logical, "replicas")
        if key in services:
            msg = (
                f"`replicas` gives the origin {origin_str(key)!r} twice (as "
                f"{shown(services[key].given)} and {shown(logical)}); list its replicas once"
            )
            raise ValueError(msg)
        if isinstance(origins, str) or not isinstance(origins, Sequence):
            msg = f"`replicas[{shown(logical)}]` must be a list of origins, got {shown(origins)}"
            raise TypeError(msg)
        if not origins:
            msg = f"`replicas[{shown(logical)}]` must list at least one replica, got []"
            raise ValueError(msg)
        parsed = [parse_origin(o, f"replicas[{shown(logical)}]") for o in origins]
        if len(set(parsed)) != len(parsed):
            msg = f"`replicas[{shown(logical)}]` lists a replica twice: {shown(list(origins))}"
            raise ValueError(msg)
        services[key] = Service(key, parsed, given=logical)
    return services
