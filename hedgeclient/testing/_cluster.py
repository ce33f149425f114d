"""The replicas of one fake service, served on one asyncio event loop.

Each replica owns a TCP port on 127.0.0.1, or (``own_address``) its own loopback
address, 127.0.0.2, 127.0.0.3, ..., all on one port, as pods behind a headless Service
each have an address and share the Service's port. A replica that is up hands its socket to a
uvicorn (HTTP/1.1) or hypercorn (HTTP/1.1 and HTTP/2 prior-knowledge h2c) server; a
replica that is :class:`Down` keeps the port bound but never listens, so a client's
connection is refused by the kernel (a real ``ECONNREFUSED``) and no other process can
take the port; one that is a :class:`BlackHole` listens with a full accept queue, so
the kernel drops new SYNs and a connect hangs. uvicorn and hypercorn are imported when
a replica first comes up.

With ``disconnects="middleware"`` every replica serves through
:class:`~hedgeclient.server.HedgeMiddleware` (cancel on disconnect for every request,
an admission queue of ``concurrency`` slots in queueing mode, and tied requests
between the replicas, signed with a secret drawn at start).

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from hedgeclient.testing._app import _ReplicaApp
from hedgeclient.testing._config import BlackHole, Down, ReplicaConfig
from hedgeclient.testing._ledger import _Ledger
from hedgeclient.testing._stats import ServiceStats

ServerKind = Literal["uvicorn", "hypercorn"]
"""``uvicorn``: HTTP/1.1; ``hypercorn``: HTTP/1.1 and HTTP/2 with prior knowledge (h2c)."""

Disconnects = Literal["app", "middleware", "ignored"]
"""How a replica learns that its client went away: ``app``, the app watches for it
itself and stops at once; ``middleware``, the app works like a framework handler and
:class:`~hedgeclient.server.HedgeMiddleware` cancels it; ``ignored``, a framework
handler without that middleware, which works to its end."""

__all__ = ["Disconnects", "ServerKind"]

_HOST = "127.0.0.1"


@dataclass(frozen=True, slots=True)
class _Spec:
    """Strictly private: everything needed to build the replicas (picklable)."""

    configs: tuple[ReplicaConfig, ...]
    seed: int
    key_header: str | None
    server: ServerKind
    ports: tuple[int, ...]
    keep: int
    backlog: int
    concurrency: int | None = None
    disconnects: Disconnects = "app"
    middleware: Mapping[str, Any] = field(default_factory=dict)
    hosts: tuple[str, ...] = ()  # per replica; empty: 127.0.0.1 for all


def _reserve(port: int, host: str = _HOST) -> socket.socket:
    """Bind (without listening) a TCP socket on ``host``:``port`` (0: ephemeral)."""
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY on accepted sockets only when proto is TCP
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def _missing(exc: ImportError) -> ImportError:
    msg = f"the fake service needs {exc.name!r}: install the extra 'hedgeclient[testing]'"
    return ImportError(msg, name=exc.name)


async def _uvicorn(app: Any, sock: socket.socket, backlog: int) -> Callable[[], Any]:
    try:
        import uvicorn  # an optional extra: imported on first use
    except ImportError as exc:
        raise _missing(exc) from exc
    config = uvicorn.Config(
        app, lifespan="off", interface="asgi3", ws="none", log_config=None, log_level="warning",
        access_log=False, proxy_headers=False, server_header=False, date_header=False,
        backlog=backlog, timeout_graceful_shutdown=1,
    )  # fmt: skip
    server = uvicorn.Server(config)
    task = asyncio.ensure_future(server.serve(sockets=[sock]))
    while not server.started:
        if task.done():
            task.result()  # raises the start-up error
            msg = "uvicorn exited during start-up"
            raise RuntimeError(msg)
        await asyncio.sleep(0.001)

    async def stop() -> None:
        server.should_exit = True
        await task

    return stop


async def _hypercorn(app: Any, sock: socket.socket, backlog: int) -> Callable[[], Any]:
    host = sock.getsockname()[0]
    try:
        from hypercorn.asyncio import serve  # an optional extra: imported on first use
        from hypercorn.config import Config
    except ImportError as exc:
        raise _missing(exc) from exc
    port = sock.getsockname()[1]
    config = Config()
    config.bind = [f"fd://{os.dup(sock.fileno())}"]  # hypercorn owns the duplicate
    sock.close()
    config.accesslog = None
    config.errorlog = logging.getLogger("hypercorn.error")
    config.errorlog.setLevel(logging.WARNING)
    config.backlog = backlog
    config.graceful_timeout = 1.0
    config.keep_alive_max_requests = 2**31
    config.h2_max_concurrent_streams = 1000
    stopping = asyncio.Event()
    asgi: Any = app  # hypercorn's ASGI types are TypedDicts; ours are plain mappings
    task = asyncio.ensure_future(serve(asgi, config, shutdown_trigger=stopping.wait, mode="asgi"))
    while True:  # hypercorn has no "started" flag: wait until the port accepts
        try:
            _, writer = await asyncio.open_connection(host, port)
        except OSError:
            if task.done():
                task.result()
            await asyncio.sleep(0.002)
            continue
        writer.close()
        await writer.wait_closed()
        break

    async def stop() -> None:
        stopping.set()
        await task

    return stop


class _Replica:
    """Strictly private: one replica's port, app and (while up) server."""

    def __init__(
        self, app: _ReplicaApp, port: int, server: ServerKind, backlog: int, host: str = _HOST
    ) -> None:
        self.app = app
        self.asgi: Any = app  # what the server serves: the app, or middleware around it
        self.host = host
        self.sock: socket.socket | None = _reserve(port, host)
        self.port: int = self.sock.getsockname()[1]
        self._serve = _uvicorn if server == "uvicorn" else _hypercorn
        self._backlog = backlog
        self._stop: Callable[[], Any] | None = None
        self._fillers: list[socket.socket] = []  # a black hole's full accept queue

    async def up(self) -> None:
        self._refill(False)
        if self._stop is not None or self.sock is None:
            return
        sock, self.sock = self.sock, None
        self.app.start()
        try:
            self._stop = await self._serve(self.asgi, sock, self._backlog)
        except BaseException:
            sock.close()
            raise

    async def black_hole(self) -> None:
        """Stop serving; listen with a full accept queue, so new SYNs are dropped."""
        await self.down()
        self._refill(True)

    def _refill(self, on: bool) -> None:
        if not on:
            if self._fillers:
                for filler in self._fillers:
                    filler.close()
                self._fillers.clear()
                if self.sock is not None:  # listening: bind afresh, not listening
                    self.sock.close()
                    self.sock = _reserve(self.port, self.host)
            return
        if self.sock is None or self._fillers:
            return
        self.sock.listen(0)
        for _ in range(3):  # a backlog of 0 queues one connection; one more to be sure
            filler = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            filler.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                filler.connect((self.host, self.port))
            self._fillers.append(filler)

    async def down(self, *, release: bool = False) -> None:
        if release:
            self._refill(False)
        if self._stop is not None:
            self.app.halt()
            stop, self._stop = self._stop, None
            await stop()
            if not release:
                self.sock = _reserve(self.port, self.host)
        if release and self.sock is not None:
            self.sock.close()
            self.sock = None


class _Cluster:
    """Strictly private: the replicas and their ledger; every method runs on the loop."""

    def __init__(self, spec: _Spec) -> None:
        self._ledger = _Ledger(len(spec.configs), spec.keep)
        self._replicas: list[_Replica] = []
        hosts = spec.hosts or (_HOST,) * len(spec.configs)
        for attempt in range(20):  # own addresses: one port free on every one of them
            try:
                self._bind(spec, hosts)
                break
            except OSError:
                self._release()
                if not spec.hosts or spec.ports[0] or attempt == 19:
                    raise
        self.origins = [f"http://{r.host}:{r.port}" for r in self._replicas]
        self._servers: list[Any] = []
        if spec.disconnects == "middleware":
            from hedgeclient.server import HedgeMiddleware, Ties

            ties = Ties(peers=self.origins, secret=secrets.token_bytes(32))
            for index, replica in enumerate(self._replicas):
                options: dict[str, Any] = {"cancel": "all", "ties": ties, **spec.middleware}
                replica.asgi = HedgeMiddleware(
                    replica.app, max_concurrency=spec.concurrency, metrics=False,
                    name=f"replica-{index}", **options,
                )  # fmt: skip
                self._servers.append(replica.asgi)

    def _bind(self, spec: _Spec, hosts: tuple[str, ...]) -> None:
        shared = 0
        for index, (config, port, host) in enumerate(
            zip(spec.configs, spec.ports, hosts, strict=True)
        ):
            app = _ReplicaApp(
                index=index, config=config, ledger=self._ledger, seed=spec.seed,
                key_header=spec.key_header, watch=spec.disconnects == "app",
            )  # fmt: skip
            replica = _Replica(app, port or shared, spec.server, spec.backlog, host)
            self._replicas.append(replica)
            if spec.hosts:
                shared = replica.port

    def _release(self) -> None:
        for replica in self._replicas:
            if replica.sock is not None:
                replica.sock.close()
        self._replicas.clear()

    async def start(self) -> list[str]:
        idle = (Down, BlackHole)
        ups = [r.up() for r in self._replicas if not isinstance(r.app.config.fault, idle)]
        for replica in self._replicas:
            if isinstance(replica.app.config.fault, BlackHole):
                replica._refill(True)
        errors = [e for e in await asyncio.gather(*ups, return_exceptions=True) if e]
        if errors:
            await self.stop()
            raise errors[0]
        return self.origins

    async def stop(self) -> None:
        # The servers first, then the middlewares' tie clients: a handler still running
        # while its middleware closed would send its tie message through a new client
        # that nobody closes (a socket left to the garbage collector's ResourceWarning).
        downs = [r.down(release=True) for r in self._replicas]
        errors = [e for e in await asyncio.gather(*downs, return_exceptions=True) if e]
        closes = [server.aclose() for server in self._servers]
        errors += [e for e in await asyncio.gather(*closes, return_exceptions=True) if e]
        if errors:
            raise errors[0]

    async def stats(self) -> ServiceStats:
        return self._ledger.snapshot(self.origins, [s.statistics() for s in self._servers])

    async def reset_stats(self) -> None:
        self._ledger.reset()

    async def configure(self, index: int, config: ReplicaConfig) -> None:
        replica = self._replicas[index]
        replica.app.config = config
        if isinstance(config.fault, Down):
            replica._refill(False)
            await replica.down()
        elif isinstance(config.fault, BlackHole):
            await replica.black_hole()
        else:
            await replica.up()
