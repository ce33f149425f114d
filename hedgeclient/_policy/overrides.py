"""Hedging policy per route and per request, over the transport's: one precedence.

A :class:`~hedgeclient.Route` may set its requests' hedge delay (a policy, a fixed
delay, or the quantile of the adaptive one), its bounds, ``max_hedges``, its own hedge
budget, the methods hedged and a backup hook; a request may set most of them again
with ``extensions={"hedge": HedgePolicy(...)}`` (or the same keys in a plain ``dict``,
httpx's own shape for a per-request setting, as its ``timeout`` extension is). For each
setting the request's wins, then its route's, then the transport's.

A route's settings are checked when the route is built (and against the transport's
replicas when the transport is), and merged with the transport's once, into a frozen
:class:`Effective`: a request that sets nothing per request pays nothing for routes
but their matching. A request's own settings are checked and merged as it enters,
before anything is sent (a mapping each time; a :class:`HedgePolicy` was checked when
it was built).

Prior art: Finagle's per-endpoint ``BackupRequestFilter`` and its ``RetryBudget``;
gRPC's per-method ``hedgingPolicy`` in the service config (gRFC A6); the per-request
policy httpx-retries users ask for (httpx-retries issue 40).

Strictly private: :class:`HedgePolicy` is re-exported by :mod:`hedgeclient`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Final, Literal, final

from hedgeclient._checks import check_delay, parse_methods, shown
from hedgeclient._policy.adaptive import AdaptiveDelay, derive
from hedgeclient._policy.budget import HedgeBudget, Tally
from hedgeclient._policy.delay import DelayPolicy, FixedDelay
from hedgeclient._policy.settings import (
    MAX_HEDGES_LIMIT,
    BackupHook,
    check_reachable,
    check_settings,
    refuse_async_hook,
)

__all__ = [
    "MAX_HEDGES_LIMIT",
    "POLICY_KEYS",
    "BackupHook",
    "Effective",
    "HedgePolicy",
    "Learn",
    "check_settings",
    "for_request",
    "for_route",
    "methods_of",
    "policy_of",
    "refuse_async_hook",
    "transport_effective",
]

_DECIDE_ON: Final = ("headers", "first_byte")

Learn = Callable[[str, float, bool, float], None]
"""Teaches a delay policy one sample: ``(route, seconds, censored, ended)``, ``ended``
the loop's time at which the primary ended (seconds)."""

POLICY_KEYS: Final = (
    "decide_on", "delay", "hedge", "max_delay", "max_hedges", "min_delay", "on_backup", "budget",
)  # fmt: skip
"""The keys of a per-request mapping: :class:`HedgePolicy`'s fields."""


@final
@dataclass(frozen=True, slots=True)
class HedgePolicy:
    """One request's hedging settings: ``extensions={"hedge": HedgePolicy(...)}``.

    Every field defaults to ``None``, "as the request's route, else the transport,
    says". A plain ``dict`` with the same keys works too (``extensions={"hedge":
    {"max_hedges": 2}}``) and is checked each time it is sent; a ``HedgePolicy`` is
    checked once, when it is built, so build it once for a hot path. The bools of
    before keep their meaning: ``{"hedge": True}`` is ``HedgePolicy(hedge=True)``.

    Args:
        hedge: ``True`` opts the request in whatever its method, ``False`` out;
            ``None`` leaves it to its route and the methods hedged.
        delay: the request's hedge delay: seconds in [0, 5] (a fixed delay, for this
            request only; it teaches its route's delay nothing, its censoring being
            at another delay), or a :class:`~hedgeclient.DelayPolicy`, asked and taught
            under the request's route key.
        min_delay: seconds, in [0, 3600]: a delay below it is raised to it.
        max_delay: seconds, in [0, 3600] or ``math.inf``: above it no backup is sent
            (reason ``cutoff``). At least ``min_delay`` and a fixed ``delay`` (and,
            as the request is sent, the shortest delay of its route's policy).
        max_hedges: backups for this request, an int in [0, 4], and at most what the
            transport allows its replicas (checked as the request is sent).
        budget: the :class:`~hedgeclient.HedgeBudget` this request deposits into and
            its backups draw on; ``None``: its route's, else the transport's.
        decide_on: ``"headers"`` or ``"first_byte"``, as the ``hedge_decide_on``
            extension (which wins when both are given).
        on_backup: the backup hook for this request, a plain function (not ``async``;
            ``HedgedTransport(on_backup=)`` has the contract).

    A quantile is a route's setting (``Route(quantile=...)``): the delay is learned per
    route, and a request needing another quantile belongs to another route.

    Raises:
        TypeError: a field of the wrong type.
        ValueError: a field out of range; the message names it and the range.

    .. versionadded:: 0.1.0
    """

    hedge: bool | None = None
    delay: float | DelayPolicy | None = None
    min_delay: float | None = None
    max_delay: float | None = None
    max_hedges: int | None = None
    budget: HedgeBudget | None = None
    decide_on: Literal["headers", "first_byte"] | None = None
    on_backup: BackupHook | None = None

    def __post_init__(self) -> None:
        _check_request(self, str)


def _check_request(policy: HedgePolicy, name: Callable[[str], str]) -> None:
    """Check ``policy``'s fields (``name`` gives each as the messages name it); keep a
    fixed delay as a :class:`FixedDelay`, the bounds as float seconds."""
    if policy.hedge is not None and not isinstance(policy.hedge, bool):
        msg = f"`{name('hedge')}` must be True, False or None, got {shown(policy.hedge)}"
        raise TypeError(msg)
    if policy.decide_on is not None and policy.decide_on not in _DECIDE_ON:
        msg = f"`{name('decide_on')}` must be 'headers', 'first_byte' or None, "
        msg += f"got {shown(policy.decide_on)}"
        raise (ValueError if isinstance(policy.decide_on, str) else TypeError)(msg)
    delay, low, high, hedges, _, _ = check_settings(
        name,
        delay=policy.delay,
        min_delay=policy.min_delay,
        max_delay=policy.max_delay,
        max_hedges=policy.max_hedges,
        budget=policy.budget,
        on_backup=policy.on_backup,
    )
    # As checked: float seconds and an int, whatever number type was given (a Fraction
    # would otherwise reach HedgeInfo.delay, a numpy int the race's counts).
    for field, value in (("delay", delay), ("min_delay", low), ("max_delay", high)):
        object.__setattr__(policy, field, value)
    object.__setattr__(policy, "max_hedges", hedges)


def policy_of(value: object) -> HedgePolicy:
    """The request's ``extensions["hedge"]`` as a :class:`HedgePolicy` (not a bool).

    Raises:
        TypeError: neither a bool, None, a mapping nor a ``HedgePolicy``; or a field of
            the wrong type.
        ValueError: an unknown key, or a field out of range (the message names it as
            ``extensions['hedge']['max_hedges']``).
    """
    if isinstance(value, HedgePolicy):
        return value
    where = "extensions['hedge']"
    if not isinstance(value, Mapping):
        msg = (
            f"`{where}` must be True, False, None, a HedgePolicy or a mapping of its "
            f"fields, got {shown(value)}"
        )
        raise TypeError(msg)
    # Sorted by repr: keys of mixed types ({1: 2, "x": 3}) do not compare.
    unknown = sorted((k for k in value if k not in POLICY_KEYS), key=repr)
    if unknown:
        msg = f"`{where}` has unknown key(s) {shown(unknown)}; allowed: {sorted(POLICY_KEYS)}"
        if "quantile" in unknown:
            msg += " (a quantile is a route's: Route(quantile=...), or give `delay`)"
        raise ValueError(msg)
    policy = HedgePolicy.__new__(HedgePolicy)
    for key in POLICY_KEYS:
        object.__setattr__(policy, key, value.get(key))
    _check_request(policy, _in_extension)
    return policy


def _in_extension(parameter: str) -> str:
    return f"extensions['hedge'][{parameter!r}]"


@final
@dataclass(frozen=True, slots=True)
class Effective:
    """The settings a request is sent with, every precedence applied. Strictly private.

    Attributes:
        delay: the delay policy asked ``hedge_delay(route)`` and taught.
        ask: ``delay``'s ``hedge_delay`` (set from ``delay``); an :class:`AdaptiveDelay`'s
            is its delays' ``__getitem__``, the same answer with no Python call; a
            policy of the caller's own is checked (``_checked_ask``).
        learn: teaches ``delay`` one primary's sample, :data:`Learn`; ``None`` for a
            :class:`FixedDelay` (it ignores samples).
        min_delay: seconds; a smaller delay is raised to it.
        max_delay: seconds; above it no backup (``cutoff``).
        bounded: whether ``min_delay`` or ``max_delay`` was set (else neither is read).
        budget: the hedge budget deposited into and drawn on.
        tally: its :class:`~hedgeclient._policy.budget.Tally`, the request path's
            deposit (set from ``budget``).
        max_hedges: backups per request.
        methods: the methods hedged (upper case).
        hedge: the route's (or request's) ``hedge`` flag.
        decide_on: the request's own decision point, or ``None`` (its route's).
        on_backup: the backup hook, or ``None``.
    """

    delay: DelayPolicy
    learn: Learn | None
    min_delay: float
    max_delay: float
    bounded: bool
    budget: HedgeBudget
    max_hedges: int
    methods: frozenset[str]
    hedge: bool | None = None
    decide_on: Literal["headers", "first_byte"] | None = None
    on_backup: BackupHook | None = None
    tally: Tally = dataclasses.field(init=False, repr=False, compare=False)
    ask: Callable[[str], float | None] = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "tally", self.budget._tally)  # its package's private part
        delay = self.delay
        ask: Callable[[str], float | None] = functools.partial(_checked_ask, delay)
        if type(delay) is AdaptiveDelay:  # its delays are checked as it computes them
            ask = delay._delays.__getitem__
        elif type(delay) is FixedDelay:
            ask = delay.hedge_delay
        object.__setattr__(self, "ask", ask)


def _checked_ask(policy: DelayPolicy, route: str) -> float | None:
    """``policy.hedge_delay(route)`` of a policy of the caller's own, as float seconds or
    ``None``: never a NaN or a string in a race.

    Raises:
        TypeError: it returned something else than a number (the message names it).
        ValueError: it returned a negative, NaN or infinite number (any finite delay is
            the policy's to choose).
    """
    delay = policy.hedge_delay(route)
    if delay is None or (type(delay) is float and 0.0 <= delay < math.inf):
        return delay
    try:
        return check_delay(delay, "delay", "a number of seconds")
    except (TypeError, ValueError) as exc:
        msg = (
            f"{policy!r}.hedge_delay({shown(route)}) returned {shown(delay)}; a DelayPolicy "
            "must return a finite number of seconds >= 0, or None"
        )
        raise type(exc)(msg) from None


def _learner(policy: DelayPolicy) -> Learn | None:
    """How ``policy`` is taught: ``None`` for a fixed delay (it ignores samples); an
    :class:`AdaptiveDelay` on the loop's clock takes the time the sample ended (no
    clock read, one call: ``AdaptiveDelay._record_at``); any other, ``record()``."""
    if type(policy) is FixedDelay:
        return None
    if type(policy) is AdaptiveDelay and policy._loop_clock:
        return policy._record_at
    return functools.partial(_record, policy)


def _record(policy: DelayPolicy, route: str, seconds: float, censored: bool, _: float) -> None:
    policy.record(route, seconds, censored=censored)


def transport_effective(
    delay: DelayPolicy,
    budget: HedgeBudget,
    max_hedges: int,
    methods: frozenset[str],
    on_backup: BackupHook | None,
) -> Effective:
    """The transport's own settings, for requests no route matches."""
    return Effective(
        delay=delay,
        learn=_learner(delay),
        min_delay=0.0,
        max_delay=float("inf"),
        bounded=False,
        budget=budget,
        max_hedges=max_hedges,
        methods=methods,
        on_backup=on_backup,
    )


def for_route(route: object, base: Effective, limit: int, label: str) -> Effective:
    """Merge a :class:`~hedgeclient.Route`'s settings over the transport's ``base``.

    A route's ``quantile`` builds its own :class:`AdaptiveDelay` from the transport's
    (its window, bounds and warm-up, at that quantile) or, when the transport's delay is
    not adaptive, from the defaults.

    Raises:
        ValueError: its ``max_hedges`` is above ``limit``, what the transport's replicas
            allow, or its ``max_delay`` below the shortest delay its policy gives (the
            message names the route).
    """
    delay: DelayPolicy | None = getattr(route, "delay", None)
    quantile: float | None = getattr(route, "quantile", None)
    source = f"{label}.delay" if delay is not None else "HedgedTransport.delay"
    if quantile is not None:
        model = base.delay if isinstance(base.delay, AdaptiveDelay) else AdaptiveDelay()
        source = "HedgedTransport.delay" if model is base.delay else "AdaptiveDelay()"
        delay = derive(model, quantile)
    hedges: int | None = getattr(route, "max_hedges", None)
    if hedges is not None and hedges > limit:
        msg = (
            f"`{label}.max_hedges` must be in [0, {limit}] (the transport's `max_hedges` "
            f"bound for its replicas), got {shown(hedges)}"
        )
        raise ValueError(msg)
    methods: frozenset[str] | None = getattr(route, "methods", None)
    low: float | None = getattr(route, "min_delay", None)
    high: float | None = getattr(route, "max_delay", None)
    budget: HedgeBudget | None = getattr(route, "budget", None)
    hook: BackupHook | None = getattr(route, "on_backup", None)
    chosen = base.delay if delay is None else delay
    low = base.min_delay if low is None else low
    high = base.max_delay if high is None else high
    check_reachable(chosen, low, high, (source, f"{label}.min_delay", f"{label}.max_delay"))
    return Effective(
        delay=chosen,
        learn=_learner(chosen),
        min_delay=low,
        max_delay=high,
        bounded=base.bounded or low is not None or high is not None,
        budget=base.budget if budget is None else budget,
        max_hedges=base.max_hedges if hedges is None else hedges,
        methods=base.methods if methods is None else methods,
        hedge=getattr(route, "hedge", None),
        on_backup=base.on_backup if hook is None else hook,
    )


def for_request(value: object, base: Effective, limit: int) -> Effective:
    """Merge a request's ``extensions["hedge"]`` (a mapping or a :class:`HedgePolicy`)
    over ``base``, its route's (or the transport's) settings.

    Raises:
        TypeError: see :func:`policy_of`.
        ValueError: see :func:`policy_of`; or ``max_hedges`` above ``limit``; or bounds
            that leave no delay at which a backup may go (its ``max_delay`` below the
            shortest delay of its policy, its route's or the transport's).
    """
    policy = policy_of(value)
    hedges = policy.max_hedges
    if hedges is not None and hedges > limit:
        msg = (
            f"`{_in_extension('max_hedges')}` must be in [0, {limit}] (the transport's "
            f"`max_hedges` bound for its replicas), got {shown(hedges)}"
        )
        raise ValueError(msg)
    delay = policy.delay
    assert delay is None or isinstance(delay, DelayPolicy)  # kept as a policy
    changes: dict[str, object] = {}
    if delay is not None:
        changes["delay"], changes["learn"] = delay, _learner(delay)
    if policy.min_delay is not None:
        changes["min_delay"], changes["bounded"] = policy.min_delay, True
    if policy.max_delay is not None:
        changes["max_delay"], changes["bounded"] = policy.max_delay, True
    for key in ("budget", "hedge", "decide_on", "on_backup"):
        given = getattr(policy, key)
        if given is not None:
            changes[key] = given
    if hedges is not None:
        changes["max_hedges"] = hedges
    if not changes:
        return base
    merged = dataclasses.replace(base, **changes)  # type: ignore[arg-type]
    given = {key: getattr(policy, key) is not None for key in ("delay", "min_delay", "max_delay")}
    if merged.bounded and any(given.values()):  # the request's bounds and delay, merged

        def name(key: str) -> str:
            return _in_extension(key) if given[key] else f"the route's {key}"

        names = (name("delay"), name("min_delay"), name("max_delay"))
        check_reachable(merged.delay, merged.min_delay, merged.max_delay, names)
    return merged


def methods_of(methods: Collection[str] | None, name: str) -> frozenset[str] | None:
    """A route's ``methods`` as kept (upper case), or ``None``; ``name`` as the messages
    give it."""
    return None if methods is None else parse_methods(methods, name)
