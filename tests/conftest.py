"""Shared fixtures: every async test runs on asyncio and on trio (anyio's pytest plugin)."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(
    params=[
        pytest.param(("asyncio", {}), id="asyncio"),
        pytest.param(("trio", {}), id="trio"),
    ]
)
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    """Run each ``@pytest.mark.anyio`` test once per backend."""
    backend: tuple[str, dict[str, Any]] = request.param
    return backend


@pytest.fixture
def virtual_time() -> tuple[str, dict[str, Any]]:
    """An anyio backend on trio with a fresh ``MockClock(autojump_threshold=0)``.

    Virtual time jumps to the next deadline whenever every task is blocked, so a test
    can assert exact instants ("backup sent at t = 0.030"). Use it by overriding
    ``anyio_backend`` in a module::

        @pytest.fixture
        def anyio_backend(virtual_time):
            return virtual_time
    """
    from trio.testing import MockClock

    return ("trio", {"clock": MockClock(autojump_threshold=0)})
