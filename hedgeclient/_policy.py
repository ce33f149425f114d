"""Which requests may be sent twice, and why not.

A request may be hedged when all of these hold; the first that fails names the
suppress reason reported when a backup would have been due (``SuppressReason``):

1. ``extensions={"hedge": False}`` was not given (``opted_out``);
2. its method is in the idempotency allow-list, or ``extensions={"hedge": True}``
   opts it in (``not_idempotent``);
3. its body can be sent again: bytes, not a stream (``unreplayable_body``);
4. its service has another replica (``no_other_replica``);
5. the transport sends backups at all, ``max_hedges > 0`` (``hedging_off``).

Why a *due* backup of an eligible request is not sent (budget, pushback, deadline,
...) is decided by the race, ``Race._veto``; this module and that method are the two
halves of one decision, and the only places a reason is chosen.

Strictly private.
"""

from __future__ import annotations

import httpx

from hedgeclient._events import SuppressReason
from hedgeclient._routing import Service

__all__ = ["DEFAULT_METHODS", "DEFAULT_NON_FATAL_STATUSES", "ineligible"]

DEFAULT_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
"""Methods hedged by default: the safe methods of RFC 9110, section 9.2.1. PUT and
DELETE are idempotent (section 9.2.2) but are not hedged by default: a late copy of
a PUT can overwrite a newer write made in between."""

DEFAULT_NON_FATAL_STATUSES = frozenset({502, 503, 504})
"""Statuses that do not end the race while another attempt may still answer."""


def ineligible(
    request: httpx.Request, service: Service | None, methods: frozenset[str], max_hedges: int
) -> SuppressReason | None:
    """Return why ``request`` may not be sent twice, or ``None`` when it may."""
    flag = request.extensions.get("hedge")
    if flag is False:
        return "opted_out"
    if flag is not True and request.method not in methods:
        return "not_idempotent"
    try:
        request.content  # noqa: B018 - raises when the body is a stream
    except httpx.RequestNotRead:
        return "unreplayable_body"
    if service is not None and len(service.replicas) < 2:
        return "no_other_replica"
    if max_hedges == 0:
        return "hedging_off"
    return None
