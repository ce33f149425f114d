"""``HedgedTransport``'s arguments, checked, and the parts they build.

The transport's parts are each given as an instance (or ``None`` for the default): its
inner transport, delay policy, budget, replica selector and tied-request settings; a
class given where an instance belongs is refused by name. The default selector reads the
event loop's clock through ``_timer.now`` (one backend look-up a call); the default
delay keeps its own default clock, the loop's, so the request path hands it the time
each sample ended instead (``_policy.overrides``, ``Learn``). ``extra_load`` derives
the delay's quantile and the budget's ratio together (:func:`delay_and_budget`).

Unlike the rest of ``_checks``, this module builds the transport's parts, so it sits
with the transport at the top of the import rule (``tests/test_layers.py``). It also
re-exports the checks of ``_checks.values`` the transport uses, so that the transport
finds every check of its arguments here.
"""

from __future__ import annotations

import numbers
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Final, cast

import httpx

from hedgeclient._checks.numbers import as_seconds, check_int, check_number
from hedgeclient._checks.text import shown
from hedgeclient._checks.values import (
    check_attempt_header,
    check_bool,
    check_hooks,
    check_name,
    check_other_origins,
    check_route_key,
    parse_methods,
    parse_statuses,
)
from hedgeclient._policy.adaptive import AdaptiveDelay
from hedgeclient._policy.budget import HedgeBudget
from hedgeclient._policy.delay import DelayPolicy, FixedDelay, routed_delays
from hedgeclient._policy.overrides import (
    MAX_HEDGES_LIMIT,
    BackupHook,
    Effective,
    for_route,
    refuse_async_hook,
    transport_effective,
)
from hedgeclient._policy.routes import Route
from hedgeclient._policy.tied import TiedRequests
from hedgeclient._replicas.choice import BackupZone
from hedgeclient._replicas.selector import PowerOfTwoChoices, ReplicaSelector
from hedgeclient._replicas.services import Service
from hedgeclient._timer import now

if TYPE_CHECKING:
    from hedgeclient._fleet import Fleet

__all__ = [
    "DEFAULT_EXTRA_LOAD",
    "MAX_EXTRA_LOAD",
    "MAX_HEDGES_LIMIT",
    "MIN_EXTRA_LOAD",
    "check_attempt_header",
    "check_backup_zone",
    "check_bool",
    "check_budget",
    "check_delay_policy",
    "check_hooks",
    "check_name",
    "check_on_backup",
    "check_other_origins",
    "check_route_key",
    "check_routes",
    "check_selector",
    "check_tied",
    "check_transport",
    "check_zone",
    "delay_and_budget",
    "hedges_limit",
    "max_hedges_for",
    "parse_methods",
    "parse_statuses",
    "policies",
    "shown",
]

DEFAULT_EXTRA_LOAD: Final = 0.05
"""The extra load the defaults spend: ``AdaptiveDelay()`` hedges at the p95 (0.95 =
1 - 0.05) and ``HedgeBudget()`` earns 0.1 = 2 × 0.05 tokens per request."""

MAX_EXTRA_LOAD: Final = 0.5
"""The largest ``extra_load``: a backup for one request in two (a delay at the median),
and a budget ratio of 2 × 0.5 = 1, the most a :class:`HedgeBudget` earns per request.
Beyond it, hedging every request is a :class:`FixedDelay` of 0 or tied requests."""

MIN_EXTRA_LOAD: Final = 2.0**-54 * (1.0 + 2.0**-52)  # math.nextafter(2.0**-54, 1.0)
"""The smallest ``extra_load``, about 5.55e-17: the smallest float ``x`` whose quantile
``1 - x`` is below 1 in floats (``1.0 - 1e-17 == 1.0``, no quantile)."""

_SAME: Final = 1e-9  # float tolerance when comparing a load with 1 - quantile


def delay_and_budget(
    extra_load: object, delay: object, budget: object
) -> tuple[DelayPolicy, HedgeBudget]:
    """Return the delay policy and the budget of ``HedgedTransport(extra_load=, delay=,
    budget=)``.

    One knob for the trade, after Finagle's ``BackupRequestFilter``, whose
    ``maxExtraLoad`` sets both the percentile a backup is sent at (``1 - maxExtraLoad``)
    and the ``RetryBudget`` that caps backups (``percentCanRetry = maxExtraLoad``).
    The extra load of a hedge delay ``d`` is exactly ``P(X > d)``
    (``../shared/reference/HEDGING.md``, docs/how-it-works.md), so with ``x`` =
    ``extra_load``:

    - the delay is ``AdaptiveDelay(quantile=1 - x)``: a stationary latency law sends a
      backup for a fraction ``x`` of requests;
    - the budget is ``HedgeBudget(ratio=2 * x)``: it binds only when latency shifts
      faster than the rolling quantile follows, or under a broad slowdown, and then
      caps the extra load at ``2 * x``. Finagle's budget ratio is ``x`` itself, but its
      ``RetryBudget`` keeps ten seconds of deposits (at 1,000 requests per second and
      5 %, 500 backups) to absorb the fluctuations of a quantile estimate; a
      ``HedgeBudget`` holds ``burst`` (10) tokens, so at a ratio of ``x`` it would
      refuse backups whenever the estimate sits a little low. Hence the factor 2, which
      is also the defaults' (p95 and 10 %).

    ``None`` keeps each part's own default (:data:`DEFAULT_EXTRA_LOAD`). A part given
    explicitly is used as is, and must agree with ``extra_load``.

    Raises:
        TypeError: ``extra_load`` is not a number, or ``delay`` or ``budget`` is of the
            wrong type (:func:`check_delay_policy`, :func:`check_budget`).
        ValueError: ``extra_load`` is outside [:data:`MIN_EXTRA_LOAD`, 0.5] (below it,
            ``1 - extra_load`` rounds to 1); or it disagrees with an ``AdaptiveDelay``
            given as ``delay`` (whose extra load is ``1 - quantile``)
            or exceeds the ``ratio`` of a ``budget`` given, or both ``delay`` and
            ``budget`` are given, so that it would set neither; each message names the
            parameters and the range allowed.
    """
    if extra_load is None:
        return check_delay_policy(delay), check_budget(budget)
    x = check_number(
        "extra_load", extra_load, low=0.0, low_open=True, high=MAX_EXTRA_LOAD, or_none=True
    )
    if x < MIN_EXTRA_LOAD:  # (0, 0.5] in the message: the floor only when it matters
        msg = (
            f"`extra_load` must be at least {MIN_EXTRA_LOAD:.3g} (below it 1 - extra_load "
            f"rounds to 1), got {shown(extra_load)}"
        )
        raise ValueError(msg)
    if delay is not None and budget is not None:
        msg = (
            "`extra_load` must be None when both `delay` and `budget` are given (it sets "
            f"the delay's quantile and the budget's ratio, so it would set neither), got "
            f"{extra_load!r}"
        )
        raise ValueError(msg)
    policy = AdaptiveDelay(quantile=1.0 - x) if delay is None else check_delay_policy(delay)
    if isinstance(policy, AdaptiveDelay) and abs((1.0 - policy.quantile) - x) > _SAME:
        load = 1.0 - policy.quantile
        msg = (
            f"`extra_load` must be {load:.6g} (1 - quantile) with delay=AdaptiveDelay("
            f"quantile={policy.quantile!r}), or None, got {shown(extra_load)}: for that extra "
            f"load, give AdaptiveDelay(quantile={1.0 - x:.6g})"
        )
        raise ValueError(msg)
    if budget is None:
        return policy, HedgeBudget(ratio=2.0 * x)
    given = check_budget(budget)
    if x > given.ratio + _SAME:
        msg = (
            f"`extra_load` must be in (0, {given.ratio!r}] (the ratio) with budget="
            f"HedgeBudget(ratio={given.ratio!r}), or None, got {shown(extra_load)}: a delay "
            "set to spend more than the budget earns would find it empty"
        )
        raise ValueError(msg)
    return policy, given


def _not_a_class(parameter: str, value: object) -> None:
    if isinstance(value, type):  # runtime_checkable protocols accept classes
        msg = f"`{parameter}` must be an instance, such as {value.__name__}(), got the class"
        raise TypeError(msg)


def check_transport(transport: object) -> httpx.AsyncBaseTransport:
    """Return the inner transport: ``transport``, or a new ``httpx.AsyncHTTPTransport()``
    for ``None``.

    Raises:
        TypeError: ``transport`` is not an ``httpx.AsyncBaseTransport``.
    """
    if transport is None:
        return httpx.AsyncHTTPTransport()
    if not isinstance(transport, httpx.AsyncBaseTransport):
        msg = f"`transport` must be an httpx.AsyncBaseTransport, got {shown(transport)}"
        raise TypeError(msg)
    return transport


def check_delay_policy(delay: object) -> DelayPolicy:
    """Return the delay policy: ``delay`` itself, a :class:`FixedDelay` for a number of
    seconds, or a new :class:`AdaptiveDelay` for ``None``.

    Raises:
        TypeError: neither a number nor a ``DelayPolicy`` (or a class).
        ValueError: a number outside [0, 5] seconds (the message gives the range).
    """
    _not_a_class("delay", delay)
    if delay is None:
        return AdaptiveDelay()
    if isinstance(delay, DelayPolicy):
        return delay
    if as_seconds(delay) is None:
        msg = f"`delay` must be a number of seconds or a DelayPolicy, got {shown(delay)}"
        raise TypeError(msg)
    return FixedDelay(cast("float", delay))  # a real number (FixedDelay checks its range)


def check_budget(budget: object) -> HedgeBudget:
    """Return ``budget``, or a new ``HedgeBudget()`` for ``None``.

    Raises:
        TypeError: not a ``HedgeBudget`` (or a class).
    """
    _not_a_class("budget", budget)
    if budget is None:
        return HedgeBudget()
    if not isinstance(budget, HedgeBudget):
        msg = f"`budget` must be a HedgeBudget or None, got {shown(budget)}"
        raise TypeError(msg)
    return budget


def check_selector(selector: object) -> ReplicaSelector:
    """Return ``selector``, or a new :class:`PowerOfTwoChoices` for ``None``.

    Raises:
        TypeError: it does not implement ``ReplicaSelector`` (or is a class).
    """
    _not_a_class("selector", selector)
    if selector is None:
        return PowerOfTwoChoices(clock=now)
    if not isinstance(selector, ReplicaSelector):
        msg = f"`selector` must implement ReplicaSelector, got {shown(selector)}"
        raise TypeError(msg)
    return selector


def check_tied(tied: object) -> TiedRequests | None:
    """Return ``tied`` (``None``: no tied requests).

    Raises:
        TypeError: neither a ``TiedRequests`` nor ``None``.
    """
    if tied is not None and not isinstance(tied, TiedRequests):
        msg = f"`tied` must be a TiedRequests or None, got {shown(tied)}"
        raise TypeError(msg)
    return tied


def check_routes(
    routes: Sequence[Route], base: Effective, limit: int
) -> tuple[tuple[Route, Effective], ...]:
    """Return ``routes`` as a tuple, each :class:`Route` with its settings merged over
    the transport's ``base`` (``_policy.overrides.for_route``), once.

    Raises:
        TypeError: ``routes`` is not a sequence of ``Route``.
        ValueError: a route's ``max_hedges`` is above ``limit`` (the message names the
            route).
    """
    if isinstance(routes, (str, bytes)) or not isinstance(routes, Sequence):
        got = "one Route: give [Route(...)]" if isinstance(routes, Route) else shown(routes)
        msg = f"`routes` must be a sequence of Route, got {got}"
        raise TypeError(msg)
    for route in routes:
        if not isinstance(route, Route):
            msg = f"`routes` must hold Route objects, got {shown(route)}"
            raise TypeError(msg)
    return tuple((route, for_route(route, base, limit, route.short_label)) for route in routes)


def policies(
    delay: DelayPolicy,
    budget: HedgeBudget,
    max_hedges: int,
    methods: frozenset[str],
    on_backup: object,
    routes: Sequence[Route],
    fleet: Fleet,
) -> tuple[Effective, tuple[tuple[Route, Effective], ...], int, DelayPolicy]:
    """The transport's own hedging settings, its routes each with theirs merged over
    them (:func:`check_routes`), the most backups per request its replicas allow
    (:func:`hedges_limit`), and the delay policy its delay gauge reads
    (``_policy.delay.routed_delays``: the routes' own policies too).

    Raises:
        TypeError: ``on_backup`` is not a plain callable, or ``routes`` not a sequence
            of Route.
        ValueError: a route's ``max_hedges`` is above what the replicas allow.
    """
    limit = hedges_limit(fleet.services.values(), fleet)
    policy = transport_effective(delay, budget, max_hedges, methods, check_on_backup(on_backup))
    routed = check_routes(routes, policy, limit)
    gauge = routed_delays(delay, tuple((p.delay, r.name) for r, p in routed))
    return policy, routed, limit, gauge


def check_on_backup(on_backup: object) -> BackupHook | None:
    """Return the transport's backup hook, or ``None``.

    Raises:
        TypeError: neither a callable nor ``None``, or an ``async def`` one.
    """
    if on_backup is not None and not callable(on_backup):
        msg = "`on_backup` must be a callable request -> request | None, or None, "
        msg += f"got {shown(on_backup)}"
        raise TypeError(msg)
    refuse_async_hook("on_backup", on_backup)
    return on_backup


def check_zone(zone: object) -> str | None:
    """Return the caller's ``zone``: a string of 1 to 128 characters, or ``None``."""
    if zone is None:
        return None
    if not isinstance(zone, str):
        msg = f"`zone` must be a str or None, got {shown(zone)}"
        raise TypeError(msg)
    if not 0 < len(zone) <= 128:
        msg = f"`zone` must be a string of 1 to 128 characters or None, got {shown(zone)}"
        raise ValueError(msg)
    return zone


def check_backup_zone(value: object) -> BackupZone:
    """Return ``backup_zone``: ``"other"`` or ``"any"``."""
    if value not in ("other", "any"):
        msg = f"`backup_zone` must be 'other' or 'any', got {shown(value)}"
        raise ValueError(msg)
    return value


def hedges_limit(services: Collection[Service], fleet: object) -> int:
    """The most backups per request the replicas allow (:func:`max_hedges_for` says
    why): a route's or a request's own ``max_hedges`` is checked against it."""
    bounded = not getattr(fleet, "discovered", False) and all(len(s.replicas) > 1 for s in services)
    most = max((len(s.replicas) for s in services), default=0)
    return min(MAX_HEDGES_LIMIT, most - 1) if bounded and most else MAX_HEDGES_LIMIT


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
    if isinstance(max_hedges, numbers.Integral) and int(max_hedges) > high:  # True: high >= 1
        if high < MAX_HEDGES_LIMIT and largest is not None:
            why = (
                f"replicas - 1: each backup goes to another replica, and the largest "
                f"service, {shown(largest.given or largest.route_suffix)}, lists {most}; a "
                f"service with one address allows up to {MAX_HEDGES_LIMIT}, its backups "
                "going to that address over other connections"
            )
        else:
            why = (
                f"MAX_HEDGES_LIMIT: at most {MAX_HEDGES_LIMIT} backups per request; "
                "with static lists of two or more replicas, at most replicas - 1"
            )
        msg = f"`max_hedges` must be in [0, {high}] ({why}), got {shown(max_hedges)}"
        raise ValueError(msg)
    return check_int("max_hedges", max_hedges, 0, high)
