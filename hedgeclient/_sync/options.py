"""``HedgeOptions``: the keyword arguments ``SyncHedgedTransport`` forwards to
``HedgedTransport``, for type checkers (PEP 692). ``tests/sync/test_options.py`` checks
that they are exactly ``HedgedTransport``'s.

Strictly private.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypedDict

import httpx

from hedgeclient._events import HedgeHook
from hedgeclient._policy.budget import HedgeBudget
from hedgeclient._policy.delay import DelayPolicy
from hedgeclient._policy.overrides import BackupHook
from hedgeclient._policy.routes import Route
from hedgeclient._policy.tied import TiedRequests
from hedgeclient._replicas.choice import BackupZone
from hedgeclient._replicas.selector import ReplicaSelector

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from hedgeclient.instrumentation import OpenTelemetry

__all__ = ["HedgeOptions"]


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
