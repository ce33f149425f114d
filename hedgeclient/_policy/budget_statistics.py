"""The snapshot a :class:`~hedgeclient.HedgeBudget` gives of itself (``statistics()``),
the tally of requests its depositors count (:class:`Tally`), and the thread it lives on
(:class:`BudgetHome`).

Strictly private: :class:`BudgetStatistics` is re-exported by :mod:`hedgeclient`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, final

__all__ = ["BudgetHome", "BudgetStatistics", "Tally"]


@final
@dataclass(frozen=True, slots=True)
class BudgetStatistics:
    """A snapshot of a :class:`~hedgeclient.HedgeBudget`.

    Attributes:
        tokens: the main balance, in backups (0 .. ``burst``).
        floor_tokens: the floor bucket's balance as of its last use, in backups.
        deposits: calls to :meth:`~hedgeclient.HedgeBudget.deposit` (requests sent to a service).
        withdrawals: backups allowed, from either bucket.
        floor_withdrawals: the part of ``withdrawals`` paid by the floor bucket.
        refusals: backups refused because both buckets were empty.
        backups_in_flight: backups started and not yet finished.
        max_in_flight: the cap on ``backups_in_flight``; ``None`` for no cap.
        retries: retries allowed by :meth:`~hedgeclient.HedgeBudget.try_retry`.
        retry_refusals: retries refused by it (the budget was short).
        refunds: the part of ``withdrawals`` given back, each to the bucket that paid:
            backups that never left the client (``withdrawals - refunds`` cost a token).
        floor_refunds: the part of ``refunds`` the floor bucket got back (it paid them).

    .. versionadded:: 0.1.0
    """

    tokens: float
    floor_tokens: float
    deposits: int
    withdrawals: int
    floor_withdrawals: int
    refusals: int
    backups_in_flight: int
    max_in_flight: int | None
    retries: int = 0
    retry_refusals: int = 0
    refunds: int = 0
    floor_refunds: int = 0


@final
class Tally:
    """Requests sent against one :class:`~hedgeclient.HedgeBudget` (its ``_tally``),
    which it earns on; only grows. Strictly private. A depositor adds one per request,
    or, finding it 0, calls ``HedgeBudget.deposit`` (the first request starts the
    floor's clock)."""

    __slots__ = ("requests",)

    def __init__(self) -> None:
        self.requests = 0


class BudgetHome(Protocol):
    """Where a budget lives: a sync transport's engine (``_sync.threads.ThreadEngine``,
    ``_sync.loop.LoopThread``). Strictly private."""

    @property
    def closed(self) -> bool: ...

    def elsewhere(self) -> bool: ...

    def run(self, func: Callable[[], bool]) -> bool: ...
