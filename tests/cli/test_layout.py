"""Where the tools sit: the command line on top of the public API, nothing below it
importing it, and no module of the tools or of ``analysis`` over about 300 lines."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "hedgeclient"
PUBLIC = {"hedgeclient", "hedgeclient.analysis", "hedgeclient.testing"}
"""What the tools may import from the library."""

TOOLS = sorted((PACKAGE / "cli").rglob("*.py"))
ANALYSIS = sorted((PACKAGE / "analysis").rglob("*.py"))


def imported(path: Path) -> set[str]:
    """The modules ``path`` imports (``from X import y`` gives X)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.parametrize("path", TOOLS, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_the_tools_use_the_public_api(path: Path) -> None:
    """A module of ``hedgeclient.cli`` imports from the library only its public modules."""
    library = {
        name
        for name in imported(path)
        if name.startswith("hedgeclient") and not name.startswith("hedgeclient.cli")
    }
    assert library <= PUBLIC


@pytest.mark.parametrize("path", [*TOOLS, *ANALYSIS], ids=lambda p: str(p.relative_to(PACKAGE)))
def test_modules_stay_short(path: Path) -> None:
    """No module of the tools or of ``analysis`` is over 300 lines."""
    assert len(path.read_text(encoding="utf-8").splitlines()) <= 300


def test_analysis_needs_no_httpx() -> None:
    """``hedgeclient.analysis`` is arithmetic: it imports nothing but the standard library
    and itself."""
    for path in ANALYSIS:
        # hedgeclient._deprecated: the deprecated names' hook, standard library only
        ours = ("hedgeclient.analysis", "hedgeclient._deprecated")
        outside = {n for n in imported(path) if not n.startswith(ours)}
        assert all(n.split(".")[0] in sys.stdlib_module_names for n in outside), path


def test_the_library_does_not_import_the_tools() -> None:
    """Importing the library, its test support, analysis and instrumentation loads no
    module of ``hedgeclient.cli``."""
    code = (
        "import sys, hedgeclient, hedgeclient.testing, hedgeclient.analysis, "
        "hedgeclient.instrumentation\n"
        "print(sorted(m for m in sys.modules if m.startswith('hedgeclient.cli')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout == "[]\n"
    outside = [
        path
        for path in PACKAGE.rglob("*.py")
        if "cli" not in path.relative_to(PACKAGE).parts and path.name != "__main__.py"
        if any(name.startswith("hedgeclient.cli") for name in imported(path))
    ]
    assert outside == []
