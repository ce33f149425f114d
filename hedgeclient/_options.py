"""Checks of ``HedgedTransport``'s arguments; every message names the parameter.

Strictly private.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from typing import TypeVar

from hedgeclient._checks import check_int
from hedgeclient._events import HedgeHook
from hedgeclient._routing import Service

__all__ = [
    "KNOWN_METHODS",
    "MAX_HEDGES_LIMIT",
    "check_attempt_header",
    "check_bool",
    "check_hooks",
    "check_name",
    "check_route_key",
    "max_hedges_for",
    "parse_methods",
    "parse_statuses",
]

KNOWN_METHODS = frozenset(
    {"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE", "POST", "PATCH", "CONNECT", "QUERY"}
)
MAX_HEDGES_LIMIT = 4
_T = TypeVar("_T")
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # RFC 9110, section 5.6.2


def max_hedges_for(max_hedges: int | None, services: Collection[Service]) -> int:
    """Return the backups per request: ``max_hedges``, or its default for ``services``.

    Each backup needs another replica, so with configured services the bound is the
    largest replica count minus one (and :data:`MAX_HEDGES_LIMIT`). The default is 1,
    or 0 when every configured service has a single replica.
    """
    most = max((len(s.replicas) for s in services), default=0)
    high = MAX_HEDGES_LIMIT if most == 0 else min(MAX_HEDGES_LIMIT, most - 1)
    if max_hedges is None:
        return min(1, high)
    if (
        isinstance(max_hedges, int)
        and not isinstance(max_hedges, bool)
        and high < max_hedges <= MAX_HEDGES_LIMIT
    ):
        msg = (
            f"`max_hedges` must be in [0, {high}] (each backup needs another replica, and "
            f"the largest service has {most}), got {max_hedges!r}"
        )
        raise ValueError(msg)
    return check_int("max_hedges", max_hedges, 0, high)


def parse_methods(methods: Collection[str]) -> frozenset[str]:
    """Return the idempotency allow-list, upper-cased; only RFC 9110 method names."""
    if isinstance(methods, str) or not isinstance(methods, Collection):
        msg = f"`methods` must be a collection of method names, got {methods!r}"
        raise TypeError(msg)
    upper = frozenset(str(m).upper() for m in methods)
    unknown = sorted(upper - KNOWN_METHODS)
    if unknown:
        msg = f"`methods` has unknown method(s) {unknown!r}; allowed: {sorted(KNOWN_METHODS)}"
        raise ValueError(msg)
    return upper


def parse_statuses(statuses: Collection[int]) -> frozenset[int]:
    """Return the non-fatal statuses; each an int in [100, 599]."""
    if isinstance(statuses, (str, bytes)) or not isinstance(statuses, Collection):
        msg = f"`non_fatal_statuses` must be a collection of ints, got {statuses!r}"
        raise TypeError(msg)
    for status in statuses:
        if isinstance(status, bool) or not isinstance(status, int):
            msg = f"`non_fatal_statuses` must hold ints in [100, 599], got {status!r}"
            raise TypeError(msg)
        if not 100 <= status <= 599:
            msg = f"`non_fatal_statuses` must hold statuses in [100, 599], got {status!r}"
            raise ValueError(msg)
    return frozenset(statuses)


def check_route_key(route_key: _T) -> _T:
    """Return ``route_key`` if it is None or callable; the transport checks its results."""
    if route_key is not None and not callable(route_key):
        msg = f"`route_key` must be a callable request -> str, got {route_key!r}"
        raise TypeError(msg)
    return route_key


def check_attempt_header(attempt_header: object) -> str | None:
    """Return ``attempt_header`` if it is None or an HTTP header name (RFC 9110 token)."""
    if attempt_header is None:
        return None
    if not isinstance(attempt_header, str):
        msg = f"`attempt_header` must be a header name (str) or None, got {attempt_header!r}"
        raise TypeError(msg)
    if not attempt_header.strip():
        msg = f"`attempt_header` must be a non-empty header name or None, got {attempt_header!r}"
        raise ValueError(msg)
    if not _TOKEN.fullmatch(attempt_header):
        msg = (
            "`attempt_header` must be an HTTP header name (an RFC 9110 token) or None, "
            f"got {attempt_header!r}"
        )
        raise ValueError(msg)
    return attempt_header


def check_bool(name: str, value: object) -> bool:
    """Return ``value`` if it is a bool (not merely truthy)."""
    if not isinstance(value, bool):
        msg = f"`{name}` must be a bool, got {value!r}"
        raise TypeError(msg)
    return value


def check_hooks(hooks: Sequence[HedgeHook]) -> tuple[HedgeHook, ...]:
    """Return ``hooks`` as a tuple; each must be callable."""
    if (
        isinstance(hooks, (str, bytes))
        or not isinstance(hooks, Sequence)
        or any(not callable(h) for h in hooks)
    ):
        msg = f"`hooks` must be a sequence of callables taking a RequestRecord, got {hooks!r}"
        raise TypeError(msg)
    return tuple(hooks)


def check_name(name: object) -> str:
    """Return ``name`` if it is a non-empty string."""
    if not isinstance(name, str):
        msg = f"`name` must be a non-empty string, got {name!r}"
        raise TypeError(msg)
    if not name:
        msg = f"`name` must be a non-empty string, got {name!r}"
        raise ValueError(msg)
    return name
