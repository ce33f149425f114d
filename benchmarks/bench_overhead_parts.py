"""Where the µs above the floor go: the no-hedge path with one piece switched off at a time.

Run from the repository root::

    .venv/bin/python benchmarks/bench_overhead_parts.py             # asyncio and trio
    .venv/bin/python benchmarks/bench_overhead_parts.py --reps 11   # steadier

A diagnostic for issue 15's first target (at most 10 µs above the floor), not a
benchmark of the product: each variant is ``bench_overhead.py``'s "hedged, metrics
off" transport (three replicas, a fixed 5 s delay, so no hedge fires) with one piece
of the request path replaced by a no-op, which is *wrong* behaviour, only to weigh the
piece. The difference from the whole path, paired per repetition (variants interleaved,
the order reversed every repetition), is what that piece costs:

- ``replica choice and health``: the selector's draw (``PowerOfTwoChoices``), the
  in-flight registry (the stall signal) and the health bookkeeping as the attempt ends;
- ``report``: ``HedgeInfo`` on the response, the record, the trace hooks;
- ``hedge timer``: registering the hedge deadline and cancelling it;
- ``caller's deadline``: reading the enclosing cancel scope's deadline;
- ``cancel scope``: the primary's cancel scope (the floor has one too).

It patches private attributes of ``hedgeclient``; it may break when they change.
Results: printed, and written to ``benchmarks/results/overhead_parts.json``.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import httpx
from _common import SERVICE, command, machine, print_table, write_json
from bench_overhead import OFF, make_transport

from hedgeclient import _report, _timer
from hedgeclient._replicas.choice import Choice

WHOLE = "whole path"


class _NoHandle:
    def cancel(self) -> None:
        pass


class _NoScope:
    def __enter__(self) -> _NoScope:
        return self

    def __exit__(self, *exc_info: object) -> None:
        return None

    def cancel(self) -> None:
        pass


def _patches(timer: Any) -> dict[str, list[tuple[Any, str, Any]]]:
    return {
        WHOLE: [],
        "replica choice and health": [  # the race's calls to the replica side
            (Choice, "primary", lambda self, service, *a: service.replicas[0]),
            (Choice, "started", lambda self, attempt: None),
            (Choice, "ended", lambda self, attempt, *a, **k: ("ok", False)),
        ],
        "report": [
            (_report.Reporter, "finish", lambda *a, **k: None),
            (_report.Reporter, "begin", lambda *a, **k: None),
        ],
        "hedge timer": [(type(timer), "call_at", lambda self, at, callback: _NoHandle())],
        "caller's deadline": [(timer, "deadline", lambda: math.inf)],
        "cancel scope": [(timer, "cancel_scope", _NoScope)],
    }


@contextmanager
def _patched(patches: list[tuple[Any, str, Any]]) -> Iterator[None]:
    saved = [(obj, attr, getattr(obj, attr)) for obj, attr, _ in patches]
    for obj, attr, value in patches:
        setattr(obj, attr, value)
    try:
        yield
    finally:
        for obj, attr, value in saved:
            setattr(obj, attr, value)


async def _cpu_per_request(n: int) -> float:
    transport = make_transport(OFF)
    async with httpx.AsyncClient(transport=transport, base_url=SERVICE) as client:
        for _ in range(200):
            await client.get("/item")
        start = time.process_time()
        for _ in range(n):
            await client.get("/item")
        return (time.process_time() - start) / n


async def _run(reps: int, n: int) -> dict[str, Any]:
    timer = _timer.current_timer()
    variants = _patches(timer)
    names = list(variants)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for rep in range(reps):
        for name in names if rep % 2 == 0 else names[::-1]:
            with _patched(variants[name]):
                samples[name].append(await _cpu_per_request(n))
    whole = samples[WHOLE]
    out: dict[str, Any] = {}
    for name in names:
        saved = statistics.median(w - v for w, v in zip(whole, samples[name], strict=True))
        out[name] = {
            "us_per_request": statistics.median(samples[name]) * 1e6,
            "us_saved": saved * 1e6,
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--reps", type=int, default=7, help="interleaved repetitions")
    parser.add_argument("--requests", type=int, default=3000, help="requests per variant")
    args = parser.parse_args()
    out: dict[str, Any] = {"command": command(), "machine": machine(), "backends": {}}
    for backend in ("asyncio", "trio"):
        run: Callable[[], Any] = lambda: _run(args.reps, args.requests)  # noqa: E731
        result = anyio.run(run, backend=backend)
        out["backends"][backend] = result
        print_table(
            f"{backend}: the no-hedge path, one piece switched off at a time",
            ["variant", "µs/request", "µs the piece costs"],
            [
                [name, round(r["us_per_request"], 1), round(r["us_saved"], 2)]
                for name, r in result.items()
            ],
        )
    write_json("overhead_parts", out)


if __name__ == "__main__":
    main()
