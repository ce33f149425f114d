"""Shared fixtures: every async test runs on asyncio and on trio (anyio's pytest plugin);
tests marked ``prometheus`` or ``dnsmasq`` skip (or fail under CI) without those
binaries."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
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


def _trio_tasks() -> list[Any]:
    """Every task of the running trio run, system tasks included."""
    import trio

    tasks: list[Any] = []

    def walk(task: Any) -> None:
        tasks.append(task)
        for nursery in task.child_nurseries:
            for child in nursery.child_tasks:
                walk(child)

    walk(trio.lowlevel.current_root_task())
    return tasks


def _count_tasks(backend: str) -> int:
    if backend == "trio":
        # The hedge timer is one system task per trio run, started by the first hedged
        # request and kept for the run: it is not a leak.
        return sum(1 for t in _trio_tasks() if t.name != "hedgeclient-timer")
    import asyncio

    return len(asyncio.all_tasks())


def _backup_tasks(backend: str) -> int:
    if backend == "trio":
        return sum(1 for t in _trio_tasks() if t.name == "hedgeclient-backup")
    import asyncio

    return sum(1 for t in asyncio.all_tasks() if t.get_name() == "hedgeclient-backup")


@pytest.fixture
def count_tasks(anyio_backend_name: str) -> Callable[[], int]:
    """Count the tasks alive on the running event loop (asyncio or trio)."""
    return lambda: _count_tasks(anyio_backend_name)


@pytest.fixture
def backup_tasks(anyio_backend_name: str) -> Callable[[], int]:
    """Count hedgeclient's detached backup tasks alive on the running event loop.

    They are ``hedgeclient._timer``'s, named "hedgeclient-backup": trio system tasks,
    asyncio tasks.
    """
    return lambda: _backup_tasks(anyio_backend_name)


_PROMETHEUS_BINARIES = ("prometheus", "promtool")
# dnsmasq lives there, often off a user's PATH; tests/test_system_deps.py empties it.
_SBIN = os.environ.get("HEDGECLIENT_TEST_SBIN", "/usr/sbin:/sbin")


def _under_ci() -> bool:
    """Whether the suite runs under CI (``CI=true``, as CI services set it)."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def find_dnsmasq() -> str | None:
    """The dnsmasq binary: on PATH, or in /usr/sbin or /sbin."""
    path = os.pathsep.join([os.environ.get("PATH", ""), _SBIN])
    return shutil.which("dnsmasq", path=path)


def _missing_system_tools(item: pytest.Item) -> str | None:
    """Why ``item`` cannot run here (a marker's binaries are missing), or None."""
    if item.get_closest_marker("prometheus") is not None:
        missing = [name for name in _PROMETHEUS_BINARIES if shutil.which(name) is None]
        if missing:
            return (
                f"needs {' and '.join(missing)} on PATH: run `make test` as root (it installs "
                "the Debian package `prometheus`), or `apt-get install prometheus`"
            )
    if item.get_closest_marker("dnsmasq") is not None and find_dnsmasq() is None:
        return (
            "needs dnsmasq (on PATH or in /usr/sbin): run `make test` as root (it installs "
            "the Debian package `dnsmasq-base`), or `apt-get install dnsmasq-base`"
        )
    return None


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A ``prometheus`` or ``dnsmasq`` test without its binaries skips, saying how to get
    them; under CI it fails instead, so that CI never passes without running it."""
    how = _missing_system_tools(item)
    if how is None:
        return
    if _under_ci():
        pytest.fail(f"CI=true: {how}", pytrace=False)
    pytest.skip(how)
