"""What the command line prints: tables, numbers with fixed decimals, links, warnings.

Strictly private: the command line is the interface.
"""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
from collections.abc import Iterable, Sequence

__all__ = [
    "DOCS_URL",
    "HelpFormatter",
    "decimals",
    "docs_link",
    "fixed",
    "print_table",
    "warn",
]

DOCS_URL = "https://hedgeclient.readthedocs.io/en/latest/"
"""Where the documentation is published (``[project.urls]`` in ``pyproject.toml`` and
``site_url`` in ``mkdocs.yml`` say the same; a test checks they agree). Output cites
pages there, never a path in the repository, which a pip-installed user does not have."""


def docs_link(page: str, anchor: str = "") -> str:
    """The URL of a page of the documentation (``page`` is its file name without ``.md``)."""
    return f"{DOCS_URL}{page}/" + (f"#{anchor}" if anchor else "")


class HelpFormatter(argparse.HelpFormatter):
    """argparse's help, wrapped without breaking a URL (or any word) at a hyphen."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        text = re.sub(r"\s+", " ", text).strip()
        return textwrap.wrap(text, width, break_on_hyphens=False, break_long_words=False)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        text = re.sub(r"\s+", " ", text).strip()
        return textwrap.fill(
            text,
            width,
            initial_indent=indent,
            subsequent_indent=indent,
            break_on_hyphens=False,
            break_long_words=False,
        )


def warn(message: str) -> None:
    """Print ``hedgeclient: warning: <message>`` on stderr (stdout stays parsable)."""
    print(f"hedgeclient: warning: {message}", file=sys.stderr)


def decimals(values: Iterable[float], most: int) -> int:
    """The fewest decimals, at most ``most``, that show every value as it is at ``most``.

    A column printed with one :func:`decimals` lines up, and a column of whole numbers
    (the lab sample's milliseconds) stays whole: ``[12.0, 45.0]`` gives 0, ``[12.0,
    22.5]`` gives 1 (``"12.0"``, ``"22.5"``).
    """
    needed = 0
    for value in values:
        text = f"{value:.{most}f}"
        if most:
            fraction = text.rsplit(".", 1)[1].rstrip("0")
            needed = max(needed, len(fraction))
    return needed


def fixed(values: Sequence[float], most: int, *, scale: float = 1.0) -> list[str]:
    """Format ``values * scale`` with one number of decimals (see :func:`decimals`)."""
    scaled = [value * scale for value in values]
    places = decimals(scaled, most)
    return [f"{value:.{places}f}" for value in scaled]


def print_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Print a table: ``rich`` on a terminal if installed, else plain aligned columns.

    The first column is left-aligned, the others right-aligned, in both forms.
    """
    if sys.stdout.isatty():
        try:
            from rich.console import Console  # lazy: the 'cli' extra
            from rich.table import Table
        except ImportError:  # no rich: plain text is fine
            pass
        else:
            table = Table(*headers)
            for column in table.columns[1:]:
                column.justify = "right"
            for row in rows:
                table.add_row(*row)
            Console().print(table)
            return
    widths = [max(len(cell) for cell in column) for column in zip(headers, *rows, strict=True)]
    for line in (headers, *rows):
        cells = [line[0].ljust(widths[0])]
        cells += [cell.rjust(width) for cell, width in zip(line[1:], widths[1:], strict=True)]
        print("  ".join(cells).rstrip())
