"""The ``hedgeclient`` command: ``demo``, ``plan`` and ``serve``.

Each subcommand lives in its own module that exposes ``register(subparsers)``; this
module only wires them (argparse, standard library). Errors a user can fix are printed
as one line on stderr with exit status 2, never as a traceback. A reader that closes
stdout early (``hedgeclient plan --preset lab | head -3``) ends the command quietly,
with exit status 1.

Strictly private: the command line is the interface.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from hedgeclient import __version__
from hedgeclient.cli import _serve, demo, plan
from hedgeclient.cli._args import UsageError
from hedgeclient.cli._output import DOCS_URL, HelpFormatter

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser with every subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="hedgeclient",
        description="Hedged requests for httpx: demo, planner and fake slow server.",
        epilog=f"Documentation: {DOCS_URL}",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (demo, plan, _serve):
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
