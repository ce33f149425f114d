"""Fixtures of the reliability suite: deterministic selectors and a tally.

Task counting (``count_tasks``, ``backup_tasks``) is in ``tests/conftest.py``.

The tally collects, per scenario, the counts ``docs/reliability.md`` reports (faults
tried, requests sent, lost writes, leaked tasks). Set ``HEDGECLIENT_RELIABILITY_REPORT``
to a file path to have the session write them there as JSON; nothing is written
otherwise.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable

import pytest

from hedgeclient.testing import FirstReplica

_TALLY: dict[str, dict[str, int]] = {}
_REPORT_ENV = "HEDGECLIENT_RELIABILITY_REPORT"


@pytest.fixture
def first_replica() -> Callable[[], FirstReplica]:
    """Build selectors that send every primary to the first replica, backups in order."""
    return FirstReplica


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
