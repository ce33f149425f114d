"""Many concurrent requests through a small pool: plain httpx against hedgeclient.

Run from the repository root::

    .venv/bin/python benchmarks/bench_pool.py                      # 10,000 on 4 connections
    .venv/bin/python benchmarks/bench_pool.py --requests 2000 --profile   # also cProfile

``--requests`` GETs started at once (one task each, ``anyio`` task group) through an
``httpx.AsyncClient`` whose pool has ``--connections`` connections
(``httpx.Limits(max_connections=...)``), over loopback against
``hedgeclient.testing.FakeService`` (three replicas in a subprocess, a constant
``--latency``). Variants, one after the other in one run (``--order`` sets which first):

- ``plain``: plain httpx, each request to a random replica;
- ``hedgeclient``: ``HedgedTransport`` with its defaults (``AdaptiveDelay``, the default
  budget, metrics on) over ``httpx.AsyncHTTPTransport`` with the same limits.

No timeouts (``httpx.Timeout(None)``): a request waits in the pool's queue as long as it
must. Each variant is stopped at ``--cap`` seconds; reported: how many finished (and
failed, by exception type), the time to finish all (or the cap), the client process's
CPU time, the requests the server received (backups included) and the load average
before and after. Target (issue 25): hedgeclient's time within 1.25x of plain's.

``--profile``: also run the ``hedgeclient`` variant under ``cProfile`` (wall clock),
written to ``benchmarks/results/pool_profile.txt`` with the call counts per request of
the top functions, which say what grows with the queue.

Only the public API is used. Results: printed, and written to
``benchmarks/results/pool.json``.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import random
import time
from collections import Counter
from typing import Any

import anyio
import httpx
from _common import SERVICE, command, machine, print_table, verdict, write_json

from hedgeclient import HedgedTransport
from hedgeclient.testing import FakeService

RATIO = 1.25  # target: hedgeclient's time at most this times plain's


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def make_client(variant: str, origins: list[str], connections: int) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    timeout = httpx.Timeout(None)
    if variant == "plain":
        return httpx.AsyncClient(limits=limits, timeout=timeout)
    if variant == "hedgeclient":
        transport = HedgedTransport(
            httpx.AsyncHTTPTransport(limits=limits), replicas={SERVICE: origins}
        )
        return httpx.AsyncClient(transport=transport, base_url=SERVICE, timeout=timeout)
    raise ValueError(variant)


async def run_variant(
    variant: str, svc: FakeService, requests: int, connections: int, cap: float
) -> dict[str, Any]:
    origins = svc.origins
    rng = random.Random(7)
    finished = 0
    failed: Counter[str] = Counter()
    done_at: list[float] = []
    svc.reset_stats()
    async with make_client(variant, origins, connections) as client:
        for _ in range(3 * connections):  # open the connections (not timed)
            url = rng.choice(origins) + "/" if variant == "plain" else "/"
            (await client.get(url)).raise_for_status()
        svc.reset_stats()
        load_before = _load()
        cpu0, start = time.process_time(), time.perf_counter()

        async def one() -> None:
            nonlocal finished
            url = rng.choice(origins) + "/" if variant == "plain" else "/"
            try:
                response = await client.get(url)
                response.raise_for_status()
            except Exception as exc:  # counted and reported, by type
                failed[type(exc).__name__] += 1
                return
            finished += 1
            done_at.append(time.perf_counter() - start)

        with anyio.move_on_after(cap) as scope:
            async with anyio.create_task_group() as tg:
                for _ in range(requests):
                    tg.start_soon(one)
        wall = time.perf_counter() - start
        cpu = time.process_time() - cpu0
    stats = svc.stats()
    return {
        "requests": requests,
        "finished": finished,
        "failed": dict(failed),
        "capped": scope.cancelled_caught,
        "seconds": wall,
        "seconds_to_half": sorted(done_at)[len(done_at) // 2] if done_at else None,
        "client_cpu_seconds": cpu,
        "server_received": stats.received,
        "loadavg_before": load_before,
        "loadavg_after": _load(),
    }


async def measure(args: argparse.Namespace, profiler: cProfile.Profile | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with FakeService(replicas=3, latency=args.latency, mode="process", seed=3, keep=1) as svc:
        for variant in args.order:
            if profiler is not None:
                profiler.enable()
            out[variant] = await run_variant(
                variant, svc, args.requests, args.connections, args.cap
            )
            if profiler is not None:
                profiler.disable()
            r = out[variant]
            print(
                f"[{variant}] {r['finished']:,}/{r['requests']:,} finished in "
                f"{r['seconds']:.1f} s (capped: {r['capped']}), load {r['loadavg_after']}",
                flush=True,
            )
    return out


def profile_text(profiler: cProfile.Profile, requests: int, title: str) -> str:
    stream = io.StringIO()
    stream.write(f"{title}\ncalls per request = ncalls / {requests}\n\n")
    stats = pstats.Stats(profiler, stream=stream)
    stats.sort_stats("tottime").print_stats(40)
    stats.sort_stats("cumulative").print_stats(40)
    stream.write(
        "\nWho calls the costliest functions (cProfile counts each resume of a coroutine "
        "as a call):\n"
    )
    stats.sort_stats("tottime").print_callers(12)
    return stream.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--latency", type=float, default=0.001, help="server latency, s")
    parser.add_argument("--cap", type=float, default=300.0, help="seconds per variant, at most")
    parser.add_argument("--order", nargs="+", default=["plain", "hedgeclient"])
    parser.add_argument("--profile", action="store_true", help="cProfile the hedgeclient run")
    parser.add_argument("--output", default="pool", help="results/<output>.json")
    args = parser.parse_args()
    out: dict[str, Any] = {
        "command": command(),
        "machine": machine(),
        "settings": {
            "requests": args.requests,
            "connections": args.connections,
            "latency_s": args.latency,
            "cap_s": args.cap,
            "order": args.order,
        },
    }
    out["variants"] = anyio.run(measure, args, None)
    if args.profile:
        args.order = ["hedgeclient"]
        profiler = cProfile.Profile()
        out["profiled"] = anyio.run(measure, args, profiler)["hedgeclient"]
        text = profile_text(
            profiler,
            args.requests,
            f"cProfile of bench_pool.py's hedgeclient variant: {args.requests} requests, "
            f"{args.connections} connections, latency {args.latency} s; "
            f"{out['profiled']['finished']} finished in {out['profiled']['seconds']:.1f} s",
        )
        path = write_json(args.output, out).with_name(f"{args.output}_profile.txt")
        path.write_text(text)
        print(f"profile written to {path}")
    v = out["variants"]
    if "plain" in v and "hedgeclient" in v:
        p, h = v["plain"], v["hedgeclient"]
        both_done = not p["capped"] and not h["capped"]
        out["ratio"] = h["seconds"] / p["seconds"] if both_done else None
        out["verdict"] = verdict(both_done and out["ratio"] <= RATIO)
    print_table(
        f"{args.requests:,} concurrent GETs, {args.connections} connections, FakeService "
        f"latency {args.latency * 1000:g} ms, cap {args.cap:g} s",
        ["variant", "finished", "failed", "seconds", "to half", "client CPU s", "server got",
         "load before", "load after"],
        [
            [name, r["finished"], sum(r["failed"].values()), r["seconds"], r["seconds_to_half"],
             r["client_cpu_seconds"], r["server_received"], str(r["loadavg_before"]),
             str(r["loadavg_after"])]
            for name, r in v.items()
        ],
    )  # fmt: skip
    if "verdict" in out:
        ratio = "-" if out["ratio"] is None else f"{out['ratio']:.2f}"
        print(f"hedgeclient / plain time: {ratio} (<= {RATIO}) -> {out['verdict']}")
    write_json(args.output, out)


if __name__ == "__main__":
    main()
