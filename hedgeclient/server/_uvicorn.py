"""Recognising uvicorn's request cycle behind a ``send``.

uvicorn hands an application the bound method ``send`` of its ``RequestResponseCycle``
(``uvicorn.protocols.http.httptools_impl`` or ``h11_impl``), whose private attributes
``response_complete`` and ``disconnected`` say whether the response went out and
whether the connection was lost before. The middleware reads them (``_poll``,
``_exchange``) rather than ``receive()``; they are feature-detected once per type.

Strictly private.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CYCLES", "UVICORN", "learn_cycle", "server_cycle"]

Send = Any  # an ASGI send: async (message) -> None

CYCLES: dict[type, bool] = {}  # a send's owner's type -> whether it is uvicorn's cycle
UVICORN: set[type] = set()  # the types of CYCLES found to be uvicorn's cycle


def server_cycle(send: Send) -> Any:
    """uvicorn's request cycle behind ``send``, or ``None``: the object whose bound
    method ``send`` is, if it is a ``RequestResponseCycle`` of ``uvicorn.protocols.http``
    (httptools or h11), which records ``response_complete`` and drops sends after a
    disconnect itself. One dict look-up per request once its type was seen (the
    asyncio factory, ``_backend.exchange``, inlines that look-up)."""
    owner = getattr(send, "__self__", None)
    if owner is None:
        return None
    known = CYCLES.get(type(owner))
    if known is None:
        known = learn_cycle(owner)
    return owner if known else None


def learn_cycle(owner: Any) -> bool:
    """Whether ``owner``'s type is uvicorn's request cycle (remembered per type)."""
    kind = type(owner)
    known = CYCLES[kind] = (
        kind.__name__ == "RequestResponseCycle"
        and kind.__module__.startswith("uvicorn.protocols.http.")
        and isinstance(getattr(owner, "response_complete", None), bool)
        and isinstance(getattr(owner, "disconnected", None), bool)
    )
    if known:
        UVICORN.add(kind)
    return known
