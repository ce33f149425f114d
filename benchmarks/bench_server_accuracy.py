"""How faithfully the fake server reproduces its latency law, and how fast it serves.

Run from the repository root::

    .venv/bin/python benchmarks/bench_server_accuracy.py

1. Accuracy: 10,000 GET requests, 50 at a time, spread over three replicas serving
   the ``lab`` law of ``HEDGING.md`` in process mode. The client is a minimal raw
   HTTP/1.1 one (``--client httpx`` for httpx, whose pool is slow at 50 concurrent
   requests and would take a CPU core from the server on a 2-core machine). The server
   measures each response's latency from the request reaching the application to the
   start of its response; its p50, p90, p95 and p99 are compared with the law's exact
   quantiles. The client-side quantiles (loopback) are shown for reference.
2. Throughput: 10,000 requests with zero latency, 50 at a time over keep-alive
   connections, from a minimal raw HTTP/1.1 client (httpx itself tops out first), and
   from httpx.

The table is printed and written as JSON to ``benchmarks/results/server_accuracy.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import math
import os
import platform
import sys
import time
from importlib.metadata import version
from importlib.util import find_spec
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from hedgeclient.testing import LAB, FakeService
from hedgeclient.testing._stats import quantile

RESULTS = Path(__file__).resolve().parent / "results" / "server_accuracy.json"
QUANTILES = (0.5, 0.9, 0.95, 0.99)


async def drive_httpx(origins: list[str], requests: int, concurrency: int) -> list[float]:
    """Send ``requests`` GETs, ``concurrency`` at a time; return client latencies (s)."""
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    counter = itertools.count()
    times: list[float] = []
    async with httpx.AsyncClient(limits=limits, timeout=30.0) as client:

        async def worker() -> None:
            while (i := next(counter)) < requests:
                start = time.perf_counter()
                headers = {"x-request-id": str(i)}
                response = await client.get(origins[i % len(origins)] + "/", headers=headers)
                times.append(time.perf_counter() - start)
                response.raise_for_status()

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return times


async def drive_raw(origins: list[str], requests: int, concurrency: int) -> list[float]:
    """The same load from a minimal keep-alive HTTP/1.1 client; return its latencies (s).

    Each of the ``concurrency`` workers keeps one connection to one replica (spread
    round-robin) and parses no more of the response than its length.
    """
    counter = itertools.count()
    times: list[float] = []

    async def worker(origin: str) -> None:
        url = urlsplit(origin)
        reader, writer = await asyncio.open_connection(url.hostname, url.port)
        request = f"GET / HTTP/1.1\r\nhost: {url.netloc}\r\nx-request-id: %d\r\n\r\n".encode()
        try:
            while (i := next(counter)) < requests:
                start = time.perf_counter()
                writer.write(request % i)
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                times.append(time.perf_counter() - start)
        finally:
            writer.close()
            await writer.wait_closed()

    await asyncio.gather(*(worker(origins[i % len(origins)]) for i in range(concurrency)))
    return times


CLIENTS = {"raw": drive_raw, "httpx": drive_httpx}


def cpu_seconds() -> tuple[float, float]:
    """Return (busy CPU seconds of the whole machine, of this process and its children).

    The machine's figure comes from ``/proc/stat`` (Linux); elsewhere it is NaN.
    """
    ours = os.times()
    ours_s = ours.user + ours.system + ours.children_user + ours.children_system
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    except OSError:
        return math.nan, ours_s
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK"), ours_s


def accuracy(args: argparse.Namespace) -> dict[str, Any]:
    drive = CLIENTS[args.client]
    with FakeService(replicas=args.replicas, latency="lab", seed=1, mode=args.mode) as svc:
        asyncio.run(drive(svc.origins, 300, args.concurrency))  # warm up
        svc.reset_stats()
        busy_before, ours_before = cpu_seconds()
        start = time.perf_counter()
        client = asyncio.run(drive(svc.origins, args.requests, args.concurrency))
        stats = svc.stats()
    elapsed = time.perf_counter() - start
    busy_after, ours_after = cpu_seconds()  # the server subprocess has been joined: counted
    ours = (ours_after - ours_before) / elapsed
    others = (busy_after - busy_before) / elapsed - ours
    visits = [v for vs in stats.requests.values() for v in vs if v.measured is not None]
    drawn = [v.latency for v in visits]
    measured = [v.measured for v in visits if v.measured is not None]
    late = [m - d for m, d in zip(measured, drawn, strict=True)]
    rows = []
    for q in QUANTILES:
        law, sample, server = LAB.quantile(q), quantile(drawn, q), quantile(measured, q)
        rows.append(
            {
                "q": q,
                "law_s": law,
                "drawn_s": sample,
                "server_s": server,
                "error_vs_law_s": server - law,
                "error_vs_drawn_s": server - sample,
                "client_s": quantile(client, q),
            }
        )
    return {
        "requests": len(visits),
        "seconds": elapsed,
        "other_processes_cpus": others,
        "benchmark_cpus": ours,
        "completed": stats.completed,
        "law_mean_s": sum(v * c for v, c in zip(LAB.values, LAB.counts, strict=True)) / LAB.size,
        "drawn_mean_s": sum(drawn) / len(drawn),
        "server_mean_s": sum(measured) / len(measured),
        "drawn_share_at_or_below": {
            f"{v:.3f}": sum(d <= v for d in drawn) / len(drawn) for v in LAB.values
        },
        "lateness_s": {
            "p50": quantile(late, 0.5),
            "p99": quantile(late, 0.99),
            "max": max(late),
            "min": min(late),
        },
        "quantiles": rows,
    }


def throughput(args: argparse.Namespace) -> dict[str, float]:
    result = {}
    with FakeService(replicas=args.replicas, latency=0.0, mode=args.mode) as svc:
        for name, drive in CLIENTS.items():
            asyncio.run(drive(svc.origins, 500, args.concurrency))  # warm up
            start = time.perf_counter()
            asyncio.run(drive(svc.origins, args.requests, args.concurrency))
            result[f"{name}_requests_per_s"] = args.requests / (time.perf_counter() - start)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--mode", choices=("process", "thread"), default="process")
    parser.add_argument("--client", choices=tuple(CLIENTS), default="raw")
    parser.add_argument("--output", type=Path, default=RESULTS, help="the JSON file written")
    args = parser.parse_args()

    report: dict[str, Any] = {
        "command": "benchmarks/bench_server_accuracy.py " + " ".join(sys.argv[1:]),
        "settings": vars(args),
        "environment": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "uvicorn": version("uvicorn"),
            "httpx": version("httpx"),
            "httptools": "no" if find_spec("httptools") is None else version("httptools"),
            "load_average_before": os.getloadavg(),
        },
        "accuracy": accuracy(args),
        "throughput": throughput(args),
    }
    acc = report["accuracy"]
    print(
        f"lab law, {acc['requests']} requests, concurrency {args.concurrency}, "
        f"{args.mode} mode, {args.client} client, load average before "
        + " ".join(f"{x:.2f}" for x in report["environment"]["load_average_before"])
    )
    titles = ("q", "law", "drawn", "server", "vs law", "vs drawn", "client")
    print(" ".join(f"{t:>{w}}" for t, w in zip(titles, (5, 8, 8, 8, 7, 8, 8), strict=True)))
    for row in acc["quantiles"]:
        ms = {k: v * 1e3 for k, v in row.items() if k.endswith("_s")}
        print(
            f"{row['q']:>5} {ms['law_s']:>8.3f} {ms['drawn_s']:>8.3f} {ms['server_s']:>8.3f}"
            f" {ms['error_vs_law_s']:>+7.3f} {ms['error_vs_drawn_s']:>+8.3f} {ms['client_s']:>8.3f}"
        )
    late = {k: v * 1e3 for k, v in acc["lateness_s"].items()}
    print(
        "server lateness (measured - drawn, per request, ms): "
        + ", ".join(f"{k} {v:.3f}" for k, v in late.items())
    )
    print(
        f"mean: law {acc['law_mean_s'] * 1e3:.3f} ms, drawn {acc['drawn_mean_s'] * 1e3:.3f} ms,"
        f" server {acc['server_mean_s'] * 1e3:.3f} ms"
    )
    print(
        f"CPUs busy during the run: {acc['benchmark_cpus']:.2f} for this benchmark (client and "
        f"server), {acc['other_processes_cpus']:.2f} for other processes, of {os.cpu_count()}"
    )
    for name, rate in report["throughput"].items():
        print(f"throughput at zero latency ({name.split('_')[0]} client): {rate:,.0f} requests/s")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(f"written to {args.output}")


if __name__ == "__main__":
    main()
