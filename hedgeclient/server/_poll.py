"""Under uvicorn: one poll per event loop that cancels the requests whose client left.

uvicorn marks a request cycle whose connection was lost before the response was
complete (``RequestResponseCycle.disconnected``, ``response_complete``: internals that
only ``_uvicorn`` reads, feature-detected per type by ``_uvicorn.learn_cycle``). So a watched
request under uvicorn is not read at all: the middleware puts its task in the loop's
:class:`Poller` (``polled[task] = cycle``, a dict insert) and takes it out as the
handler returns (a dict pop), and one poll every :data:`POLL_EVERY` seconds, armed
while requests are polled, cancels the tasks whose cycle says the client left. The
handler keeps uvicorn's own ``receive`` and ``send``: no wrapper, no task, no timer
per request.

The middleware inlines the request's side (the dict insert and pop, :data:`LAST` to
find the loop's poller): every Python call shows on a hello world. Only what is rare
is a function here (:meth:`Poller.left`: the client left, or the poll cancelled the
task).

Strictly private. asyncio only (uvicorn runs on asyncio).
"""

from __future__ import annotations

import sys
import weakref
from asyncio import CancelledError
from collections.abc import Callable
from typing import Any, Generic, TypeVar, final

from hedgeclient.server._uvicorn import gone, left_early

__all__ = ["LAST", "POLL_EVERY", "POLL_MAX", "PerLoop", "Poller", "current_task", "poller_of"]

T = TypeVar("T")


@final
class PerLoop(Generic[T]):
    """One ``T`` per asyncio loop, made on first use, kept in a dict keyed weakly by
    the loop.

    Calling it with a loop returns that loop's ``T``. :attr:`last` holds the loop seen
    last and its ``T`` (strongly: a loop stays alive until another one is seen), so
    that a hot path finds it in two list reads,
    ``last[1] if last[0] is loop else per_loop(loop)`` (one loop per process is the
    common case). Strictly private.
    """

    __slots__ = ("_made", "_make", "last")

    def __init__(self, make: Callable[[Any], T]) -> None:
        self._make = make
        self._made: weakref.WeakKeyDictionary[Any, T] = weakref.WeakKeyDictionary()
        self.last: list[Any] = [None, None]

    def __call__(self, loop: Any) -> T:
        found = self._made.get(loop)
        if found is None:
            found = self._made[loop] = self._make(loop)
        self.last[:] = [loop, found]
        return found


POLL_EVERY = 0.0025
"""Seconds between two polls of the uvicorn requests in flight, at least: the lag of
their cancellation, at most, with up to 250 requests in flight. The period grows by
10 µs per request in flight (so a poll costs at most about 1 % of a core), up to
:data:`POLL_MAX`."""
POLL_MAX = 0.050
"""Seconds between two polls at most (with 5,000 requests in flight or more)."""
_POLL_PER_REQUEST = 10e-6  # seconds of period per request in flight
_UNCANCEL = sys.version_info >= (3, 11)  # Task.uncancel()

if sys.version_info >= (3, 12):  # pragma: no cover - the venv runs 3.11
    from asyncio import current_task  # a C function since 3.12
else:  # 3.10, 3.11: skip the Python wrapper (and its get_running_loop) around this dict
    from asyncio.tasks import _current_tasks  # type: ignore[attr-defined]

    current_task = _current_tasks.get


@final
class Poller:
    """The uvicorn requests polled on one asyncio loop. Strictly private.

    The request's side (in the middleware, inlined)::

        polled = poller.polled
        polled[task] = cycle
        if not poller.armed:
            poller.arm()
        ... the handler runs ...
        if polled.pop(task, None) is None or disconnected(cycle):
            left = poller.left(task, cycle, exc)  # rare: see left()

    Args:
        loop: the asyncio event loop.
    """

    __slots__ = ("__weakref__", "armed", "delivered", "loop", "polled")

    def __init__(self, loop: Any) -> None:
        self.loop = loop
        self.polled: dict[Any, Any] = {}  # request task -> its uvicorn request cycle
        self.delivered: set[Any] = set()  # tasks the poll cancelled (out of ``polled``)
        self.armed = False

    def arm(self) -> None:
        """Arm the next poll: in :data:`POLL_EVERY` seconds, longer with many requests
        polled (:data:`POLL_MAX` at most)."""
        self.armed = True
        period = min(POLL_MAX, max(POLL_EVERY, len(self.polled) * _POLL_PER_REQUEST))
        self.loop.call_at(self.loop.time() + period, self._poll)

    def _poll(self) -> None:
        polled = self.polled
        for task in gone(polled):  # out of ``polled``: the request's pop finds it delivered
            del polled[task]
            self.delivered.add(task)
            task.cancel()  # a loop callback: the task waits at an await
        if polled:
            self.arm()
        else:
            self.armed = False

    def left(self, task: Any, cycle: Any, exc: BaseException | None) -> int:
        """The polled request's handler returned (``exc`` ``None``) or raised ``exc``,
        and its task is out of :attr:`polled`, which was found empty of it or its
        ``cycle`` disconnected. 0: its client stayed (or left after the response was
        complete); 1: its client went away before the response was complete
        (abandoned), and the handler was not cancelled for it, or ``exc`` is not that
        cancellation (re-raise it); 2: abandoned, and ``exc`` is the cancellation the
        poll delivered (swallow it)."""
        delivered = self.delivered
        if task in delivered:
            delivered.discard(task)
            others = task.uncancel() if _UNCANCEL else 0  # taken back: it was ours
            return 2 if isinstance(exc, CancelledError) and not others else 1
        return 1 if left_early(cycle) else 0


poller_of: PerLoop[Poller] = PerLoop(Poller)
"""The :class:`Poller` of an asyncio loop (made on first use)."""
LAST = poller_of.last
"""The loop seen last and its :class:`Poller` (:attr:`PerLoop.last`)."""
