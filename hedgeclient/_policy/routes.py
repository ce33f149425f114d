"""Per-route settings: which requests a route covers, whether they may be hedged, and
where their race ends.

An SDK (``openai``, ``anthropic`` and most others take an ``http_client=``) builds its
own requests, so its caller cannot add ``extensions={"hedge": True}`` to them. A
:class:`Route` says the same thing from the transport's side: requests matching a
method, a path glob and/or a predicate are opted in (or out), and their race may end at
the first body byte instead of the response headers (``decide_on="first_byte"``), which
is what a streaming server that sends ``200 OK`` at once and its first token later
needs. A route also carries its own hedging policy (its delay, its quantile and bounds,
``max_hedges``, its own hedge budget, the methods hedged, a backup hook), checked here
and merged with the transport's once, when the transport is built
(``_policy.overrides``).

Per request, ``extensions={"hedge_decide_on": "first_byte"}`` (or ``"headers"``)
overrides the route's decision point.

Strictly private: :class:`Route` is re-exported by :mod:`hedgeclient`.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Literal, TypeVar, final

import httpx

from hedgeclient._checks import KNOWN_METHODS, check_number, shown
from hedgeclient._policy.budget import HedgeBudget
from hedgeclient._policy.delay import DelayPolicy
from hedgeclient._policy.overrides import BackupHook, check_settings, methods_of

__all__ = [
    "DECIDE_ON_EXTENSION",
    "FIRST_BYTE_KEY",
    "DecideOn",
    "Route",
    "decision_point",
    "match_route",
]

DecideOn = Literal["headers", "first_byte"]
"""Where a request's race ends: at an attempt's response headers, or at its first body
byte (the end of an empty body counts as its first byte)."""

_DECIDE_ON = ("headers", "first_byte")

DECIDE_ON_EXTENSION = "hedge_decide_on"
"""The request extension that overrides a route's decision point, per request."""

_T = TypeVar("_T")

FIRST_BYTE_KEY = " (first byte)"
"""Appended to the route key of a request decided on its first byte, so that its hedge
delay is learned from times to the first byte, apart from header latencies."""


@final
@dataclass(frozen=True, slots=True)
class Route:
    """Settings for the requests that match a method, a path glob and a predicate.

    A request matches when every criterion given holds (a ``Route()`` with none
    matches every request). ``HedgedTransport(routes=[...])`` uses the first route that
    matches; a request that matches none is treated as before routes existed.

    Args:
        method: the HTTP method (case-insensitive; an RFC 9110 method name), or
            ``None`` (default) for any.
        path: a shell-style glob over the URL path, matched case-sensitively with
            :func:`fnmatch.fnmatchcase` (``*`` matches any run of characters, ``/``
            included), e.g. ``"/v1/chat/completions"`` or ``"*/completions"``; or
            ``None`` (default) for any path.
        match: a predicate ``request -> bool``, or ``None`` (default). It runs on
            every request to a configured origin whose method and path matched (hedged
            or not: the route may opt it in), before anything is sent; an exception it
            raises reaches the caller.
        hedge: ``True`` opts the matching requests in whatever their method (only
            for requests that are safe to send twice: a duplicated LLM generation is
            billed for its prompt and the tokens generated before it was cancelled);
            ``False`` opts them out; ``None`` (default) leaves it to the transport's
            ``methods``. A request's own ``extensions={"hedge": ...}`` wins over it.
        decide_on: ``"headers"`` (default) ends the race at the first response headers
            with a status that is not non-fatal; ``"first_byte"`` ends it at the first
            body byte of such a response (or the end of an empty body). The winner's
            body then starts with the bytes already read and continues from the same
            connection. A request's own ``extensions={"hedge_decide_on": ...}`` wins
            over it.
        name: the route key of the matching requests (their hedge delay and metric
            label) instead of the transport's ``route_key``; a non-empty str, or
            ``None`` (default). Keep names few.

    The route's hedging policy: each setting left ``None`` (the default) is the
    transport's; a request's own ``extensions={"hedge": HedgePolicy(...)}`` wins over
    the route's (``docs/api.md``, "Policy per route and per request").

    Args:
        delay: the route's hedge delay: seconds in [0, 5] (fixed), or a
            :class:`~hedgeclient.DelayPolicy` of its own.
        quantile: the route's own adaptive delay at this latency quantile, in (0, 1):
            an :class:`~hedgeclient.AdaptiveDelay` with the transport's settings (or
            the defaults, when the transport's delay is not adaptive) at that quantile,
            which sends backups for about ``1 - quantile`` of the route's requests.
            Not with ``delay``.
        min_delay: seconds, in [0, 3600]: a smaller delay is raised to it.
        max_delay: seconds, in [0, 3600] or ``math.inf``: above it the route sends no
            backup (reason ``cutoff``); at least ``min_delay`` and the shortest delay
            of the route's policy (a fixed ``delay``; an ``AdaptiveDelay``'s
            ``min_delay``), its own or the transport's (checked when the transport is
            built).
        max_hedges: backups per request of the route, an int in [0, 4], within what the
            transport's replicas allow (checked when the transport is built).
        budget: a :class:`~hedgeclient.HedgeBudget` of the route's own (its requests
            deposit into it and its backups draw on it); ``None``: the transport's,
            shared with every other route.
        methods: the methods hedged on this route (RFC 9110 names,
            case-insensitive) instead of the transport's ``methods``; distinct from
            ``method``, which chooses the requests the route matches.
        on_backup: the route's backup hook, a plain function (not ``async``;
            ``HedgedTransport(on_backup=)`` has the contract), instead of the
            transport's.

    On a ``"first_byte"`` route the hedge delay is learned from the time to the first
    byte, under the route key followed by ``" (first byte)"``, apart from the header
    latencies of the same requests decided on headers.

    Raises:
        TypeError: a criterion or setting of the wrong type.
        ValueError: an unknown method, a path that does not start with ``/`` or ``*``,
            an empty name, a ``decide_on`` other than ``"headers"`` and
            ``"first_byte"``, a policy setting out of range, or both ``delay`` and
            ``quantile``. Every message names the route
            (```Route(path='/export').max_hedges` must be ...``).

    Example usage::

        transport = HedgedTransport(
            replicas={"http://llm": ["http://10.0.0.7:8000", "http://10.0.0.8:8000"]},
            routes=[
                Route(method="POST", path="/v1/chat/completions", hedge=True,
                      decide_on="first_byte"),
            ],
        )

    .. versionadded:: 0.1.0
    """

    method: str | None = None
    path: str | None = None
    match: Callable[[httpx.Request], bool] | None = None
    hedge: bool | None = None
    decide_on: DecideOn = "headers"
    name: str | None = None
    delay: float | DelayPolicy | None = None
    quantile: float | None = None
    min_delay: float | None = None
    max_delay: float | None = None
    max_hedges: int | None = None
    budget: HedgeBudget | None = None
    methods: Collection[str] | None = None
    on_backup: BackupHook | None = None
    _pattern: re.Pattern[str] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        name = self._name
        if self.method is not None:
            if not isinstance(self.method, str):
                msg = f"`{name('method')}` must be an HTTP method name or None, "
                msg += f"got {shown(self.method)}"
                raise TypeError(msg)
            method = self.method.upper()
            if method not in KNOWN_METHODS:
                msg = f"`{name('method')}` must be one of {sorted(KNOWN_METHODS)} or None, "
                msg += f"got {shown(self.method)}"
                raise ValueError(msg)
            object.__setattr__(self, "method", method)
        if self.path is not None:
            # A long path is in the message once, after "got", not in the label too.
            where = name("path") if shown(self.path) == repr(self.path) else "Route.path"
            if not isinstance(self.path, str):
                msg = (
                    f"`{where}` must be a glob over the URL path (str) or None, "
                    f"got {shown(self.path)}"
                )
                raise TypeError(msg)
            if not self.path.startswith(("/", "*")):
                # A URL path starts with "/": "reports/*" or "http://svc/reports/*" would
                # never match, and the route would silently do nothing.
                msg = (
                    f"`{where}` must be a glob over the URL path, starting with '/' "
                    f"or '*' (such as '/v1/*'), got {shown(self.path)}"
                )
                raise ValueError(msg)
            object.__setattr__(self, "_pattern", re.compile(fnmatch.translate(self.path)))
        if self.match is not None and not callable(self.match):
            msg = f"`{name('match')}` must be a callable request -> bool or None, "
            msg += f"got {shown(self.match)}"
            raise TypeError(msg)
        if self.hedge is not None and not isinstance(self.hedge, bool):
            msg = f"`{name('hedge')}` must be True, False or None, got {shown(self.hedge)}"
            raise TypeError(msg)
        if self.decide_on not in _DECIDE_ON:
            msg = f"`{name('decide_on')}` must be 'headers' or 'first_byte', "
            msg += f"got {shown(self.decide_on)}"
            raise (ValueError if isinstance(self.decide_on, str) else TypeError)(msg)
        if self.name is not None and (not isinstance(self.name, str) or not self.name):
            msg = f"`{name('name')}` must be a non-empty str or None, got {shown(self.name)}"
            raise TypeError(msg) if not isinstance(self.name, str) else ValueError(msg)
        self._check_policy()

    @property
    def label(self) -> str:
        """The route as metrics name it: ``Route(name='export')``, else its criteria
        (``Route(method='GET', path='/export/*')``), whole."""
        return self._label(repr)

    @property
    def short_label(self) -> str:
        """The route as error messages name it: :attr:`label`, each value abbreviated
        past 40 characters (``shown``), so that a message stays one short line."""
        return self._label(shown)

    def _label(self, show: Callable[[object], str]) -> str:
        if self.name is not None:
            return f"Route(name={show(self.name)})"
        given = [
            f"{key}={show(value)}"
            for key, value in (("method", self.method), ("path", self.path))
            if value is not None
        ]
        if self.match is not None:
            called = getattr(self.match, "__name__", None)
            if called is None:  # a callable object, or not a callable at all (refused)
                called = "predicate" if callable(self.match) else show(self.match)
            given.append(f"match={called}")
        return f"Route({', '.join(given)})"

    def _name(self, parameter: str) -> str:
        """``parameter`` as the messages name it: ``Route(path='/export').max_hedges``."""
        return f"{self.short_label}.{parameter}"

    def _check_policy(self) -> None:
        """Check the policy settings, each message naming the route."""
        name = self._name

        if self.delay is not None and self.quantile is not None:
            msg = (
                f"`{name('quantile')}` must be None when `{name('delay')}` is given (the "
                f"quantile builds the route's own delay), got {shown(self.quantile)}"
            )
            raise ValueError(msg)
        if self.quantile is not None:
            q = check_number(
                name("quantile"), self.quantile, low=0.0, high=1.0, low_open=True,
                high_open=True, or_none=True,
            )  # fmt: skip
            object.__setattr__(self, "quantile", q)
        delay, low, high, *_ = check_settings(
            name,
            delay=self.delay,
            min_delay=self.min_delay,
            max_delay=self.max_delay,
            max_hedges=self.max_hedges,
            budget=self.budget,
            on_backup=self.on_backup,
        )
        for key, value in (("delay", delay), ("min_delay", low), ("max_delay", high)):
            object.__setattr__(self, key, value)
        object.__setattr__(self, "methods", methods_of(self.methods, name("methods")))

    def matches(self, request: httpx.Request) -> bool:
        """Return True when ``request`` meets every criterion of this route.

        Raises:
            Exception: whatever the ``match`` predicate raises.
        """
        if self.method is not None and request.method != self.method:
            return False
        if self._pattern is not None and self._pattern.match(request.url.path) is None:
            return False
        return self.match is None or bool(self.match(request))


def match_route(
    routes: tuple[tuple[Route, _T], ...], request: httpx.Request
) -> tuple[Route, _T] | None:
    """Return the first of ``routes`` (each a route and what the transport keeps with
    it) whose route ``request`` matches, or None."""
    for pair in routes:
        if pair[0].matches(request):
            return pair
    return None


def decision_point(request: httpx.Request, route: Route | None) -> DecideOn:
    """Return where ``request``'s race ends: its extension, else its route's, else headers.

    Raises:
        TypeError: ``extensions["hedge_decide_on"]`` is not a str.
        ValueError: it is neither ``"headers"`` nor ``"first_byte"``.
    """
    value = request.extensions.get(DECIDE_ON_EXTENSION)
    if value is None:
        return route.decide_on if route is not None else "headers"
    if value not in _DECIDE_ON:
        msg = (
            f"`extensions[{DECIDE_ON_EXTENSION!r}]` must be 'headers' or 'first_byte', "
            f"got {shown(value)}"
        )
        raise (ValueError if isinstance(value, str) else TypeError)(msg)
    decided: DecideOn = value
    return decided
