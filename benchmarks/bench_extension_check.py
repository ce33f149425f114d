"""The cost of refusing a misspelt extension key (issue 23), in CPU instructions.

The request path looks at a request's extension keys only when they hold more than
httpx's ``timeout``; this script counts what that gate costs a request built by
``httpx.AsyncClient`` (``timeout`` only), and what the check costs one that also
carries httpx's ``trace`` (its verdict cached after the first request). Under
``valgrind --tool=callgrind`` the counts are deterministic; ``--compare`` runs valgrind
itself, twice per case (``N`` and ``2N`` calls), and prints the difference divided by
``N``: instructions per request, above an empty loop::

    .venv/bin/python benchmarks/bench_extension_check.py --compare --calls 100000
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from typing import Any

import httpx

from hedgeclient._extensions import check_extensions

CASES = ("empty", "timeout_only", "with_trace")


def _extensions(case: str) -> dict[str, Any]:
    client = httpx.AsyncClient()
    extra = {"trace": None} if case == "with_trace" else None
    return client.build_request("GET", "http://catalog/", extensions=extra).extensions


def run(case: str, calls: int) -> None:
    """Call the request path's gate (and check) ``calls`` times on ``case``."""
    extensions = _extensions(case)
    if case == "empty":
        for _ in range(calls):
            pass
        return
    for _ in range(calls):
        if len(extensions) > 1 or "timeout" not in extensions:  # as in _sending.py
            check_extensions(extensions)


def _instructions(case: str, calls: int) -> int:
    out = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable,
         __file__, case, "--calls", str(calls)],
        capture_output=True, text=True, check=True, env={**os.environ, "PYTHONHASHSEED": "0"},
    )  # fmt: skip
    found = re.search(r"refs:\s+([\d,]+)", out.stderr)
    assert found is not None, out.stderr
    return int(found[1].replace(",", ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("case", nargs="?", choices=CASES, default="timeout_only")
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--compare", action="store_true", help="run valgrind, print counts")
    args = parser.parse_args()
    if not args.compare:
        run(args.case, args.calls)
        return
    per_call = {}
    for case in CASES:
        low, high = _instructions(case, args.calls), _instructions(case, 2 * args.calls)
        per_call[case] = (high - low) / args.calls
    for case in CASES[1:]:
        print(f"{case}: {per_call[case] - per_call['empty']:.0f} instructions per request")


if __name__ == "__main__":
    main()
