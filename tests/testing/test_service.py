"""FakeService modes and entry points: process mode, hypercorn h2c, sync use, plugin."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from hedgeclient.testing import Down, ErrorStatus, FakeService, ReplicaConfig

pytestmark = pytest.mark.slow

pytest_plugins = ["pytester"]


def test_sync_context_manager_in_process_mode() -> None:
    """Process mode: served from a subprocess; accounting and runtime changes cross the pipe."""
    overrides = {2: ReplicaConfig(fault=Down())}
    with FakeService(replicas=3, latency=0.001, mode="process", replica_overrides=overrides) as svc:
        with httpx.Client() as client:
            response = client.get(svc.origins[1] + "/x", headers={"x-request-id": "p1"})
            assert (response.status_code, response.headers["x-replica"]) == (200, "1")
            with pytest.raises(httpx.ConnectError):
                client.get(svc.origins[2])
            svc.set_fault(ErrorStatus(503), replicas=1)
            assert client.get(svc.origins[1]).status_code == 503
        stats = svc.stats()
        assert [r.completed for r in stats.replicas] == [0, 2, 0]
        assert [v.status for v in stats.visits("p1")] == [200]
        with pytest.raises(ValueError, match=r"^`replicas` must be indices in \[0, 3\), got 7$"):
            svc.set_fault(None, replicas=7)
    with pytest.raises(RuntimeError, match=r"^a FakeService starts once; create another one$"):
        svc.start()


@pytest.mark.anyio
async def test_hypercorn_serves_http2_prior_knowledge(anyio_backend: object) -> None:
    """http2=True serves h2c with prior knowledge (httpx http1=False, http2=True)."""
    async with FakeService(replicas=2, latency=0.001, http2=True) as svc:
        async with httpx.AsyncClient(http1=False, http2=True) as client:
            responses = [await client.get(o, headers={"x-request-id": "h"}) for o in svc.origins]
        assert [r.http_version for r in responses] == ["HTTP/2", "HTTP/2"]
        assert [r.headers["x-replica"] for r in responses] == ["0", "1"]
        stats = svc.stats()
        assert [v.outcome for v in stats.visits("h")] == ["completed", "completed"]


@pytest.mark.anyio
async def test_hypercorn_counts_http1_disconnects(
    anyio_backend: object, cancel_once_received: Any
) -> None:
    """Over HTTP/1.1, hypercorn reports a cancelled request as abandoned too."""
    async with FakeService(replicas=1, latency=5.0, server="hypercorn") as svc:
        async with httpx.AsyncClient() as client:
            await cancel_once_received(
                svc, 1, lambda ext: client.get(svc.origins[0], extensions=ext)
            )
        with anyio.fail_after(2.0):  # a few ms are enough; 2 s bounds a hang
            stats = await svc.wait_stats(lambda s: s.abandoned == 1)
        assert stats.completed == 0


def test_port_base_assigns_consecutive_ports() -> None:
    """With ``port_base``, replica i listens on port_base + i."""
    with socket.socket() as probe:  # a port free a moment ago; collisions are unlikely
        probe.bind(("127.0.0.1", 0))
        base = probe.getsockname()[1]
    with FakeService(replicas=1, port_base=base) as svc:
        assert svc.origins == [f"http://127.0.0.1:{base}"]


def test_port_in_use_fails_start_and_cleans_up() -> None:
    """A port another socket listens on fails start-up with OSError; nothing is left running."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        svc = FakeService(replicas=1, port_base=taken.getsockname()[1])
        with pytest.raises(OSError, match=r"Address already in use"):
            svc.start()
    assert not any(t.name == "hedgeclient-fake-service" for t in threading.enumerate())
    svc.stop()  # idempotent, even after a failed start


def test_origins_need_a_running_service() -> None:
    """A service that is not running has no origins."""
    with pytest.raises(RuntimeError, match=r"^the FakeService is not running"):
        _ = FakeService().origins


def test_process_mode_from_a_script_without_a_main_guard_says_so(tmp_path: Path) -> None:
    """``mode="process"`` re-imports the main script; without the ``__main__`` guard the
    child fails, and the error says what to do instead of only that it exited."""
    script = tmp_path / "no_guard.py"
    script.write_text(
        "from hedgeclient.testing import FakeService\n"
        "with FakeService(mode='process') as svc:\n"
        "    print(svc.origins)\n"
    )
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last == (
        "RuntimeError: the fake service's subprocess exited (exit code 1; its error is on "
        "stderr). Started from a script? mode='process' spawns a fresh interpreter that "
        "imports the script again: start the service under `if __name__ == '__main__':`"
    )


def test_plugin_fixture_starts_and_stops_services(pytester: pytest.Pytester) -> None:
    """The ``fake_service`` fixture returns started services and stops them at teardown."""
    pytester.makepyfile(
        """
        import httpx

        SEEN = []

        def test_uses_it(fake_service):
            svc = fake_service(replicas=2, latency="constant:0.001")
            SEEN.append(svc)
            assert httpx.get(svc.origins[0]).status_code == 200

        def test_stopped_after_teardown():
            assert "stopped" in repr(SEEN[0])
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "-W", "error")
    result.assert_outcomes(passed=2)


def test_thread_mode_leaves_no_threads(fake_service: Callable[..., FakeService]) -> None:
    """Stopping the service ends its thread."""
    svc = fake_service(replicas=1)
    assert any(t.name == "hedgeclient-fake-service" for t in threading.enumerate())
    svc.stop()
    assert not any(t.name == "hedgeclient-fake-service" for t in threading.enumerate())


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        (lambda s: s.slowdown(True), TypeError, "`slowdown` must be a number > 0, got True"),
        (lambda s: s.slowdown(0.0), ValueError, "`slowdown` must be a finite number > 0, got 0.0"),
        (
            lambda s: s.set_latency([1]),
            TypeError,
            "`latency` must be a LatencyLaw, a law string or a number of seconds, got [1]",
        ),
        (
            lambda s: s.set_fault(None, replicas=True),
            TypeError,
            "`replicas` must be indices in [0, 2), got True",
        ),
        (
            lambda s: s.set_stall(None, replicas=["1"]),
            TypeError,
            "`replicas` must be indices in [0, 2), got '1'",
        ),
        (
            lambda s: s.slowdown(2.0, replicas=1.5),
            TypeError,
            "`replicas` must be an index, indices or None, got 1.5",
        ),
    ],
)
def test_runtime_changes_check_their_arguments(
    fake_service: Callable[..., FakeService],
    change: Callable[[FakeService], None],
    error: type[Exception],
    message: str,
) -> None:
    """A running service's setters refuse a bool or a wrong type, and change nothing."""
    svc = fake_service(replicas=2)
    with pytest.raises(error, match=f"^{re.escape(message)}$"):
        change(svc)
    unchanged = ReplicaConfig(latency=0.0, slowness="server-owned")
    assert [svc.replica_config(i) for i in range(2)] == [unchanged, unchanged]
