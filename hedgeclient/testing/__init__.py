"""Test support: scripted in-process replicas and the fake slow server."""

from hedgeclient.testing._body import iter_large_body, large_body, large_body_sha256
from hedgeclient.testing._cluster import Disconnects, ServerKind
from hedgeclient.testing._config import (
    BlackHole,
    CloseMidBody,
    Down,
    ErrorStatus,
    Fault,
    LargeBody,
    ReplicaConfig,
    Reset,
    SlowBody,
    Slowness,
    Stall,
)
from hedgeclient.testing._empirical import LAB, Empirical
from hedgeclient.testing._generation import Generation
from hedgeclient.testing._laws import Constant, LatencyLaw, LogNormal, Pareto
from hedgeclient.testing._mixtures import Mixture, Pauses
from hedgeclient.testing._nameserver import FakeNameserver
from hedgeclient.testing._parse import load_sample, parse_law
from hedgeclient.testing._scripted import Reply, ScriptedEvent, ScriptedReplicas
from hedgeclient.testing._selectors import FirstReplica
from hedgeclient.testing._service import FakeService, Mode
from hedgeclient.testing._stats import Outcome, ReplicaStats, ServiceStats, Visit, WriteRecord

__all__ = [  # noqa: RUF022 - plain sorted(), as tests/test_exports.py asserts
    "BlackHole",
    "CloseMidBody",
    "Constant",
    "Disconnects",
    "Down",
    "Empirical",
    "ErrorStatus",
    "FakeNameserver",
    "FakeService",
    "Fault",
    "FirstReplica",
    "Generation",
    "LAB",
    "LargeBody",
    "LatencyLaw",
    "LogNormal",
    "Mixture",
    "Mode",
    "Outcome",
    "Pareto",
    "Pauses",
    "ReplicaConfig",
    "ReplicaStats",
    "Reply",
    "Reset",
    "ScriptedEvent",
    "ScriptedReplicas",
    "ServerKind",
    "ServiceStats",
    "SlowBody",
    "Slowness",
    "Stall",
    "Visit",
    "WriteRecord",
    "iter_large_body",
    "large_body",
    "large_body_sha256",
    "load_sample",
    "parse_law",
]
