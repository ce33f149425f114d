"""The server half: how fast a loser's handler stops, what that saves, what it costs.

Run from the repository root::

    .venv/bin/python benchmarks/bench_server.py cancel     # -> results/server_cancel.json
    .venv/bin/python benchmarks/bench_server.py waste      # -> results/server_waste.json
    .venv/bin/python benchmarks/bench_server.py overhead   # -> results/server_overhead.json

- ``cancel``: ``--trials`` requests per server to a handler that would work 30 s; the
  client goes away once the handler started (HTTP/1.1: the connection closed;
  HTTP/2: ``RST_STREAM``, the connection kept). Lag: from the client going away to the
  handler's cancellation, in this process (servers on 127.0.0.1 in the same event
  loop). Target: every lag under 100 ms (uvicorn h1, hypercorn h2; hypercorn h1 too).
- ``waste``: the demo's workload (law ``demo``, 3 replicas, 8 requests in flight,
  the default AdaptiveDelay after a warm-up) against ``FakeService`` whose handlers do
  not watch for disconnects, once without the middleware (``disconnects="ignored"``)
  and once behind it (``"middleware"``). Wasted handler time: the seconds a losing
  attempt's handler ran after its client let it go (the handler's run time less the
  client's time from sending the attempt to cancelling it; the work *before* the
  winner answered is the price of hedging, not waste a server can avoid). Target:
  falls by >= 90 %. The losers' whole handler time is reported too.
- ``overhead``: hello-world throughput of uvicorn (one process, httptools) serving
  a raw ASGI app alone and behind ``HedgeMiddleware`` in each ``cancel`` mode, for
  requests without the attempt header (ordinary traffic) and with it (hedged
  attempts), and with an admission queue; then a Starlette hello world
  (``_server_apps.ROWS`` lists the rows); ``--before GITREF`` also serves that
  commit's middleware (its ``git archive``), so that the change is measured in one
  run. Rounds
  of ``--round`` seconds, interleaved, from ``--connections`` keep-alive connections
  of a raw asyncio client in this process, 16 requests pipelined on each (so that
  the server is the bottleneck). Target: throughput >= 0.95 of the same app without
  the middleware: the median over rounds of each round's ratio (paired, since the
  machine's load drifts between rounds), beside the ratio of the medians.
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
from _common import command, machine, ms, print_table, quantile, verdict, write_json

from hedgeclient import HedgedTransport, RequestRecord
from hedgeclient.cli._laws import latency_law
from hedgeclient.server import HedgeMiddleware
from hedgeclient.testing import FakeService

HERE = Path(__file__).resolve().parent


def header(name: str) -> dict[str, Any]:
    uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    return {
        "command": command(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "uptime": uptime,
        "machine": machine(),
        "benchmark": name,
    }


# -- cancel -------------------------------------------------------------------------


async def cancel_lags(kind: str, protocol: str, trials: int) -> list[float]:
    import socket

    import h2.config
    import h2.connection

    started, cancelled = asyncio.Event(), asyncio.Event()
    marks: dict[str, float] = {}

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        started.set()
        try:
            await asyncio.sleep(30)
        finally:
            marks["cancelled"] = time.perf_counter()
            cancelled.set()

    middleware = HedgeMiddleware(app, metrics=False)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    if kind == "uvicorn":
        import uvicorn

        server = uvicorn.Server(uvicorn.Config(middleware, lifespan="off", log_config=None))
        task = asyncio.ensure_future(server.serve(sockets=[sock]))
        while not server.started:  # noqa: ASYNC110 - uvicorn offers no event
            await asyncio.sleep(0.01)
        stop: Any = lambda: setattr(server, "should_exit", True)  # noqa: E731
    else:
        from hypercorn.asyncio import serve
        from hypercorn.config import Config

        config = Config()
        config.bind = [f"fd://{os.dup(sock.fileno())}"]
        config.accesslog = None
        sock.close()
        stopping = asyncio.Event()
        task = asyncio.ensure_future(serve(middleware, config, shutdown_trigger=stopping.wait))  # type: ignore[arg-type]
        await asyncio.sleep(0.5)
        stop = stopping.set
    lags = []
    for _ in range(trials):
        started.clear()
        cancelled.clear()
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        if protocol == "h1":
            writer.write(b"GET /work HTTP/1.1\r\nHost: svc\r\nHedge-Attempt: 2\r\n\r\n")
            await started.wait()
            await asyncio.sleep(0.01)
            left = time.perf_counter()
            writer.close()
        else:
            conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
            conn.initiate_connection()
            conn.send_headers(
                1, [(":method", "GET"), (":path", "/work"), (":scheme", "http"),
                    (":authority", "svc"), ("hedge-attempt", "2")], end_stream=True,
            )  # fmt: skip
            writer.write(conn.data_to_send())
            await started.wait()
            await asyncio.sleep(0.01)
            conn.reset_stream(1)
            left = time.perf_counter()
            writer.write(conn.data_to_send())
        await asyncio.wait_for(cancelled.wait(), 5)
        lags.append(marks["cancelled"] - left)
        if protocol == "h2":
            writer.close()
    stop()
    await task
    return lags


async def run_cancel(args: argparse.Namespace) -> None:
    rows, results = [], []
    for kind, protocol in (("uvicorn", "h1"), ("hypercorn", "h1"), ("hypercorn", "h2")):
        lags = await cancel_lags(kind, protocol, args.trials)
        ok = max(lags) < 0.100
        results.append({"server": kind, "protocol": protocol, "lags_s": lags, "ok": ok})
        row = [f"{kind} {protocol}", ms(statistics.median(lags)), ms(quantile(lags, 0.99))]
        rows.append([*row, ms(max(lags)), verdict(ok)])
    print_table("cancel lag (ms)", ["server", "p50", "p99", "max", "< 100 ms"], rows)
    write_json("server_cancel", {**header("cancel"), "trials": args.trials, "results": results})


# -- waste --------------------------------------------------------------------------


_RECORDS: contextvars.ContextVar[list[RequestRecord]] = contextvars.ContextVar("records")


async def waste_for(disconnects: str, args: argparse.Namespace) -> dict[str, Any]:
    async with FakeService(
        replicas=3, latency=latency_law("demo"), disconnects=disconnects,  # type: ignore[arg-type]
        mode="process", seed=args.seed, keep=1_000_000,
    ) as svc:  # fmt: skip
        transport = HedgedTransport(
            replicas={"http://svc": svc.origins}, metrics=False,
            hooks=[lambda record: _RECORDS.get().append(record)],
        )  # fmt: skip
        records: dict[str, RequestRecord] = {}
        async with httpx.AsyncClient(transport=transport, base_url="http://svc") as client:
            counter = iter(range(args.warmup + args.requests))

            async def worker() -> None:
                mine: list[RequestRecord] = []
                _RECORDS.set(mine)  # the hook runs in this task: its records land here
                for i in counter:
                    rid = f"r{i}"
                    await client.get("/", headers={"x-request-id": rid})
                    if i >= args.warmup:
                        records[rid] = mine[-1]

            async with anyio.create_task_group() as tg:
                for _ in range(args.concurrency):
                    tg.start_soon(worker)
        with anyio.fail_after(30):
            stats = await svc.wait_stats(lambda s: all(r.in_flight == 0 for r in s.replicas))
    loser_seconds = after_seconds = used = 0.0
    losers = 0
    for rid, record in records.items():
        visits = {v.attempt: v for v in stats.visits(rid)}
        for number, attempt in enumerate(record.attempts, start=1):
            visit = visits.get(str(number))
            if visit is None:
                continue
            if attempt.outcome == "won":
                used += visit.worked
            elif attempt.outcome in ("cancelled", "lost"):
                losers += 1
                loser_seconds += visit.worked
                # work after the client let it go: the handler ran from about when the
                # attempt was sent (loopback), the client gave up `duration` later
                after_seconds += max(0.0, visit.worked - attempt.duration)
    return {"disconnects": disconnects, "requests": len(records), "losers": losers,
            "loser_handler_seconds": loser_seconds,
            "wasted_after_cancel_seconds": after_seconds,
            "used_handler_seconds": used}  # fmt: skip


async def run_waste(args: argparse.Namespace) -> None:
    ignored = await waste_for("ignored", args)
    watched = await waste_for("middleware", args)
    key = "wasted_after_cancel_seconds"
    fall = 1.0 - watched[key] / ignored[key]
    rows = [
        [r["disconnects"], r["requests"], r["losers"], r["loser_handler_seconds"], r[key],
         r["used_handler_seconds"]]
        for r in (ignored, watched)
    ]  # fmt: skip
    columns = ["handlers", "requests", "losers", "losers' s", "after cancel s", "used s"]
    print_table("losers' handler time", columns, rows)
    print(f"{verdict(fall >= 0.9)}  losers' work after the cancel falls by {fall:.1%} (>= 90 %)")
    payload = {**header("waste"), "settings": vars(args), "results": [ignored, watched]}
    write_json("server_waste", {**payload, "fall": fall, "target": verdict(fall >= 0.9)})


# -- overhead -----------------------------------------------------------------------

REQUEST = b"GET / HTTP/1.1\r\nHost: svc\r\nHedge-Attempt: 1\r\n\r\n"
PLAIN_REQUEST = b"GET / HTTP/1.1\r\nHost: svc\r\n\r\n"  # no attempt header


async def hammer(
    port: int, connections: int, seconds: float, depth: int = 16, request: bytes = REQUEST
) -> int:
    """Requests answered in ``seconds`` over keep-alive connections, ``depth`` pipelined
    at a time on each (so that the server, not this client, is the bottleneck)."""
    done = 0
    deadline = time.perf_counter() + seconds
    batch = request * depth

    async def one() -> None:
        nonlocal done
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        while time.perf_counter() < deadline:
            writer.write(batch)
            for _ in range(depth):
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
            done += depth
        writer.close()

    await asyncio.gather(*(one() for _ in range(connections)))
    return done


BEFORE_ROWS = {  # with --before REF: REF's applications, the same requests
    "default": ("default", False, "plain"),
    "default, hedged requests": ("default", True, "plain"),
    "all": ("watched", False, "plain"),
    "all, hedged requests": ("watched", True, "plain"),
}


async def run_overhead(args: argparse.Namespace) -> None:
    import tempfile

    from _server_apps import ROWS

    rows_to_run: dict[str, tuple[str, str, bool, str]] = {  # row -> tree, app, marked, base
        row: ("", app, marked, base) for row, (app, marked, base) in ROWS.items()
    }
    before = tempfile.TemporaryDirectory() if args.before else None
    if before is not None:  # REF's hedgeclient and benchmarks, served side by side
        archive = subprocess.run(  # noqa: ASYNC221 - once, before measuring
            ["git", "archive", args.before, "hedgeclient", "benchmarks"],
            cwd=HERE.parent, capture_output=True, check=True,
        ).stdout  # fmt: skip
        tar = ["tar", "-x", "-C", before.name]
        subprocess.run(tar, input=archive, check=True)  # noqa: ASYNC221 - once, before measuring
        for row, (app, marked, base) in BEFORE_ROWS.items():
            rows_to_run[f"{row} (before: {args.before})"] = (before.name, app, marked, base)
    servers, ports = [], {}
    for index, (tree, app) in enumerate(sorted({(t, a) for t, a, _, _ in rows_to_run.values()})):
        port = args.port + index
        ports[tree, app] = port
        env = {**os.environ, "PYTHONPATH": tree} if tree else None
        servers.append(subprocess.Popen(  # noqa: ASYNC220 - started once, before measuring
            [sys.executable, "-m", "uvicorn", f"_server_apps:{app}", "--port", str(port),
             "--log-level", "warning", "--no-access-log", "--lifespan", "off",
             "--http", "httptools"],
            cwd=Path(tree) / "benchmarks" if tree else HERE, env=env,
        ))  # fmt: skip
    try:
        for port in ports.values():  # wait until each server accepts
            for _ in range(400):
                try:
                    _, writer = await asyncio.open_connection("127.0.0.1", port)
                except OSError:
                    await asyncio.sleep(0.05)
                    continue
                writer.close()
                break
        for port in ports.values():  # warm-up
            await hammer(port, args.connections, 0.5)
        rates: dict[str, list[float]] = {row: [] for row in rows_to_run}
        for _ in range(args.rounds):
            for row, (tree, app, marked, _) in rows_to_run.items():
                request = REQUEST if marked else PLAIN_REQUEST
                port = ports[tree, app]
                done = await hammer(port, args.connections, args.round, request=request)
                rates[row].append(done / args.round)
    finally:
        for server in servers:
            server.terminate()
            server.wait()
        if before is not None:
            before.cleanup()

    def base(row: str) -> list[float]:  # each app against its own framework without us
        return rates[rows_to_run[row][3]]

    ratios = {row: statistics.median(rates[row]) / statistics.median(base(row)) for row in rates}
    paired_ratios = {  # the median of the rounds' own ratios
        row: statistics.median(a / b for a, b in zip(rates[row], base(row), strict=True))
        for row in rates
    }
    rows = [[row, statistics.median(rates[row]), ratios[row], paired_ratios[row],
             verdict(paired_ratios[row] >= 0.95)]
            for row in rates]  # fmt: skip
    title = "hello-world throughput (req/s, median of rounds)"
    print_table(title, ["app", "req/s", "ratio", "paired ratio", ">= 0.95"], rows)
    payload = {**header("overhead"), "settings": vars(args), "rates": rates, "ratios": ratios}
    payload["paired_ratios"] = paired_ratios
    write_json("server_overhead", payload)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("cancel", "waste", "overhead"))
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--round", type=float, default=1.0, help="seconds per round")
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--port", type=int, default=18931)
    parser.add_argument(
        "--before", metavar="GITREF", help="overhead: also serve this commit's middleware"
    )
    args = parser.parse_args()
    if args.what == "cancel":
        asyncio.run(run_cancel(args))
    elif args.what == "waste":
        anyio.run(run_waste, args)
    else:
        asyncio.run(run_overhead(args))


if __name__ == "__main__":
    main()
