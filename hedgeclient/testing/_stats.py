"""Accounting of the fake service: what each replica received and how each request ended.

:class:`ServiceStats` is the frozen snapshot that :meth:`FakeService.stats` returns,
taken from the mutable ledger (``_ledger.py``) that lives with the replicas.

Outcomes of one attempt on one replica:

- ``completed``: the whole response was sent (whatever its status);
- ``abandoned``: the client went away (ASGI ``http.disconnect``) before the response
  completed: a cancelled loser of a hedged request;
- ``failed``: the replica dropped it (a :class:`Reset` or :class:`CloseMidBody` fault,
  the replica going down or the service stopping);
- ``in_flight``: still running when the snapshot was taken.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, final

if TYPE_CHECKING:
    from hedgeclient.server import ServerStatistics

__all__ = ["Outcome", "ReplicaStats", "ServiceStats", "Visit", "WriteRecord"]

Outcome = Literal["in_flight", "completed", "abandoned", "failed"]
"""How one attempt ended on the replica that received it (see the module docstring)."""

WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
"""Requests with these methods count as writes (side effects) once their body is read."""


def quantile(values: Sequence[float], q: float) -> float:
    """Return the smallest value ``v`` with ``P(X > v) <= 1 - q`` (``docs/how-it-works.md``).

    Args:
        values: latencies in seconds, in any order; not empty.
        q: in (0, 1).

    Raises:
        ValueError: q outside (0, 1), or no values.
    """
    if not 0.0 < q < 1.0:
        msg = f"`q` must be in (0, 1), got {q!r}"
        raise ValueError(msg)
    if not values:
        msg = "`values` must hold at least one latency, got none"
        raise ValueError(msg)
    ordered = sorted(values)
    rank = math.ceil(q * len(ordered) * (1.0 - 1e-9))  # slack for q * n rounding up
    return ordered[max(rank, 1) - 1]


@final
@dataclass(frozen=True, slots=True)
class Visit:
    """One attempt of a request (by its ``x-request-id``) as one replica saw it.

    Attributes:
        replica: the replica's index.
        attempt: the ``hedge-attempt`` request header, or None.
        method: the HTTP method.
        path: the request path.
        outcome: see :data:`Outcome`.
        status: the status sent, or None when no response started.
        latency: the latency drawn for it (after any slowdown), seconds.
        measured: seconds from the request reaching the application to the start of
            its response, as the server measured them (for a streamed chat
            completion, to its first token); None if no response started.
        tokens: chat completion tokens generated for it (``POST
            /v1/chat/completions``; 0 elsewhere), sent or not.
        text_sha256: the hex SHA-256 of the completion's whole text (UTF-8), for a
            chat completion that generated it all; else None.
        traceparent: the W3C ``traceparent`` request header (the client's trace context
            for this attempt), or None.
        worked: seconds the handler ran (from reaching the application to its end,
            cancelled or not): the server work this visit cost.
        queued: seconds it waited in the admission queue first (queueing mode).
        connection: the client's end of the connection it came on, ``"host:port"``
            (one value per TCP connection), or None if the server did not say.

    .. versionadded:: 0.1.0
    """

    replica: int
    attempt: str | None
    method: str
    path: str
    outcome: Outcome
    status: int | None
    latency: float
    measured: float | None
    tokens: int = 0
    text_sha256: str | None = None
    traceparent: str | None = None
    worked: float = 0.0
    queued: float = 0.0
    connection: str | None = None


@final
@dataclass(frozen=True, slots=True)
class WriteRecord:
    """One applied write: a POST, PUT, PATCH or DELETE whose body was fully received.

    Attributes:
        replica: the replica's index.
        request_id: the ``x-request-id`` header, or None.
        method: the HTTP method.
        path: the request path.
        length: the body's length, bytes.
        sha256: the body's hex SHA-256.

    .. versionadded:: 0.1.0
    """

    replica: int
    request_id: str | None
    method: str
    path: str
    length: int
    sha256: str


@final
@dataclass(frozen=True, slots=True)
class ReplicaStats:
    """The counters of one replica since start or the last reset.

    Attributes:
        index: the replica's index (0-based).
        origin: its base URL, such as ``"http://127.0.0.1:54321"``.
        received: requests that reached the application.
        completed: responses sent in full.
        abandoned: requests the client gave up before their response completed.
        failed: requests the replica dropped.
        in_flight: requests running now.
        max_in_flight: the most requests running at once.
        writes: writes applied (see :class:`WriteRecord`).
        latencies: the server-side latency of the latest responses (at most ``keep``
            of them, oldest first), seconds from the request reaching the application
            to the start of its response (to the first token of a streamed chat
            completion).
        tokens: chat completion tokens generated, for any client.
        wasted_tokens: the part of ``tokens`` generated for requests ``abandoned``
            by their client (a cancelled loser): work billed, never read in full.
        busy: handler-seconds: the seconds its handlers ran, summed over requests
            (finished or cancelled), the replica's work.
        server: the :class:`~hedgeclient.server.HedgeMiddleware` counters of the
            replica (``disconnects="middleware"``), else None.

    .. versionadded:: 0.1.0
    """

    index: int
    origin: str
    received: int
    completed: int
    abandoned: int
    failed: int
    in_flight: int
    max_in_flight: int
    writes: int
    latencies: tuple[float, ...]
    tokens: int = 0
    wasted_tokens: int = 0
    busy: float = 0.0
    server: ServerStatistics | None = None

    def quantile(self, q: float) -> float:
        """Return the q-quantile of :attr:`latencies`, seconds.

        Raises:
            ValueError: q outside (0, 1), or no latency recorded.
        """
        return quantile(self.latencies, q)


@final
@dataclass(frozen=True, slots=True)
class ServiceStats:
    """A snapshot of the service's accounting.

    Attributes:
        replicas: one :class:`ReplicaStats` per replica, by index.
        requests: the visits of each request id (``x-request-id``), in arrival order;
            at most ``keep`` ids, the oldest dropped first. Requests without the
            header are not in it.
        writes: the writes applied, in order (at most ``keep``).

    .. versionadded:: 0.1.0
    """

    replicas: tuple[ReplicaStats, ...]
    requests: Mapping[str, tuple[Visit, ...]]
    writes: tuple[WriteRecord, ...]

    @property
    def received(self) -> int:
        """Requests received by all replicas."""
        return sum(r.received for r in self.replicas)

    @property
    def completed(self) -> int:
        """Responses completed by all replicas."""
        return sum(r.completed for r in self.replicas)

    @property
    def abandoned(self) -> int:
        """Requests abandoned by the client, on all replicas."""
        return sum(r.abandoned for r in self.replicas)

    @property
    def failed(self) -> int:
        """Requests dropped by all replicas."""
        return sum(r.failed for r in self.replicas)

    @property
    def tokens(self) -> int:
        """Chat completion tokens generated by all replicas."""
        return sum(r.tokens for r in self.replicas)

    @property
    def wasted_tokens(self) -> int:
        """Chat completion tokens generated for clients that went away, on all replicas."""
        return sum(r.wasted_tokens for r in self.replicas)

    @property
    def busy(self) -> float:
        """Handler-seconds of all replicas: the service's work."""
        return sum(r.busy for r in self.replicas)

    def visits(self, request_id: str) -> tuple[Visit, ...]:
        """Return the visits of ``request_id`` (empty when no replica saw it).

        Only requests with an ``x-request-id`` header are tracked by id; the others
        are in the counters only. An SDK that sends none (the openai SDK) can be given
        one per call (``extra_headers={"x-request-id": ...}``): the transport copies it
        to every attempt (``docs/streaming.md``, "The fake model").
        """
        return self.requests.get(request_id, ())

    def writes_for(self, request_id: str) -> tuple[WriteRecord, ...]:
        """Return the writes applied for ``request_id``."""
        return tuple(w for w in self.writes if w.request_id == request_id)

    def quantile(self, q: float) -> float:
        """Return the q-quantile of every replica's latencies together, seconds.

        Raises:
            ValueError: q outside (0, 1), or no latency recorded.
        """
        return quantile([x for r in self.replicas for x in r.latencies], q)
