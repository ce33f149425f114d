"""The admission queue: at most ``limit`` requests run at once; the rest wait in line.

Two lines: primaries (and requests no hedging client sent, and tied copies) in one,
backups in the other; a slot that frees goes to the oldest primary, and to a backup
only when no primary waits, so backups wait behind primaries. A waiting request can
leave the line (its client went away) or be *dropped* from it (its tied twin started
on another replica); either way it never takes a slot. Lines are FIFO with lazy
deletion: a ticket that left is skipped when its turn comes.

Single-event-loop state, no locks. Strictly private.
"""

from __future__ import annotations

from collections import deque
from typing import Literal, final

import anyio

__all__ = ["ADMITTED", "DROPPED", "WAITING", "Admission", "Ticket"]

WAITING: Literal[0] = 0
ADMITTED: Literal[1] = 1
DROPPED: Literal[2] = 2
LEFT: Literal[3] = 3
DONE: Literal[4] = 4


@final
class Ticket:
    """One request's place in the queue. Strictly private."""

    __slots__ = ("backup", "event", "state")

    def __init__(self, backup: bool) -> None:
        self.backup = backup
        self.state: int = WAITING
        self.event: anyio.Event | None = None


@final
class Admission:
    """A concurrency limit with a queue where backups wait behind primaries.

    Args:
        limit: requests that may run at once, >= 1.
    """

    __slots__ = ("_backups", "_primaries", "limit", "running", "waiting", "waiting_backups")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.running = 0
        self.waiting = 0  # tickets in either line that are still WAITING
        self.waiting_backups = 0
        self._primaries: deque[Ticket] = deque()
        self._backups: deque[Ticket] = deque()

    def arrive(self, *, backup: bool) -> Ticket:
        """Take a ticket: ADMITTED at once if a slot is free and nobody waits, else
        WAITING (then :meth:`wait_admitted`)."""
        ticket = Ticket(backup)
        if self.running < self.limit and self.waiting == 0:
            ticket.state = ADMITTED
            self.running += 1
            return ticket
        ticket.event = anyio.Event()
        (self._backups if backup else self._primaries).append(ticket)
        self.waiting += 1
        self.waiting_backups += backup
        return ticket

    async def wait_admitted(self, ticket: Ticket) -> bool:
        """Wait for ``ticket``'s turn; True when admitted, False when dropped.

        A cancelled wait leaves the line (or, admitted in that instant, gives the slot
        back) before the cancellation propagates.
        """
        if ticket.state == WAITING:
            assert ticket.event is not None
            try:
                await ticket.event.wait()
            except BaseException:
                state: int = ticket.state  # changed by another task meanwhile
                if state == ADMITTED:
                    self.release(ticket)
                elif state == WAITING:
                    self._leave(ticket, LEFT)
                raise
        return ticket.state == ADMITTED

    def drop(self, ticket: Ticket) -> bool:
        """Drop a WAITING ticket (its tied twin started elsewhere); False if not waiting."""
        if ticket.state != WAITING:
            return False
        self._leave(ticket, DROPPED)
        assert ticket.event is not None
        ticket.event.set()
        return True

    def release(self, ticket: Ticket) -> None:
        """Give back an ADMITTED ticket's slot (idempotent) and admit the next in line."""
        if ticket.state != ADMITTED:
            return
        ticket.state = DONE
        self.running -= 1
        while self.waiting and self.running < self.limit:
            line = self._primaries if self._primaries_waiting() else self._backups
            nxt = line.popleft()
            if nxt.state != WAITING:
                continue
            self.waiting -= 1
            self.waiting_backups -= nxt.backup
            nxt.state = ADMITTED
            self.running += 1
            assert nxt.event is not None
            nxt.event.set()
        self._trim()

    def _primaries_waiting(self) -> bool:
        return self.waiting > self.waiting_backups

    def _leave(self, ticket: Ticket, state: int) -> None:
        ticket.state = state
        self.waiting -= 1
        self.waiting_backups -= ticket.backup
        self._trim()

    def _trim(self) -> None:
        """Pop tickets that left from the heads of both lines (bounded memory)."""
        for line in (self._primaries, self._backups):
            while line and line[0].state != WAITING:
                line.popleft()
