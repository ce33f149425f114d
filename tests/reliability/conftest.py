"""Fixtures of the reliability suite: deterministic selectors, task counting, a tally.

The tally collects, per scenario, the counts ``docs/reliability.md`` reports (faults
tried, requests sent, lost writes, leaked tasks). Set ``HEDGECLIENT_RELIABILITY_REPORT``
to a file path to have the session write them there as JSON; nothing is written
otherwise.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import pytest

from hedgeclient.testing import FirstReplica

_TALLY: dict[str, dict[str, int]] = {}
_REPORT_ENV = "HEDGECLIENT_RELIABILITY_REPORT"


@pytest.fixture
def first_replica() -> Callable[[], FirstReplica]:
    """Build selectors that send every primary to the first replica, backups in order."""
    return FirstReplica


def _count_tasks(backend: str) -> int:
    if backend == "trio":
        import trio

        def count(task: Any) -> int:
            # The hedge timer is one system task per trio run, started by the first
            # hedged request and kept for the run: it is not a leak.
            own = 0 if task.name == "hedgeclient-timer" else 1
            return own + sum(count(t) for n in task.child_nurseries for t in n.child_tasks)

        return count(trio.lowlevel.current_root_task())
    import asyncio

    return len(asyncio.all_tasks())


@pytest.fixture
def count_tasks(anyio_backend_name: str) -> Callable[[], int]:
    """Count the tasks alive on the running event loop (asyncio or trio)."""
    return lambda: _count_tasks(anyio_backend_name)


Tally = Callable[..., None]


@pytest.fixture
def tally() -> Tally:
    """Add counts to a scenario's row of the report (summed over backends and runs)."""

    def add(scenario: str, **counts: int) -> None:
        row = _TALLY.setdefault(scenario, {})
        for key, value in counts.items():
            row[key] = row.get(key, 0) + int(value)

    return add


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Write the tally as JSON when ``HEDGECLIENT_RELIABILITY_REPORT`` names a file."""
    path = os.environ.get(_REPORT_ENV)
    if path and _TALLY:
        with open(path, "w", encoding="utf-8") as out:
            json.dump(dict(sorted(_TALLY.items())), out, indent=2, sort_keys=True)
