"""One replica of a logical service, as a replica source describes it.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import final

from hedgeclient._checks import check_number, shown
from hedgeclient._replicas.services import origin_str, parse_origin

__all__ = ["MAX_WEIGHT", "Replica", "as_replica"]

MAX_WEIGHT = 65535.0
"""The largest weight: an SRV record's weight is a 16-bit number (RFC 2782)."""


@final
@dataclass(frozen=True, slots=True)
class Replica:
    """A replica origin, with the zone it runs in and its share of the load.

    A replica source (a list in ``replicas=``, a DNS name, your own source) yields
    these, or plain origin strings, which mean ``Replica(origin)``.

    Args:
        origin: an absolute http(s) origin, ``"http://10.0.0.7:8080"``; kept in its
            canonical form (default port dropped, IPv6 in brackets).
        zone: the zone (availability zone, rack, data centre) it runs in, or ``None``
            when unknown; a string of 1 to 128 characters.
        weight: its relative share of primaries, a number in (0, 65535], default 1
            (SRV records give theirs).

    Raises:
        TypeError: ``origin`` or ``zone`` is not a str, ``weight`` not a number.
        ValueError: ``origin`` is not an absolute http(s) origin (or has a path,
            query or credentials), ``zone`` is not 1 to 128 characters long,
            ``weight`` is not in (0, 65535].

    .. versionadded:: 0.1.0
    """

    origin: str
    zone: str | None = None
    weight: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "origin", origin_str(parse_origin(self.origin, "origin")))
        if self.zone is not None:
            if not isinstance(self.zone, str):
                msg = f"`zone` must be a str or None, got {shown(self.zone)}"
                raise TypeError(msg)
            if not 0 < len(self.zone) <= 128:
                msg = f"`zone` must be a string of 1 to 128 characters, got {shown(self.zone)}"
                raise ValueError(msg)
        weight = check_number("weight", self.weight, low=0.0, high=MAX_WEIGHT, low_open=True)
        object.__setattr__(self, "weight", weight)


def as_replica(value: object, parameter: str) -> Replica:
    """Return ``value`` as a :class:`Replica`: a Replica, or an origin string.

    Raises:
        TypeError: neither a Replica nor a str.
        ValueError: a string that is not an absolute http(s) origin.
    """
    if isinstance(value, Replica):
        return value
    if not isinstance(value, str):
        msg = (
            f"`{parameter}` must be an origin string like 'http://host:port' or a Replica, "
            f"got {shown(value)}"
        )
        raise TypeError(msg)
    return Replica(origin_str(parse_origin(value, parameter)))
