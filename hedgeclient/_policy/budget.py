"""The hedge budget: a token bucket that caps the extra load hedging may add.

Every request a transport sends to a service deposits ``ratio`` tokens, hedgeable or not
(the budget is a share of the traffic); every backup request spends one. The
balance starts full and is capped at ``burst``. Extra load arrives exactly when the
service is slow, and slowness is correlated in time: under a broad slowdown the bucket
empties and hedging stops, instead of doubling the load on a struggling service.

Quiet clients, which deposit too little to ever hold a whole token, get a floor of
``min_per_second`` backups per second from a second bucket that fills with clock time.
It starts empty and holds at most ``max(1, min_per_second)`` tokens, so it never releases
a burst of its own. Over any run, therefore::

    backups <= ratio * requests + burst + min_per_second * elapsed_seconds

A request earns lazily: the request path adds one to the budget's :class:`Tally` (no
call: an unhedged request never calls the budget, issue 25), and the budget earns on the
requests counted since, one :meth:`HedgeBudget.deposit` after another, before a draw.

``max_in_flight`` caps the backups outstanding at once (Envoy's retry concurrency
limit): a slow replica set cannot pile up backups even when tokens remain.

A budget is single-event-loop state and needs no locks; one object may be shared by
several transports on the same loop to give them a common budget, and by a retry
library (:meth:`HedgeBudget.try_retry`): retries and backups then spend the same tokens,
so that a retry policy around hedging adds at most ``ratio`` of extra load in all, not
``(retries + 1) x (hedges + 1)`` times the load (``docs/budget.md``).

Prior art: gRFC A6 "gRPC Retry Design", retry throttling (a token bucket where successes
earn a fraction of a token and retries spend one); Finagle's ``RetryBudget``
(``percentCanRetry`` of requests plus ``minRetriesPerSec`` for quiet clients); Envoy's
circuit breaker ``max_retries``; Dean & Barroso, "The Tail at Scale", CACM 56(2), 2013.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import final

from hedgeclient._checks import check_clock, check_number, check_optional_int, shown
from hedgeclient._clock import default_clock
from hedgeclient._events import Payer
from hedgeclient._policy.budget_statistics import BudgetHome, BudgetStatistics, Tally

__all__ = ["BudgetStatistics", "HedgeBudget", "Payer", "Tally"]

# Float tolerance on "at least one token": ten deposits of 0.1 sum to 0.9999999999999999;
# a withdrawal at 1 - 1e-9 leaves a debt below 1e-9 of a backup, which deposits repay.
_ONE = 1.0 - 1e-9


@final
class HedgeBudget:
    """A token bucket for backup requests, with a floor for quiet clients.

    The transport combines the token check and the in-flight cap like this, with no
    ``await`` between the checks and :meth:`backup_started` (so a shared budget stays
    consistent without locks)::

        budget.deposit()                      # every request (or _tally.requests += 1)
        ...                                   # the hedge delay expires
        if budget.in_flight_full:
            suppress("max_in_flight")         # no token spent
        elif (payer := budget.draw()) is None:  # or try_withdraw(): a bool
            suppress("budget")
        else:
            budget.backup_started()
            try:
                ...                           # race the backup
            finally:                          # unsent: never left the client
                budget.backup_finished(unsent=unsent, payer=payer)

    The in-flight cap is checked first so that a refused backup does not spend a token.

    Args:
        ratio: tokens earned per request, i.e. the steady-state fraction of requests
            that may be hedged; in (0, 1]. Default 0.1: twice the 5 % extra load of a
            delay at the p95, so the budget never binds while the delay tracks the
            latency, and binds when latency shifts faster than the delay follows (or
            under a broad slowdown), capping the extra load at 10 %.
        burst: the capacity of the bucket and its initial balance, in backups; finite
            and ≥ 1. Default 10: a new client can hedge its first requests, and a short
            spike of slow calls is absorbed, while the worst-case burst stays ten backups.
        min_per_second: backups per second always allowed from the floor bucket, which
            starts empty when the budget is first used and holds at most
            ``max(1, min_per_second)`` tokens; finite and ≥ 0 (0 disables the floor).
            Default 1.0: a client issuing a few requests a second never earns a whole
            token from ``ratio``, yet can still hedge about once a second (Finagle's
            default ``minRetriesPerSec`` is 10, for retries; hedges are speculative, so
            ours is smaller).
        max_in_flight: the most backups outstanding at once, ≥ 1; ``None`` (default) for no cap.
        clock: a callable returning the current time in seconds (monotonic), read only
            by the floor bucket; default ``anyio.current_time``, looked up at call time.

    Attributes:
        in_flight_full: whether ``max_in_flight`` backups are outstanding, so no other may
            start now; read-only, kept current as backups start and finish (no call to read).

    Raises:
        TypeError: a parameter has the wrong type.
        ValueError: a parameter is out of range; the message names it and the range.

    .. versionadded:: 0.1.0
    """

    __slots__ = (
        "_balance", "_burst", "_clock", "_floor_cap", "_floor_refunds", "_floor_since",
        "_floor_tokens", "_floor_withdrawals", "_full_at", "_home", "_in_flight",
        "_max_in_flight", "_min_per_second", "_ratio", "_refunds", "_refusals", "_retries",
        "_retry_refusals", "_tally", "_withdrawals", "in_flight_full",
    )  # fmt: skip

    def __init__(
        self,
        *,
        ratio: float = 0.1,
        burst: float = 10,
        min_per_second: float = 1.0,
        max_in_flight: int | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self._ratio = check_number("ratio", ratio, low=0.0, high=1.0, low_open=True)
        self._burst = check_number("burst", burst, low=1.0)
        self._min_per_second = check_number("min_per_second", min_per_second, low=0.0)
        self._max_in_flight = check_optional_int("max_in_flight", max_in_flight, 1)
        self._clock = check_clock(clock)
        self._tally = Tally()
        # The main balance, and the tally's count it has earned on: one tuple, replaced
        # whole, so that the scrape thread reads a pair that belongs together.
        self._balance = (self._burst, 0)
        self._floor_tokens = 0.0
        self._floor_cap = max(1.0, self._min_per_second)
        # When the floor bucket last accrued; None until the budget is first used.
        self._floor_since: float | None = None
        self._withdrawals = self._floor_withdrawals = self._refusals = 0  # counts
        self._retries = self._retry_refusals = self._in_flight = 0
        self._refunds = self._floor_refunds = 0
        # A sync transport's engine (try_retry), weakly: a budget the metrics read
        # must not keep an unclosed transport's thread alive.
        self._home: weakref.ref[BudgetHome] | None = None
        self._full_at = float("inf") if self._max_in_flight is None else self._max_in_flight
        self.in_flight_full = False  # True from _full_at backups in flight (no cap: inf)

    @property
    def ratio(self) -> float:
        """Tokens earned per request."""
        return self._ratio

    @property
    def burst(self) -> float:
        """The capacity and initial balance of the main bucket, in backups."""
        return self._burst

    @property
    def min_per_second(self) -> float:
        """Backups per second allowed by the floor bucket."""
        return self._min_per_second

    @property
    def max_in_flight(self) -> int | None:
        """The cap on backups outstanding at once; ``None`` for no cap."""
        return self._max_in_flight

    @property
    def tokens(self) -> float:
        """The main balance, in backups (0 .. ``burst``, or down to 1e-9 below 0: the
        tolerance of a whole token, a debt the next deposit repays); the floor bucket is
        apart. Includes what the requests counted since the last draw earned (computed,
        not settled: safe to read from another thread)."""
        tokens, earned = self._balance
        return self._earn(tokens, self._tally.requests - earned)

    @property
    def backups_in_flight(self) -> int:
        """Backups started (:meth:`backup_started`) and not yet finished."""
        return self._in_flight

    def deposit(self) -> None:
        """Earn ``ratio`` tokens for one request (up to ``burst``); the first starts the floor."""
        self._tally.requests += 1
        self._settle()
        if self._floor_since is None and self._min_per_second:
            self._floor_since = self._now()

    def _earn(self, tokens: float, requests: int) -> float:
        """``tokens`` after ``requests`` deposits of ``ratio``, capped at ``burst``: one by
        one up to 64 (the float sums of a deposit per request), beyond in one product
        (a few ulps apart, far inside ``_ONE``'s tolerance; a settlement stays O(1))."""
        ratio, burst = self._ratio, self._burst
        if requests > 64:
            tokens += requests * ratio
        else:
            while requests > 0 and tokens < burst:
                tokens += ratio
                requests -= 1
        return tokens if tokens < burst else burst

    def _settle(self) -> float:
        """Earn on the requests counted since the last settlement; the main balance."""
        tokens, earned = self._balance
        counted = self._tally.requests
        if counted != earned:
            tokens = self._earn(tokens, counted - earned)
            self._balance = (tokens, counted)
        return tokens

    def _spend(self, cost: float) -> None:
        """Take ``cost`` tokens from the main balance (settled just before)."""
        tokens, earned = self._balance
        self._balance = (tokens - cost, earned)

    def try_withdraw(self) -> bool:
        """Spend one token for a backup, if there is one: from the main bucket when it
        holds a whole token, else from the floor bucket; nothing when both are short.
        Does not look at the in-flight cap (see the class docstring).

        Returns:
            ``True`` if a token was spent and the backup may be sent, ``False`` if the
            backup is refused.
        """
        return self.draw() is not None

    def draw(self) -> Payer | None:
        """:meth:`try_withdraw` saying which bucket paid, ``"main"`` or ``"floor"``
        (``None``: refused): where a backup that never left the client gives its token
        back (``backup_finished(unsent=True, payer=...)``, :meth:`refund`)."""
        if self._settle() >= _ONE:
            self._spend(1.0)
            self._withdrawals += 1
            return "main"
        if self._min_per_second and self._floor_token():
            self._withdrawals += 1
            self._floor_withdrawals += 1
            return "floor"
        self._refusals += 1
        return None

    def _floor_token(self) -> bool:
        """Refill the floor bucket since its last use (not outside any event loop, where
        the default clock has no time), then spend a whole token if it holds one."""
        now, since = self._now(), self._floor_since
        if now is not None:
            if since is not None and now > since:
                floor = self._floor_tokens + (now - since) * self._min_per_second
                self._floor_tokens = floor if floor < self._floor_cap else self._floor_cap
            self._floor_since = now if since is None or now > since else since
        if self._floor_tokens >= _ONE:
            self._floor_tokens -= 1.0
            return True
        return False

    def _now(self) -> float | None:
        """The clock; ``None`` for the default one outside any event loop (a retry
        library's thread with no loop to hand over to: before a sync transport's first
        request, after it closed)."""
        try:
            return self._clock()
        except RuntimeError:  # anyio's NoEventLoopError, sniffio's AsyncLibraryNotFoundError
            if self._clock is not default_clock:
                raise
            return None

    def try_retry(self, *, deposits: bool = True) -> bool:
        """Spend the tokens of one retry, if the budget holds them: the draw of a retry
        library, so that its retries and the transport's backups share one budget.

        Call it as a retry is about to be scheduled (never for a first attempt); retry
        only if it returns ``True``. It draws as a backup does (main bucket, else floor),
        and never looks at ``max_in_flight`` (a retry is not a backup in flight).

        As in Finagle, a request earns once, however many times it is retried. A retried
        request that goes through a :class:`~hedgeclient.HedgedTransport` drawing on this
        budget deposits ``ratio`` again as it is sent; so by default a retry withdraws
        ``1 + ratio`` tokens, one for itself and the deposit its resend will make. Then,
        over any run (``requests``: the caller's, not their retries; ``backups``: those
        that reached the wire; ``docs/budget.md`` derives it)::

            backups + retries <= ratio * requests + burst + min_per_second * seconds

        A budget of a :class:`~hedgeclient.SyncHedgedTransport` (its own, its routes', its
        requests') may be drawn on from any thread: the call runs under its engine's lock
        (or on its loop thread, ``backend="asyncio"``).

        Args:
            deposits: whether the retried request deposits into this budget as it is sent
                (through a transport drawing on it); default ``True``: ``1 + ratio`` tokens.
                ``False`` for a retry sent by a client that does not deposit here: one token.

        Returns:
            ``True`` if the tokens were spent and the retry may go, ``False`` if refused
            (counted in ``statistics().retry_refusals``).

        Raises:
            TypeError: ``deposits`` is not a bool.
        """
        if type(deposits) is not bool:  # a truthy "no" must not pass as True
            msg = f"`deposits` must be a bool, got {shown(deposits)}"
            raise TypeError(msg)
        home = None if self._home is None else self._home()
        if home is not None and home.elsewhere():  # a sync caller's thread: on the loop's
            return home.run(functools.partial(self.try_retry, deposits=deposits))
        cost = 1.0 + self._ratio if deposits else 1.0
        if self._settle() >= cost - 1e-9:  # the same float tolerance as a backup's
            self._spend(cost)
            self._retries += 1
            return True
        if self._min_per_second and self._floor_token():  # a whole retry, as a backup
            self._retries += 1
            return True
        self._retry_refusals += 1
        return False

    def bind_home(self, home: BudgetHome, given: str = "budget") -> None:
        """Make ``home`` (a sync transport's engine: its lock, or its loop thread; again: a
        no-op) where this budget lives: :meth:`try_retry` from another thread runs there.
        ``given``: its name.

        Raises:
            ValueError: another open (not closed) ``SyncHedgedTransport``'s thread holds it.
        """
        held = None if self._home is None else self._home()
        if held is not None and held is not home and not held.closed:
            msg = (
                f"`{given}`: {self!r} already serves another SyncHedgedTransport: a budget "
                "lives on one event loop, and each SyncHedgedTransport has its own; give "
                "each its own HedgeBudget, or share one SyncHedgedTransport"
            )
            raise ValueError(msg)
        self._home = weakref.ref(home)

    def unbind_home(self, home: BudgetHome) -> None:
        """Free the budget from ``home`` (its transport closed), if it holds it."""
        if self._home is not None and self._home() is home:
            self._home = None

    def backup_started(self) -> None:
        """Count one more backup in flight. Check :attr:`in_flight_full` first."""
        self._in_flight += 1
        self.in_flight_full = self._in_flight >= self._full_at

    def backup_finished(self, *, unsent: bool = False, payer: Payer = "main") -> None:
        """Count one backup in flight fewer (call it in a ``finally``). ``unsent`` (default
        ``False``): no replica saw its request (never off the pool's queue, or cancelled
        still connecting), so its token goes back (:meth:`refund`) to ``payer`` (``"main"``).

        Raises:
            RuntimeError: no backup is in flight (unbalanced calls: a bug in the caller).
        """
        if self._in_flight <= 0:
            msg = "backup_finished() called with no backup in flight"
            raise RuntimeError(msg)
        self._in_flight -= 1
        self.in_flight_full = self._in_flight >= self._full_at
        if unsent:  # no extra load: its token back
            self.refund(payer)

    def refund(self, payer: Payer = "main") -> None:
        """Give a backup's token back to ``payer``, the bucket that paid it (:meth:`draw`),
        as if it had never been tried (capped): for a backup that never left the client,
        unsent or never begun (a custom selector raised as it started)."""
        self._refunds += 1
        if payer == "floor":  # back to the floor: the main bucket never lent it
            self._floor_refunds += 1
            floor = self._floor_tokens + 1.0  # accrued since, and capped, at its next use
            self._floor_tokens = floor if floor < self._floor_cap else self._floor_cap
        else:
            tokens = self._settle()
            self._spend(tokens - min(tokens + 1.0, self._burst))

    def statistics(self) -> BudgetStatistics:
        """Return a snapshot of the budget (does not read the clock; settles nothing:
        safe to read from another thread)."""
        tokens, earned = self._balance
        requests = self._tally.requests  # every deposit is counted there
        return BudgetStatistics(
            tokens=self._earn(tokens, requests - earned),
            floor_tokens=self._floor_tokens,
            deposits=requests,
            withdrawals=self._withdrawals,
            floor_withdrawals=self._floor_withdrawals,
            refusals=self._refusals,
            backups_in_flight=self._in_flight,
            max_in_flight=self._max_in_flight,
            retries=self._retries,
            retry_refusals=self._retry_refusals,
            refunds=self._refunds,
            floor_refunds=self._floor_refunds,
        )

    def __repr__(self) -> str:
        return (
            f"HedgeBudget(ratio={self._ratio!r}, burst={self._burst!r}, "
            f"min_per_second={self._min_per_second!r}, max_in_flight={self._max_in_flight!r})"
        )
