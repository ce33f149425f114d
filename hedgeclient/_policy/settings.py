"""The hedging settings a route and a request share, checked as a route, a
:class:`~hedgeclient.HedgePolicy` or a request's mapping is built; and the check that
merged bounds leave the delay room to send a backup.

Strictly private (``_policy.overrides`` merges the settings).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Final

import httpx

from hedgeclient._checks import check_int, check_number, check_seconds, shown
from hedgeclient._policy.adaptive import shortest_delay
from hedgeclient._policy.budget import HedgeBudget
from hedgeclient._policy.delay import MAX_DELAY, DelayPolicy, FixedDelay

__all__ = [
    "MAX_HEDGES_LIMIT",
    "BackupHook",
    "check_reachable",
    "check_settings",
    "refuse_async_hook",
]

BackupHook = Callable[[httpx.Request], "httpx.Request | None"]
"""``request -> request | None``: may change a backup request, or veto it (``None``)."""

MAX_HEDGES_LIMIT: Final = 4  # the transport's bound (``_checks.transport``)

_Settings = tuple[
    DelayPolicy | None,
    float | None,
    float | None,
    int | None,
    HedgeBudget | None,
    BackupHook | None,
]


def check_settings(
    name: Callable[[str], str],
    *,
    delay: object,
    min_delay: object,
    max_delay: object,
    max_hedges: object,
    budget: object,
    on_backup: object,
) -> _Settings:
    """Check the settings a route and a request share; return them as kept.

    ``name`` gives each parameter as the messages name it (``"Route(path='/export')
    .max_hedges"``, ``"extensions['hedge']['max_hedges']"``).
    A number given as ``delay`` becomes a :class:`FixedDelay`.

    Raises:
        TypeError: a setting of the wrong type.
        ValueError: a setting out of range; the message names it and the range.
    """
    policy: DelayPolicy | None = None
    if delay is not None:
        if isinstance(delay, type):
            msg = (
                f"`{name('delay')}` must be an instance, such as {delay.__name__}(), got the class"
            )
            raise TypeError(msg)
        if isinstance(delay, DelayPolicy):
            policy = delay
        else:
            seconds = check_number(
                name("delay"), delay, low=0.0, high=MAX_DELAY, unit="seconds", or_none=True
            )
            policy = FixedDelay(seconds)
    low = None if min_delay is None else check_seconds(name("min_delay"), min_delay)
    high = (
        None if max_delay is None else check_seconds(name("max_delay"), max_delay, allow_inf=True)
    )
    if low is not None and high is not None and low > high:
        msg = f"`{name('min_delay')}` must be <= `{name('max_delay')}`, got {shown(low)} > {high!r}"
        raise ValueError(msg)
    if policy is not None and high is not None:
        names = (name("delay"), name("min_delay"), name("max_delay"))
        check_reachable(policy, 0.0 if low is None else low, high, names)
    hedges = None
    if max_hedges is not None:
        hedges = check_int(name("max_hedges"), max_hedges, 0, MAX_HEDGES_LIMIT, or_none=True)
    if budget is not None and not isinstance(budget, HedgeBudget):
        msg = f"`{name('budget')}` must be a HedgeBudget or None, got {shown(budget)}"
        raise TypeError(msg)
    if on_backup is not None and not callable(on_backup):
        msg = f"`{name('on_backup')}` must be a callable request -> request | None, "
        msg += f"got {shown(on_backup)}"
        raise TypeError(msg)
    refuse_async_hook(name("on_backup"), on_backup)
    return policy, low, high, hedges, budget, on_backup


def refuse_async_hook(name: str, hook: object) -> None:
    """Refuse an ``async def`` backup hook (or a callable whose ``__call__`` is one):
    the hook runs synchronously as the backup is due, where its coroutine would never
    be awaited and every backup would be lost (``hook_error``).

    Raises:
        TypeError: ``hook`` is a coroutine function; the message names ``name``.
    """
    call = getattr(type(hook), "__call__", None)  # noqa: B004 - an object's own __call__
    if inspect.iscoroutinefunction(hook) or inspect.iscoroutinefunction(call):
        msg = (
            f"`{name}` must be a plain (not async) callable request -> request | None: it "
            f"runs synchronously as the backup is due, got the coroutine function {hook!r}"
        )
        raise TypeError(msg)


def check_reachable(
    policy: DelayPolicy,
    min_delay: float,
    max_delay: float,
    names: tuple[str, str, str],
) -> None:
    """Refuse bounds that leave no hedge delay at which a backup may go: the shortest
    delay, ``max(min_delay, shortest_delay(policy))`` seconds, above ``max_delay``
    would switch hedging off (every backup ``cutoff``) without a word.

    ``names`` gives the delay policy, ``min_delay`` and ``max_delay`` as the message
    names them: a parameter (``Route(path='/x').max_delay``, put in backticks) or a
    setting that is no parameter of the caller's, in words (``the route's delay``).

    Raises:
        ValueError: the message names ``max_delay`` and the setting above it, with
            their values.
    """
    shortest = shortest_delay(policy)
    if max(min_delay, shortest) <= max_delay:
        return
    delay, low, high = names
    if min_delay >= shortest:
        what, value = _named(low), min_delay
    elif isinstance(policy, FixedDelay):
        what, value = _named(delay), shortest
    else:
        what, value = _named(delay, "min_delay"), shortest
    msg = (
        f"{_named(high)} must be >= {what}, got {shown(max_delay)} < {value!r} (above "
        "`max_delay` no backup is sent: hedging would be off)"
    )
    raise ValueError(msg)


def _named(name: str, attribute: str = "") -> str:
    """A setting as a message names it: a parameter in backticks (```Route.delay```,
    ```Route.delay.min_delay```), a description in words (``the route's delay`` and
    ``the route's delay (its `min_delay`)``)."""
    if name.startswith("the "):
        return f"{name} (its `{attribute}`)" if attribute else name
    return f"`{name}.{attribute}`" if attribute else f"`{name}`"
