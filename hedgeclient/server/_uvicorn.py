"""uvicorn's request cycle: the one module that reads its internals.

uvicorn hands an application the bound method ``send`` of its ``RequestResponseCycle``
(``uvicorn.protocols.http.httptools_impl`` or ``h11_impl``), whose undocumented
attributes ``response_complete`` and ``disconnected`` say whether the response went
out and whether the connection was lost before (uvicorn sets ``disconnected`` in
``connection_lost``). The middleware learns that its client left from them
(:func:`disconnected`, :func:`response_complete`, :func:`left_early`, :func:`gone`,
called by ``_poll``, ``_exchange`` and ``_middleware``); nothing else reads them, and
:func:`learn_cycle` feature-detects them once per type, so that a uvicorn without them
is served as any other server.

Why not the public API: ASGI tells an application that its client left only through
``receive()``, as an ``http.disconnect`` message, and only to a caller awaiting it; a
handler that has read its body does not call it again, so the public way is a second
reader per request (a task, or a wrapper awaiting ``receive()`` beside the handler),
which is what the middleware does under any other server (``_exchange``). uvicorn
0.28 also raises ``ClientDisconnected`` from ``send()`` (Kludex/uvicorn#2220), but only
when the application sends, which a handler cancelled for its abandoned client is
about to stop doing. The flags cost a dict insert per request and a poll every few
milliseconds (``_poll``, ``docs/benchmarks.md``, "The server's half").

Strictly private.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "CYCLES",
    "UVICORN",
    "disconnected",
    "gone",
    "learn_cycle",
    "left_early",
    "response_complete",
    "server_cycle",
]

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


def disconnected(cycle: Any) -> bool:
    """Whether uvicorn saw the connection of ``cycle`` lost."""
    return cycle.disconnected  # type: ignore[no-any-return]


def response_complete(cycle: Any) -> bool:
    """Whether uvicorn handed the last of ``cycle``'s response to its transport."""
    return cycle.response_complete is True


def left_early(cycle: Any) -> bool:
    """Whether the client of ``cycle`` went away before its response was complete."""
    return bool(cycle.disconnected and not cycle.response_complete)


def gone(polled: dict[Any, Any]) -> list[Any]:
    """The tasks of ``polled`` (request task -> its cycle) whose client went away before
    the response was complete: :func:`left_early` of each, inlined, since the poll asks
    it of every request in flight every few milliseconds."""
    return [
        task for task, cycle in polled.items() if cycle.disconnected and not cycle.response_complete
    ]
