"""``make test`` on a fresh machine: system packages installed when possible, else the
tests that need them skip with a reason, except under CI, where they fail."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "system-deps"
PROMTOOL_TEST = "tests/integration/test_prometheus_server.py::test_promtool_check_rules"


def run_pytest_without_binaries(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess[str]:
    """Run the promtool test with a PATH holding neither prometheus nor promtool."""
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS")}
    env["PATH"] = str(tmp_path)  # an empty directory: nothing is found there
    if ci is not None:
        env["CI"] = ci
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:randomly", PROMTOOL_TEST],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_prometheus_tests_skip_with_advice_without_the_binaries(tmp_path: Path) -> None:
    """Without the binaries (and not under CI) a ``prometheus`` test skips, and the one-line
    reason says how to get them."""
    done = run_pytest_without_binaries(tmp_path, ci=None)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 skipped" in done.stdout
    assert (
        "needs prometheus and promtool on PATH: run `make test` as root (it installs the "
        "Debian package `prometheus`), or `apt-get install prometheus`"
    ) in done.stdout


def test_prometheus_tests_fail_under_ci_without_the_binaries(tmp_path: Path) -> None:
    """Under CI=true the same test fails: CI never passes without running it."""
    done = run_pytest_without_binaries(tmp_path, ci="true")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 error" in done.stdout  # a failure in the test's setup
    assert "CI=true: needs prometheus and promtool on PATH" in done.stdout


DNSMASQ_TEST = "tests/discovery/test_dns.py::test_srv_without_targets_keeps_nothing_and_says_why"


def run_dnsmasq_test_without_it(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess[str]:
    """Run one ``dnsmasq`` test with neither PATH nor the sbin directories holding it."""
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS")}
    env["PATH"] = str(tmp_path)
    env["HEDGECLIENT_TEST_SBIN"] = str(tmp_path)
    if ci is not None:
        env["CI"] = ci
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:randomly", DNSMASQ_TEST],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_dnsmasq_tests_skip_with_advice_without_it(tmp_path: Path) -> None:
    """Without dnsmasq (and not under CI) a ``dnsmasq`` test skips, saying how to get it."""
    done = run_dnsmasq_test_without_it(tmp_path, ci=None)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 skipped" in done.stdout  # asyncio and trio
    assert (
        "needs dnsmasq (on PATH or in /usr/sbin): run `make test` as root (it installs the "
        "Debian package `dnsmasq-base`), or `apt-get install dnsmasq-base`"
    ) in done.stdout


def test_dnsmasq_tests_fail_under_ci_without_it(tmp_path: Path) -> None:
    """Under CI=true the same test fails: CI never passes without running it."""
    done = run_dnsmasq_test_without_it(tmp_path, ci="true")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "2 errors" in done.stdout
    assert "CI=true: needs dnsmasq" in done.stdout


def fake_tools(directory: Path, *, uid: int) -> dict[str, str]:
    """An environment whose ``id -u`` says ``uid`` and whose dpkg knows no package."""
    (directory / "id").write_text(f"#!/bin/sh\necho {uid}\n", encoding="utf-8")
    (directory / "dpkg-query").write_text("#!/bin/sh\nexit 1\n", encoding="utf-8")
    for tool in ("id", "dpkg-query"):
        (directory / tool).chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PATH"] = f"{directory}:/usr/bin:/bin"
    return env


@pytest.mark.parametrize(("ci", "status"), [(None, 0), ("true", 1)])
def test_system_deps_without_root_says_so(tmp_path: Path, ci: str | None, status: int) -> None:
    """Not root: `scripts/system-deps` names what it does not install and exits 0, or 1
    under CI."""
    env = fake_tools(tmp_path, uid=1000)
    if ci is not None:
        env["CI"] = ci
    done = subprocess.run(
        ["sh", str(SCRIPT), "prometheus", "dnsmasq-base"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == status
    if ci is None:
        assert done.stderr == (
            "system-deps: not installing prometheus dnsmasq-base (needs root and apt-get); "
            "the tests that need them will skip\n"
        )
    else:
        assert done.stderr == (
            "system-deps: cannot install prometheus dnsmasq-base (needs root and apt-get); "
            "CI needs them\n"
        )


def test_system_deps_does_nothing_when_installed() -> None:
    """Packages already installed: nothing to do, nothing printed."""
    done = subprocess.run(
        ["sh", str(SCRIPT), "dpkg"], capture_output=True, text=True, timeout=30, check=False
    )
    if done.stderr.startswith("system-deps: not installing dpkg"):
        pytest.skip("not a Debian system: dpkg is not a package here")
    assert (done.returncode, done.stderr) == (0, "")


def test_make_test_installs_the_system_deps_then_runs_pytest() -> None:
    """The Makefile's test target runs scripts/system-deps with the prometheus and
    dnsmasq-base packages first, and pytest with skip reasons shown; `make docs` builds
    the docs strictly; .ci/run runs make lint, make test and make docs under CI=true."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "SYSTEM_DEPS := prometheus dnsmasq-base\n" in makefile
    assert (
        "test: $(STAMP)\n\tscripts/system-deps $(SYSTEM_DEPS)\n"
        "\t$(BIN)/python -m pytest -q -rs -n 2\n" in makefile
    )
    assert "\ndocs: $(STAMP)\n\tNO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict" in makefile
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert 'export CI="${CI:-true}"' in ci
    assert "\nmake lint " in ci
    assert "\nmake test " in ci
    assert "\nmake docs " in ci
