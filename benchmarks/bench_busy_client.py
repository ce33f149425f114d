"""A busy client: backups per request with two CPU burners beside, against an idle
machine, at the same request rate (issue 24).

Three fake replicas in a process of their own (the lab's median and p95 on a smooth
law, or ``--law``), 8 requests in flight paced to ``--rate`` requests a second, the
default adaptive delay. Each round runs idle, then beside ``--burners`` busy processes
(``yes > /dev/null``), interleaved, for ``--seconds`` each. Printed per phase: requests,
backups per request, the suppressed backups by reason, the event loop's lag (the mean
of ``HedgedTransport.event_loop_lag`` sampled every 50 ms) and the load average.

Target (issue 24): beside two burners, 8 in flight on 2 cores, no more backups per
request than with an idle client at the same request rate.

    python benchmarks/bench_busy_client.py [--rounds 2] [--seconds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import subprocess
from collections.abc import Sequence

import httpx

from hedgeclient import HedgedTransport, RequestRecord
from hedgeclient.testing import FakeService

SERVICE = "http://svc"


async def phase(svc: FakeService, seconds: float, rate: float) -> dict[str, object]:
    records: list[RequestRecord] = []
    transport = HedgedTransport(
        replicas={SERVICE: svc.origins}, hooks=[records.append], metrics=False
    )
    loop = asyncio.get_running_loop()
    lags: list[float] = []
    async with httpx.AsyncClient(transport=transport, base_url=SERVICE) as client:
        for _ in range(300):  # warm the delay up
            await client.get("/")
        del records[:]
        end = loop.time() + seconds
        interval = 8 / rate  # each of 8 workers sends one request per interval

        async def worker(offset: float) -> None:
            next_at = loop.time() + offset
            while next_at < end:
                await asyncio.sleep(max(0.0, next_at - loop.time()))
                await client.get("/")
                next_at += interval

        async def sample_lag() -> None:
            while loop.time() < end:
                lags.append(getattr(transport, "event_loop_lag", 0.0))  # 0: before issue 24
                await asyncio.sleep(0.05)

        await asyncio.gather(sample_lag(), *(worker(i * interval / 8) for i in range(8)))
    backups = sum(len(r.attempts) - 1 for r in records if r.hedged)
    reasons = collections.Counter(r.suppressed for r in records if r.suppressed)
    return {
        "requests": len(records),
        "backups_per_request": backups / max(1, len(records)),
        "suppressed": dict(reasons),
        "lag_ms": 1e3 * sum(lags) / max(1, len(lags)),
    }


def start_burners(count: int) -> list[subprocess.Popen[bytes]]:
    """``count`` processes that keep a core busy each (``yes > /dev/null``)."""
    return [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) for _ in range(count)]


async def main(args: argparse.Namespace) -> None:
    with FakeService(replicas=3, latency=args.law, seed=7, mode="process") as svc:
        for index in range(args.rounds):
            for burners in (0, args.burners):
                procs = start_burners(burners)
                try:
                    await asyncio.sleep(1.0 if burners else 0.0)
                    result = await phase(svc, args.seconds, args.rate)
                    load = os.getloadavg()[0]
                finally:
                    for proc in procs:
                        proc.kill()
                        proc.wait()
                print(
                    f"round {index + 1}, {burners} burners (load {load:.2f}): "
                    f"{result['requests']} requests, "
                    f"{result['backups_per_request']:.4f} backups per request, "
                    f"suppressed {result['suppressed']}, "
                    f"event loop lag {result['lag_ms']:.2f} ms (mean)"
                )


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=200.0, help="requests per second")
    parser.add_argument("--burners", type=int, default=2)
    parser.add_argument("--law", default="lognormal:median=0.012,sigma=0.557")
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse()))
