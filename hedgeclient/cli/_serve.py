"""``hedgeclient serve``: run the fake slow service until Ctrl-C.

Example::

    hedgeclient serve --replicas 3 --latency lab --slowness request-owned

prints one origin per line on stdout (``http://127.0.0.1:PORT``), then serves until
interrupted. See :func:`~hedgeclient.testing.parse_law` for the ``--latency`` forms.

Strictly private: the command line is the interface.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from typing import Any

from hedgeclient.cli._args import UsageError
from hedgeclient.cli._laws import LATENCY_HELP, SLOWNESS_HELP, latency_law
from hedgeclient.cli._output import HelpFormatter
from hedgeclient.testing import FakeService

__all__ = ["register", "run"]


def register(subparsers: Any) -> None:
    """Add the ``serve`` subcommand to the ``hedgeclient`` parser's ``subparsers``."""
    parser = subparsers.add_parser(
        "serve",
        formatter_class=HelpFormatter,
        help="run the fake slow service (replicas on 127.0.0.1) until Ctrl-C",
        description="Run N replicas of a fake slow HTTP service on 127.0.0.1; print one "
        "origin per line, then serve until Ctrl-C.",
    )
    options: list[tuple[str, dict[str, Any]]] = [
        ("--replicas", {"metavar": "N", "type": int, "default": 3,
            "help": "how many replicas (default 3)"}),
        ("--latency", {"metavar": "LAW", "default": "lab", "help": LATENCY_HELP
            + " (default: lab)"}),
        ("--slowness", {"metavar": "{server-owned,request-owned}", "default": "server-owned",
            "choices": ("server-owned", "request-owned"), "help": SLOWNESS_HELP}),
        ("--port-base", {"metavar": "PORT", "type": int, "default": 0,
            "help": "replica i listens on PORT + i (default: ephemeral ports)"}),
        ("--seed", {"metavar": "N", "type": int, "default": 0,
            "help": "seeds every latency draw (default 0)"}),
        ("--server", {"metavar": "{uvicorn,hypercorn}", "default": "uvicorn",
            "choices": ("uvicorn", "hypercorn"),
            "help": "the HTTP server; hypercorn also serves HTTP/2 with prior knowledge "
            "(h2c) (default uvicorn)"}),
    ]  # fmt: skip
    for flag, settings in options:
        parser.add_argument(flag, **settings)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Serve until Ctrl-C; return the exit status (0).

    Raises:
        UsageError: a bad option, a port that cannot be bound, or a missing extra
            (uvicorn).
    """
    law = latency_law(args.latency)
    try:
        service = FakeService(
            replicas=args.replicas,
            latency=law,
            slowness=args.slowness,
            seed=args.seed,
            port_base=args.port_base,
            server=args.server,
        )
    except (ValueError, OSError) as exc:
        raise UsageError(_PARAMETER.sub(_flag, str(exc))) from exc
    try:
        service.start()
    except (OSError, ImportError) as exc:
        msg = f"cannot start the service: {exc}"
        raise UsageError(msg) from exc
    try:
        print("\n".join(service.origins), flush=True)
        print(f"serving {args.replicas} replicas ({args.latency}); Ctrl-C to stop", file=sys.stderr)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        service.stop()
    return 0


# FakeService's errors name its Python parameters; the command line has flags.
_PARAMETER = re.compile(r"`(replicas|slowness|seed|port_base|server)`")


def _flag(match: re.Match[str]) -> str:
    return "--" + match[1].replace("_", "-")
