"""The package's walls: which part of hedgeclient may import which (issue 25).

The core is a folder per concern, and imports point down only:

- base (``_events``, ``_attempt``, ``_checks``, ``_clock``, ...): data and argument
  checks, importing nothing of ours but each other (``_checks.transport``, which
  builds the transport's default parts, sits at the top: ``PLACED``);
- ``_policy/`` (when and whether: the delay, the budget, eligibility) and
  ``_replicas/`` (where: services, selection, health, stalls): pure, the clock injected;
  neither imports the other, a task API, httpcore or prometheus;
- ``_timer/`` (the one backend-specific place) and ``_compat/`` (httpcore repairs,
  httpx's private fast paths, OpenTelemetry's provider globals, prometheus-client's
  ``_created`` switch: other packages' private names live there);
- ``_discovery/`` (which replicas exist now) and ``_race/`` (the engine: it takes a
  ``send(attempt)`` callable and never imports the wire);
- ``_wire/`` (one attempt at the httpx/httpcore boundary);
- the request path and the transport at the top;
- ``instrumentation/`` consumes events; ``server/`` is the replica's half; the lab
  (``testing/``, ``cli/``, ``analysis/``) uses the public API.

The walk reads every module's imports with ``ast`` (type-only imports included: a
wall a type crosses is still crossed). ``DEBTS`` lists the imports the rule does not
allow yet, each with why; the test fails when a new one appears, and when a debt is
paid (so that the list shrinks with the code).
"""

from __future__ import annotations

import ast
from pathlib import Path

import hedgeclient

PACKAGE = Path(hedgeclient.__file__).parent

BASE = {
    "_attempt",
    "_checks",
    "_clock",
    "_deprecated",
    "_events",
    "_extensions",
    "_hedge_info",
    "_version",
}
"""The base: data, argument checks and the version; they import only each other."""

TOP = {"_fleet", "_otel_gate", "_report", "_request", "_sync", "_transport"}
"""The request path and the transports, which build and compose the parts: ``_sync``
(the sync transport) sits above ``_transport``, which it runs on a private event-loop
thread; nothing of ours imports it but the package's ``__init__``."""

PLACED = {"_checks.transport": "top"}
"""Modules that sit above their package's part: ``_checks`` is the base's argument
checks, but the transport's own (``_checks.transport``) build its default parts (an
``AdaptiveDelay``, a ``HedgeBudget``, a ``PowerOfTwoChoices``), so they sit with it."""

ALLOWED: dict[str, set[str]] = {
    "base": {"base"},
    "_policy": {"base"},
    "_replicas": {"base"},
    "_timer": {"base"},
    "_compat": {"base", "_timer"},
    "_discovery": {"base", "_replicas", "_timer"},
    "_race": {"base", "_policy", "_replicas", "_timer"},
    "_wire": {"base", "_replicas", "_policy", "_compat", "_timer"},
    "top": {
        "base",
        "top",
        "_policy",
        "_replicas",
        "_timer",
        "_compat",
        "_discovery",
        "_race",
        "_wire",
        "instrumentation",
    },
    "api": {"base", "top", "_policy", "_replicas", "_discovery"},
    "instrumentation": {"base", "_policy", "_compat"},
    "server": {"base", "_policy", "_replicas", "_timer"},
    "testing": {"api", "base", "server"},
    "analysis": {"api", "base"},
    "cli": {"api", "base", "testing", "analysis"},
    "__main__": {"cli"},
}
"""Each part, and the parts it may import (besides itself)."""

DEBTS: dict[tuple[str, str], str] = {}
"""Imports the rule does not allow yet: (importer, imported) -> why. None left."""


def _module(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _part(module: str) -> str:
    if module in PLACED:
        return PLACED[module]
    head = module.split(".")[0] if module else "api"
    if head in BASE:
        return "base"
    if head in TOP:
        return "top"
    return head or "api"


def _is_module(name: str) -> bool:
    return (PACKAGE / name).is_dir() or (PACKAGE / f"{name}.py").is_file()


def _imports() -> set[tuple[str, str]]:
    """Every (importer, imported) pair of hedgeclient's own modules."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        module = _module(path)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                if node.module == "hedgeclient":  # a public name, or a subpackage
                    found.update(
                        (module, alias.name if _is_module(alias.name) else "")
                        for alias in node.names
                    )
                elif node.module.startswith("hedgeclient."):
                    found.add((module, node.module.removeprefix("hedgeclient.")))
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("hedgeclient."):
                        found.add((module, alias.name.removeprefix("hedgeclient.")))
    return found


def _crossing(importer: str, imported: str) -> bool:
    """Whether the import crosses a wall the rule does not allow."""
    source, target = _part(importer), _part(imported)
    if importer == "" and target in ALLOWED["api"] | {"api"}:
        return False  # hedgeclient/__init__.py re-exports
    if source == target or source not in ALLOWED:
        return False
    return target not in ALLOWED[source]


def test_imports_point_down_only() -> None:
    """No import crosses a wall of the layout, but the debts listed (each with why)."""
    crossings = {pair for pair in _imports() if _crossing(*pair)}
    assert crossings - DEBTS.keys() == set()


def test_every_debt_is_still_owed() -> None:
    """A debt that was paid leaves the list: the rule only tightens."""
    crossings = {pair for pair in _imports() if _crossing(*pair)}
    assert DEBTS.keys() - crossings == set()


def test_the_core_answers_the_three_questions_by_folder() -> None:
    """Where the delay is computed, where a backup is decided, where a replica is chosen:
    each has its folder, and no flat module of the core is left beside them but the
    base and the request path."""
    assert (PACKAGE / "_policy" / "adaptive.py").is_file()  # the delay
    assert (PACKAGE / "_policy" / "eligibility.py").is_file()  # whether a backup goes
    assert (PACKAGE / "_replicas" / "choice.py").is_file()  # where each attempt goes
    flat = {p.stem for p in PACKAGE.glob("_*.py")} - {"__init__", "__main__"}
    assert flat <= BASE | TOP


def test_the_sync_transport_is_the_top() -> None:
    """The sync transport is built on the async one and nothing builds on it: no module
    of hedgeclient imports ``_sync`` but the package's ``__init__`` (the lab reaches it
    through the public name)."""
    importers = {
        importer
        for importer, imported in _imports()
        if imported.split(".")[0] == "_sync" and importer.split(".")[0] != "_sync"
    }
    assert importers == {""}
    assert ("_sync.transport", "_transport") in _imports()
