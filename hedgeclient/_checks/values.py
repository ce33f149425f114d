"""Values that are not numbers: names, headers, methods, statuses, callables, choices.

Each check returns the value as the caller keeps it, or raises ``TypeError`` (the wrong
kind of value) or ``ValueError`` (the right kind, out of range); every message names the
parameter, gives the bad value with ``!r`` and says what is allowed.
"""

from __future__ import annotations

import inspect
import numbers
import re
from collections.abc import Collection, Sequence
from typing import TypeVar

from hedgeclient._checks.text import shown
from hedgeclient._clock import Clock, default_clock
from hedgeclient._events import HedgeHook

__all__ = [
    "KNOWN_METHODS",
    "check_attempt_header",
    "check_bool",
    "check_clock",
    "check_hooks",
    "check_name",
    "check_other_origins",
    "check_route_key",
    "parse_methods",
    "parse_statuses",
]

_T = TypeVar("_T")

KNOWN_METHODS = frozenset(
    {"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE", "POST", "PATCH", "CONNECT", "QUERY"}
)
"""HTTP methods ``methods=`` and routes may name (RFC 9110, section 9; QUERY: the
HTTP QUERY method draft)."""

_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # RFC 9110, section 5.6.2
# Headers that HTTP itself, httpcore or the request's meaning rely on: the attempt
# number written over one of them would break framing (RFC 9112, section 6), the
# connection (RFC 9110, section 7.6.1), routing (Host), the request's content or
# conditions (RFC 9110, sections 13 and 14), its credentials, or the identity a server
# deduplicates by (Idempotency-Key, X-Request-Id).
_RESERVED_HEADERS = frozenset(
    {
        "authorization",
        "connection",
        "content-encoding",
        "content-length",
        "content-type",
        "cookie",
        "expect",
        "host",
        "idempotency-key",
        "if-match",
        "if-modified-since",
        "if-none-match",
        "if-range",
        "if-unmodified-since",
        "keep-alive",
        "proxy-authorization",
        "proxy-connection",
        "range",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "x-request-id",
    }
)


def check_attempt_header(attempt_header: object, *, optional: bool = True) -> str | None:
    """Return ``attempt_header`` if it is a header name (RFC 9110 token) of its own, or
    None when ``optional`` (the server's middleware must read a header: not optional)."""
    either = " or None" if optional else ""
    if attempt_header is None and optional:
        return None
    if not isinstance(attempt_header, str):
        msg = f"`attempt_header` must be a header name (str){either}, got {shown(attempt_header)}"
        raise TypeError(msg)
    if not attempt_header.strip():
        msg = (
            f"`attempt_header` must be a non-empty header name{either}, got {shown(attempt_header)}"
        )
        raise ValueError(msg)
    if not _TOKEN.fullmatch(attempt_header):
        msg = (
            f"`attempt_header` must be an HTTP header name (an RFC 9110 token){either}, "
            f"got {shown(attempt_header)}"
        )
        raise ValueError(msg)
    if attempt_header.lower() in _RESERVED_HEADERS:
        msg = (
            "`attempt_header` must not be a header HTTP or the request relies on (such "
            f"as Host, Content-Length, Authorization), got {shown(attempt_header)}"
        )
        raise ValueError(msg)
    return attempt_header


def check_name(name: object) -> str:
    """Return ``name`` if it is a non-empty string."""
    if not isinstance(name, str):
        msg = f"`name` must be a non-empty string, got {shown(name)}"
        raise TypeError(msg)
    if not name:
        msg = f"`name` must be a non-empty string, got {shown(name)}"
        raise ValueError(msg)
    return name


def parse_methods(methods: Collection[str], name: str = "methods") -> frozenset[str]:
    """Return the idempotency allow-list, upper-cased; only RFC 9110 method names.
    ``name`` is the parameter as the messages give it."""
    if isinstance(methods, str) or not isinstance(methods, Collection):
        msg = f"`{name}` must be a collection of method names, got {shown(methods)}"
        raise TypeError(msg)
    strays = [m for m in methods if not isinstance(m, str)]
    if strays:
        msg = f"`{name}` must hold method names (str), got {shown(strays[0])} in "
        msg += shown(methods)
        raise TypeError(msg)
    upper = frozenset(m.upper() for m in methods)
    unknown = sorted(upper - KNOWN_METHODS)
    if unknown:
        msg = f"`{name}` has unknown method(s) {shown(unknown)}; allowed: "
        msg += ", ".join(sorted(KNOWN_METHODS))
        raise ValueError(msg)
    return upper


def parse_statuses(statuses: Collection[int]) -> frozenset[int]:
    """Return the non-fatal statuses; each an error status, an int in [400, 599], not 429.

    A success or a redirect cannot be non-fatal: it would make every answer trigger the
    next backup (RFC 9110, sections 15.5 and 15.6 define the error classes).
    """
    if isinstance(statuses, (str, bytes)) or not isinstance(statuses, Collection):
        msg = f"`non_fatal_statuses` must be a collection of ints, got {shown(statuses)}"
        raise TypeError(msg)
    parsed: list[int] = []
    for status in statuses:
        # Any integer (numpy's int64 too, as ``max_hedges`` takes), kept as an int.
        if isinstance(status, bool) or not isinstance(status, numbers.Integral):
            msg = f"`non_fatal_statuses` must hold ints in [400, 599], got {shown(status)}"
            raise TypeError(msg)
        if not 400 <= int(status) <= 599:
            msg = (
                f"`non_fatal_statuses` must hold error statuses in [400, 599], got {shown(status)}"
            )
            raise ValueError(msg)
        if int(status) == 429:
            # RFC 6585 section 4: the client is asked to slow down. No backup follows it
            # (pushback), so it could never be passed over for another attempt.
            msg = (
                "`non_fatal_statuses` must not hold 429 (Too Many Requests): it asks the "
                "client to slow down, so no backup is ever sent after it (pushback)"
            )
            raise ValueError(msg)
        parsed.append(int(status))
    return frozenset(parsed)


def check_route_key(route_key: _T) -> _T:
    """Return ``route_key`` if it is None or callable; the transport checks its results."""
    if route_key is not None and not callable(route_key):
        msg = f"`route_key` must be a callable request -> str, got {shown(route_key)}"
        raise TypeError(msg)
    return route_key


def check_bool(name: str, value: object) -> bool:
    """Return ``value`` if it is a bool (not merely truthy)."""
    if not isinstance(value, bool):
        msg = f"`{name}` must be a bool, got {shown(value)}"
        raise TypeError(msg)
    return value


def check_hooks(hooks: Sequence[HedgeHook]) -> tuple[HedgeHook, ...]:
    """Return ``hooks`` as a tuple; each must be callable."""
    if (
        isinstance(hooks, (str, bytes))
        or not isinstance(hooks, Sequence)
        or any(not callable(h) for h in hooks)
    ):
        msg = f"`hooks` must be a sequence of callables taking a RequestRecord, got {shown(hooks)}"
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
        msg = f"`other_origins` must be 'pass', 'hedge' or None, got {shown(value)}"
        raise ValueError(msg)
    return value == "pass"


def check_clock(clock: object) -> Clock:
    """Return ``clock``, or :func:`~hedgeclient._clock.default_clock` if it is ``None``.

    Raises:
        TypeError: ``clock`` is neither ``None`` nor callable.
    """
    if clock is None:
        return default_clock
    if not callable(clock):
        msg = f"`clock` must be a callable returning seconds, or None, got {shown(clock)}"
        raise TypeError(msg)
    return clock
