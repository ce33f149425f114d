"""Shared helpers of the benchmarks in this directory (tables, JSON, machine facts).

Strictly private to ``benchmarks/``; not part of hedgeclient.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import math
import os
import platform
import queue
import re
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import anyio
import httpx

RESULTS_DIR = Path(__file__).resolve().parent / "results"
SERVICE = "http://svc"  # the logical origin every hedged benchmark talks to


def package_version(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def with_fixed_hash_seed() -> None:
    """Re-run this script with ``PYTHONHASHSEED=0`` unless it is set: a set's order, and
    so a virtual-time run's figures, must not vary between runs. Call it first thing
    under ``if __name__ == "__main__":``."""
    if os.environ.get("PYTHONHASHSEED") != "0":
        os.environ["PYTHONHASHSEED"] = "0"
        os.execv(sys.executable, [sys.executable, *sys.argv])


def machine() -> dict[str, Any]:
    """Facts about this machine, read from the machine itself."""
    model = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        usable = os.cpu_count()
    try:
        load = os.getloadavg()
    except OSError:
        load = None
    return {
        "git": _git_state(),
        "date_utc": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu_model": model,
        "cpu_count": os.cpu_count(),
        "cpus_usable": usable,
        "loadavg_at_start": [round(x, 2) for x in load] if load else None,
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "packages": {
            name: package_version(name)
            for name in ("hedgeclient", "httpx", "httpcore", "anyio", "trio", "uvicorn")
        },
    }


def _git_state() -> dict[str, Any] | None:
    """HEAD, and the hedgeclient/ files that differ from it (others edit the tree)."""
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "hedgeclient"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split("\n")
    except (OSError, subprocess.CalledProcessError):
        return None
    return {"head": head, "hedgeclient_changes": [line for line in dirty if line.strip()]}


def command(argv: Sequence[str] | None = None) -> str:
    args = list(sys.argv if argv is None else argv)
    script = Path(args[0])
    with contextlib.suppress(ValueError):  # a script outside the working directory
        script = script.resolve().relative_to(Path.cwd())
    return " ".join([".venv/bin/python", str(script), *args[1:]])


def write_json(name: str, payload: dict[str, Any]) -> Path:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    if isinstance(payload.get("machine"), dict):  # other work shares the box: say how much
        with contextlib.suppress(OSError):
            payload["machine"]["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    path = RESULTS_DIR / f"{name}.json"
    path.write_text(json.dumps(payload, indent=2, default=_jsonable) + "\n")
    return path


def _jsonable(value: object) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return repr(value)


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """Print a table with rich if it is installed, else as plain text."""
    cells = [[_cell(v) for v in row] for row in rows]
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
        print(f"\n{title}")
        print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)))
        for row in cells:
            print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)))
        return
    table = Table(title=title, title_justify="left")
    for index, name in enumerate(columns):
        table.add_column(name, justify="left" if index == 0 else "right")
    for row in cells:
        table.add_row(*row)
    Console(width=200).print(table)


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if not math.isfinite(value):
            return "-"
        return f"{value:.3g}" if abs(value) < 1 else f"{value:.1f}"
    return str(value)


def ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000.0


def quantile(values: Sequence[float], q: float) -> float:
    """The smallest value v with P(X > v) <= 1 - q (HEDGING.md's convention)."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q * len(ordered) - 1e-9))
    return ordered[rank - 1]


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def small_response(request: httpx.Request) -> httpx.Response:
    """The instant in-process handler: a 2-byte 200 response."""
    return httpx.Response(200, content=b"ok")


class Stopwatch:
    """CPU (process) and wall time of a block, in seconds."""

    __slots__ = ("_cpu0", "_wall0", "cpu", "wall")

    def __enter__(self) -> Stopwatch:
        self._cpu0 = time.process_time()
        self._wall0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.cpu = time.process_time() - self._cpu0
        self.wall = time.perf_counter() - self._wall0


async def run_concurrently(total: int, concurrency: int, one: Callable[[int], Any]) -> None:
    """Call ``await one(i)`` for i in range(total), ``concurrency`` at a time."""
    counter = iter(range(total))

    async def worker() -> None:
        for i in counter:
            await one(i)

    async with anyio.create_task_group() as tg:
        for _ in range(min(concurrency, total)):
            tg.start_soon(worker)


# -- the floor: the least a hedging transport does ----------------------------------------

FLOOR_TARGETS = ("http://10.0.0.1:8080", "http://10.0.0.2:8080", "http://10.0.0.3:8080")


class Forward(httpx.AsyncBaseTransport):
    """A do-nothing middleware: what any wrapper costs; optionally the floor's pieces.

    ``rewrite`` sends each request to the next of ``targets`` (round robin) by one of
    two URL rewrites; ``cancel_scope`` runs the inner call under an anyio cancel scope.
    ``Forward(inner, "_replace", cancel_scope=True, targets=FLOOR_TARGETS)`` is **the
    floor** of ``bench_overhead.py`` and ``bench_instructions.py``: the least any hedging
    transport does on a request that is never hedged (route it to one of three
    replicas as a new ``httpx.Request``, and be able to interrupt it).
    """

    def __init__(
        self,
        inner: httpx.AsyncBaseTransport,
        rewrite: str | None = None,
        *,
        cancel_scope: bool = False,
        targets: Sequence[str] = ("http://10.0.0.1:8080",),
    ) -> None:
        self.inner = inner
        self.rewrite = rewrite
        self.cancel_scope = cancel_scope
        self.targets = [httpx.URL(t) for t in targets]
        self.sent = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        target = self.targets[self.sent % len(self.targets)]
        self.sent += 1
        if self.rewrite == "copy_with":
            url = request.url.copy_with(scheme=target.scheme, host=target.host, port=target.port)
            request = httpx.Request(
                request.method,
                url,
                headers=request.headers,
                stream=request.stream,
                extensions=request.extensions,
            )
        elif self.rewrite == "_replace":
            request = self.copy(request, target)
        if self.cancel_scope:
            with anyio.CancelScope():
                return await self.inner.handle_async_request(request)
        return await self.inner.handle_async_request(request)

    @staticmethod
    def copy(request: httpx.Request, target: httpx.URL) -> httpx.Request:
        """``request`` as a new ``httpx.Request`` to ``target``'s origin (the floor's copy).

        httpx-private fast path: the origin was validated when it was configured, so
        swap the parsed components without re-parsing (ParseResult is a NamedTuple).
        """
        url = httpx.URL.__new__(httpx.URL)
        parts = target._uri_reference
        url._uri_reference = request.url._uri_reference._replace(
            scheme=parts.scheme, host=parts.host, port=parts.port
        )
        return httpx.Request(
            request.method,
            url,
            headers=request.headers,
            stream=request.stream,
            extensions=request.extensions,
        )


# -- instruction counts -------------------------------------------------------------------


def callgrind_instructions(argv: Sequence[str], env: dict[str, str] | None = None) -> int:
    """Instructions one run of ``argv`` executes under ``valgrind --tool=callgrind``.

    The total callgrind reports (``Collected : N``), which a loaded machine does not
    move. ``PYTHONHASHSEED=0`` gives every run the same dict and set layouts. Take the
    difference of two runs that differ only in the work measured (a run with none
    removes the interpreter's start, the imports and any warm-up).

    Raises:
        FileNotFoundError: valgrind is not installed.
        subprocess.CalledProcessError: the run failed (its stderr is in the error).
    """
    command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *argv]
    environment = {**os.environ, **(env or {}), "PYTHONHASHSEED": "0"}
    done = subprocess.run(command, capture_output=True, text=True, check=False, env=environment)
    if done.returncode != 0:
        raise subprocess.CalledProcessError(done.returncode, command, done.stdout, done.stderr)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise subprocess.CalledProcessError(0, command, done.stdout, done.stderr)
    return int(found.group(1))


def per_request(
    samples: dict[str, list[float]],
    walls: dict[str, list[float]],
    loads: dict[str, list[float]],
    plain: str,
) -> dict[str, dict[str, float]]:
    """Each variant's CPU and wall-clock µs per request (medians over the repetitions),
    its CPU against ``plain``'s (the median of the per-repetition ratios) and the median
    1-minute load average; ``samples`` and ``walls`` in seconds per request."""
    base = samples[plain]
    return {
        name: {
            "us_per_request": statistics.median(values) * 1e6,
            "ratio_to_plain": statistics.median([v / p for v, p in zip(values, base, strict=True)]),
            "wall_us_per_request": statistics.median(walls[name]) * 1e6,
            "loadavg_1m": statistics.median(loads[name]),
        }
        for name, values in samples.items()
    }


def on_threads(n: int, one: Callable[[int], None], threads: int) -> None:
    """Call ``one(i)`` for ``i`` in ``range(n)`` on ``threads`` threads taking the next
    ``i`` as each is free; return once every call has returned."""
    work: queue.SimpleQueue[int] = queue.SimpleQueue()
    for i in range(n):
        work.put(i)

    def worker() -> None:
        while True:
            try:
                i = work.get_nowait()
            except queue.Empty:
                return
            one(i)

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
