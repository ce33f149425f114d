"""The mutable accounting of the fake service; snapshots are :class:`ServiceStats`.

Strictly private. Used on the server's event loop only (no locks): every replica of a
service shares one ledger, so a request id's visits to several replicas sit together.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING

from hedgeclient.testing._stats import Outcome, ReplicaStats, ServiceStats, Visit, WriteRecord

if TYPE_CHECKING:
    from hedgeclient.server import ServerStatistics


class _Attempt:
    """Strictly private: a visit while it runs."""

    __slots__ = (
        "attempt",
        "connection",
        "latency",
        "measured",
        "method",
        "outcome",
        "path",
        "queued",
        "replica",
        "request_id",
        "status",
        "text_sha256",
        "tokens",
        "traceparent",
        "worked",
    )

    def __init__(
        self,
        replica: int,
        request_id: str | None,
        attempt: str | None,
        method: str,
        path: str,
        traceparent: str | None = None,
        connection: str | None = None,
    ) -> None:
        self.replica, self.request_id, self.attempt = replica, request_id, attempt
        self.method, self.path, self.traceparent = method, path, traceparent
        self.connection = connection
        self.outcome: Outcome = "in_flight"
        self.status: int | None = None
        self.latency = 0.0
        self.measured: float | None = None
        self.tokens = 0
        self.text_sha256: str | None = None
        self.worked = 0.0
        self.queued = 0.0

    def freeze(self) -> Visit:
        return Visit(
            self.replica, self.attempt, self.method, self.path, self.outcome, self.status,
            self.latency, self.measured, self.tokens, self.text_sha256, self.traceparent,
            self.worked, self.queued, self.connection,
        )  # fmt: skip


class _Counters:
    """Strictly private: one replica's counters."""

    __slots__ = ("busy", "counts", "in_flight", "latencies", "max_in_flight")

    def __init__(self, keep: int) -> None:
        self.counts = dict.fromkeys(
            ("received", "completed", "abandoned", "failed", "writes", "tokens", "wasted"), 0
        )
        self.in_flight = self.max_in_flight = 0
        self.busy = 0.0
        self.latencies: deque[float] = deque(maxlen=keep)


class _Ledger:
    """Strictly private: the mutable accounting, used on the server's loop only."""

    def __init__(self, replicas: int, keep: int) -> None:
        self._keep = keep
        self._counters = [_Counters(keep) for _ in range(replicas)]
        self._requests: dict[str, list[_Attempt]] = {}
        self._writes: deque[WriteRecord] = deque(maxlen=keep)

    def begin(
        self,
        replica: int,
        request_id: str | None,
        attempt: str | None,
        method: str,
        path: str,
        traceparent: str | None = None,
        connection: str | None = None,
    ) -> _Attempt:
        counters = self._counters[replica]
        counters.counts["received"] += 1
        counters.in_flight += 1
        counters.max_in_flight = max(counters.max_in_flight, counters.in_flight)
        visit = _Attempt(replica, request_id, attempt, method, path, traceparent, connection)
        if request_id is not None:
            self._requests.setdefault(request_id, []).append(visit)
            if len(self._requests) > self._keep:
                del self._requests[next(iter(self._requests))]
        return visit

    def end(self, visit: _Attempt, outcome: Outcome, worked: float = 0.0) -> None:
        counters = self._counters[visit.replica]
        counters.counts[outcome] += 1
        counters.counts["tokens"] += visit.tokens
        if outcome == "abandoned":
            counters.counts["wasted"] += visit.tokens
        counters.busy += worked
        visit.worked = worked
        counters.in_flight -= 1
        visit.outcome = outcome

    def started(self, visit: _Attempt, seconds: float) -> None:
        visit.measured = seconds
        self._counters[visit.replica].latencies.append(seconds)

    def write(
        self, replica: int, request_id: str | None, method: str, path: str, body: bytes
    ) -> None:
        self._counters[replica].counts["writes"] += 1
        digest = hashlib.sha256(body).hexdigest()
        self._writes.append(WriteRecord(replica, request_id, method, path, len(body), digest))

    def snapshot(
        self, origins: Sequence[str], servers: Sequence[ServerStatistics | None] = ()
    ) -> ServiceStats:
        replicas = tuple(
            ReplicaStats(
                index=i,
                origin=origins[i],
                received=c.counts["received"],
                completed=c.counts["completed"],
                abandoned=c.counts["abandoned"],
                failed=c.counts["failed"],
                in_flight=c.in_flight,
                max_in_flight=c.max_in_flight,
                writes=c.counts["writes"],
                latencies=tuple(c.latencies),
                tokens=c.counts["tokens"],
                wasted_tokens=c.counts["wasted"],
                busy=c.busy,
                server=servers[i] if i < len(servers) else None,
            )
            for i, c in enumerate(self._counters)
        )
        requests = {rid: tuple(v.freeze() for v in vs) for rid, vs in self._requests.items()}
        return ServiceStats(replicas, requests, tuple(self._writes))

    def reset(self) -> None:
        for counters in self._counters:
            counters.counts = dict.fromkeys(counters.counts, 0)
            counters.max_in_flight = counters.in_flight
            counters.busy = 0.0
            counters.latencies.clear()
        self._requests.clear()
        self._writes.clear()
