"""Keeping each discovered service's replica set current, while requests go on.

No background task runs while a transport is idle. A request for a discovered service
looks at its state: when the set has expired (its TTL, or the source's interval), it
starts one refresh in a detached task (through the event loop's hedge timer) and goes
on with the set it has; only a service with no set yet makes requests wait, for at
most the source's ``timeout``. A connection failure to one of its replicas starts a
refresh at once, at most once a second. A DNS refresh whose A or AAAA query failed
while the other gave addresses applies those, and logs and counts the family that
failed. A refresh that fails keeps the last good set, logs one warning line and counts
the failure; the next one is tried after 1, 2, 4, ... seconds (at most the source's
longest interval). A service that never had a set does
not wait out that back-off: a request that finds no set starts a refresh at once, at
most once a second. A watch (an async iterable) is iterated in one task per service
from the first request until ``aclose()``; the first request waits for its first
valid set (values that are not one are skipped), for at most the source's
``timeout``.

A new set takes effect in one step (``Service.update``): requests read a service's
replicas afresh for each attempt, so a removed replica gets no new attempt once its
removal is seen, while its attempts in flight finish. The transport's ``on_change``
callback then tells the selector, forgets stall state, and closes the removed
replicas' idle pooled connections.

Strictly private.
"""

from __future__ import annotations

import contextvars
import logging
import math
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, final

import anyio
import httpx

from hedgeclient._discovery._dns import DnsReplicas, SrvReplicas
from hedgeclient._discovery._errors import DiscoveryFailure
from hedgeclient._discovery._resolver import AddressFamily, FamilyFailure
from hedgeclient._discovery._sources import Source, WatchedReplicas, replica_set
from hedgeclient._discovery._state import (
    DiscoveryStatistics,
    State,
    longest,
    wait_limit,
)
from hedgeclient._replicas.replica import Replica
from hedgeclient._replicas.services import Service
from hedgeclient._timer import current_timer, loop_id

__all__ = ["Discovery", "DiscoveryStatistics", "OnChange"]

logger = logging.getLogger("hedgeclient")

RATE_LIMIT: Final = 1.0  # seconds: the least time between refreshes after connect failures

_RECORD: Final[dict[AddressFamily, str]] = {"ipv4": "A", "ipv6": "AAAA"}

OnChange = Callable[[Service, list[Replica], frozenset[str]], Awaitable[None]]
"""Called after a service's set changed: the service, its new replicas, the origins
that left."""


@final
class Discovery:
    """The discovered services of one transport. Strictly private.

    Args:
        sources: logical origin text -> (its service, its source).
        zone_of: the zone of a replica origin its source gave none for, or None.
        on_change: awaited in the refresh task after each change of a set.
        check: called with each set a source gives, before it applies; a set it
            refuses (by raising ``DiscoveryFailure``) counts as a failed refresh.
    """

    __slots__ = ("_check", "_on_change", "_states", "_zone_of")

    def __init__(
        self,
        sources: Mapping[str, tuple[Service, Source]],
        *,
        zone_of: Callable[[str], str | None],
        on_change: OnChange,
        check: Callable[[Service, list[Replica]], None] = lambda service, replicas: None,
    ) -> None:
        self._states = {name: State(svc, src) for name, (svc, src) in sources.items()}
        self._zone_of = zone_of
        self._on_change = on_change
        self._check = check

    def __bool__(self) -> bool:
        return bool(self._states)

    # -- the request path -------------------------------------------------------------

    async def ensure(self, service: Service, request: httpx.Request) -> None:
        """Start a refresh of ``service`` if one is due; wait only while it has no set.

        With no set, a refresh is due a second after the last one (not after the
        back-off), and the request waits for it, or for a watch's first valid set, for
        at most the source's ``timeout``.

        Raises:
            httpx.ConnectError: no replica is known (the first resolution failed or
                took longer than the source's ``timeout``); the message says why.
        """
        state = self._states.get(service.route_suffix)
        if state is None:
            return
        loop = loop_id()
        if state.loop != loop:  # a new event loop: what ran on the old one is gone
            state.loop, state.running, state.scope, state.settled = loop, False, None, None
            state.expires = -math.inf
        if not state.running and (
            isinstance(state.source, WatchedReplicas) or self._due(state, anyio.current_time())
        ):
            self._start(state)
        if service.replicas:
            return
        # Until a set comes: a refresh ends with a set or a failure; a watch goes on
        # after an invalid value (skipped), or raising (restarted), so keep waiting.
        with anyio.move_on_after(wait_limit(state.source)):
            while state.running and not service.replicas:
                if state.settled is None:
                    state.settled = anyio.Event()
                await state.settled.wait()
        if not service.replicas:
            why = state.last_error or "no answer yet"
            msg = f"hedgeclient: no replica known for {service.route_suffix} "
            msg += f"({state.label}): {why}"
            raise httpx.ConnectError(msg, request=request)

    @staticmethod
    def _due(state: State, now: float) -> bool:
        """Whether a refresh is due: the set expired, or there is none yet and the
        last try is a second old (a service with no set does not wait out the back-off,
        which is for a service that has one)."""
        if now >= state.expires:
            return True
        return not state.service.replicas and now - state.last_refresh >= RATE_LIMIT

    def connect_failed(self, service: Service) -> None:
        """A connection to a replica of ``service`` failed: refresh now (rate-limited)."""
        state = self._states.get(service.route_suffix)
        if state is None or state.running or isinstance(state.source, WatchedReplicas):
            return
        if state.loop != loop_id():
            return
        if anyio.current_time() - state.last_refresh >= RATE_LIMIT:
            self._start(state)
        else:  # too soon: the first request a second after the last refresh starts one
            state.expires = min(state.expires, state.last_refresh + RATE_LIMIT)

    # -- refreshing ---------------------------------------------------------------------

    def _start(self, state: State) -> None:
        state.running = True
        work = self._watch if isinstance(state.source, WatchedReplicas) else self._refresh
        current_timer().spawn(contextvars.copy_context(), lambda: work(state))

    async def _refresh(self, state: State) -> None:
        """Ask the source once; apply the set, or keep the last one and say why."""
        state.last_refresh = anyio.current_time()
        try:
            with anyio.CancelScope() as scope:
                state.scope = scope
                source: Any = state.source
                failed: list[FamilyFailure] = []
                try:
                    if isinstance(source, (DnsReplicas, SrvReplicas)):
                        replicas, ttl = await source._lookup(state.service.logical, failed)
                    else:
                        replicas, ttl = await source.resolve(state.service.logical)
                    self._check(state.service, replicas)
                except DiscoveryFailure as failure:
                    self._failed(state, failure)
                except Exception as exc:  # a bug in a source must not stop refreshes
                    logger.exception("hedgeclient: replica source %s failed", state.label)
                    self._failed(state, DiscoveryFailure(repr(exc), kind="source_error"))
                else:
                    for left_out in failed:
                        self._family_failed(state, left_out, len(replicas))
                    await self._apply(state, replicas)
                    state.expires = anyio.current_time() + ttl
        finally:
            self._settle(state)

    async def _watch(self, state: State) -> None:
        """Iterate a watch source until cancelled; restart it when it fails or ends."""
        source = state.source
        assert isinstance(source, WatchedReplicas)
        with anyio.CancelScope() as scope:
            state.scope = scope
            try:
                while (iterator := source.iterate()) is not None:
                    try:
                        async for value in iterator:
                            await self._take(state, value)
                        ended = DiscoveryFailure(f"{source!r} ended", kind="source_error")
                    except Exception as exc:
                        ended = DiscoveryFailure(f"{source!r} raised {exc!r}", kind="source_error")
                    self._failed(state, ended)
                    self._wake(state)
                    await anyio.sleep(source.retry)
                logger.warning(
                    "hedgeclient: replica source %r cannot restart; %s keeps its last %d "
                    "replica(s)",
                    source,
                    state.service.route_suffix,
                    len(state.service.replicas),
                )
            finally:
                self._settle(state)

    async def _take(self, state: State, value: object) -> None:
        """One value a watch yielded: a new set, or a failure to count."""
        try:
            replicas = replica_set(value, repr(state.source))
            self._check(state.service, replicas)
        except DiscoveryFailure as failure:
            self._failed(state, failure)
        else:
            await self._apply(state, replicas)
        self._wake(state)

    async def _apply(self, state: State, replicas: list[Replica]) -> None:
        service = state.service
        state.refreshes += 1
        state.failures = 0
        state.last_error = None
        zones = {}
        for replica in replicas:
            zone = replica.zone if replica.zone is not None else self._zone_of(replica.origin)
            if zone is not None:
                zones[replica.origin] = zone
        replicas = sorted(replicas, key=lambda r: r.origin)  # DNS answers come in any order
        origins = [r.origin for r in replicas]
        if origins == list(service.replicas) and zones == service.zones:
            return
        before = frozenset(service.replicas)
        service.update(origins, zones)
        state.changes += 1
        removed = before - frozenset(origins)
        if before:
            logger.info(
                "hedgeclient: replicas of %s: %d (+%d, -%d)",
                service.route_suffix,
                len(origins),
                len(frozenset(origins) - before),
                len(removed),
            )
        try:
            await self._on_change(service, replicas, removed)
        except Exception:  # a selector's bug must not stop discovery
            logger.exception(
                "hedgeclient: applying the new replicas of %s failed", service.route_suffix
            )

    def _failed(self, state: State, failure: DiscoveryFailure) -> None:
        state.errors[failure.kind] += 1
        state.failures += 1
        state.last_error = str(failure)
        backoff = min(longest(state.source), 2.0 ** min(state.failures - 1, 16))
        state.expires = anyio.current_time() + max(RATE_LIMIT, backoff)
        kept = len(state.service.replicas)
        # A warning for failures 1, 2, 4, 8, ... of a run, the others at debug: a service
        # without a set is retried every second, and its log should not say so as often.
        run = state.failures
        logger.log(
            logging.WARNING if run & (run - 1) == 0 else logging.DEBUG,
            "hedgeclient: refreshing the replicas of %s failed (%s: %s; %d in a row); %s",
            state.service.route_suffix,
            failure.kind,
            failure,
            run,
            f"keeping the last {kept} replica(s)" if kept else "no replica known yet",
        )

    @staticmethod
    def _family_failed(state: State, left_out: FamilyFailure, kept: int) -> None:
        """One family of a DNS source failed in a refresh the other answered: count it,
        and log it (a warning the 1st, 2nd, 4th, ... time: a nameserver that always
        refuses AAAA would otherwise warn at every TTL)."""
        family, failure = left_out
        state.family_errors[family] = count = state.family_errors.get(family, 0) + 1
        logger.log(
            logging.WARNING if count & (count - 1) == 0 else logging.DEBUG,
            "hedgeclient: resolving the replicas of %s: the %s query failed (%s: %s; %d "
            "time(s) so far); using the %d address(es) of the other family",
            state.service.route_suffix,
            _RECORD[family],
            failure.kind,
            failure,
            count,
            kept,
        )

    def _settle(self, state: State) -> None:
        state.running = False
        state.scope = None
        self._wake(state)

    @staticmethod
    def _wake(state: State) -> None:
        if state.settled is not None:
            state.settled.set()
            state.settled = None

    # -- lifecycle and introspection ----------------------------------------------------

    async def refresh_now(self) -> dict[str, str | None]:
        """Refresh every discovered service now (watches excepted), in this task.

        Returns:
            logical origin -> None, or the message of its failure.
        """
        out: dict[str, str | None] = {}
        for name, state in self._states.items():
            if isinstance(state.source, WatchedReplicas):
                continue
            state.loop = loop_id()
            state.running = True
            await self._refresh(state)
            out[name] = state.last_error
        return out

    def aclose(self) -> None:
        """Stop every refresh and watch (synchronous: each task ends at its next await)."""
        for state in self._states.values():
            if state.scope is not None:
                state.scope.cancel()
            state.expires = math.inf

    def statistics(self) -> dict[str, DiscoveryStatistics]:
        """Per discovered service (by logical origin text), a snapshot."""
        return {
            name: DiscoveryStatistics(
                source=state.label,
                replicas=state.service.replicas,
                refreshes=state.refreshes,
                changes=state.changes,
                errors=dict(state.errors),
                last_error=state.last_error,
                family_errors=dict(state.family_errors),
            )
            for name, state in self._states.items()
        }
