"""The pytest plugin costs nothing in a run that does not use it: pytest loads every
installed plugin, so ``_hedgeclient_pytestplugin`` imports nothing but pytest."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[2]


def test_loading_the_plugin_imports_no_hedgeclient() -> None:
    """Importing the plugin's module, as pytest does at start-up, loads no module of
    hedgeclient, httpx, anyio or a server (a fresh interpreter, so nothing is cached)."""
    heavy = ["hedgeclient", "httpx", "httpcore", "anyio", "trio", "uvicorn", "h2", "dns"]
    code = (
        "import sys, _hedgeclient_pytestplugin\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({heavy!r})))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert done.stdout.strip() == "[]"


def test_the_entry_point_names_the_plugin_module_the_wheel_ships() -> None:
    """``pytest11`` names the module outside the package, and the wheel includes it."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert project["project"]["entry-points"]["pytest11"] == {
        "hedgeclient": "_hedgeclient_pytestplugin"
    }
    wheel = project["tool"]["hatch"]["build"]["targets"]["wheel"]
    assert wheel["only-include"] == ["hedgeclient", "_hedgeclient_pytestplugin.py"]


def test_the_former_plugin_module_serves_the_same_fixture() -> None:
    """An install whose entry point still names ``hedgeclient.testing._plugin`` gets the
    same fixture."""
    import _hedgeclient_pytestplugin
    from hedgeclient.testing import _plugin

    assert _plugin.fake_service is _hedgeclient_pytestplugin.fake_service


def test_the_fixture_works_from_the_plugin_module(pytester: pytest.Pytester) -> None:
    """Loaded by its module name (the entry point's), with any other registration of it
    off, the fixture starts a service on first use and stops it at teardown."""
    pytester.makepyfile(
        """
        import httpx

        SEEN = []

        def test_uses_it(fake_service):
            svc = fake_service(replicas=1, latency="constant:0.001")
            SEEN.append(svc)
            assert httpx.get(svc.origins[0]).status_code == 200

        def test_stopped_after_teardown():
            assert "stopped" in repr(SEEN[0])
        """
    )
    result = pytester.runpytest(
        "-p", "no:hedgeclient", "-p", "_hedgeclient_pytestplugin", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=2)
