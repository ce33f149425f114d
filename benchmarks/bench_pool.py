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
  budget, metrics on) over ``httpx.AsyncHTTPTransport`` with the same limits;
- diagnostics (``--order`` them in): ``no_backups``, the same with a budget that allows
  one backup in the whole run (``HedgeBudget(ratio=1e-9, burst=1, min_per_second=0)``):
  the hedge timer runs, backups (almost) never go; ``never_hedges``, ``max_hedges=0``:
  neither;
- ``baseline`` (with ``--baseline DIR``): ``hedgeclient`` again, with the ``hedgeclient/``
  of another checkout ``DIR`` on ``PYTHONPATH``: a before/after comparison in one run,
  the variants interleaved (``--order plain hedgeclient baseline``, ``--rounds 2``).

Each variant runs in a child process (``--child``) against the one ``FakeService`` of
the parent, which exits as soon as its result is written: a variant stopped at the cap
is not waited for while thousands of queued requests unwind (httpcore's pool scans its
whole queue for each one that leaves it).

No timeouts (``httpx.Timeout(None)``): a request waits in the pool's queue as long as it
must. Each variant is stopped at ``--cap`` seconds; reported: how many finished (and
failed, by exception type), the time to finish all (or the cap), the client process's
CPU time, the requests the server received (backups included) and the load average
before and after. Target (issue 25): hedgeclient's time within 1.25x of plain's.
``--rounds K`` runs the order K times, reversed every other round; each variant's
figures are then those of its median round by time (on a shared machine, one round
can meet a neighbour's burst).

``--profile``: also run the ``hedgeclient`` variant again under ``cProfile`` (wall clock),
written to ``benchmarks/results/pool_profile.txt`` with the call counts per request of
the top functions, which say what grows with the queue.

Only the public API is used. Results: printed, and written to
``benchmarks/results/pool.json``.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import random
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
from _common import RESULTS_DIR, SERVICE, command, machine, print_table, verdict, write_json

from hedgeclient import HedgeBudget, HedgedTransport
from hedgeclient.testing import FakeService

RATIO = 1.25  # target: hedgeclient's time at most this times plain's


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


VARIANTS = ("plain", "hedgeclient", "no_backups", "never_hedges", "baseline")


def make_client(variant: str, origins: list[str], connections: int) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    timeout = httpx.Timeout(None)
    if variant == "plain":
        return httpx.AsyncClient(limits=limits, timeout=timeout)
    options: dict[str, Any] = {
        "hedgeclient": {},
        "no_backups": {"budget": HedgeBudget(ratio=1e-9, burst=1, min_per_second=0)},
        "never_hedges": {"max_hedges": 0},
    }[variant]
    transport = HedgedTransport(
        httpx.AsyncHTTPTransport(limits=limits), replicas={SERVICE: origins}, **options
    )
    return httpx.AsyncClient(transport=transport, base_url=SERVICE, timeout=timeout)


async def run_variant(
    variant: str,
    origins: list[str],
    requests: int,
    connections: int,
    cap: float,
    report: Callable[[dict[str, Any]], None],
) -> None:
    """Run one variant; ``report`` its result when the last request ends or at ``cap``.

    ``report`` is called inside the task group or, at the cap, from a watchdog thread,
    with the requests still queued then still running: it is expected to exit the
    process (:func:`_child`), leaving the queue to the kernel rather than to unwinding.
    """
    rng = random.Random(7)
    finished = 0
    failed: Counter[str] = Counter()
    attempts: Counter[int] = Counter()
    suppressed: Counter[str] = Counter()
    done_at: list[float] = []
    client = make_client(variant, origins, connections)
    await client.__aenter__()
    for _ in range(3 * connections):  # open the connections (not timed)
        url = rng.choice(origins) + "/" if variant == "plain" else "/"
        (await client.get(url)).raise_for_status()
    load_before = _load()
    cpu0, start = time.process_time(), time.perf_counter()
    all_done = anyio.Event()
    reported = threading.Lock()

    def result(capped: bool) -> dict[str, Any]:
        return {
            "requests": requests,
            "finished": finished,
            "failed": dict(failed),
            "capped": capped,
            "seconds": time.perf_counter() - start,
            "seconds_to_half": sorted(done_at)[len(done_at) // 2] if done_at else None,
            "client_cpu_seconds": time.process_time() - cpu0,
            "attempts_per_finished_request": dict(attempts),
            "suppressed": dict(suppressed),
            "loadavg_before": load_before,
            "loadavg_after": _load(),
        }

    def at_cap() -> None:
        # A watchdog thread, not a cancel scope: one pass of the event loop can outlast
        # the cap (10,000 requests entering httpcore's pool at once is O(n^2) in one pass).
        if reported.acquire(blocking=False):
            report(result(capped=True))

    watchdog = threading.Timer(cap, at_cap)
    watchdog.daemon = True
    watchdog.start()

    async def one() -> None:
        nonlocal finished
        url = rng.choice(origins) + "/" if variant == "plain" else "/"
        try:
            response = await client.get(url)
            response.raise_for_status()
        except Exception as exc:  # counted and reported, by type
            failed[type(exc).__name__] += 1
        else:
            finished += 1
            done_at.append(time.perf_counter() - start)
            info = response.extensions.get("hedge")
            attempts[getattr(info, "attempts", 1)] += 1
            if getattr(info, "suppressed", None):
                suppressed[str(info.suppressed)] += 1
        if finished + sum(failed.values()) == requests:
            all_done.set()

    async with anyio.create_task_group() as tg:
        for _ in range(requests):
            tg.start_soon(one)
        await all_done.wait()
        watchdog.cancel()
        if reported.acquire(blocking=False):
            report(result(capped=False))
        tg.cancel_scope.cancel()  # when report() returns (it need not)


def _child(args: argparse.Namespace) -> None:
    """One variant in this process: print its result as JSON, then exit at once."""
    variant, *origins = args.child
    profiler = cProfile.Profile() if args.profile_to else None
    if profiler is not None:
        profiler.enable()

    def report(result: dict[str, Any]) -> None:
        if profiler is not None:
            profiler.disable()
            Path(args.profile_to).write_text(
                profile_text(profiler, args.requests, f"cProfile of {variant}: {result}")
            )
        sys.stdout.write(json.dumps(result) + "\n")
        sys.stdout.flush()
        os._exit(0)  # not waiting for the queue to unwind (see the module doc)

    anyio.run(run_variant, variant, origins, args.requests, args.connections, args.cap, report)


def run_child(
    args: argparse.Namespace, svc: FakeService, variant: str, profile_to: Path | None
) -> dict[str, Any]:
    svc.reset_stats()
    env = None
    if variant == "baseline":  # hedgeclient's defaults, another checkout's code
        env = {**os.environ, "PYTHONPATH": str(Path(args.baseline).resolve())}
    child = "hedgeclient" if variant == "baseline" else variant
    argv = [sys.executable, __file__, "--child", child, *svc.origins]
    argv += ["--requests", str(args.requests), "--connections", str(args.connections)]
    argv += ["--cap", str(args.cap)]
    if profile_to is not None:
        argv += ["--profile-to", str(profile_to)]
    done = subprocess.run(argv, capture_output=True, text=True, check=False, env=env)
    if done.returncode != 0 or not done.stdout.strip():
        msg = f"{variant}: the child failed ({done.returncode}): {done.stderr[-2000:]}"
        raise SystemExit(msg)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["server_received"] = svc.stats().received - 3 * args.connections
    return result


def measure(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    rounds: dict[str, list[dict[str, Any]]] = {v: [] for v in args.order}
    with FakeService(replicas=3, latency=args.latency, mode="process", seed=3, keep=1) as svc:
        for k in range(args.rounds):
            for variant in args.order if k % 2 == 0 else args.order[::-1]:
                rounds[variant].append(r := run_child(args, svc, variant, None))
                print(
                    f"[{variant}] {r['finished']:,}/{r['requests']:,} finished in "
                    f"{r['seconds']:.1f} s (capped: {r['capped']}), load {r['loadavg_after']}",
                    flush=True,
                )
        for variant, runs in rounds.items():
            # the median round by time, a capped round counted as the slowest
            ranked = sorted(runs, key=lambda r: (r["capped"], -r["finished"], r["seconds"]))
            out[variant] = dict(ranked[(len(ranked) - 1) // 2], rounds=runs)
        if args.profile:
            path = RESULTS_DIR / f"{args.output}_profile.txt"
            out["profiled"] = run_child(args, svc, "hedgeclient", path)
            print(f"profile written to {path}")
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


def _cpu_ratio(variant: dict[str, Any], plain: dict[str, Any]) -> float | None:
    """The variant's client CPU seconds per finished request over plain's."""
    if not variant["finished"] or not plain["finished"]:
        return None
    mine = variant["client_cpu_seconds"] / variant["finished"]
    return round(mine / (plain["client_cpu_seconds"] / plain["finished"]), 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--latency", type=float, default=0.001, help="server latency, s")
    parser.add_argument("--cap", type=float, default=300.0, help="seconds per variant, at most")
    parser.add_argument("--order", nargs="+", default=["plain", "hedgeclient"], choices=VARIANTS)
    parser.add_argument("--profile", action="store_true", help="cProfile the hedgeclient run")
    parser.add_argument("--output", default="pool", help="results/<output>.json")
    parser.add_argument("--rounds", type=int, default=1, help="run the order this many times")
    parser.add_argument("--baseline", help="a checkout whose hedgeclient/ the baseline runs")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--profile-to", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args)
        return
    if ("baseline" in args.order) != (args.baseline is not None):
        parser.error("--baseline DIR and the variant `baseline` in --order go together")
    out: dict[str, Any] = {
        "command": command(),
        "machine": machine(),
        "settings": {
            "requests": args.requests,
            "connections": args.connections,
            "latency_s": args.latency,
            "cap_s": args.cap,
            "order": args.order,
            "rounds": args.rounds,
            "baseline": args.baseline,
        },
    }
    out["variants"] = measure(args)
    out["variants"].pop("profiled", None)
    v = out["variants"]
    if "plain" in v and "hedgeclient" in v:
        p, h = v["plain"], v["hedgeclient"]
        both_done = not p["capped"] and not h["capped"]
        out["ratio"] = h["seconds"] / p["seconds"] if both_done else None
        # both stopped at the cap: no time to compare, only counts
        out["verdict"] = verdict(out["ratio"] <= RATIO) if both_done else "undecided"
        out["finished_ratio"] = h["finished"] / p["finished"] if p["finished"] else None
        # CPU per finished request: what a loaded machine moves least
        out["cpu_per_request_ratio"] = _cpu_ratio(h, p)
    if "plain" in v and "baseline" in v:
        p, b = v["plain"], v["baseline"]
        both_done = not p["capped"] and not b["capped"]
        out["baseline_ratio"] = b["seconds"] / p["seconds"] if both_done else None
        out["baseline_finished_ratio"] = b["finished"] / p["finished"] if p["finished"] else None
        out["baseline_cpu_per_request_ratio"] = _cpu_ratio(b, p)
    print_table(
        f"{args.requests:,} concurrent GETs, {args.connections} connections, FakeService "
        f"latency {args.latency * 1000:g} ms, cap {args.cap:g} s",
        ["variant", "finished", "failed", "seconds", "to half", "client CPU s",
         "with a backup", "server got", "load before", "load after"],
        [
            [name, r["finished"], sum(r["failed"].values()), r["seconds"], r["seconds_to_half"],
             r["client_cpu_seconds"],
             sum(n for k, n in r["attempts_per_finished_request"].items() if int(k) > 1),
             r["server_received"], str(r["loadavg_before"]), str(r["loadavg_after"])]
            for name, r in v.items()
        ],
    )  # fmt: skip
    if "verdict" in out:
        ratio = "-" if out["ratio"] is None else f"{out['ratio']:.2f}"
        print(
            f"hedgeclient / plain time: {ratio} (<= {RATIO}) -> {out['verdict']}; "
            f"finished, hedgeclient / plain: {out['finished_ratio']}; CPU per finished "
            f"request, hedgeclient / plain: {out['cpu_per_request_ratio']}"
        )
    if "baseline_ratio" in out:
        ratio = "-" if out["baseline_ratio"] is None else f"{out['baseline_ratio']:.2f}"
        print(
            f"baseline / plain time: {ratio}; finished, baseline / plain: "
            f"{out['baseline_finished_ratio']}; CPU per finished request, baseline / plain: "
            f"{out['baseline_cpu_per_request_ratio']}"
        )
    write_json(args.output, out)


if __name__ == "__main__":
    main()
