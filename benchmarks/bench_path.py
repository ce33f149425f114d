"""How much of the library one request runs through: files touched, calls between them.

Run from the repository root::

    .venv/bin/python benchmarks/bench_path.py                 # asyncio and trio, defaults
    .venv/bin/python benchmarks/bench_path.py --delay 0.01    # a fixed hedge delay instead
    .venv/bin/python benchmarks/bench_path.py --edges         # also every edge's count

Issue 25's walk, as a count any layout of ``hedgeclient/`` can be held to. Two
requests, each profiled on its own after a warm-up on the same transport and client
(first use excluded: the origin's caches, the adaptive route, the metric children):

- **unhedged**: a GET answered at once (``httpx.MockTransport``), the transport's
  defaults (``AdaptiveDelay``, metrics on, OpenTelemetry on with no provider), three
  replicas;
- **backup wins**: the same transport over a handler that sleeps 60 s on the first
  attempt it sees of a request (told apart by an ``x-request-id`` header) and answers
  every later attempt at once, so the primary stalls, the hedge delay passes, the
  backup answers and the primary is cancelled. Its budget never binds
  (``HedgeBudget(ratio=1.0, burst=1e6, min_per_second=0)``: the default one would run
  dry in the warm-up), the rest are the defaults. The script checks that
  ``response.extensions["hedge"].attempt == 2`` (else it stops with an error). The
  delay is ``AdaptiveDelay``'s (about its ``initial_delay``, 0.1 s, the p95 of the
  warm-up); ``--delay`` sets a ``FixedDelay`` instead.

The adaptive delay recomputes its quantile when a sample arrives a second or more after
its last refresh; so that this never falls in the profiled request at random, the
warm-up ends with a 1.1 s pause and one more request (which takes the refresh).

Only the public API is used (``HedgedTransport``, ``httpx.MockTransport``), so the
script works on any layout of the package. A *library file* is a ``.py`` file under
the directory of the ``hedgeclient`` package that is imported (``PYTHONPATH`` chooses
it). ``sys.setprofile`` sees every Python function call while the request runs (from
just before ``client.get`` until its response is closed, then three checkpoints so that
work the request left to the event loop runs too). Counted:

- **files touched**: library files in which any function ran;
- **calls between library files**: a call of a function of library file B whose caller
  frame is in library file A != B (C functions in between, such as
  ``functools.partial``, are transparent: the caller is the nearest Python frame);
- **entries from outside**: a call of a library function whose caller frame is not in
  the library (httpx calling the transport, the event loop running a timer callback
  or starting a task, httpx iterating a response stream of the library); listed by the
  caller's module;
- the **total** (internal + entries) is what the targets are judged on.

Resuming a suspended coroutine or generator is not a call (on 3.11 the profiler's
``call`` event of a fresh frame stops at ``RESUME 0``; a resume stops at another
``RESUME``, or for ``throw()``, how a cancellation resumes a coroutine, at the await it
was suspended in; 3.12+ has ``sys.monitoring``'s ``PY_RESUME`` for the same); resumes
are reported apart. Calls within one file are not counted.

Targets (issue 25): backup wins, at most 12 files and 30 calls; unhedged, at most 8
files and 15 calls. Results: printed, and written to ``benchmarks/results/path.json``.
"""

from __future__ import annotations

import argparse
import dis
import itertools
import sys
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

import anyio
import httpx
from _common import SERVICE, command, machine, print_table, small_response, verdict, write_json

import hedgeclient
from hedgeclient import FixedDelay, HedgeBudget, HedgedTransport

REPLICAS = {SERVICE: ["http://10.0.0.1:8080", "http://10.0.0.2:8080", "http://10.0.0.3:8080"]}
LIBRARY = Path(hedgeclient.__file__).resolve().parent
STALL = 60.0  # seconds the first attempt of a request sleeps (cancelled long before)
REFRESH_INTERVAL = 1.1  # seconds: past AdaptiveDelay's default refresh_interval (1 s)
TARGETS = {"unhedged": (8, 15), "backup wins": (12, 30)}  # (files, calls) at most
# requests before the profiled one (backup wins: 20 each followed by fast requests on
# every replica, so that every replica has won, lost and answered: its series exist)
WARM_UP = {"unhedged": 20, "backup wins": 20}
_RESUME = dis.opmap.get("RESUME")
_GENERATOR_FLAGS = 0x20 | 0x80 | 0x200  # CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR


class StallFirstAttempt:
    """A MockTransport handler: each request's first attempt stalls, later ones answer.

    Requests are told apart by their ``x-request-id`` header (every attempt of a
    request carries the caller's headers); one whose id starts with ``fast`` is
    answered at once.
    """

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self.calls = 0

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.calls += 1
        rid = request.headers["x-request-id"]
        if rid not in self.seen and not rid.startswith("fast"):
            self.seen.add(rid)
            await anyio.sleep(STALL)
        return httpx.Response(200, content=b"ok")


def _where(path: str) -> str | None:
    """The library-relative name of a code file, or None outside the library."""
    try:
        return Path(path).resolve().relative_to(LIBRARY).as_posix()
    except ValueError:
        return None


def _outside_name(frame: FrameType | None) -> str:
    if frame is None:
        return "<no Python caller>"
    return str(frame.f_globals.get("__name__", frame.f_code.co_filename))


class PathProfile:
    """A ``sys.setprofile`` function that counts library files and calls between them."""

    def __init__(self) -> None:
        self.files: Counter[str] = Counter()  # calls (not resumes) into each file
        self.edges: Counter[tuple[str, str]] = Counter()  # (caller file, callee file)
        self.entries: Counter[tuple[str, str]] = Counter()  # (outside module, callee file)
        self.resumes = 0
        self.touched: set[str] = set()
        self._where: dict[str, str | None] = {}

    def _file(self, filename: str) -> str | None:
        try:
            return self._where[filename]
        except KeyError:
            found = self._where[filename] = _where(filename)
            return found

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        code = frame.f_code
        callee = self._file(code.co_filename)
        if callee is None:
            return
        self.touched.add(callee)
        if _is_resume(frame):
            self.resumes += 1
            return
        self.files[callee] += 1
        caller_frame = frame.f_back
        caller = None if caller_frame is None else self._file(caller_frame.f_code.co_filename)
        if caller is None:
            self.entries[(_outside_name(caller_frame), callee)] += 1
        elif caller != callee:
            self.edges[(caller, callee)] += 1

    def summary(self) -> dict[str, Any]:
        internal = sum(self.edges.values())
        entries = sum(self.entries.values())
        return {
            "files_touched": len(self.touched),
            "calls_between_library_files": internal,
            "entries_from_outside": entries,
            "total_calls": internal + entries,
            "resumes_of_library_coroutines": self.resumes,
            "files": sorted(self.touched),
            "calls_into_file": dict(self.files.most_common()),
            "edges": [
                {"caller": a, "callee": b, "calls": n} for (a, b), n in self.edges.most_common()
            ],
            "entries": [
                {"caller": a, "callee": b, "calls": n} for (a, b), n in self.entries.most_common()
            ],
        }


def _is_resume(frame: FrameType) -> bool:
    """Whether this ``call`` event resumes a suspended coroutine or generator frame."""
    code = frame.f_code
    if not code.co_flags & _GENERATOR_FLAGS:
        return False
    if _RESUME is None:  # before 3.11: a fresh frame has not run an instruction yet
        return frame.f_lasti >= 0
    # RESUME 0 is the start of the function. Any other instruction is a resume: RESUME
    # 1-3 for send(), or the await's own SEND loop (JUMP_BACKWARD_NO_INTERRUPT) or a
    # YIELD_VALUE for throw(), how a cancelled coroutine is resumed (the loser's send,
    # and the awaits above it, once counted as calls).
    at = frame.f_lasti
    raw = code.co_code
    return not (raw[at] == _RESUME and raw[at + 1] == 0)


def make_transport(
    scenario: str, delay: float | None
) -> tuple[HedgedTransport, StallFirstAttempt | None]:
    if scenario == "unhedged":
        inner = httpx.MockTransport(small_response)
        kwargs: dict[str, Any] = {} if delay is None else {"delay": FixedDelay(delay)}
        return HedgedTransport(inner, replicas=REPLICAS, **kwargs), None
    handler = StallFirstAttempt()
    kwargs = {"budget": HedgeBudget(ratio=1.0, burst=1e6, min_per_second=0)}
    if delay is not None:
        kwargs["delay"] = FixedDelay(delay)
    return HedgedTransport(httpx.MockTransport(handler), replicas=REPLICAS, **kwargs), handler


async def profile_one(scenario: str, delay: float | None) -> dict[str, Any]:
    """Warm up, then profile one request of ``scenario``; its counts."""
    transport, handler = make_transport(scenario, delay)
    with anyio.fail_after(STALL / 2):  # a backup that never comes: say so, do not hang
        return await _profile_one(scenario, transport, handler)


async def _profile_one(
    scenario: str, transport: HedgedTransport, handler: StallFirstAttempt | None
) -> dict[str, Any]:
    ids = (f"r{i}" for i in itertools.count())

    async def get(client: httpx.AsyncClient, prefix: str = "r") -> httpx.Response:
        response = await client.get("/item", headers={"x-request-id": prefix + next(ids)})
        await response.aread()
        await response.aclose()
        return response

    async with httpx.AsyncClient(transport=transport, base_url=SERVICE) as client:
        for _ in range(WARM_UP[scenario]):
            await get(client)
            if handler is not None:
                await _answer_on_every_replica(client, get)
        # The adaptive delay refreshes its quantile when a sample arrives a second or
        # more after its last refresh: let that happen now, on a request of its own, so
        # that it never falls in the profiled request at random.
        await anyio.sleep(REFRESH_INTERVAL)
        await get(client, "fast")
        for _ in range(3):
            await anyio.lowlevel.checkpoint()
        profiler = PathProfile()
        calls_before = handler.calls if handler else 0
        sys.setprofile(profiler)
        try:
            response = await get(client)
            for _ in range(3):  # what the request left to the loop (a loser's cleanup)
                await anyio.lowlevel.checkpoint()
        finally:
            sys.setprofile(None)
    info = response.extensions.get("hedge")
    attempt = getattr(info, "attempt", None)
    wanted = 2 if scenario == "backup wins" else 1
    if response.status_code != 200 or attempt != wanted:
        msg = (
            f"{scenario}: expected a 200 from attempt {wanted}, got {response.status_code} "
            f"with extensions['hedge'] = {info!r}"
        )
        raise SystemExit(msg)
    out = profiler.summary()
    out["hedge_info"] = repr(info)
    if handler is not None:
        out["handler_calls"] = handler.calls - calls_before
    files, calls = TARGETS[scenario]
    out["target_files"], out["target_calls"] = files, calls
    out["files_verdict"] = verdict(out["files_touched"] <= files)
    out["calls_verdict"] = verdict(out["total_calls"] <= calls)
    return out


async def _answer_on_every_replica(client: httpx.AsyncClient, get: Any) -> None:
    """Fast requests until every replica has answered one.

    A replica whose primary attempts lose to a backup several times in a row with no
    answer between may be ejected (outlier ejection), and then the next requests
    take another path: each answer ends such a run, so the profiled request meets
    every replica healthy, whatever the random draws of the warm-up were. A replica
    whose stalled primary was just cancelled is hushed (it gets no new primary) for
    about as long as that primary waited, so the loop paces itself by 10 ms.
    """
    answered: set[str] = set()
    for _ in range(100):
        info = (await get(client, "fast")).extensions.get("hedge")
        answered.add(str(getattr(info, "replica", "")))
        if answered >= set(REPLICAS[SERVICE]):
            return
        await anyio.sleep(0.01)
    msg = f"warm-up: only {sorted(answered)} answered in 100 fast requests"
    raise SystemExit(msg)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--delay", type=float, help="a fixed hedge delay for 'backup wins' (default: defaults)"
    )
    parser.add_argument("--edges", action="store_true", help="print every edge's count")
    parser.add_argument("--backends", nargs="+", default=["asyncio", "trio"])
    parser.add_argument("--output", default="path", help="results/<output>.json")
    args = parser.parse_args()
    out: dict[str, Any] = {
        "command": command(),
        "machine": machine(),
        "library": str(LIBRARY),
        "delay": "defaults" if args.delay is None else args.delay,
        "runs": {},
    }
    for backend in args.backends:
        for scenario in TARGETS:
            result = anyio.run(profile_one, scenario, args.delay, backend=backend)
            out["runs"][f"{backend}, {scenario}"] = result
    write_json(args.output, out)
    report(out, args.edges)


def report(out: dict[str, Any], edges: bool) -> None:
    rows = []
    for name, r in out["runs"].items():
        rows.append(
            [
                name,
                f"{r['files_touched']} (<= {r['target_files']}) {r['files_verdict']}",
                r["calls_between_library_files"],
                r["entries_from_outside"],
                f"{r['total_calls']} (<= {r['target_calls']}) {r['calls_verdict']}",
                r["resumes_of_library_coroutines"],
            ]
        )
    print(f"library: {out['library']}; hedge delay: {out['delay']}")
    print_table(
        "One request's path through the library (sys.setprofile; first use excluded)",
        ["backend, request", "files", "calls A->B", "entries", "total calls", "resumes"],
        rows,
    )
    for name, r in out["runs"].items():
        print(f"\n{name}: {r['hedge_info']}")
        print("  files (calls into each): " + ", ".join(
            f"{f} ({r['calls_into_file'].get(f, 0)})" for f in r["files"]
        ))  # fmt: skip
        if edges:
            for e in r["edges"]:
                print(f"  {e['calls']:3d}  {e['caller']} -> {e['callee']}")
            for e in r["entries"]:
                print(f"  {e['calls']:3d}  <{e['caller']}> -> {e['callee']}")
    load = out["machine"].get("loadavg_at_end") or out["machine"]["loadavg_at_start"]
    print(f"\nload average at the end: {load}")


if __name__ == "__main__":
    main()
