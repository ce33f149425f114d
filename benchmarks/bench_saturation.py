"""A client saturated by its own requests: in-process, many requests in flight.

Not a target, an explanation (docs/benchmarks.md, "A saturated client"): how the
latency and the backups' punctuality behave when one event loop runs more requests
than a core can serve. Run it with ``PYTHONPATH`` pointing at another checkout to
compare engines in turns::

    .venv/bin/python benchmarks/bench_saturation.py --in-flight 50
    .venv/bin/python benchmarks/bench_saturation.py --in-flight 50 --yield-first
    .venv/bin/python benchmarks/bench_saturation.py --in-flight 4 --requests 1500

The handler sleeps 20 ms in 5 % of requests (seeded); ``--yield-first`` makes the fast
ones await ``asyncio.sleep(0)`` first, as a request over a socket yields on its I/O.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time

import anyio
import httpx

from hedgeclient import FixedDelay, HedgeBudget, HedgedTransport, RequestRecord

REPLICAS = {"http://svc": ["http://a", "http://b", "http://c"]}


async def run(in_flight: int, requests: int, yield_first: bool) -> None:
    """Print p50, p99, backups and when they were sent."""
    rng = random.Random(1)

    async def handler(request: httpx.Request) -> httpx.Response:
        if rng.random() < 0.05:
            await asyncio.sleep(0.020)
        elif yield_first:
            await asyncio.sleep(0)
        return httpx.Response(200)

    records: list[RequestRecord] = []
    transport = HedgedTransport(
        httpx.MockTransport(handler),
        replicas=REPLICAS,
        delay=FixedDelay(0.0005),
        budget=HedgeBudget(ratio=0.2),
        hooks=[records.append],
        metrics=False,
    )
    latencies: list[float] = []
    async with httpx.AsyncClient(transport=transport, base_url="http://svc") as client:

        async def worker() -> None:
            for _ in range(requests):
                start = time.perf_counter()
                await client.get("/")
                latencies.append(time.perf_counter() - start)

        start = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for _ in range(in_flight):
                tg.start_soon(worker)
        wall = time.perf_counter() - start
    latencies.sort()
    sent = [a.started for r in records for a in r.attempts if a.kind == "backup"]
    print(
        f"{in_flight} in flight: {len(latencies) / wall:.0f} req/s, "
        f"p50 {latencies[len(latencies) // 2] * 1e3:.1f} ms, "
        f"p99 {latencies[int(len(latencies) * 0.99)] * 1e3:.1f} ms, {len(sent)} backups "
        f"sent {statistics.median(sent) * 1e3 if sent else 0:.1f} ms after the start (median)"
    )


def main() -> None:
    """Parse the flags and run."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--in-flight", type=int, default=50)
    parser.add_argument("--requests", type=int, default=200, help="per task")
    parser.add_argument("--yield-first", action="store_true")
    args = parser.parse_args()
    asyncio.run(run(args.in_flight, args.requests, args.yield_first))


if __name__ == "__main__":
    main()
