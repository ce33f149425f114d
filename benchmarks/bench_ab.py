"""CPU per request of two hedgeclient trees, before and after a change, interleaved.

Run from the repository root (about 10 minutes at the defaults on a loaded 2-core box)::

    .venv/bin/python benchmarks/bench_ab.py --before /path/to/main --after .
    .venv/bin/python benchmarks/bench_ab.py --before ../main --after . --rounds 8

Each round runs one child process per tree (the tree's root first on ``PYTHONPATH``,
so its ``hedgeclient/`` is the one imported), the trees' order alternating from round
to round, so that the shared machine's drift falls on both alike. A child measures,
in process CPU time, sequential requests through ``httpx.AsyncClient`` over an
``httpx.MockTransport`` on asyncio, each setup in turn (twice, the order reversed the
second time; the best of the two):

- ``bare``: the MockTransport alone;
- ``floor``: ``_common.Forward`` (route to one of three replicas, one cancel scope);
- ``off``: ``HedgedTransport``, three replicas, a fixed 5 s delay (no hedge fires),
  ``metrics=False``; ``on``: the same with ``metrics=CollectorRegistry()``;
  ``hook``: ``metrics=False`` and one no-op hook (the record is built for it);
- ``defaults``: ``HedgedTransport(replicas=...)`` alone (adaptive delay, metrics on,
  OpenTelemetry on without a provider);
- ``hedged off`` / ``hedged on``: every request hedged (the handler sleeps 2 ms, a
  1 ms delay, a budget that never binds), metrics off / on.

The table gives, per setup, the median over rounds of each tree's figure, and the
medians of the per-round ratio (after / before) and difference; then, per tree, the
medians of ``off`` above ``floor`` and of ``on``, ``hook`` and ``defaults`` above
``off``; and the 1-minute load average after each round. Results: printed, and
written to ``benchmarks/results/<output>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
from _common import SERVICE, Forward, command, machine, print_table, small_response, write_json

REPLICAS = {SERVICE: ["http://10.0.0.1:8080", "http://10.0.0.2:8080", "http://10.0.0.3:8080"]}
SETUPS = ("bare", "floor", "off", "on", "hook", "defaults", "hedged off", "hedged on")


async def _sleepy(request: httpx.Request) -> httpx.Response:
    await anyio.sleep(0.002)
    return httpx.Response(200, content=b"ok")


def _transport(name: str) -> httpx.AsyncBaseTransport:
    from prometheus_client import CollectorRegistry

    from hedgeclient import HedgeBudget, HedgedTransport

    inner = httpx.MockTransport(_sleepy if name.startswith("hedged") else small_response)
    if name == "bare":
        return inner
    if name == "floor":
        return Forward(inner, "_replace", cancel_scope=True, targets=REPLICAS[SERVICE])
    if name == "defaults":
        return HedgedTransport(inner, replicas=REPLICAS)
    kwargs: dict[str, Any] = {"metrics": False, "delay": 5.0}
    if name in ("on", "hedged on"):
        kwargs["metrics"] = CollectorRegistry()
    if name == "hook":
        kwargs["hooks"] = [lambda record: None]
    if name.startswith("hedged"):
        kwargs["delay"] = 0.001
        kwargs["budget"] = HedgeBudget(ratio=1.0, burst=1000, min_per_second=1000)
    return HedgedTransport(inner, replicas=REPLICAS, **kwargs)


async def _cpu_us(name: str, n: int) -> float:
    async with httpx.AsyncClient(transport=_transport(name), base_url=SERVICE) as client:
        for _ in range(min(n, 200)):  # warm-up: caches, the adaptive route, metric children
            await client.get("/item")
        start = time.process_time()
        for _ in range(n):
            await client.get("/item")
        return (time.process_time() - start) / n * 1e6


async def _child(n: int, n_hedged: int) -> dict[str, float]:
    samples: dict[str, list[float]] = {name: [] for name in SETUPS}
    for rep in range(2):
        for name in SETUPS if rep == 0 else tuple(reversed(SETUPS)):
            samples[name].append(await _cpu_us(name, n_hedged if name.startswith("hedged") else n))
    return {name: min(values) for name, values in samples.items()}


def _run_child(tree: Path, n: int, n_hedged: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    argv = [sys.executable, __file__, "--child", str(n), str(n_hedged)]
    out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout
    result: dict[str, float] = json.loads(out)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", type=Path, help="the tree before the change")
    parser.add_argument("--after", type=Path, help="the tree after it")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--requests", type=int, default=1500, help="per setup, no hedge")
    parser.add_argument("--hedged-requests", type=int, default=300, help="per hedged setup")
    parser.add_argument("--output", default="ab")
    parser.add_argument("--child", nargs=2, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(anyio.run(_child, *args.child, backend="asyncio")))
        return
    if args.before is None or args.after is None:
        parser.error("--before and --after are required")
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    facts = machine()
    rounds: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    loads: list[float] = []
    started = time.monotonic()
    for r in range(args.rounds):
        for side in ("before", "after") if r % 2 == 0 else ("after", "before"):
            rounds[side].append(_run_child(trees[side], args.requests, args.hedged_requests))
        loads.append(round(os.getloadavg()[0], 2))
        print(f"round {r + 1}/{args.rounds} done, load {loads[-1]}", flush=True)
    rows = []
    summary: dict[str, dict[str, float]] = {}
    for name in SETUPS:
        before = [x[name] for x in rounds["before"]]
        after = [x[name] for x in rounds["after"]]
        summary[name] = {
            "before_us": statistics.median(before),
            "after_us": statistics.median(after),
            "ratio": statistics.median(a / b for b, a in zip(before, after, strict=True)),
            "diff_us": statistics.median(a - b for b, a in zip(before, after, strict=True)),
        }
        s = summary[name]
        rows.append(
            (
                name,
                f"{s['before_us']:.1f}",
                f"{s['after_us']:.1f}",
                f"{s['ratio']:.3f}",
                f"{s['diff_us']:+.2f}",
            )
        )
    print_table(
        "CPU µs per request, medians over rounds (asyncio, in-process)",
        ["setup", "before", "after", "after / before", "after - before"],
        rows,
    )
    above: dict[str, dict[str, float]] = {}
    for side, values in rounds.items():
        above[side] = {
            "off - floor": statistics.median(x["off"] - x["floor"] for x in values),
            "on - off": statistics.median(x["on"] - x["off"] for x in values),
            "hook - off": statistics.median(x["hook"] - x["off"] for x in values),
            "defaults - off": statistics.median(x["defaults"] - x["off"] for x in values),
        }
        print(side, ", ".join(f"{k} {v:+.2f} µs" for k, v in above[side].items()))
    print("1-minute load average after each round:", loads)
    path = write_json(
        args.output,
        {
            "command": command(),
            "machine": facts,
            "trees": {side: str(tree) for side, tree in trees.items()},
            "seconds": round(time.monotonic() - started, 1),
            "requests": args.requests,
            "hedged_requests": args.hedged_requests,
            "load_after_each_round": loads,
            "summary": summary,
            "within_each_tree": above,
            "rounds": rounds,
        },
    )
    print(f"written to {path}")


if __name__ == "__main__":
    main()
