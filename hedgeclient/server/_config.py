"""The server side of tied requests (:class:`Ties`) and the checks of
:class:`~hedgeclient.server.HedgeMiddleware`'s arguments.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, final

from hedgeclient._checks import check_attempt_header, check_int, check_number
from hedgeclient._replicas.services import origin_str, parse_origin
from hedgeclient.server._admission import Admission

__all__ = ["MIN_SECRET_BYTES", "Arguments", "Ties", "canonical_origin", "check_arguments"]

MIN_SECRET_BYTES = 16
"""The shortest secret accepted: 128 bits (RFC 2104, section 3, asks for a key no
shorter than the hash's output; 16 random bytes already resist guessing)."""

_PATH = re.compile(r"/[A-Za-z0-9._~!$&'()*+,;=:@%/-]*")  # an absolute path, RFC 3986


def canonical_origin(value: str) -> str | None:
    """``value`` as ``HedgedTransport`` writes replica origins, or ``None`` if it is not
    an http(s) origin."""
    try:
        return origin_str(parse_origin(value, "twin"))
    except (TypeError, ValueError):
        return None


@final
@dataclass(frozen=True, slots=True)
class Ties:
    """The server side of tied requests, for ``HedgeMiddleware(ties=...)``.

    A tied pair (requests with ``Hedge-Tie`` and ``Hedge-Twin`` headers, sent by
    ``HedgedTransport(tied=...)``) has a *leader*, the copy sent first (attempt 1), and
    a *follower*, its twin (attempt 2). The leader starts as soon as its replica lets
    it and sends nothing. The follower, as it is about to start, asks the leader's
    replica (``POST <twin><path>``, one message per pair at most) and waits for the
    answer: a leader still queued there is dropped and the follower runs; a leader that
    started (or finished) means the follower is dropped before any work; a leader not
    there yet is dropped when it comes (its tie is remembered for ``remember``
    seconds). A dropped copy answers 503 with ``Hedge-Tie-Dropped``. The leader's
    replica decides alone, so the two copies never both run, unless the message fails.
    Messages go only to ``peers``, never to an address a request names, and are
    accepted only when authenticated: set a ``secret`` (the same on every replica),
    ``networks``, or both. The attempt header (``Hedge-Attempt``) must reach the
    middleware: it tells the leader from the follower.

    What a replica knows of its ties (queued copies, started leaders, seen nonces)
    lives in its process. Serve each replica address from one process (one
    ``uvicorn`` worker per address, as containers do): behind ``--workers N`` a
    message may reach a worker that does not hold the copy, and then both copies may
    run, and a signed message may be accepted once per worker within ``max_skew``.

    Args:
        peers: the replica origins this replica may send tie messages to, as the
            clients name them in ``replicas=`` (``"http://10.0.0.7:8080"``). A
            follower whose leader is elsewhere sends no message and runs.
        secret: the shared secret, at least 16 bytes (a ``str`` is UTF-8 encoded),
            or ``None``. Messages are signed with HMAC-SHA256 over a timestamp and a
            nonce; a replayed or stale message is refused.
        networks: networks allowed to send tie messages (CIDR strings such as
            ``"10.0.0.0/8"``), checked against the caller's address as the ASGI
            server reports it; empty (default): any address, so a ``secret`` is
            required.
        path: the tie endpoint's path on every replica; default ``"/_hedge/tie"``.
            Requests to it never reach the application.
        max_skew: seconds a message's timestamp may differ from this replica's wall
            clock, in (0, 300]; default 10.
        timeout: seconds a follower waits for the leader's replica's answer (its slot
            held meanwhile), in (0, 60]; default 0.25. A message that fails or times
            out is not retried: the follower runs, and both copies may then run.
        remember: seconds a tie is remembered, in (0, 3600]; default 10: a leader
            that started (so that its follower, asking later, is dropped) and a tie
            whose follower asked before its leader came (so that the leader is
            dropped on arrival).

    Raises:
        TypeError: an argument of the wrong type.
        ValueError: no ``secret`` and no ``networks``; a secret shorter than 16
            bytes; a peer that is not an http(s) origin; a network that is not CIDR;
            a path that is not absolute, or is ``/``; a time out of its range.

    .. versionadded:: 0.1.0
    """

    peers: Sequence[str]
    secret: bytes | str | None = field(default=None, repr=False)  # never printed
    networks: Sequence[str] = ()
    path: str = "/_hedge/tie"
    max_skew: float = 10.0
    timeout: float = 0.25
    remember: float = 10.0
    peer_origins: frozenset[str] = field(init=False, repr=False)
    secret_bytes: bytes | None = field(init=False, repr=False)
    parsed_networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = field(
        init=False, repr=False
    )

    def __post_init__(self) -> None:
        if isinstance(self.peers, (str, bytes)) or not isinstance(self.peers, Sequence):
            msg = f"`peers` must be a sequence of origins, got {self.peers!r}"
            raise TypeError(msg)
        origins = set()
        for peer in self.peers:
            origins.add(origin_str(parse_origin(peer, "peers")))
        secret = self.secret
        if isinstance(secret, str):
            secret = secret.encode()
        if secret is not None and not isinstance(secret, bytes):
            msg = f"`secret` must be bytes, a str or None, got {type(secret).__name__}"
            raise TypeError(msg)
        if secret is not None and len(secret) < MIN_SECRET_BYTES:
            msg = f"`secret` must be at least {MIN_SECRET_BYTES} bytes, got {len(secret)}"
            raise ValueError(msg)
        if isinstance(self.networks, (str, bytes)) or not isinstance(self.networks, Sequence):
            msg = f"`networks` must be a sequence of CIDR strings, got {self.networks!r}"
            raise TypeError(msg)
        networks = []
        for network in self.networks:
            try:
                networks.append(ipaddress.ip_network(network))
            except (TypeError, ValueError):
                msg = f"`networks` must hold CIDR strings like '10.0.0.0/8', got {network!r}"
                raise ValueError(msg) from None
        if secret is None and not networks:
            msg = "`Ties` needs a `secret`, `networks`, or both: the drop endpoint is never open"
            raise ValueError(msg)
        if (
            not isinstance(self.path, str)
            or not _PATH.fullmatch(self.path)
            or not self.path.strip("/")
            or "//" in self.path
        ):
            msg = (
                f"`path` must be an absolute URL path other than '/' (it is taken from "
                f"the application), such as '/_hedge/tie', got {self.path!r}"
            )
            raise ValueError(msg)
        for name, high in (("max_skew", 300.0), ("timeout", 60.0), ("remember", 3600.0)):
            value = check_number(
                name, getattr(self, name), low=0.0, high=high, low_open=True, unit="seconds"
            )
            object.__setattr__(self, name, value)
        object.__setattr__(self, "peer_origins", frozenset(origins))
        object.__setattr__(self, "secret_bytes", secret)
        object.__setattr__(self, "parsed_networks", tuple(networks))


class Arguments(NamedTuple):
    """``HedgeMiddleware``'s arguments, checked (:func:`check_arguments`)."""

    header: bytes
    """The attempt header's name, lower case."""
    admission: Admission | None
    max_queue: int | None
    pushback: int | None
    retry_after: bytes
    """The ``Retry-After`` value, ASCII digits."""
    unqueued: tuple[frozenset[str], tuple[str, ...]]
    """The paths whose requests skip the admission queue: exactly these, or under
    these followed by ``/`` (whole path segments)."""


def check_arguments(
    app: Any,
    cancel: str,
    attempt_header: str,
    max_concurrency: int | None,
    max_queue: int | None,
    pushback_queue: int | str | None,
    retry_after: int,
    unqueued: Collection[str] = (),
) -> Arguments:
    """Check ``HedgeMiddleware``'s arguments (as its docstring states them).

    Raises:
        TypeError: an argument of the wrong type.
        ValueError: an argument out of range, or ``max_queue``/``pushback_queue``/
            ``unqueued_paths`` given without ``max_concurrency``.
    """
    if not callable(app):
        msg = f"`app` must be an ASGI application (a callable), got {app!r}"
        raise TypeError(msg)
    if cancel not in ("hedged", "all", "none"):
        msg = f"`cancel` must be 'hedged', 'all' or 'none', got {cancel!r}"
        raise ValueError(msg)
    header = check_attempt_header(attempt_header, optional=False)
    assert header is not None
    admission = None
    queue = pushback = None
    if max_concurrency is not None:
        admission = Admission(check_int("max_concurrency", max_concurrency, 1))
        if max_queue is not None:
            queue = check_int("max_queue", max_queue, 0)
        if pushback_queue == "auto":
            pushback = admission.limit
        elif pushback_queue is not None:
            pushback = check_int("pushback_queue", pushback_queue, 0)
    elif max_queue is not None or pushback_queue not in ("auto", None) or unqueued:
        msg = (
            "`max_queue`, `pushback_queue` and `unqueued_paths` need `max_concurrency` "
            "(an admission queue)"
        )
        raise ValueError(msg)
    retry = str(check_int("retry_after", retry_after, 0, 3600)).encode()
    paths = _unqueued_paths(unqueued)
    return Arguments(header.lower().encode("latin-1"), admission, queue, pushback, retry, paths)


def _unqueued_paths(paths: object) -> tuple[frozenset[str], tuple[str, ...]]:
    """``unqueued_paths`` checked (absolute URL paths, not ``/``), as the exact paths
    and the prefixes (each one followed by ``/``) that skip the queue."""
    if isinstance(paths, str) or not isinstance(paths, Collection):
        msg = (
            f"`unqueued_paths` must be a collection of URL paths such as '/metrics', got {paths!r}"
        )
        raise TypeError(msg)
    for path in paths:
        if not isinstance(path, str) or not _PATH.fullmatch(path) or not path.strip("/"):
            msg = (
                f"`unqueued_paths` must hold absolute URL paths other than '/' (which "
                f"would turn the queue off) such as '/metrics', got {path!r}"
            )
            raise ValueError(msg)
    exact = frozenset(p.rstrip("/") for p in paths)
    return exact, tuple(p.rstrip("/") + "/" for p in paths)
