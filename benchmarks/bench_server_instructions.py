"""uvicorn's request path in one process, without sockets, for instruction counts.

``bench_server.py overhead`` measures throughput on the loopback, which this shared
2-core machine resolves to a few percent at best. This script drives uvicorn's own
``HttpToolsProtocol`` (the server ``bench_server.py overhead`` runs) with a fake
transport: each batch of ``--depth`` pipelined hello-world requests goes to
``data_received`` and the loop runs until every response is written. Under
``valgrind --tool=callgrind`` the instructions per request are deterministic::

    valgrind --tool=callgrind --callgrind-out-file=/dev/null \\
        .venv/bin/python benchmarks/bench_server_instructions.py default --requests 2000

Run it twice (``--requests 0`` and ``N``) and divide the difference by ``N``, or let
``--compare`` do that for each application named (it runs valgrind itself and prints
instructions per request, and each against ``plain``). Without valgrind the script
prints the CPU time per request (noisy).

The applications are those of ``_server_apps.py``, or ``module:name`` for another.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from _common import callgrind_instructions

HERE = Path(__file__).resolve().parent

REQUEST = b"GET / HTTP/1.1\r\nHost: svc\r\nHedge-Attempt: 1\r\n\r\n"
PLAIN_REQUEST = b"GET / HTTP/1.1\r\nHost: svc\r\n\r\n"


class _Transport(asyncio.Transport):
    """Strictly private: counts responses, writes nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.responses = 0
        self.done: asyncio.Future[None] | None = None
        self.wanted = 0

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 50000)}.get(
            name, default
        )

    def write(self, data: Any) -> None:
        self.responses += bytes(data).count(b"HTTP/1.1 200")
        if self.done is not None and self.responses >= self.wanted and not self.done.done():
            self.done.set_result(None)

    def is_closing(self) -> bool:
        return False

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass


async def drive(
    app_name: str, requests: int, depth: int, marked: bool, poll_every: float | None = None
) -> float:
    """Serve ``requests`` requests in batches of ``depth``; the CPU seconds it took."""
    sys.path.insert(0, str(HERE))
    import importlib

    from uvicorn.config import Config
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    from uvicorn.server import ServerState

    if poll_every is not None:  # the poll's period (under valgrind: time runs ~50x slower)
        for where in ("hedgeclient.server._poll", "hedgeclient.server._backend"):
            try:
                polling = importlib.import_module(where)
            except ImportError:
                continue
            if hasattr(polling, "POLL_EVERY"):
                polling.POLL_EVERY = polling.POLL_MAX = poll_every
    module, _, name = app_name.rpartition(":")
    app = getattr(importlib.import_module(module or "_server_apps"), name)
    config = Config(app=app, http="httptools", lifespan="off", log_level="warning")
    config.access_log = False
    config.load()
    loop = asyncio.get_running_loop()
    protocol = HttpToolsProtocol(
        config=config, server_state=ServerState(), app_state={}, _loop=loop
    )
    transport = _Transport()
    protocol.connection_made(transport)
    batch = (REQUEST if marked else PLAIN_REQUEST) * depth
    start = time.process_time()
    for _ in range(requests // depth):
        transport.done = loop.create_future()
        transport.wanted = transport.responses + depth
        protocol.data_received(batch)
        await transport.done
    return time.process_time() - start


def run_valgrind(app: str, requests: int, args: argparse.Namespace) -> int:
    """Instructions of one run under callgrind (the total it reports)."""
    command = [
        sys.executable, __file__, app, "--requests", str(requests), "--depth", str(args.depth),
    ]  # fmt: skip
    if args.marked:
        command.append("--marked")
    if args.poll_every is not None:
        command += ["--poll-every", str(args.poll_every)]
    return callgrind_instructions(command)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("apps", nargs="+", help="applications of _server_apps.py")
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--depth", type=int, default=16)
    parser.add_argument("--marked", action="store_true", help="send Hedge-Attempt: 1")
    parser.add_argument("--compare", action="store_true", help="run each under callgrind")
    parser.add_argument(
        "--poll-every",
        type=float,
        help="seconds between uvicorn polls (valgrind slows the clock ~50x: polls that "
        "would serve ~90 requests each serve ~2; 0.1 restores about the real ratio)",
    )
    args = parser.parse_args()
    if not args.compare:
        for app in args.apps:
            seconds = asyncio.run(
                drive(app, args.requests, args.depth, args.marked, args.poll_every)
            )
            if args.requests:
                print(f"{app}: {seconds / args.requests * 1e6:.2f} µs of CPU per request")
        return
    per_request = {}
    for app in args.apps:
        empty = run_valgrind(app, 0, args)
        full = run_valgrind(app, args.requests, args)
        per_request[app] = (full - empty) / args.requests
    base = per_request.get("plain")
    for app, count in per_request.items():
        ratio = f"  {base / count:.3f} of plain's throughput" if base else ""
        print(f"{app}: {count:,.0f} instructions per request{ratio}")
    print(json.dumps({"marked": args.marked, "instructions_per_request": per_request}))


if __name__ == "__main__":
    main()
