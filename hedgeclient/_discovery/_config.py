"""``HedgedTransport(replicas=..., zones=...)``: checked at construction.

Strictly private.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, final

from hedgeclient._checks import shown
from hedgeclient._discovery._dns import DnsReplicas
from hedgeclient._discovery._sources import Source, source_of
from hedgeclient._replicas.replica import Replica
from hedgeclient._replicas.services import Origin, Service, origin_str, parse_origin

__all__ = ["Config", "ZoneOf", "parse_config"]

ZoneOf = Callable[[str], "str | None"]


@final
@dataclass(slots=True)
class Config:
    """The checked routing configuration. Strictly private.

    Attributes:
        services: every configured service, by logical origin.
        sources: the discovered ones, by logical origin text, with their source.
        static: the static ones, by logical origin text, with their replicas.
        zone_of: the zone of a replica origin that its source gave none for.
    """

    services: dict[Origin, Service] = field(default_factory=dict)
    sources: dict[str, tuple[Service, Source]] = field(default_factory=dict)
    static: dict[str, tuple[Service, list[Replica]]] = field(default_factory=dict)
    zone_of: ZoneOf = lambda origin: None


def _zone_of(zones: object) -> ZoneOf:
    """Check ``zones``: a mapping of replica origin to zone, or a callable, or None."""
    if zones is None:
        return lambda origin: None
    if isinstance(zones, Mapping):
        table: dict[str, str] = {}
        for origin, zone in zones.items():
            key = origin_str(parse_origin(origin, "zones"))
            if not isinstance(zone, str) or not 0 < len(zone) <= 128:
                msg = f"`zones[{shown(origin)}]` must be a string of 1 to 128 characters, "
                msg += f"got {shown(zone)}"
                raise (ValueError if isinstance(zone, str) else TypeError)(msg)
            table[key] = zone
        return table.get
    if callable(zones):
        function: Callable[[str], Any] = zones

        def checked(origin: str) -> str | None:
            zone = function(origin)
            return zone if isinstance(zone, str) and 0 < len(zone) <= 128 else None

        return checked
    msg = (
        "`zones` must be a mapping of replica origin to zone, a callable origin -> zone "
        f"or None, or None, got {shown(zones)}"
    )
    raise TypeError(msg)


def _check_dns_name(source: Source, key: Origin, logical: str) -> None:
    """A DnsReplicas that takes its name from the origin needs a host that is a name."""
    host = key[1]
    if not isinstance(source, DnsReplicas) or source.name is not None:
        return
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return
    msg = (
        f"`replicas[{shown(logical)}]` is a DnsReplicas() that takes its name from the "
        f"origin, whose host {host!r} is an IP address, not a DNS name: give "
        "DnsReplicas the name to resolve, or list the replica origins"
    )
    raise ValueError(msg)


def parse_config(replicas: object, zones: object = None) -> Config:
    """Check ``replicas=`` and ``zones=``; build the services.

    Raises:
        TypeError: not a mapping of origin strings to replica sources, or a value of
            no accepted kind (see :func:`~hedgeclient._discovery._sources.source_of`).
        ValueError: an origin that is not an absolute http(s) origin, a static list
            that is empty or lists a replica twice, one logical origin given twice, a
            ``DnsReplicas()`` with no name for an origin whose host is an IP address.
    """
    config = Config(zone_of=_zone_of(zones))
    if replicas is None:
        return config
    if not isinstance(replicas, Mapping):
        msg = f"`replicas` must be a mapping of origin to replica origins, got {shown(replicas)}"
        raise TypeError(msg)
    for logical, value in replicas.items():
        key = parse_origin(logical, "replicas")
        if key in config.services:
            msg = (
                f"`replicas` gives the origin {origin_str(key)!r} twice (as "
                f"{shown(config.services[key].given)} and {shown(logical)}); list its replicas once"
            )
            raise ValueError(msg)
        parsed = source_of(value, f"replicas[{shown(logical)}]")
        service = Service(key, [], given=logical)
        name = service.route_suffix
        if isinstance(parsed, list):
            zones_now = {}
            for replica in parsed:
                zone = replica.zone if replica.zone is not None else config.zone_of(replica.origin)
                if zone is not None:
                    zones_now[replica.origin] = zone
            service.update([r.origin for r in parsed], zones_now)
            config.static[name] = (service, parsed)
        else:
            _check_dns_name(parsed, key, logical)
            config.sources[name] = (service, parsed)
        config.services[key] = service
    return config
