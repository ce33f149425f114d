"""How punctual backups are: when each one is sent, against its hedge delay.

Run from the repository root::

    .venv/bin/python benchmarks/bench_backup_lateness.py            # 1,600 requests per case
    .venv/bin/python benchmarks/bench_backup_lateness.py --requests 4000

Three replicas of ``FakeService(latency="lab", mode="process")``, 4 requests in flight,
a fixed hedge delay (12, 20 and 30 ms) and a budget that never binds; on each backend
(asyncio, trio), the transport's own ``RequestRecord`` gives when each backup went out
(``AttemptRecord.started``, seconds after the request reached the transport).
Lateness is that minus the delay.

Also reported: the share of requests that sent a backup against the share whose
primary had no headers by the delay (answered later, or cancelled by a winning
backup). The gap is the primaries that answered inside the lateness: on the lab law,
whose latencies sit on a few exact values, a lateness of a fraction of a millisecond
is enough to skip the backups of every primary that lands just past the delay.

Results: printed, and written to ``benchmarks/results/backup_lateness.json``.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import anyio
import httpx
from _common import SERVICE, command, machine, print_table, quantile, write_json

from hedgeclient import HedgeBudget, HedgedTransport, RequestRecord
from hedgeclient.testing import FakeService

DELAYS = (0.012, 0.020, 0.030)
CONCURRENCY = 4


async def one_case(origins: list[str], delay: float, requests: int) -> dict[str, Any]:
    """Send ``requests`` hedged GETs at :data:`CONCURRENCY`; summarise the backups."""
    records: list[RequestRecord] = []
    transport = HedgedTransport(
        replicas={SERVICE: origins},
        delay=delay,
        metrics=False,
        budget=HedgeBudget(ratio=1.0, burst=10**6, min_per_second=0),
        hooks=[records.append],
    )
    async with httpx.AsyncClient(transport=transport, base_url=SERVICE) as client:

        async def worker(n: int) -> None:
            for _ in range(n):
                (await client.get("/")).raise_for_status()

        async with anyio.create_task_group() as tg:
            for _ in range(CONCURRENCY):
                tg.start_soon(worker, requests // CONCURRENCY)
    late_ms = sorted((r.attempts[1].started - delay) * 1000 for r in records if len(r.attempts) > 1)
    due = sum(
        1 for r in records if r.attempts[0].duration > delay or r.attempts[0].outcome == "cancelled"
    )
    return {
        "requests": len(records),
        "backups_per_request": len(late_ms) / len(records),
        "primary_not_answered_by_delay": due / len(records),
        "lateness_ms": {
            q: quantile(late_ms, p) if late_ms else None
            for q, p in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))
        }
        | {"max": late_ms[-1] if late_ms else None, "min": late_ms[0] if late_ms else None},
    }


async def run_backend(origins: list[str], requests: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for delay in DELAYS:
        out[f"d={delay * 1000:.0f} ms"] = await one_case(origins, delay, requests)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=1600, help="per case (default 1600)")
    parser.add_argument("--output", default="backup_lateness", help="results/<output>.json")
    args = parser.parse_args()
    started = time.perf_counter()
    out: dict[str, Any] = {"command": command(), "machine": machine(), "results": {}}
    with FakeService(replicas=3, latency="lab", mode="process", seed=1) as svc:
        for backend in ("asyncio", "trio"):
            out["results"][backend] = anyio.run(run_backend, svc.origins, args.requests,
                                                backend=backend)  # fmt: skip
    out["seconds"] = time.perf_counter() - started
    rows = []
    for backend, cases in out["results"].items():
        for name, case in cases.items():
            late = case["lateness_ms"]
            rows.append(
                [
                    backend,
                    name,
                    f"{late['p50']:.2f}",
                    f"{late['p90']:.2f}",
                    f"{late['p99']:.2f}",
                    f"{late['max']:.2f}",
                    f"{case['backups_per_request']:.1%}",
                    f"{case['primary_not_answered_by_delay']:.1%}",
                ]
            )
    print_table(
        "Backup lateness: sent at, minus the hedge delay (ms); lab law, concurrency 4",
        ["backend", "case", "p50", "p90", "p99", "max", "backups/req", "primary late"],
        rows,
    )
    path = write_json(args.output, out)
    print(f"wrote {path} in {out['seconds']:.0f} s")


if __name__ == "__main__":
    main()
