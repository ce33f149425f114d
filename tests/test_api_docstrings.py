"""The API reference's docstrings parse cleanly, as ``mkdocs build --strict`` reads them.

``docs/api.md`` renders objects with mkdocstrings, which parses each docstring with
griffe's Google-style parser; any warning of that parser fails the strict build. This
test parses the same docstrings with the same parser (and the project's griffe
extension), so that a docstring griffe cannot read fails the test suite, not only
``make docs``: five parameters documented in one ``Args:`` entry did (issue 23).
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import pytest

griffe = pytest.importorskip("griffe", reason="the docs extra: pip install -e '.[docs]'")

ROOT = Path(__file__).resolve().parent.parent
_DIRECTIVE = re.compile(r"^::: (hedgeclient(?:\.\w+)*)\s*$", re.MULTILINE)


def documented() -> list[str]:
    """The objects the docs render: every ``::: hedgeclient...`` line of ``docs/*.md``."""
    names = []
    for page in sorted((ROOT / "docs").glob("*.md")):
        names += _DIRECTIVE.findall(page.read_text(encoding="utf-8"))
    return names


def _parse_all(obj: Any, seen: set[str]) -> None:
    """Parse the docstring of ``obj`` and of its public members (what mkdocstrings shows)."""
    if obj.is_alias:
        try:
            obj = obj.final_target
        except griffe.AliasResolutionError:  # a name from another package: not ours
            return
    if obj.path in seen:
        return
    seen.add(obj.path)
    if obj.docstring is not None:
        obj.docstring.parse("google")
    for name, member in obj.members.items():
        if not name.startswith("_") or name == "__init__":
            _parse_all(member, seen)


def test_every_documented_docstring_parses_without_warnings(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """No docstring of an object docs/api.md renders (or of its public members) makes
    griffe's Google parser warn: each ``Args:`` entry names one parameter of the
    signature, and so on."""
    names = documented()
    assert "hedgeclient.SrvReplicas" in names  # the directive pattern still matches
    extensions = griffe.load_extensions(str(ROOT / "scripts/griffe_sphinx_roles.py:SphinxRoles"))
    package = griffe.load(
        "hedgeclient",
        search_paths=[str(ROOT)],
        docstring_parser="google",
        extensions=extensions,
        allow_inspection=False,
    )
    seen: set[str] = set()
    with caplog.at_level(logging.WARNING, logger="griffe"):
        for name in names:
            _parse_all(package[name.removeprefix("hedgeclient.")], seen)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(seen) > len(names)  # members were walked too
    assert warnings == []


def test_make_docs_counts_the_warnings() -> None:
    """`make docs` builds with --strict and without --quiet, which would hide from
    --strict the very warnings it fails on (the build passed with a broken docstring)."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    (line,) = [ln for ln in makefile.splitlines() if "mkdocs build" in ln]
    assert "--strict" in line.split()
    assert not {"--quiet", "-q"} & set(line.split())
