"""Which requests may be sent twice, and why a backup is not sent: every suppress reason.

A request may be hedged when all of these hold; the first that fails names its
reason (:func:`ineligible`, ``SuppressReason``):

1. ``extensions={"hedge": False}`` was not given, nor (without a ``"hedge"``
   extension) a matching ``Route(hedge=False)`` (``opted_out``);
2. its method is in the idempotency allow-list, or ``extensions={"hedge": True}`` or
   a matching ``Route(hedge=True)`` opts it in (``not_idempotent``);
3. its body can be sent again: bytes, not a stream (``unreplayable_body``);
4. the transport sends backups at all, ``max_hedges > 0`` (``hedging_off``).

A service with a single address is hedged too: its backups go to that address over
another connection (``_replicas.choice``).

Every suppress reason is chosen here, by these four functions (and
:func:`selector_failed`, which the race asks when it cannot begin a backup that may go).
The request path (``_request``) asks :func:`ineligible` before the race; the race
(``_race.race``) asks the other three and records the answer, and no other module writes
it. A request reports at most one reason, the first (a held-back one is withdrawn if its
backup goes after all, :data:`HELD_BACK`), and only when a backup was due, but
``cutoff``:

- as the race starts, :func:`no_delay_reason`: ``cutoff`` for a request that may be
  hedged but whose route has no hedge delay (the delay policy suspended it);
- each time a backup is due (no headers by the hedge delay, a failed attempt, a twin),
  :func:`veto_backup`: the request's own reason, ``pushback``, ``deadline``,
  ``client_lag`` (held back, see :data:`HELD_BACK`), ``no_other_replica``,
  ``max_in_flight``, ``vetoed`` or ``hook_error`` (the backup hook said no, or
  raised), ``budget``, or ``selector_error`` (a custom ``ReplicaSelector`` raised);
- after a request that may not be hedged answered, :func:`unsent_reason`: its own
  reason, if a backup would have been due by the delay its route has now.

Strictly private.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

import httpx

from hedgeclient._events import SuppressReason
from hedgeclient._policy.budget import HedgeBudget, Payer

__all__ = [
    "DEFAULT_METHODS",
    "DEFAULT_NON_FATAL_STATUSES",
    "HELD_BACK",
    "LAG_DEFER",
    "LAG_FLOOR",
    "LAG_LEAVE_OUT",
    "LAG_SUPPRESS",
    "ineligible",
    "no_delay_reason",
    "selector_failed",
    "unsent_reason",
    "veto_backup",
]

logger = logging.getLogger("hedgeclient")

DEFAULT_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
"""Methods hedged by default: the safe methods of RFC 9110, section 9.2.1. PUT and
DELETE are idempotent (section 9.2.2) but are not hedged by default: a late copy of
a PUT can overwrite a newer write made in between."""

LAG_SUPPRESS = 0.5
"""Of the hedge delay: a client whose event loop runs that late sends no backup by
delay (reason ``client_lag``). Its backup would start half a delay late, so it could
win only where the primary is slower than ``1.5 d`` plus the backup's own time, and the
extra work lands on a client that is already short of CPU."""

HELD_BACK: frozenset[SuppressReason] = frozenset({"client_lag"})
"""Reasons :func:`veto_backup` holds a backup back for, rather than ending the request's
backups: the race looks again later, a failed attempt may still call for one, and the
request counts as suppressed only if none went in the end."""

LAG_DEFER = 2.0
"""Of the client's lag: a backup held back by it (``client_lag``) goes once the primary
has waited its delay plus this many lags. A held backup is deferred, not dropped: the
race looks again a lag later, and counts the request as suppressed only if no backup
went in the end."""

LAG_LEAVE_OUT = 0.1
"""Of the hedge delay: a primary during whose time on the wire the client's event loop
served a wake-up that late, or that ends while the loop typically runs that late
(``LoopLag.during``), is left out of the delay's samples (``client_lag``). The timer's
lateness understates what a busy loop adds to a measured latency: reading a response
takes several turns of the loop, each as late. Measured in a burst of 400 GETs on 20
connections, the replicas in a process of their own (``tests/integration/test_burst.py``,
quiet machine, 4 runs on each backend): judged by the typical lateness at the end
alone, 140-220 of the burst's samples were kept, their median 20-24 ms where the
replicas measured their own at 12 ms, and the delay after the burst was 1.14-1.42x the
delay before it; judged over the time on the wire, 86-117 were kept and the delay after
was 1.04-1.05x, none of the 300 samples before the burst left out. At a twentieth of the
delay 40-52 were kept (1.02-1.05x) but 2 of 300 before the burst were left out on
asyncio: a quiet loop's jitter. The rule reads the loop, never the sample's own value:
a rule on the value would keep the slow samples and drop the fast ones, and bias the
quantile up."""

LAG_FLOOR = 0.001
"""Seconds: a loop late by less never leaves a sample out, whatever the delay. Every
Python event loop runs its timers a fraction of a millisecond late; a route with a
small delay must still learn."""

DEFAULT_NON_FATAL_STATUSES = frozenset({502, 503, 504})
"""Statuses that do not end the race while another attempt may still answer."""


def ineligible(
    request: httpx.Request,
    methods: frozenset[str],
    max_hedges: int,
    flag: bool | None = None,
) -> SuppressReason | None:
    """Return why ``request`` may not be sent twice, or ``None`` when it may.

    ``methods`` and ``max_hedges`` are the request's (its own, else its route's, else
    the transport's: ``_policy.overrides``); ``flag`` is its ``hedge`` setting, the
    request's own ``extensions={"hedge": ...}`` (a bool, or a ``HedgePolicy``'s
    ``hedge``) else its :class:`~hedgeclient.Route`'s (``None``: left to ``methods``).
    The request path reads and checks the extension (a truthy ``1`` or ``"false"``
    is refused there, never read one way or the other).
    """
    if flag is False:
        return "opted_out"
    if flag is not True and request.method not in methods:
        return "not_idempotent"
    try:
        request.content  # noqa: B018 - raises when the body is a stream
    except httpx.RequestNotRead:
        return "unreplayable_body"
    if max_hedges == 0:
        return "hedging_off"
    return None


def no_delay_reason(ineligible: SuppressReason | None) -> SuppressReason | None:
    """The reason a request whose route has no hedge delay (the policy returned
    ``None``) reports from its start: ``cutoff`` when it may be hedged (hedging of the
    route is suspended, whatever happens next), else ``None`` (``ineligible``, its own
    reason, is reported only once a backup would have been due)."""
    return "cutoff" if ineligible is None else None


def unsent_reason(
    ineligible: SuppressReason, waited: float, due: float | None
) -> SuppressReason | None:
    """Whether a request that may not be hedged, whose primary answered, counts as
    suppressed: its reason ``ineligible`` when a backup would have been due, its primary
    having waited ``waited`` seconds (on the wire) past ``due``, the hedge delay its
    route has now (``None``: none would be), else ``None``. (A failed primary of such a
    request is a backup due at once: :func:`veto_backup` gives its reason.)"""
    return ineligible if due is not None and waited > due else None


def veto_backup(
    *,
    ineligible: SuppressReason | None,
    allowed: bool,
    pushback: bool,
    time_left: float,
    expected: float,
    choose: Callable[[], str | None],
    budget: HedgeBudget,
    vet: Callable[[str], object] | None = None,
    twin: str | None = None,
    lag: float = 0.0,
    delay: float | None = None,
    waited: float = 0.0,
) -> tuple[SuppressReason | None, tuple[str, object, Payer | None] | None]:
    """Decide whether a due backup goes, and where; the race begins it (``Race.begin_backup``).

    Args:
        ineligible: the request's own reason (:func:`ineligible`), or ``None``.
        allowed: the request still has a backup to send (``max_hedges``) and is not
            being closed.
        pushback: a replica answered 429 or with ``Retry-After``.
        time_left: seconds until the caller stops waiting (``math.inf`` for never).
        expected: the route's typical latency in seconds (the hedge delay): a backup
            needs more time than that to answer.
        choose: the replica for the backup, or ``None`` when none is free.
        budget: the hedge budget; a token is withdrawn only when the backup goes.
        vet: the backup hook's step (``_wire.send.AttemptSender.prepare``): given the
            replica chosen, the backup's own request, or ``None`` to veto it
            (``vetoed``); one that raises is logged and gives ``hook_error``. Asked
            after every other check but the budget's, so a vetoed backup spends no
            token. ``None``: no hook.
        twin: the replica of a tied request's twin (``_policy.tied``), chosen when its first
            copy was sent: the twin goes there, and draws nothing from the budget (a
            dropped copy costs no work); ``None`` for a backup by delay or failure.
        lag: how late the client's own event loop typically runs lately, in seconds
            (``_timer``'s ``LoopLag.recent``): about how late the backup starts. 0.0
            for a backup after a failure, which the caller needs whatever the loop does.
        delay: the request's hedge delay in seconds, or ``None``. A backup is held
            back (``client_lag``) when ``lag`` is :data:`LAG_SUPPRESS` of it or more
            (and at least :data:`LAG_FLOOR`): it would start that late, and add work to
            a client already short of time (issue 24).
        waited: seconds since the request began. The hold lasts while it is below
            ``delay + LAG_DEFER * lag``: a primary still waiting after that gets its
            backup however late the loop (a replica that hangs must not keep the
            request once the client is busy).

    Returns:
        ``(None, (replica, prepared, payer))`` when the backup goes, to ``replica`` with
        what ``vet`` returned (``None`` without one), its token spent from ``payer``'s
        bucket (``HedgeBudget.draw``; ``None``: a twin draws none): the caller begins it,
        or gives ``payer`` its token back when it cannot. ``(reason, None)`` when it is
        suppressed; ``(None, None)`` when every allowed backup already went, which is not
        a suppression. A ``choose`` that raises (a custom ``ReplicaSelector``'s bug) is
        logged and gives ``selector_error``: a backup lost, never a request; so does a
        beginning that raises (``Choice.started``, the selector again: the caller asks
        :func:`selector_failed`, and refunds the token).
    """
    prepared: object = None
    if ineligible is not None:
        return ineligible, None
    if not allowed:
        return None, None
    if pushback:
        return "pushback", None
    try:
        if twin is not None:  # sent with its first copy, it has the same time to answer
            if vet is not None:
                reason, prepared = _vetted(vet, twin)
                if reason is not None:
                    return reason, None
            return None, (twin, prepared, None)
        if time_left < math.inf and time_left <= expected:
            return "deadline", None
        if (
            delay is not None
            and lag >= LAG_FLOOR
            and lag >= LAG_SUPPRESS * delay
            and waited < delay + LAG_DEFER * lag
        ):
            return "client_lag", None
        replica = choose()
        if replica is None:
            return "no_other_replica", None
        if budget.in_flight_full:
            return "max_in_flight", None
        if vet is not None:
            reason, prepared = _vetted(vet, replica)
            if reason is not None:
                return reason, None
        payer = budget.draw()
        if payer is None:
            return "budget", None
    except Exception:  # a custom ReplicaSelector's bug: no backup, never a lost request
        return selector_failed(), None
    return None, (replica, prepared, payer)


def selector_failed() -> SuppressReason:
    """Log the exception being handled as a custom ``ReplicaSelector``'s bug while a
    backup was chosen or begun, and return its reason, ``selector_error``: a backup lost,
    never a request. Call it from an ``except`` clause (the traceback is logged)."""
    logger.warning("hedgeclient: the replica selector failed; no backup", exc_info=True)
    return "selector_error"


def _vetted(vet: Callable[[str], object], replica: str) -> tuple[SuppressReason | None, object]:
    """What the backup hook made of the backup to ``replica``: ``(None, its request)``,
    ``("vetoed", None)``, or ``("hook_error", None)`` when it raised (a backup lost,
    never a request; the transport logs it, at most once a minute, ``_report``)."""
    try:
        prepared = vet(replica)
    except Exception:  # the caller's hook: no backup, never a lost request
        return "hook_error", None
    return (None, prepared) if prepared is not None else ("vetoed", None)
