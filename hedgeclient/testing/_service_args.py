"""The arguments of :class:`~hedgeclient.testing.FakeService`, checked and turned into a spec.

Strictly private.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from hedgeclient._checks import check_int
from hedgeclient.testing._cluster import Disconnects, ServerKind, _Spec
from hedgeclient.testing._config import ReplicaConfig

__all__ = ["MAX_STARTUP_TIMEOUT", "Mode", "service_spec"]

Mode = Literal["thread", "process"]
"""``thread``: an event loop in a daemon thread of this process; ``process``: a spawned
subprocess, so that server work does not compete with the client for the GIL."""

# Seconds. Longer waits overflow the operating system's timeouts (epoll takes whole
# milliseconds in a C int: 24.8 days), and a day is already more than any start-up needs.
MAX_STARTUP_TIMEOUT = 86_400


def _overrides(
    replica_overrides: Mapping[int, ReplicaConfig] | None, replicas: int
) -> dict[int, ReplicaConfig]:
    """Check ``replica_overrides``: a mapping of index in [0, replicas) to ReplicaConfig."""
    if replica_overrides is not None and not isinstance(replica_overrides, Mapping):
        msg = "`replica_overrides` must be a mapping of replica index to ReplicaConfig, "
        msg += f"got {replica_overrides!r}"
        raise TypeError(msg)
    overrides = dict(replica_overrides or {})
    for index, override in overrides.items():
        msg = f"`replica_overrides` keys must be indices in [0, {replicas}), got {index!r}"
        if isinstance(index, bool) or not isinstance(index, int):
            raise TypeError(msg)
        if not 0 <= index < replicas:
            raise ValueError(msg)
        if not isinstance(override, ReplicaConfig):
            msg = f"`replica_overrides` values must be ReplicaConfig, got {override!r}"
            raise TypeError(msg)
    return overrides


def _server(server: ServerKind | None, http2: bool) -> ServerKind:
    server = server or ("hypercorn" if http2 else "uvicorn")
    if server not in ("uvicorn", "hypercorn") or (http2 and server != "hypercorn"):
        msg = f"`server` must be 'uvicorn' or 'hypercorn' (for http2), got {server!r}"
        raise ValueError(msg)
    return server


MAX_REPLICAS = 256
"""Replicas one ``FakeService`` serves (each a server on loopback)."""


def _port_base(port_base: int, replicas: int) -> int:
    """0, or the first of ``replicas`` consecutive ports, all in [1024, 65535]."""
    if isinstance(port_base, bool) or not isinstance(port_base, int):
        msg = f"`port_base` must be 0 or an integer in [1024, {65536 - replicas}], "
        msg += f"got {port_base!r}"
        raise TypeError(msg)
    if port_base != 0 and not 1024 <= port_base <= 65536 - replicas:
        msg = f"`port_base` must be 0 or in [1024, {65536 - replicas}], got {port_base!r}"
        raise ValueError(msg)
    return port_base


def _disconnects(
    disconnects: Disconnects | None,
    concurrency: int | None,
    middleware: Mapping[str, Any] | None,
) -> tuple[Disconnects, dict[str, Any]]:
    """Check the queueing mode's arguments; return ``disconnects`` and the middleware's
    extra arguments."""
    if concurrency is not None:
        check_int("concurrency", concurrency, 1)
    if disconnects is None:
        disconnects = "middleware" if concurrency is not None else "app"
    if disconnects not in ("app", "middleware", "ignored"):
        msg = f"`disconnects` must be 'app', 'middleware' or 'ignored', got {disconnects!r}"
        raise ValueError(msg)
    if disconnects != "middleware" and (concurrency is not None or middleware):
        msg = (
            "`concurrency` and `middleware` need disconnects='middleware' (the queue is "
            f"the middleware's), got disconnects={disconnects!r}"
        )
        raise ValueError(msg)
    if middleware is not None and not isinstance(middleware, Mapping):
        msg = f"`middleware` must be a mapping of HedgeMiddleware arguments, got {middleware!r}"
        raise TypeError(msg)
    options = dict(middleware or {})
    if options:
        from hedgeclient.server import HedgeMiddleware

        forbidden = {"app", "max_concurrency", "metrics", "name"} & set(options)
        if forbidden:
            msg = f"`middleware` must not set {sorted(forbidden)!r}: the service sets them"
            raise ValueError(msg)

        async def nothing(*_: object) -> None:  # pragma: no cover - never served
            return None

        HedgeMiddleware(nothing, metrics=False, **options)  # raises for a bad argument
    return disconnects, options


def service_spec(
    *,
    replicas: int,
    base: ReplicaConfig,
    replica_overrides: Mapping[int, ReplicaConfig] | None,
    key_header: str | None,
    seed: int,
    mode: Mode,
    server: ServerKind | None,
    http2: bool,
    port_base: int,
    keep: int,
    concurrency: int | None = None,
    disconnects: Disconnects | None = None,
    middleware: Mapping[str, Any] | None = None,
    own_address: bool = False,
) -> _Spec:
    """Check FakeService's arguments (but ``startup_timeout``); return the replicas' spec.

    Raises:
        TypeError: an argument of the wrong type.
        ValueError: an argument out of range.
    """
    check_int("replicas", replicas, 1, MAX_REPLICAS)
    if not isinstance(own_address, bool):
        msg = f"`own_address` must be a bool, got {own_address!r}"
        raise TypeError(msg)
    if own_address and replicas > 253:
        msg = "`replicas` must be <= 253 with own_address=True (127.0.0.2 .. 127.0.0.254), "
        msg += f"got {replicas!r}"
        raise ValueError(msg)
    overrides = _overrides(replica_overrides, replicas)
    if mode not in ("thread", "process"):
        msg = f"`mode` must be 'thread' or 'process', got {mode!r}"
        raise ValueError(msg)
    kind = _server(server, http2)
    if key_header is not None:
        if not isinstance(key_header, str):
            msg = f"`key_header` must be a str or None, got {key_header!r}"
            raise TypeError(msg)
        if not key_header.isascii():
            msg = f"`key_header` must be an ASCII header name, got {key_header!r}"
            raise ValueError(msg)
    check_int("seed", seed, None)
    port_base = _port_base(port_base, 1 if own_address else replicas)
    disconnects, options = _disconnects(disconnects, concurrency, middleware)
    return _Spec(
        configs=tuple(base.merged(overrides.get(i)) for i in range(replicas)),
        seed=seed,
        key_header=key_header,
        server=kind,
        ports=tuple(
            (port_base + (0 if own_address else i)) if port_base else 0 for i in range(replicas)
        ),
        hosts=tuple(f"127.0.0.{i + 2}" for i in range(replicas)) if own_address else (),
        keep=check_int("keep", keep, 1),
        backlog=2048,
        concurrency=concurrency,
        disconnects=disconnects,
        middleware=options,
    )
