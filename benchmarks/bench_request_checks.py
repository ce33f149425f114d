"""What two small pieces of the request path cost (issue 23), in CPU instructions.

- The extension-key gate: the request path looks at a request's extension keys (for
  a near miss of hedgeclient's) only when they hold more than httpx's ``timeout``.
  Cases ``timeout_only`` (a request ``httpx.AsyncClient`` built without extensions:
  the gate alone) and ``with_trace`` (httpx's ``trace`` too: the gate and the check,
  its verdict cached after the first request).
- The response stream's read-error message: ``_compat.pool.ReclaimingStream``
  iterates httpcore's stream itself, in place of httpx's ``AsyncResponseStream``, to
  give a read on a connection closed on this side a message. Case ``stream_before``
  reads through the wrapper as it was (its ``__aiter__`` handed out httpx's own
  iterator), ``stream_now`` through the wrapper as it is; each reads a one-chunk body
  from a stand-in for httpcore's pool stream, without a socket or an event loop.

Under ``valgrind --tool=callgrind`` the counts are deterministic; ``--compare`` runs
valgrind itself, twice per case (``N`` and ``2N`` calls), and prints the difference
divided by ``N`` (per request, above an empty loop)::

    .venv/bin/python benchmarks/bench_request_checks.py --compare --calls 20000
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import httpx
from httpx._transports.default import AsyncResponseStream  # what the wrapper replaces

from hedgeclient._compat.pool import ReclaimingStream
from hedgeclient._extensions import check_extensions

CASES = ("empty", "timeout_only", "with_trace", "stream_before", "stream_now")


class _PoolStream:
    """A stand-in for httpcore's pool stream: one chunk."""

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield b"x" * 100


class _Before(ReclaimingStream):
    """The wrapper before issue 23: httpx's own iterator, handed out."""

    __slots__ = ()

    def __aiter__(self) -> AsyncIterator[bytes]:
        iterator: AsyncIterator[bytes] = self._stream.__aiter__()
        return iterator


async def _read(stream: Any) -> None:
    async for _ in stream:  # as httpx's BoundAsyncStream does
        pass


def _drive(case: str) -> None:
    inner = AsyncResponseStream(_PoolStream())
    stream = ReclaimingStream(inner) if case == "stream_now" else _Before(inner)
    with contextlib.suppress(StopIteration):  # the read ends at its first step
        _read(stream).send(None)


def run(case: str, calls: int) -> None:
    """Run ``case`` ``calls`` times."""
    client = httpx.AsyncClient()
    extra = {"trace": None} if case == "with_trace" else None
    extensions = client.build_request("GET", "http://catalog/", extensions=extra).extensions
    if case == "empty":
        for _ in range(calls):
            pass
    elif case.startswith("stream_"):
        for _ in range(calls):
            _drive(case)
    else:
        for _ in range(calls):
            if len(extensions) > 1 or "timeout" not in extensions:  # as in _request.py
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
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("case", nargs="?", choices=CASES, default="timeout_only")
    parser.add_argument("--calls", type=int, default=20_000)
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
    extra = per_call["stream_now"] - per_call["stream_before"]
    print(f"stream_now - stream_before: {extra:.0f} instructions per response")


if __name__ == "__main__":
    main()
