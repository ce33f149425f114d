"""The objects a ``HedgedTransport`` is built from, checked: its inner transport, delay
policy, budget, replica selector and tied-request settings.

Each is given as an instance (or ``None`` for the default); a class given where an
instance belongs is refused by name. The defaults read the event loop's clock through
``_timer.now`` (one backend look-up a call).

Strictly private.
"""

from __future__ import annotations

import httpx

from hedgeclient._policy.adaptive import AdaptiveDelay
from hedgeclient._policy.budget import HedgeBudget
from hedgeclient._policy.delay import DelayPolicy, FixedDelay, check_delay
from hedgeclient._policy.tied import TiedRequests
from hedgeclient._replicas.selector import PowerOfTwoChoices, ReplicaSelector
from hedgeclient._timer import now

__all__ = [
    "check_budget",
    "check_delay_policy",
    "check_selector",
    "check_tied",
    "check_transport",
    "checked_delay",
]


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
        msg = f"`transport` must be an httpx.AsyncBaseTransport, got {transport!r}"
        raise TypeError(msg)
    return transport


def check_delay_policy(delay: object) -> DelayPolicy:
    """Return the delay policy: ``delay`` itself, a :class:`FixedDelay` for a number of
    seconds, or a new :class:`AdaptiveDelay` for ``None``.

    Raises:
        TypeError: neither a number nor a ``DelayPolicy`` (or a class).
        ValueError: a number that is negative, not finite, or above 5 s.
    """
    _not_a_class("delay", delay)
    if delay is None:
        return AdaptiveDelay(clock=now)
    if isinstance(delay, DelayPolicy):
        return delay
    return FixedDelay(check_delay(delay, "delay", "a number of seconds or a DelayPolicy"))


def check_budget(budget: object) -> HedgeBudget:
    """Return ``budget``, or a new ``HedgeBudget()`` for ``None``.

    Raises:
        TypeError: not a ``HedgeBudget`` (or a class).
    """
    _not_a_class("budget", budget)
    if budget is None:
        return HedgeBudget()
    if not isinstance(budget, HedgeBudget):
        msg = f"`budget` must be a HedgeBudget or None, got {budget!r}"
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
        msg = f"`selector` must implement ReplicaSelector, got {selector!r}"
        raise TypeError(msg)
    return selector


def check_tied(tied: object) -> TiedRequests | None:
    """Return ``tied`` (``None``: no tied requests).

    Raises:
        TypeError: neither a ``TiedRequests`` nor ``None``.
    """
    if tied is not None and not isinstance(tied, TiedRequests):
        msg = f"`tied` must be a TiedRequests or None, got {tied!r}"
        raise TypeError(msg)
    return tied


def checked_delay(policy: DelayPolicy, delay: object, route: str) -> float:
    """Return what ``policy.hedge_delay(route)`` returned, ``delay``, as float seconds.

    Raises:
        TypeError: ``delay`` is not a number (the message names the policy).
        ValueError: ``delay`` is negative, NaN, infinite or above 5 s (likewise).
    """
    try:
        return check_delay(delay, "delay", "a number of seconds")
    except (TypeError, ValueError) as exc:
        msg = (
            f"{policy!r}.hedge_delay({route!r}) returned {delay!r}; a DelayPolicy "
            "must return a finite number of seconds >= 0, or None"
        )
        raise type(exc)(msg) from None
