"""Instructions of the primitives a hedged request is built of (callgrind, per operation).

Run from the repository root::

    .venv/bin/python benchmarks/bench_primitives.py             # asyncio and trio
    .venv/bin/python benchmarks/bench_primitives.py --jobs 2    # both backends at once

Unit costs for reading ``bench_instructions.py``'s counts and its cProfile breakdown
(which says how many of each a request makes): each operation below is repeated
``--ops`` times in an interpreter under ``valgrind --tool=callgrind``; the difference
to a run that repeats none, divided by ``--ops``, is its count, which a loaded machine
does not move. No hedgeclient code runs; the operations are the anyio, asyncio and
httpx calls a hedging transport can make:

- ``checkpoint``: ``await anyio.lowlevel.checkpoint()`` (one pass through the loop);
- ``cancel_scope``: enter and exit an ``anyio.CancelScope`` (nothing cancelled);
- ``task_group``: enter and exit an anyio task group with no task;
- ``spawn``: a task group that starts one task, which returns at once;
- ``wake``: a task group whose task waits on an ``anyio.Event`` until the parent sets
  it, once the task waits (the parent checkpoints until then);
- ``cancel``: the same task waits in its own ``anyio.CancelScope`` until the parent
  cancels that scope (a cross-task cancel: on asyncio, anyio >= 4.11 builds the
  waiting task's repr here);
- ``request_copy``: a new ``httpx.Request`` from an existing one with another origin (the
  floor's copy, ``_common.Forward``);
- ``event``: ``anyio.Event()``, ``set()``, ``await wait()``;
- asyncio only: ``native_cancel`` and ``native_wake``: ``loop.create_task`` of a
  coroutine waiting on an ``asyncio.Event``, woken by ``Task.cancel()`` or by
  ``Event.set()``, then awaited;
- asyncio only, the cross-task cancel and the task's repr anyio >= 4.11 builds in it:
  ``task_repr``, ``repr()`` of the running task; ``cancel_in_task``, the same as
  ``cancel`` made from a new task that the parent awaits; ``cancel_cheap_repr``, the
  same from a task whose class prints as ``object`` does (``_timer._asyncio``'s
  detached tasks); ``cancel_deferred``, the same as ``cancel`` through
  ``loop.call_soon(scope.cancel)``, where no task is current (``_timer._asyncio``'s
  scopes cancelled from another task);
- httpx, public API against the private shortcut (issue 25: a private name stays only
  where the public call costs more than ~1 µs per attempt; ``_compat/httpx.py``):
  ``url_copy_with`` / ``url_replace``: a request URL onto a replica's origin with
  ``URL.copy_with(scheme=, host=, port=)`` / by replacing the fields of the private
  ``URL._uri_reference``; ``attempt_copy``: an attempt's ``httpx.Request`` (method,
  URL, the caller's headers, a one-chunk body stream, extensions), and the same plus
  ``header_set`` (``headers["Hedge-Attempt"] = "2"``) / ``header_append`` (appended to
  the private ``Headers._list``), plus ``body_read`` (``read()``, the stream put back)
  / ``body_stored`` (the private ``Request._content`` set); ``origin_fields`` /
  ``origin_parsed``: a URL's origin as a cache key, ``(url.scheme, url.host,
  url.port)`` / the same fields of the private ``URL._uri_reference``;
- anyio: ``deadline`` / ``deadline_backend``: ``anyio.current_effective_deadline()`` /
  the running backend's own ``current_effective_deadline`` (a private module's
  ``backend_class``, found once), which the public function looks up on every call.

``cancel - wake`` is what a cancel costs beyond an ordinary wake-up; ``spawn -
task_group`` a task's start; ``header_set - attempt_copy`` and the like what each step
adds to an attempt's copy. Results: printed, and written to
``benchmarks/results/primitives.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anyio
import anyio.lowlevel
import httpx
from _common import (
    FLOOR_TARGETS,
    Forward,
    callgrind_instructions,
    command,
    machine,
    print_table,
    write_json,
)

from hedgeclient._timer import current_timer

COMMON = (
    "checkpoint",
    "cancel_scope",
    "timer_scope",
    "timer_event",
    "timer_cancel",
    "task_group",
    "spawn",
    "wake",
    "cancel",
    "request_copy",
    "event",
    "url_copy_with",
    "url_replace",
    "attempt_copy",
    "header_set",
    "header_append",
    "body_read",
    "body_stored",
    "origin_fields",
    "origin_parsed",
    "deadline",
    "deadline_backend",
)
ASYNCIO_ONLY = (
    "native_cancel",
    "native_wake",
    "task_repr",
    "cancel_in_task",
    "cancel_cheap_repr",
    "cancel_deferred",
)


class _ObjectReprTask(asyncio.Task[None]):
    """A task that prints as ``object`` does (``_timer._asyncio._DetachedTask``)."""

    __repr__ = object.__repr__


class _OneChunk(httpx.SyncByteStream, httpx.AsyncByteStream):
    """An attempt's replayed body (``_wire.send.ReplayBody``, in short)."""

    def __init__(self, body: bytes) -> None:
        self._body = body

    def __iter__(self) -> Iterator[bytes]:
        return iter((self._body,))

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield self._body


async def _noop() -> None:
    pass


async def _wait_event(event: anyio.Event, box: list[bool]) -> None:
    box.append(True)
    await event.wait()


async def _cancel_now(scope: anyio.CancelScope) -> None:
    scope.cancel()


async def _wait_in_scope(box: list[anyio.CancelScope]) -> None:
    with anyio.CancelScope() as scope:
        box.append(scope)
        await anyio.sleep_forever()


async def _wait_in_timer_scope(box: list[Any]) -> None:
    with current_timer().cancel_scope() as scope:
        box.append(scope)
        await anyio.sleep_forever()


def operations() -> dict[str, Callable[[], Awaitable[None]]]:
    forward = Forward(httpx.MockTransport(lambda r: httpx.Response(200)), "_replace")
    request = httpx.Request("GET", "http://svc/item", headers={"x-request-id": "1"})
    target = httpx.URL(FLOOR_TARGETS[1])

    async def checkpoint() -> None:
        await anyio.lowlevel.checkpoint()

    async def cancel_scope() -> None:
        with anyio.CancelScope():  # noqa: ASYNC100 (entering and leaving it is the point)
            pass

    async def timer_scope() -> None:
        with current_timer().primary_scope():  # the hedge timer's own (``_timer``)
            pass

    async def timer_event() -> None:
        flag = current_timer().event()
        flag.set()
        await flag.wait()

    async def task_group() -> None:
        async with anyio.create_task_group():
            pass

    async def spawn() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_noop)

    async def wake() -> None:
        event = anyio.Event()
        box: list[bool] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(_wait_event, event, box)
            while not box:  # until the task waits (trio runs a new task a batch later)
                await anyio.lowlevel.checkpoint()
            event.set()

    async def cancel() -> None:
        box: list[anyio.CancelScope] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(_wait_in_scope, box)
            while not box:  # until the task waits
                await anyio.lowlevel.checkpoint()
            box[0].cancel()

    async def timer_cancel() -> None:
        box: list[Any] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(_wait_in_timer_scope, box)
            while not box:  # until the task waits
                await anyio.lowlevel.checkpoint()
            box[0].cancel()

    async def request_copy() -> None:
        forward.copy(request, target)

    async def event() -> None:
        flag = anyio.Event()
        flag.set()
        await flag.wait()

    async def native(cancel: bool) -> None:
        flag = asyncio.Event()
        task = asyncio.get_running_loop().create_task(flag.wait())
        await asyncio.sleep(0)
        if cancel:
            task.cancel()
        else:
            flag.set()
        await asyncio.wait({task})

    async def native_cancel() -> None:
        await native(True)

    async def native_wake() -> None:
        await native(False)

    async def cancel_in(how: str) -> None:
        box: list[anyio.CancelScope] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(_wait_in_scope, box)
            while not box:  # until the task waits
                await anyio.lowlevel.checkpoint()
            if how == "deferred":
                asyncio.get_running_loop().call_soon(box[0].cancel)
            elif how == "cheap repr":
                await _ObjectReprTask(_cancel_now(box[0]))
            else:
                await asyncio.get_running_loop().create_task(_cancel_now(box[0]))

    async def task_repr() -> None:
        repr(asyncio.current_task())

    async def cancel_in_task() -> None:
        await cancel_in("task")

    async def cancel_cheap_repr() -> None:
        await cancel_in("cheap repr")

    async def cancel_deferred() -> None:
        await cancel_in("deferred")

    url = request.url

    async def url_copy_with() -> None:
        url.copy_with(scheme=target.scheme, host=target.host, port=target.port)

    async def url_replace() -> None:
        new = httpx.URL.__new__(httpx.URL)
        parts: Any = target._uri_reference
        new._uri_reference = url._uri_reference._replace(
            scheme=parts.scheme, host=parts.host, port=parts.port
        )

    caller = httpx.Request(
        "POST", "http://svc/item", headers={"x-request-id": "1"}, content=b'{"a": 1}'
    )
    body = caller.content

    def attempt() -> httpx.Request:
        return httpx.Request(
            caller.method,
            target,
            headers=caller.headers,
            stream=_OneChunk(body),
            extensions=caller.extensions,
        )

    async def attempt_copy() -> None:
        attempt()

    async def header_set() -> None:
        attempt().headers["Hedge-Attempt"] = "2"

    async def header_append() -> None:
        items: Any = attempt().headers._list
        items.append((b"Hedge-Attempt", b"hedge-attempt", b"2"))

    async def body_read() -> None:
        copy = attempt()
        stream = copy.stream
        copy.read()
        copy.stream = stream

    async def body_stored() -> None:
        copy: Any = attempt()
        copy._content = body

    backend: Any = sys.modules[type(anyio.CancelScope()).__module__]
    backend_deadline = backend.backend_class.current_effective_deadline

    async def deadline() -> None:
        anyio.current_effective_deadline()

    async def deadline_backend() -> None:
        backend_deadline()

    async def origin_fields() -> None:
        (url.scheme, url.host, url.port)  # noqa: B018 (building the key is the point)

    async def origin_parsed() -> None:
        parsed: Any = url._uri_reference
        (parsed.scheme, parsed.host, parsed.port)  # noqa: B018 (as above)

    return {
        "checkpoint": checkpoint,
        "cancel_scope": cancel_scope,
        "timer_scope": timer_scope,
        "timer_event": timer_event,
        "timer_cancel": timer_cancel,
        "task_group": task_group,
        "spawn": spawn,
        "wake": wake,
        "cancel": cancel,
        "request_copy": request_copy,
        "event": event,
        "native_cancel": native_cancel,
        "native_wake": native_wake,
        "task_repr": task_repr,
        "cancel_in_task": cancel_in_task,
        "cancel_cheap_repr": cancel_cheap_repr,
        "cancel_deferred": cancel_deferred,
        "url_copy_with": url_copy_with,
        "url_replace": url_replace,
        "attempt_copy": attempt_copy,
        "header_set": header_set,
        "header_append": header_append,
        "body_read": body_read,
        "body_stored": body_stored,
        "origin_fields": origin_fields,
        "origin_parsed": origin_parsed,
        "deadline": deadline,
        "deadline_backend": deadline_backend,
    }


def _child(backend: str, measured: str, n: int, names: list[str]) -> None:
    async def run() -> None:
        ops = operations()
        for name in names:  # every operation once first: the same imports and caches
            for _ in range(50):
                await ops[name]()
            if name == measured:
                for _ in range(n):
                    await ops[name]()

    anyio.run(run, backend=backend)


def count(backend: str, names: list[str], ops: int) -> dict[str, float]:
    argv = [sys.executable, __file__, "--child", backend]
    empty = callgrind_instructions([*argv, "none", str(ops), *names])
    out = {}
    for name in names:
        full = callgrind_instructions([*argv, name, str(ops), *names])
        out[name] = (full - empty) / ops
        print(f"[{backend}/{name}] {out[name]:,.0f} instructions", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--backends", nargs="+", default=["asyncio", "trio"])
    parser.add_argument("--ops", type=int, default=2_000, help="operations per run")
    parser.add_argument("--jobs", type=int, default=1, help="backends measured at once")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--output", default="primitives", help="results/<output>.json")
    parser.add_argument("--only", nargs="+", help="these operations only")
    args = parser.parse_args()
    if args.child:
        backend, measured, n, *names = args.child
        _child(backend, measured, int(n), names)
        return
    out: dict[str, Any] = {"command": command(), "machine": machine(), "ops": args.ops}

    def names(backend: str) -> list[str]:
        found = [*COMMON, *ASYNCIO_ONLY] if backend == "asyncio" else list(COMMON)
        return [name for name in found if not args.only or name in args.only]

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        counted = dict(pool.map(lambda b: (b, count(b, names(b), args.ops)), args.backends))
    out["instructions"] = counted
    rows = []
    for name in [*COMMON, *ASYNCIO_ONLY]:
        rows.append([name, *(f"{counted[b].get(name, float('nan')):,.0f}" for b in counted)])
    differences = (
        ("cancel - wake", "cancel", "wake"),
        ("timer_cancel - wake", "timer_cancel", "wake"),
        ("spawn - task_group", "spawn", "task_group"),
        ("native_cancel - native_wake", "native_cancel", "native_wake"),
        ("cancel_in_task - cancel_cheap_repr", "cancel_in_task", "cancel_cheap_repr"),
        ("cancel_deferred - wake", "cancel_deferred", "wake"),
        ("url_copy_with - url_replace", "url_copy_with", "url_replace"),
        ("header_set - attempt_copy", "header_set", "attempt_copy"),
        ("header_append - attempt_copy", "header_append", "attempt_copy"),
        ("body_read - attempt_copy", "body_read", "attempt_copy"),
        ("body_stored - attempt_copy", "body_stored", "attempt_copy"),
        ("origin_fields - origin_parsed", "origin_fields", "origin_parsed"),
        ("deadline - deadline_backend", "deadline", "deadline_backend"),
    )
    for label, a, b in differences:
        cells = [
            f"{counted[x][a] - counted[x][b]:+,.0f}" if {a, b} <= counted[x].keys() else "-"
            for x in counted
        ]
        rows.append([label, *cells])
    print_table(
        f"Instructions per operation (callgrind, {args.ops} operations less none)",
        ["operation", *counted],
        rows,
    )
    print(f"load average at the start: {out['machine']['loadavg_at_start']} (counts do not move)")
    write_json(args.output, out)


if __name__ == "__main__":
    main()
