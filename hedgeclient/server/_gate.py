"""The middleware's path through the admission queue and the tie book.

A request comes here when the middleware has an admission queue (``max_concurrency``)
or when it is a tied copy (``ties``): it may be refused at once (pushback, a full
queue: 503 with ``Retry-After``), dropped (its tied twin started elsewhere: 503 with
``Hedge-Tie-Dropped``), or queued, then run with its :class:`HedgeAttempt` telling how
long it waited. Every other request takes the middleware's own short paths
(``_middleware``).

Strictly private.
"""

from __future__ import annotations

from typing import Any, final

from hedgeclient.server._admission import WAITING, Admission
from hedgeclient.server._answers import attempt_of, dropped, queue_too_long
from hedgeclient.server._backend import exchange
from hedgeclient.server._exchange import Receive, Scope, Send
from hedgeclient.server._loops import Loop, current_loop
from hedgeclient.server._stats import _CURRENT, Counters, HedgeAttempt
from hedgeclient.server._ties import TieBook, TieCopy

__all__ = ["Gate"]


@final
class Gate:
    """Admission, pushback and ties for one middleware. Strictly private.

    Args:
        counters: the middleware's counters.
        admission: the admission queue, or ``None``.
        book: the tie book, or ``None``.
        max_queue: requests that may wait (``None``: no bound).
        pushback: a backup that finds this many waiting is refused (``None``: never).
        retry_after: the ``Retry-After`` value of a refusal.
    """

    __slots__ = ("_admission", "_book", "_counters", "_max_queue", "_pushback", "_retry")

    def __init__(
        self,
        counters: Counters,
        admission: Admission | None,
        book: TieBook | None,
        max_queue: int | None,
        pushback: int | None,
        retry_after: bytes,
    ) -> None:
        self._counters = counters
        self._admission = admission
        self._book = book
        self._max_queue = max_queue
        self._pushback = pushback
        self._retry = retry_after

    async def serve(
        self,
        app: Any,
        scope: Scope,
        receive: Receive,
        send: Send,
        number: int | None,
        tie: str | None,
        twin: bytes | None,
        watched: bool,
    ) -> None:
        """Serve one request to ``app`` (``number``: its attempt; ``tie``, ``twin``:
        its tie headers), watched for its client going away if ``watched``."""
        counters = self._counters
        backup = number is not None and number > 1 and tie is None
        book = self._book
        copy = None
        if tie is not None and book is not None:
            copy = book.arrive(tie)
            if copy is None:  # its follower started elsewhere: dropped before any work
                await dropped(send, tie)
                return
        admission = self._admission
        if admission is not None and (admission.waiting or admission.running >= admission.limit):
            if backup and self._pushback is not None and admission.waiting >= self._pushback:
                counters.rejected_pushback += 1
                await self._refuse(send, copy)
                return
            if self._max_queue is not None and admission.waiting >= self._max_queue:
                counters.rejected_full += 1
                await self._refuse(send, copy)
                return
        loop = current_loop()
        args = (app, scope, number, copy, twin)
        if not watched:
            try:
                await self._admitted(loop, receive, send, *args)
            finally:
                if copy is not None and book is not None:
                    book.end(copy)
            return
        watching = exchange(receive, send)
        try:
            handler_send = send if watching.cycle is not None else watching.send
            await self._admitted(loop, watching.receive, handler_send, *args)
        except BaseException as exc:
            if not watching.caught(exc):
                raise
        finally:
            if copy is not None and book is not None:
                book.end(copy)
            if watching.stop():
                await watching.finish()
        if watching.gone:
            counters.abandoned += 1
            counters.abandoned_backups += number is not None and number > 1
            counters.cancelled += watching.cancelled

    async def _admitted(
        self,
        loop: Loop,
        receive: Receive,
        send: Send,
        app: Any,
        scope: Scope,
        number: int | None,
        copy: TieCopy | None,
        twin: bytes | None,
    ) -> None:
        """Wait in the admission queue (if any), start the tied copy (if any), run."""
        admission = self._admission
        book = self._book
        ticket = None
        try:
            queued = 0.0
            if admission is not None:
                backup = number is not None and number > 1 and copy is None
                ticket = admission.arrive(backup=backup)
                if ticket.state == WAITING:
                    if copy is not None:
                        copy.ticket = ticket
                    start = loop.now()
                    admitted = await admission.wait_admitted(ticket)
                    queued = loop.now() - start
                    self._counters.queue_seconds += queued
                    if not admitted and copy is not None:  # its follower started elsewhere
                        await dropped(send, copy.tie)
                        return
            if book is not None and copy is not None:
                if number is not None and number > 1:  # the follower asks its leader's replica
                    if not await book.start_follower(copy, twin):
                        await dropped(send, copy.tie)
                        return
                else:  # the leader starts at once
                    book.start_leader(copy)
            if copy is None and not queued:
                info = None if number is None else attempt_of(number)
            else:
                tie = copy.tie if copy is not None else None
                info = None if number is None else HedgeAttempt(number, tie, queued)
            scope["state"]["hedge"] = info
            token = _CURRENT.set(info)
            try:
                await app(scope, receive, send)
            finally:
                _CURRENT.reset(token)
        finally:
            if ticket is not None:
                assert admission is not None
                admission.release(ticket)

    async def _refuse(self, send: Send, copy: TieCopy | None) -> None:
        if copy is not None and self._book is not None:
            self._book.end(copy)
        await queue_too_long(send, self._retry)
