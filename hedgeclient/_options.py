"""Checks of ``HedgedTransport``'s arguments; every message names the parameter.

Strictly private.
"""

from __future__ import annotations

import inspect
from collections.abc import Collection, Sequence
from typing import TypeVar

from hedgeclient._checks import KNOWN_METHODS, check_attempt_header, check_int, check_name
from hedgeclient._events import HedgeHook
from hedgeclient._replicas.services import Service

__all__ = [
    "KNOWN_METHODS",
    "MAX_HEDGES_LIMIT",
    "check_attempt_header",
    "check_bool",
    "check_hooks",
    "check_name",
    "check_other_origins",
    "check_route_key",
    "max_hedges_for",
    "parse_methods",
    "parse_statuses",
]

MAX_HEDGES_LIMIT = 4
_T = TypeVar("_T")


def max_hedges_for(max_hedges: int | None, services: Collection[Service], fleet: object) -> int:
    """Return the backups per request: ``max_hedges``, or its default (1).

    Each backup goes to another replica, so when every service is a static list of two
    or more, the bound is replicas - 1 of the largest (and :data:`MAX_HEDGES_LIMIT`). A
    service with one address sends its backups to that address over other
    connections (a load balancer behind it may spread them), and a discovered one may
    grow: :data:`MAX_HEDGES_LIMIT` bounds those.

    Raises:
        TypeError: ``max_hedges`` is not an int (a bool is not).
        ValueError: ``max_hedges`` is out of range; the message gives the bound and why.
    """
    bounded = not getattr(fleet, "discovered", False) and all(len(s.replicas) > 1 for s in services)
    largest = max(services, key=lambda s: len(s.replicas), default=None)
    most = 0 if largest is None else len(largest.replicas)
    high = min(MAX_HEDGES_LIMIT, most - 1) if bounded and most else MAX_HEDGES_LIMIT
    if max_hedges is None:
        return 1
    if isinstance(max_hedges, int) and not isinstance(max_hedges, bool) and max_hedges > high:
        if high < MAX_HEDGES_LIMIT and largest is not None:
            why = (
                f"replicas - 1: each backup goes to another replica, and the largest "
                f"service, {largest.given or largest.route_suffix!r}, lists {most}; a "
                f"service with one address allows up to {MAX_HEDGES_LIMIT}, its backups "
                "going to that address over other connections"
            )
        else:
            why = (
                f"MAX_HEDGES_LIMIT: at most {MAX_HEDGES_LIMIT} backups per request; "
                "with static lists of two or more replicas, at most replicas - 1"
            )
        msg = f"`max_hedges` must be in [0, {high}] ({why}), got {max_hedges!r}"
        raise ValueError(msg)
    return check_int("max_hedges", max_hedges, 0, high)


def parse_methods(methods: Collection[str]) -> frozenset[str]:
    """Return the idempotency allow-list, upper-cased; only RFC 9110 method names."""
    if isinstance(methods, str) or not isinstance(methods, Collection):
        msg = f"`methods` must be a collection of method names, got {methods!r}"
        raise TypeError(msg)
    strays = [m for m in methods if not isinstance(m, str)]
    if strays:
        msg = f"`methods` must hold method names (str), got {strays[0]!r} in {methods!r}"
        raise TypeError(msg)
    upper = frozenset(m.upper() for m in methods)
    unknown = sorted(upper - KNOWN_METHODS)
    if unknown:
        msg = f"`methods` has unknown method(s) {unknown!r}; allowed: {sorted(KNOWN_METHODS)}"
        raise ValueError(msg)
    return upper


def parse_statuses(statuses: Collection[int]) -> frozenset[int]:
    """Return the non-fatal statuses; each an error status, an int in [400, 599], not 429.

    A success or a redirect cannot be non-fatal: it would make every answer trigger the
    next backup (RFC 9110, sections 15.5 and 15.6 define the error classes).
    """
    if isinstance(statuses, (str, bytes)) or not isinstance(statuses, Collection):
        msg = f"`non_fatal_statuses` must be a collection of ints, got {statuses!r}"
        raise TypeError(msg)
    for status in statuses:
        if isinstance(status, bool) or not isinstance(status, int):
            msg = f"`non_fatal_statuses` must hold ints in [400, 599], got {status!r}"
            raise TypeError(msg)
        if not 400 <= status <= 599:
            msg = f"`non_fatal_statuses` must hold error statuses in [400, 599], got {status!r}"
            raise ValueError(msg)
        if status == 429:
            # RFC 6585 section 4: the client is asked to slow down. No backup follows it
            # (pushback), so it could never be passed over for another attempt.
            msg = (
                "`non_fatal_statuses` must not hold 429 (Too Many Requests): it asks the "
                "client to slow down, so no backup is ever sent after it (pushback)"
            )
            raise ValueError(msg)
    return frozenset(statuses)


def check_route_key(route_key: _T) -> _T:
    """Return ``route_key`` if it is None or callable; the transport checks its results."""
    if route_key is not None and not callable(route_key):
        msg = f"`route_key` must be a callable request -> str, got {route_key!r}"
        raise TypeError(msg)
    return route_key


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
    for hook in hooks:
        # A hook runs synchronously as the request ends: a coroutine function would
        # only make a coroutine that nobody awaits.
        if inspect.iscoroutinefunction(hook) or inspect.iscoroutinefunction(type(hook).__call__):
            msg = (
                f"`hooks` must be plain (synchronous) callables, got the coroutine "
                f"function {hook!r}: schedule async work from a plain hook instead"
            )
            raise TypeError(msg)
    return tuple(hooks)


def check_other_origins(value: object, has_replicas: bool) -> bool:
    """Parse ``other_origins``; return True when other origins pass through unchanged."""
    if value is None:
        return has_replicas
    if value not in ("pass", "hedge"):
        msg = f"`other_origins` must be 'pass', 'hedge' or None, got {value!r}"
        raise ValueError(msg)
    return value == "pass"
