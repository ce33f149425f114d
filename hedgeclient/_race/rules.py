"""What every race of one transport shares.

The request path builds one :class:`RaceRules` per transport and gives it to each race
(``_race.race``): where attempts go (``_replicas.choice``, which also keeps which are in
flight where and how each replica answered), the hedge budget, the statuses that do
not end a race, the backups a request may send, and the pool's repair after a race.

Strictly private.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection
from typing import final

from hedgeclient._attempt import Attempt
from hedgeclient._policy.budget import HedgeBudget
from hedgeclient._replicas.choice import Choice
from hedgeclient._replicas.services import Service

__all__ = ["RaceRules", "Repair"]

logger = logging.getLogger("hedgeclient")

Repair = Callable[[], Awaitable[None]]
"""The transport's repair of its pool after a race that cut an attempt short or closed a
loser unread (``_compat``); shielded by itself."""


@final
class RaceRules:
    """What every race of one transport shares. Strictly private.

    Args:
        choice: where each attempt goes, and the attempts in flight.
        budget: the hedge budget.
        non_fatal: statuses that do not end a race.
        max_backups: backups a request may send (≥ 0).
        repair: what the race awaits before it returns when it cut an attempt short or
            closed a loser unread, or ``None`` when the pool needs no repair.
    """

    __slots__ = ("budget", "choice", "max_backups", "non_fatal", "repair")

    def __init__(
        self,
        *,
        choice: Choice,
        budget: HedgeBudget,
        non_fatal: Collection[int],
        max_backups: int,
        repair: Repair | None = None,
    ) -> None:
        self.choice, self.budget, self.non_fatal = choice, budget, non_fatal
        self.max_backups, self.repair = max_backups, repair

    def but(self, budget: HedgeBudget, max_backups: int) -> RaceRules:
        """These rules with another budget and backups per request (a route's or a
        request's own); ``self`` when both are the same."""
        if budget is self.budget and max_backups == self.max_backups:
            return self
        return RaceRules(
            choice=self.choice,
            budget=budget,
            non_fatal=self.non_fatal,
            max_backups=max_backups,
            repair=self.repair,
        )

    def twin(
        self, service: Service | None, origin: str, primary: Attempt, delay: float | None
    ) -> str | None:
        """A replica for a tied request's twin, chosen with its ``primary``; ``None``
        when none other is free, or the selector raised (logged: no twin, never a
        lost request)."""
        try:
            twin = self.choice.backup(service, origin, [primary], delay, primary.started)
        except Exception:  # a custom ReplicaSelector's bug
            logger.warning("hedgeclient: the replica selector failed; no twin", exc_info=True)
            return None
        return twin if twin != primary.replica else None
