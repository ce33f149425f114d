"""A griffe extension for the docs build: show reST markup of docstrings as Markdown.

The docstrings use Napoleon sections with a few reST constructs that mkdocstrings
would print verbatim: roles (``:class:`~hedgeclient.HedgeBudget```), the
``.. versionadded::`` directive and ``Example usage::`` literal-block markers. This
rewrites them, at docs build time only, as code spans, an "Added in version" line
and a plain colon. Loaded by ``mkdocs.yml`` (``plugins.mkdocstrings...extensions``).
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:class|meth|func|attr|data|mod|exc|obj|const):`(~?)([^`]+)`")
_VERSION = re.compile(
    r"^([ \t]*)\.\. (versionadded|versionchanged|deprecated):: *(\S+)[ \t]*$", re.M
)
_LITERAL_MARKER = re.compile(r"(\S)::[ \t]*$", re.M)
_WORDS = {"versionadded": "Added", "versionchanged": "Changed", "deprecated": "Deprecated"}


def _role(match: re.Match[str]) -> str:
    target = match[2]
    if match[1]:  # ~a.b.C shows as C
        target = target.rsplit(".", 1)[-1]
    return f"`{target}`"


def _version(match: re.Match[str]) -> str:
    return f"{match[1]}*{_WORDS[match[2]]} in version {match[3]}.*"


def rewrite(text: str) -> str:
    """Return ``text`` with roles, version directives and ``::`` markers rewritten."""
    text = _ROLE.sub(_role, text)
    text = _VERSION.sub(_version, text)
    return _LITERAL_MARKER.sub(r"\1:", text)


class SphinxRoles(griffe.Extension):
    """Rewrite every docstring of the loaded package once its tree is complete."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = rewrite(obj.docstring.value)
