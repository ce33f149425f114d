"""``hedgeclient serve``: run the fake slow service until Ctrl-C.

Example::

    hedgeclient serve --replicas 3 --latency lab --slowness request-owned

prints one origin per line on stdout (``http://127.0.0.1:PORT``), then serves until
interrupted. See :func:`~hedgeclient.testing.parse_law` for the ``--latency`` forms.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from typing import Any

from hedgeclient._cli import UsageError
from hedgeclient.testing._parse import parse_law
from hedgeclient.testing._service import FakeService

__all__ = ["register", "run"]


def register(subparsers: Any) -> None:
    """Add the ``serve`` subcommand to the ``hedgeclient`` parser's ``subparsers``."""
    parser = subparsers.add_parser(
        "serve",
        help="run the fake slow service (replicas on 127.0.0.1) until Ctrl-C",
        description="Run N replicas of a fake slow HTTP service on 127.0.0.1.",
    )
    parser.add_argument("--replicas", type=int, default=3, help="how many (default 3)")
    parser.add_argument(
        "--latency",
        default="lab",
        help="latency law in seconds: lab, 0.005, lognormal:median=0.01,sigma=1, "
        "pareto:scale=0.005,alpha=1.5, file:PATH[,unit=ms], ... (default lab)",
    )
    parser.add_argument(
        "--slowness", choices=("server-owned", "request-owned"), default="server-owned"
    )
    parser.add_argument(
        "--port-base", type=int, default=0, help="replica i listens on N + i (default: ephemeral)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seeds every draw (default 0)")
    parser.add_argument(
        "--server", choices=("uvicorn", "hypercorn"), default="uvicorn",
        help="hypercorn also serves HTTP/2 with prior knowledge (h2c)",
    )  # fmt: skip
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Serve until Ctrl-C; return the exit status (0).

    Raises:
        hedgeclient._cli.UsageError: a bad option, a port that cannot be bound, or a
            missing extra (uvicorn).
    """
    try:
        law = parse_law(args.latency)
    except (ValueError, OSError) as exc:
        msg = f"--latency {args.latency!r}: {_reason(exc)}"
        raise UsageError(msg) from exc
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
        raise UsageError(_PARAMETER.sub(_flag, _reason(exc))) from exc
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


def _reason(exc: Exception) -> str:
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"cannot read {exc.filename!r}: {exc.strerror}"
    return str(exc)
