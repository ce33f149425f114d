"""Instructions per request above the floor (callgrind), and where a request's time goes.

Run from the repository root::

    .venv/bin/python benchmarks/bench_instructions.py            # every variant, both backends
    .venv/bin/python benchmarks/bench_instructions.py --variants floor off --backends asyncio
    .venv/bin/python benchmarks/bench_instructions.py --profile  # (b) only

(a) **Instruction counts.** Per backend, one interpreter under
``valgrind --tool=callgrind`` warms every variant up (``WARM_UP`` requests each, on its
own transport) and measures none; then one such run per variant also makes
``--requests`` requests of that variant in its turn. The difference to the first run,
divided by ``--requests``, is the variant's instructions per request, which a loaded
machine does not move (``--jobs 2`` measures the two backends at once). Each request is a direct
``await transport.handle_async_request(request)`` (no ``AsyncClient``, as in
``docs/benchmarks.md``'s earlier count) of a new ``httpx.Request`` carrying an
``x-request-id`` header, then ``await response.aclose()``. Variants, over an
``httpx.MockTransport`` and three replicas:

- ``bare``: the MockTransport alone;
- ``floor``: ``_common.Forward``, the floor of ``bench_overhead.py`` (route each request
  to one of three replicas as a new ``httpx.Request``, the inner call under one anyio
  ``CancelScope``);
- ``defaults``: ``HedgedTransport`` with its defaults (``AdaptiveDelay``, metrics on,
  OpenTelemetry on without a provider); an instant handler, no hedge fires;
- ``off``: metrics off, ``FixedDelay(5)`` (issue 15's measured variant: +80 k asyncio,
  +82 k trio above the floor at 05b2bf3; issue 25's target: at most half);
- ``hedged``: every request hedged, the backup loses (``bench_peers.py``'s mode): the
  primary answers as soon as the backup has reached the handler, the backup waits
  until it is cancelled; a fixed 1 ms delay, a budget that never binds, metrics on;
- ``backup_wins``: every request hedged, the primary waits until it is cancelled and
  the backup answers at once; the same settings;
- ``peer_<name>``: ``hedged``'s handler under a library built as ``bench_peers.py``
  builds it for "every request hedged" (``hedgeclient``: metrics off; the peers
  ``grit-toolkit`` and ``nopanic``, the two cheapest there), at a 50 ms delay for all:
  issue 25's CPU target (at most the cheapest peer) in counts no load moves. (At 1 ms,
  under valgrind's slowdown, hedgeclient's loop-lag hold-back fires on some requests.)

The handler tells attempts apart by their order per request (``x-request-id``), not
by time, so every run takes the same path whatever valgrind's slowdown; what can still
vary is how often the event loop wakes while the 1 ms delay runs (a few thousand
instructions), and which replicas the random two-choice draws pick.

(b) **Where it goes** (``--profile``): ``cProfile`` over ``--profile-requests``
requests of ``hedged`` and ``backup_wins`` (and ``off``) in this process (asyncio),
the top 40 functions by exclusive and by inclusive time, and exclusive time by package
(the library, httpx, httpcore, anyio, asyncio, trio, the rest of the standard library,
C built-ins). cProfile adds a cost per call, so the shares of small, often called
functions are inflated; the call counts per request are exact. Written to
``benchmarks/results/breakdown_<variant>.txt``.

Only the public API of ``hedgeclient`` is used. Results: printed, and written to
``benchmarks/results/instructions.json``.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import httpx
from _common import (
    FLOOR_TARGETS,
    RESULTS_DIR,
    SERVICE,
    Forward,
    callgrind_instructions,
    command,
    machine,
    print_table,
    small_response,
    verdict,
    write_json,
)

import hedgeclient
from hedgeclient import FixedDelay, HedgeBudget, HedgedTransport

REPLICAS = {SERVICE: list(FLOOR_TARGETS)}
PEERS = ("peer_hedgeclient", "peer_grit-toolkit", "peer_nopanic")
VARIANTS = ("bare", "floor", "defaults", "off", "hedged", "backup_wins", *PEERS)
PEER_DELAY = 0.05  # the peer variants' fixed hedge delay
MEASURED = ["floor", "defaults", "off", "hedged", "backup_wins"]  # by default
HEDGED = ("hedged", "backup_wins")
EVERY_DELAY = 0.001  # the hedge delay of the hedged variants
BEFORE = {"asyncio": 80_000, "trio": 82_000}  # "off" above the floor at 05b2bf3
WARM_UP = 200


class Attempts:
    """A MockTransport handler that decides each request's winner by attempt order.

    ``winner="primary"``: the first attempt of a request waits until a second one has
    arrived, then answers; the second waits until it is cancelled. ``"backup"``: the
    first waits until it is cancelled, the second answers at once.
    """

    def __init__(self, winner: str) -> None:
        self.winner = winner
        self.arrived: dict[str, anyio.Event] = {}
        self.calls = 0

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.calls += 1
        rid = request.headers["x-request-id"]
        backup = self.arrived.pop(rid, None)
        if backup is None:  # the primary attempt
            backup = self.arrived[rid] = anyio.Event()
            if self.winner == "backup":
                await anyio.sleep_forever()
            await backup.wait()
            return httpx.Response(200, content=b"ok")
        backup.set()
        if self.winner == "primary":
            await anyio.sleep_forever()
        return httpx.Response(200, content=b"ok")


def make_transport(variant: str) -> tuple[httpx.AsyncBaseTransport, Attempts | None]:
    if variant in PEERS:
        import bench_peers

        handler = Attempts("primary")
        name = variant.removeprefix("peer_")
        inner = httpx.MockTransport(handler)
        return bench_peers.build(name, inner, list(FLOOR_TARGETS), PEER_DELAY), handler
    if variant in HEDGED:
        handler = Attempts("primary" if variant == "hedged" else "backup")
        every = HedgedTransport(
            httpx.MockTransport(handler),
            replicas=REPLICAS,
            delay=FixedDelay(EVERY_DELAY),
            budget=HedgeBudget(ratio=1.0, burst=1e6, min_per_second=0),
        )
        return every, handler
    inner = httpx.MockTransport(small_response)
    if variant == "bare":
        return inner, None
    if variant == "floor":
        return Forward(inner, "_replace", cancel_scope=True, targets=FLOOR_TARGETS), None
    if variant == "defaults":
        return HedgedTransport(inner, replicas=REPLICAS), None
    if variant == "off":
        return HedgedTransport(inner, replicas=REPLICAS, delay=FixedDelay(5.0), metrics=False), None
    raise ValueError(variant)


async def drive(
    variant: str, requests: int, warm_up: int = WARM_UP, profiler: cProfile.Profile | None = None
) -> dict[str, Any]:
    """``warm_up`` then ``requests`` direct calls (``profiler`` on for those); what the
    responses said."""
    transport, handler = make_transport(variant)
    winners: Counter[int] = Counter()
    for i in range(warm_up + requests):
        if i == warm_up and profiler is not None:
            profiler.enable()
        request = httpx.Request("GET", f"{SERVICE}/item", headers={"x-request-id": str(i)})
        response = await transport.handle_async_request(request)
        await response.aclose()
        if i >= warm_up:
            winners[getattr(response.extensions.get("hedge"), "attempt", 0)] += 1
    await anyio.sleep(0.01)  # the losers' cleanup, in both runs alike
    if profiler is not None:
        profiler.disable()
    await transport.aclose()
    return {"winner_attempts": dict(winners), "handler_calls": handler.calls if handler else None}


def _child(args: argparse.Namespace) -> None:
    """The run valgrind measures (``--child BACKEND MEASURED N VARIANT...``).

    Every variant warms up on its own transport, one after another; ``MEASURED`` (or
    ``none``) then runs ``N`` requests in its turn.
    """
    backend, measured, n, *variants = args.child

    async def run() -> None:
        for variant in variants:
            result = await drive(variant, int(n) if variant == measured else 0)
            winners = result["winner_attempts"]
            wanted = {"hedged": 1, "backup_wins": 2}.get(variant)
            if winners and wanted is not None and set(winners) != {wanted}:
                msg = f"{variant}: expected every response from attempt {wanted}, got {winners}"
                raise SystemExit(msg)

    anyio.run(run, backend=backend)


def count(backend: str, variants: list[str], requests: int) -> dict[str, dict[str, Any]]:
    """Instructions per request of each variant on ``backend``: len(variants) + 1 runs.

    One run warms every variant up and measures none; each other run also makes
    ``requests`` requests of one variant. Its difference to the first, divided by
    ``requests``, is that variant's count.
    """
    argv = [sys.executable, __file__, "--child", backend]
    empty = callgrind_instructions([*argv, "none", str(requests), *variants])
    out: dict[str, dict[str, Any]] = {}
    for variant in variants:
        full = callgrind_instructions([*argv, variant, str(requests), *variants])
        out[variant] = {
            "instructions_total": full,
            "instructions_empty": empty,
            "per_request": (full - empty) / requests,
        }
        print(f"[{backend}/{variant}] {out[variant]['per_request']:,.0f} per request", flush=True)
    return out


# -- (b) where it goes ---------------------------------------------------------------------

_PACKAGES = (
    "hedgeclient",
    "httpx",
    "httpcore",
    "anyio",
    "trio",
    "sniffio",
    "prometheus_client",
    "opentelemetry",
)
LIBRARY = Path(hedgeclient.__file__).resolve().parent


def package_of(filename: str) -> str:
    """The package a profiled function belongs to, from its file name."""
    if filename == "~" or filename.startswith("<"):
        return "C built-ins"
    path = Path(filename)
    if path.resolve().is_relative_to(LIBRARY):
        return "hedgeclient"
    parts = path.parts
    for name in _PACKAGES:
        if name in parts:
            return name
    if "asyncio" in parts:
        return "asyncio"
    return "stdlib/other"


def _name(func: tuple[str, int, str]) -> str:
    filename, line, name = func
    if filename == "~":
        return name
    path = Path(filename)
    try:
        short = "hedgeclient/" + path.resolve().relative_to(LIBRARY).as_posix()
    except ValueError:
        parts = path.parts
        idx = max(
            (i for i, p in enumerate(parts) if p in ("site-packages", "python3.11")), default=-1
        )
        short = "/".join(parts[idx + 1 :]) if idx >= 0 else filename
    return f"{short}:{line} {name}"


def breakdown(variant: str, requests: int) -> str:
    """cProfile of ``requests`` requests of ``variant`` on asyncio, as text."""
    profiler = cProfile.Profile()

    anyio.run(drive, variant, requests, WARM_UP, profiler, backend="asyncio")
    stats = pstats.Stats(profiler)
    raw: dict[Any, Any] = dict(stats.stats)  # type: ignore[attr-defined]
    idle = [func for func in raw if func[0] == "~" and "poll' of 'select.epoll" in func[2]]
    idle_time = sum(raw.pop(func)[2] for func in idle)  # the loop waiting: not CPU
    total = sum(tt for (_, _, tt, _, _) in raw.values())
    by_package: Counter[str] = Counter()
    calls_by_package: Counter[str] = Counter()
    for func, (_, nc, tt, _, _) in raw.items():
        by_package[package_of(func[0])] += tt
        calls_by_package[package_of(func[0])] += nc
    out = io.StringIO()
    out.write(
        f"cProfile, variant {variant!r}, asyncio, {requests} requests after a warm-up of "
        f"{WARM_UP} (and a 10 ms sleep at the end, for the losers' cleanup);\n"
        f"total {total / requests * 1e6:.1f} us per request under the profiler, without "
        f"the {idle_time / requests * 1e6:.1f} us the loop waited in epoll (left out of "
        "every figure; inclusive times of the loop's functions still hold it).\n"
        "Wall-clock timer on a shared machine, and cProfile inflates small, often called "
        "functions: compare shares and call counts, not absolute us. cProfile counts each "
        "resume of a coroutine as a call (an async function awaited across two loop "
        "passes shows 2x or 3x).\n\n"
    )
    out.write("Exclusive time by package (us per request, share, calls per request):\n")
    for package, tt in by_package.most_common():
        out.write(
            f"  {package:<18} {tt / requests * 1e6:8.1f} us  {tt / total:6.1%}  "
            f"{calls_by_package[package] / requests:7.1f} calls\n"
        )
    for key, title in ((2, "exclusive (tottime)"), (3, "inclusive (cumtime)")):
        out.write(f"\nTop 40 by {title}: us per request, share of the total, calls per request\n")
        ranked = sorted(raw.items(), key=lambda item: item[1][key], reverse=True)[:40]
        for func, values in ranked:
            nc, t = values[1], values[key]
            out.write(
                f"  {t / requests * 1e6:8.2f} us {t / total:6.1%} {nc / requests:6.2f}x  "
                f"[{package_of(func[0])}] {_name(func)}\n"
            )
    return out.getvalue()


# -- main -----------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--variants", nargs="+", default=MEASURED, choices=VARIANTS)
    parser.add_argument("--backends", nargs="+", default=["asyncio", "trio"])
    parser.add_argument("--requests", type=int, default=2_000, help="per callgrind run")
    parser.add_argument("--profile", action="store_true", help="(b) only: cProfile breakdowns")
    parser.add_argument("--profile-requests", type=int, default=3_000)
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--jobs", type=int, default=1, help="backends measured at once")
    parser.add_argument("--output", default="instructions", help="results/<output>.json")
    args = parser.parse_args()
    if args.child:
        _child(args)
        return
    if args.profile:
        for variant in ("off", "hedged", "backup_wins"):
            text = breakdown(variant, args.profile_requests)
            path = RESULTS_DIR / f"breakdown_{variant}.txt"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(text.split("\nTop 40 by inclusive")[0])
            print(f"written to {path}\n")
        return
    variants = list(args.variants)
    if "floor" not in variants:
        variants.insert(0, "floor")
    out: dict[str, Any] = {
        "command": command(),
        "machine": machine(),
        "library": str(LIBRARY),
        "requests_per_run": args.requests,
        "warm_up": WARM_UP,
        "counts": {},
    }
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        counted = pool.map(lambda b: (b, count(b, variants, args.requests)), args.backends)
        for backend, results in counted:
            for variant, result in results.items():
                out["counts"][f"{backend}/{variant}"] = result
    report(out, args.backends, variants)
    write_json(args.output, out)


def report(out: dict[str, Any], backends: list[str], variants: list[str]) -> None:
    rows = []
    for backend in backends:
        floor = out["counts"][f"{backend}/floor"]["per_request"]
        for variant in variants:
            per = out["counts"][f"{backend}/{variant}"]["per_request"]
            above = per - floor
            note = ""
            if variant == "off":
                target = BEFORE[backend] / 2
                note = f"target <= {target / 1000:.0f} k: {verdict(above <= target)}"
                out["counts"][f"{backend}/{variant}"]["verdict"] = verdict(above <= target)
            out["counts"][f"{backend}/{variant}"]["above_floor"] = above
            rows.append([backend, variant, f"{per / 1000:,.1f} k", f"{above / 1000:+,.1f} k", note])
    print_table(
        f"Instructions per request (callgrind, {out['requests_per_run']} requests less none)",
        ["backend", "variant", "per request", "vs the floor", ""],
        rows,
    )
    load = out["machine"]["loadavg_at_start"]
    print(
        f"library: {out['library']}; load average at the start: {load} (counts do not move with it)"
    )


if __name__ == "__main__":
    main()
