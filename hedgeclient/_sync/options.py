"""``HedgeOptions``: the keyword arguments ``SyncHedgedTransport`` forwards to
``HedgedTransport``, for type checkers (PEP 692; ``tests/sync/test_options.py`` checks
that they are exactly ``HedgedTransport``'s); and :func:`backend_of`, its ``backend``.

Strictly private.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal, TypedDict

import httpx

from hedgeclient._checks import shown
from hedgeclient._compat.sockets import speaks_http2
from hedgeclient._discovery import parse_config
from hedgeclient._events import HedgeHook
from hedgeclient._policy.budget import HedgeBudget
from hedgeclient._policy.budget_statistics import BudgetHome
from hedgeclient._policy.delay import DelayPolicy
from hedgeclient._policy.overrides import BackupHook, HedgePolicy
from hedgeclient._policy.routes import Route
from hedgeclient._policy.tied import TiedRequests
from hedgeclient._replicas.choice import BackupZone
from hedgeclient._replicas.selector import ReplicaSelector

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from hedgeclient.instrumentation import OpenTelemetry

__all__ = ["BINDING", "Backend", "HedgeOptions", "backend_of", "bind_own"]

# Binds budgets to engines one at a time: two SyncHedgedTransports given the same budget
# by requests in two threads at once must not both take it (HedgeBudget.bind_home).
BINDING: Final = threading.Lock()

Backend = Literal["threads", "asyncio", "trio"]
"""Where a ``SyncHedgedTransport`` runs its engine (``backend=``)."""


class HedgeOptions(TypedDict, total=False):
    """The keyword arguments of :class:`~hedgeclient.HedgedTransport`, each as typed
    there (their meaning is documented there). Strictly private."""

    replicas: Mapping[str, Any] | None
    other_origins: Literal["pass", "hedge"] | None
    extra_load: float | None
    delay: float | DelayPolicy | None
    budget: HedgeBudget | None
    max_hedges: int | None
    methods: Collection[str]
    non_fatal_statuses: Collection[int]
    routes: Sequence[Route]
    tied: TiedRequests | None
    selector: ReplicaSelector | None
    zone: str | None
    zones: Mapping[str, str] | Callable[[str], str | None] | None
    backup_zone: BackupZone
    allow_plaintext: bool
    attempt_header: str | None
    preserve_host: bool
    route_key: Callable[[httpx.Request], str] | None
    name: str
    hooks: Sequence[HedgeHook]
    metrics: bool | CollectorRegistry
    opentelemetry: bool | OpenTelemetry
    on_backup: BackupHook | None


def backend_of(transport: object, backend: object, options: Mapping[str, Any]) -> Backend:
    """The engine's ``backend`` (see ``SyncHedgedTransport``), checked against
    ``transport``; ``None``: the default.

    Raises:
        TypeError: ``transport`` is no httpx transport, or cannot serve ``backend``.
        ValueError: ``backend`` is unknown; ``"threads"`` with discovered replicas, or
            with a sync transport that speaks HTTP/2 (``_compat.sockets``).
    """
    if backend not in (None, "threads", "asyncio", "trio"):
        msg = f"`backend` must be 'threads', 'asyncio' or 'trio', got {shown(backend)}"
        raise ValueError(msg)
    if transport is not None and not isinstance(
        transport, (httpx.BaseTransport, httpx.AsyncBaseTransport)
    ):
        msg = (
            "`transport` must be an httpx transport (httpx.HTTPTransport; "
            f"httpx.AsyncHTTPTransport with backend='asyncio'), got {shown(transport)}"
        )
        raise TypeError(msg)
    sync = transport is None or (  # (httpx.MockTransport is both, its handler one)
        isinstance(transport, httpx.BaseTransport)
        and not inspect.iscoroutinefunction(getattr(transport, "handler", None))
    )
    loop = transport is None or isinstance(transport, httpx.AsyncBaseTransport)
    discovered = bool(parse_config(options.get("replicas"), options.get("zones")).sources)
    if backend is None and (not sync or discovered):
        return "asyncio"
    if backend is None or backend == "threads":
        if speaks_http2(transport):
            msg = (
                "`transport`: httpx's sync HTTP/2 is not thread-safe; pass "
                "httpx.AsyncHTTPTransport(http2=True) with backend='asyncio'"
            )
            raise ValueError(msg)
        if backend is None:
            return "threads"
        if not sync:
            msg = (
                "`transport` must be a sync httpx transport with backend='threads' (an "
                "httpx.HTTPTransport with the same settings), or pass backend='asyncio', "
                f"got {shown(transport)}"
            )
            raise TypeError(msg)
        if discovered:
            msg = (
                "`backend='threads'` serves listed replicas only: discovered ones "
                "(DnsReplicas, ...) are resolved on an event loop: pass backend='asyncio'"
            )
            raise ValueError(msg)
    elif not loop:
        msg = (
            f"`transport` must be an httpx.AsyncBaseTransport with backend={backend!r} "
            "(the attempts run on an event loop): pass an httpx.AsyncHTTPTransport with "
            f"the same settings, got {shown(transport)}"
        )
        raise TypeError(msg)
    return backend


def bind_own(own: object, home: BudgetHome) -> None:
    """Bind a request's own budget (``extensions["hedge"]``'s, ``own``) to ``home``, the
    transport's engine, as the transport's and its routes' are: its backups draw there,
    and a retry library's ``try_retry`` from another thread then runs there too.

    Bound, not refused: a user who gives a budget per request expects it to work as
    one given to the transport (shared with retries, ``docs/budget.md``). It stays
    bound after the transport closes (not listed: a budget made per request would
    pile up), which frees it for another (``bind_home`` skips a closed engine).

    Raises:
        ValueError: another open ``SyncHedgedTransport`` holds the budget.
    """
    if isinstance(own, HedgePolicy):
        budget, given = own.budget, "extensions['hedge'].budget"
    elif isinstance(own, Mapping):
        budget, given = own.get("budget"), "extensions['hedge']['budget']"
    else:  # the engine refuses it, naming it
        return
    if isinstance(budget, HedgeBudget):
        with BINDING:
            budget.bind_home(home, given)
