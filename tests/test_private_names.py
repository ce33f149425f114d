"""Other packages' internals are read in one module named for each (issue 25): when an
upstream release moves them, one module changes, and its docstring says why they are
read at all."""

from __future__ import annotations

import ast
from pathlib import Path

import hedgeclient

PACKAGE = Path(hedgeclient.__file__).parent


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def _importers(package: str) -> set[str]:
    """The modules of hedgeclient that import ``package`` (or one of its modules)."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(_tree(path)):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            if any(n == package or n.startswith(f"{package}.") for n in names):
                found.add(str(path.relative_to(PACKAGE)))
    return found


def test_uvicorns_request_cycle_is_read_only_in_its_module() -> None:
    """``RequestResponseCycle.disconnected`` and ``response_complete`` (uvicorn's
    internals) are read by ``server/_uvicorn.py`` alone; the rest of the server asks it."""
    readers = {
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(_tree(path))
        if isinstance(node, ast.Attribute) and node.attr in {"disconnected", "response_complete"}
    }
    assert readers == {"server/_uvicorn.py"}


def test_hdrh_is_used_in_one_module_through_its_public_methods() -> None:
    """Only ``_policy/hdr.py`` imports ``hdrh``, and it calls only public methods of its
    histogram: the bucket geometry is HdrHistogram's definition, computed there."""
    assert _importers("hdrh") == {"_policy/hdr.py"}
    tree = _tree(PACKAGE / "_policy" / "hdr.py")
    used = {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "_GEOMETRY"
    }
    assert used == {"get_highest_equivalent_value", "get_value_from_index"}


OTHERS_PRIVATE = (
    "_TRACER_PROVIDER",
    "_METER_PROVIDER",
    "_ProxyMeterProvider",
    "_SUPPRESS_INSTRUMENTATION_KEY",
    "_SUPPRESS_HTTP_INSTRUMENTATION_KEY",
    "metrics._internal",
    "_use_created",
)
"""OpenTelemetry's and prometheus-client's private names hedgeclient reads."""


def test_other_packages_private_names_only_in_compat() -> None:
    """OpenTelemetry's and prometheus-client's private names are read in ``_compat/``
    only (``_compat/otel.py``, ``_compat/prometheus.py``, each with its upstream
    reason), and each is read there."""
    found: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        for name in OTHERS_PRIVATE:
            if name in text:
                found.setdefault(name, set()).add(str(path.relative_to(PACKAGE)))
    assert {name: {m.split("/")[0] for m in modules} for name, modules in found.items()} == {
        name: {"_compat"} for name in OTHERS_PRIVATE
    }


def test_httpx_internals_are_read_only_in_compat_httpx() -> None:
    """httpx's private attributes (the parsed URL, the header list, the read body) are
    read and written by ``_compat/httpx.py`` alone, each shortcut with its measured cost
    against the public call in its docstring; the wire asks it."""
    readers = {
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(_tree(path))
        if isinstance(node, ast.Attribute) and node.attr in {"_uri_reference", "_list", "_content"}
    }
    assert readers == {"_compat/httpx.py"}


def test_anyios_task_state_is_read_in_the_asyncio_timer_alone() -> None:
    """``anyio._backends`` (anyio's task state, for a cancel that waits out a shield as
    anyio's own delivery does) is imported by the asyncio timer alone."""
    assert _importers("anyio._backends") == {"_timer/_asyncio.py"}
