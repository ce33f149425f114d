"""Test support: scripted in-process replicas and the fake slow server.

Part of the product: users' own pytest suites run against the fake server (the
``fake_service`` fixture, ``docs/testing.md``). Importing this package starts nothing
and imports no server: uvicorn, hypercorn and h2 (the ``testing`` extra) load when a
:class:`FakeService` starts.
"""

from typing import TYPE_CHECKING

from hedgeclient._deprecated import deprecated_names
from hedgeclient.testing._body import large_body, large_body_sha256
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
from hedgeclient.testing._service import FakeService
from hedgeclient.testing._stats import Outcome, ReplicaStats, ServiceStats, Visit, WriteRecord

__all__ = [  # noqa: RUF022 - plain sorted(), as tests/test_exports.py asserts
    "BlackHole",
    "CloseMidBody",
    "Constant",
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
    "Outcome",
    "Pareto",
    "Pauses",
    "ReplicaConfig",
    "ReplicaStats",
    "Reply",
    "Reset",
    "ScriptedEvent",
    "ScriptedReplicas",
    "ServiceStats",
    "SlowBody",
    "Stall",
    "Visit",
    "WriteRecord",
    "large_body",
    "large_body_sha256",
    "load_sample",
    "parse_law",
]

if TYPE_CHECKING:  # the deprecated names still type-check for this release
    from hedgeclient.testing._body import iter_large_body as iter_large_body
    from hedgeclient.testing._cluster import Disconnects as Disconnects
    from hedgeclient.testing._cluster import ServerKind as ServerKind
    from hedgeclient.testing._config import Slowness as Slowness
    from hedgeclient.testing._service import Mode as Mode

_LITERAL = "{} takes {}; annotate a variable as Literal[{}]"


def _takes(parameter: str, *values: str) -> str:
    quoted = ", ".join(repr(v) for v in values)
    return _LITERAL.format(parameter, " or ".join(repr(v) for v in values), quoted)


__getattr__ = deprecated_names(
    __name__,
    {
        "Disconnects": (
            "hedgeclient.testing._cluster",
            "Disconnects",
            _takes("FakeService(disconnects=...)", "app", "middleware", "ignored"),
        ),
        "Mode": (
            "hedgeclient.testing._service",
            "Mode",
            _takes("FakeService(mode=...)", "thread", "process"),
        ),
        "ServerKind": (
            "hedgeclient.testing._cluster",
            "ServerKind",
            _takes("FakeService(server=...)", "uvicorn", "hypercorn"),
        ),
        "Slowness": (
            "hedgeclient.testing._config",
            "Slowness",
            _takes("FakeService(slowness=...)", "server-owned", "request-owned"),
        ),
        "iter_large_body": (
            "hedgeclient.testing._body",
            "iter_large_body",
            "large_body(size) gives the bytes, large_body_sha256(size) their hash",
        ),
    },
)
