"""The ``hedgeclient`` command: ``demo``, ``plan`` and ``serve``.

Each subcommand lives in its own module that exposes ``register(subparsers)``; this
module only wires them (argparse, standard library). Errors a user can fix are printed
as one line on stderr with exit status 2, never as a traceback. A reader that closes
stdout early (``hedgeclient plan --preset lab | head -3``) ends the command quietly,
with exit status 1.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

_COMMAND_MODULES = (
    "hedgeclient._demo",
    "hedgeclient._plan",
    "hedgeclient.testing._serve",
)


class UsageError(Exception):
    """A user error: printed as ``hedgeclient: error: <message>``, exit status 2."""


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


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser with every available subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="hedgeclient",
        description="Hedged requests for httpx: demo, planner and fake slow server.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in _COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:  # a subcommand not built yet, or missing extra
            if exc.name == name:
                continue
            raise
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the process exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        status = args.func(args)
        sys.stdout.flush()  # a closed pipe fails here, not in the interpreter's exit
    except UsageError as exc:
        print(f"hedgeclient: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        _discard_stdout()
        return 1
    return int(status or 0)


def _discard_stdout() -> None:
    """Point stdout's file descriptor at devnull, after its reader closed the pipe.

    The idiom of the Python docs (``signal`` module, "Note on SIGPIPE"): without it, the
    interpreter's flush of what is left in stdout's buffer at exit fails again, and
    prints "Exception ignored ... BrokenPipeError".
    """
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a file (a test's capture): no flush
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


if __name__ == "__main__":  # pragma: no cover - exercised through the console script
    raise SystemExit(main())
