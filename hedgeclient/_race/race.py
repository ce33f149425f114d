"""The race between a primary attempt and its backup requests: the one engine.

The primary attempt runs in the caller's own task, under one cancel scope. If it may
be hedged, its hedge deadline is registered with the event loop's hedge timer
(``_timer``). Most requests answer first: they cancel the registration and start no
task at all. When the deadline passes first and a backup may go, the timer starts a
*backup driver*: one detached task, in a copy of the caller's context variables, that
runs the backups and judges the race (``_race.backups``). If a backup wins, the driver
cancels the primary's scope.

The engine is three layers, imported one way: this module (the entry point, what the
caller's task does, and what the caller gets back), ``_race.backups`` (when a backup is
due, whether it goes, and the driver that runs it) and ``_race.core`` (the race's
state, and running and judging one attempt).

An attempt that fails (a transport error, or a status such as 503 that another replica
may not give) triggers the next backup at once. The first attempt whose headers carry
a status that is not in the non-fatal set wins; every other attempt is cancelled, so
the replica sees a disconnect, and a loser that already had headers has its response
closed unread (shielded).

A copy of a tied request (``_policy.tied``) whose replica answers "dropped" (its twin started
elsewhere) is neither a winner nor a failure while another attempt is in flight, and
gives its backup back; with nothing else in flight it counts as failed.

Guarantees, whatever the caller's task does:

- the caller never returns (nor raises) while its backup driver runs: on every exit
  path it cancels the driver and waits for it, shielded;
- the caller's own cancellation (anyio, trio, or a native ``asyncio`` cancel such as
  ``asyncio.timeout``) is what it gets back, never another exception;
- exceptions never leave as an ``ExceptionGroup``: attempts catch their own errors,
  and when every attempt failed the caller gets the last failed response if there was
  one (a 503 from every replica is a 503), else the last attempt's own exception with
  its own type (``httpx.ConnectError`` stays ``httpx.ConnectError``).

The engine's modules and ``_timer`` are the only ones that start tasks. Prior art: tower's
``hedge::select`` (the first future to finish wins and the other is dropped);
Finagle's ``BackupRequestFilter``; Dean & Barroso, "The Tail at Scale", CACM 56(2),
2013.

Strictly private.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import final

import anyio
import httpx

from hedgeclient._attempt import FAILED, HEADERS, Attempt, ended_last
from hedgeclient._policy.tied import is_dropped
from hedgeclient._race.backups import Backups
from hedgeclient._timer import run_shielded

__all__ = ["Race"]


@final
class Race(Backups):
    """Runs one request's attempts and keeps the facts hooks and metrics need.

    Built with the arguments of :class:`~hedgeclient._race.core.RaceCore`; nothing is
    sent until :meth:`run`.
    """

    __slots__ = ()

    async def run(self) -> httpx.Response | None:
        """Run the race in the caller's task.

        Returns:
            The winner's (or the last failed) response; ``None`` when :meth:`cancel`
            (the transport closing) stopped the race before any attempt won.

        Raises:
            httpx.HTTPError: the last attempt's own exception, when every attempt
                failed without a response.
            ValueError: the selector chose a replica it was not given (primary).
        """
        replica = self._choice.primary(self._service, self._origin, self.delay, self.start)
        primary = self._begin(replica, "primary", self.start)
        scope = self._primary_scope = self._timer.cancel_scope()
        if self._tie_offset is not None:
            self._tie(primary)
        first = self.delay if self._twin is None else self._tie_offset  # _interval()
        if first is not None and self.backups_left > 0:
            self._context = contextvars.copy_context()
            self._handle = self._timer.call_at(self.start + first, self._hedge_due)
            primary.on_stall = self._stall_due
        try:
            try:
                with scope:  # the primary in this task: _attempt(primary), inlined
                    try:
                        response = primary.response = await self._send(primary)
                        primary.state = HEADERS
                        if primary.tie is not None:
                            primary.dropped = is_dropped(response)
                    except Exception as exc:  # an attempt's error is data for the race
                        primary.error = exc
                        primary.state = FAILED
                    finally:
                        self._ended(primary)
            finally:
                if self._handle is not None:
                    self._handle.cancel()
                    primary.on_stall = None  # it held the race: a cycle for the collector
            if self._driver_done is None:  # no backup was sent: judge the primary here
                if primary.state == HEADERS and self._judge(primary):
                    self._finished.clear()
                    return primary.response  # the common case, in its shortest form
            else:  # a backup is out: the first to win stops the other
                if primary.state == HEADERS and self._judge(primary):
                    assert self._driver_scope is not None
                    self._driver_scope.cancel()  # the primary won: its backups lose
                await self._driver_done.wait()
            if self.winner is None and not self.aborted:
                with anyio.CancelScope() as self._settle_scope:
                    await self._settle()
            if self.winner is None and self.aborted:  # closed before any attempt won
                self.cancelled_by_caller = True
                return None
        except BaseException:
            self.cancelled_by_caller = True
            await self._stop_driver()
            raise
        finally:
            if len(self.attempts) > 1 or self.cancelled_by_caller:  # else nothing to close
                await self._close_losers()
        return self._result()

    def cancel(self) -> None:
        """The transport is closing: end every attempt, send no more. Synchronous."""
        self.aborted = True
        self.backups_left = 0
        for scope in (self._primary_scope, self._driver_scope, self._settle_scope):
            if scope is not None:
                scope.cancel()

    async def _close_losers(self) -> None:
        """Close every response but the one :meth:`_result` will return; shielded."""
        keep = self._kept()
        losers = [a.response for a in self.attempts if a.response is not None and a is not keep]
        if not losers:
            return
        self.needs_cleanup = True  # an HTTP/2 stream closed unread

        async def close() -> None:
            for response in losers:
                await response.aclose()

        try:
            await run_shielded(close)
        except BaseException:  # cancelled meanwhile: nobody will take the kept response
            if keep is not None and keep.response is not None:
                self.cancelled_by_caller = True
                with contextlib.suppress(BaseException):  # the first exception goes on
                    await run_shielded(keep.response.aclose)
            raise

    def _kept(self) -> Attempt | None:
        if self.cancelled_by_caller:
            return None
        if self.winner is not None:
            return self.winner
        failed = [
            a for a in self.attempts if a.response is not None and a.processed and not a.dropped
        ]
        return max(failed, key=ended_last) if failed else None

    def _result(self) -> httpx.Response:
        kept = self._kept()
        if kept is not None:
            assert kept.response is not None
            return kept.response
        errors = [a for a in self.attempts if a.error is not None]
        if not errors:  # only dropped copies: replicas that broke the tie protocol
            msg = "every copy of the tied request was dropped, none answered"
            raise httpx.RemoteProtocolError(msg)
        last = max(errors, key=ended_last)
        assert last.error is not None
        # The error's own message names no replica (httpx's "All connection attempts
        # failed"): a note says where each attempt went (issue 23, item 18).
        last.error.add_note(_no_answer(errors))
        raise last.error


def _no_answer(failed: list[Attempt]) -> str:
    """A note naming each failed attempt's replica and error (PEP 678 notes: the error
    raised keeps its type and message)."""

    def one(attempt: Attempt) -> str:
        error = attempt.error
        text = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
        return f"attempt {attempt.number} to {attempt.replica} failed ({text})"

    return "hedgeclient: no replica answered: " + "; ".join(map(one, failed))
