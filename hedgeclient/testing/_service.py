"""``FakeService``: N replicas of a slow HTTP service on 127.0.0.1, for tests and benchmarks.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import Any, final

import anyio
import anyio.to_thread
import httpx

from hedgeclient._checks import check_number
from hedgeclient.testing._cluster import Disconnects, ServerKind
from hedgeclient.testing._config import Fault, ReplicaConfig, Slowness, Stall
from hedgeclient.testing._generation import Generation
from hedgeclient.testing._laws import LatencyLaw
from hedgeclient.testing._runner import _ProcessRunner, _ThreadRunner
from hedgeclient.testing._service_args import MAX_STARTUP_TIMEOUT, Mode, service_spec
from hedgeclient.testing._stats import ServiceStats

__all__ = ["FakeService", "Mode"]


@final
class FakeService:
    """N replicas of a slow HTTP service, on 127.0.0.1, outside the caller's event loop.

    Use it as a context manager, sync or async (asyncio or trio); it starts every
    replica, waits until each one accepts connections (or is reserved, if down), and
    stops them on exit. Responses carry ``x-replica`` and ``x-latency`` headers; the
    special paths are ``/delay/<seconds>``, ``/status/<code>``, ``/large?bytes=N`` and
    an OpenAI-compatible ``POST /v1/chat/completions`` (streamed or not) whose latency
    is the time to the first token, followed by tokens at ``generation``'s rate.

    Args:
        replicas: how many replicas, ≥ 1.
        latency: the latency law of every replica (default: 0 s): a
            :class:`LatencyLaw`, its string form (``"lab"``) or a constant in seconds.
        slowness: ``"server-owned"`` (default) or ``"request-owned"``.
        stall: periodic stop-the-world stalls of every replica, or None.
        fault: a fault of every replica, or None (healthy).
        generation: the fake model's token rate and default length, or None for
            :class:`Generation()`.
        replica_overrides: per replica index, a :class:`ReplicaConfig` whose non-None
            fields replace the service-wide ones.
        key_header: with request-owned slowness, the (ASCII) header whose value keys
            the latency (default: the path and query).
        seed: an int that seeds every random draw (latencies and fault probabilities).
        mode: ``"thread"`` (default) or ``"process"``.
        server: ``"uvicorn"`` (default) or ``"hypercorn"`` (which also serves HTTP/2
            with prior knowledge, h2c).
        http2: shorthand for ``server="hypercorn"``.
        port_base: 0 (default) for ephemeral ports, else replica i listens on
            ``port_base + i`` (with ``own_address``, every replica on ``port_base``).
        own_address: give replica i its own loopback address, ``127.0.0.{i + 2}``,
            every replica on the same port (default false: all on 127.0.0.1, each on
            its own port), as pods behind a Kubernetes headless Service: one DNS name
            can then map to all of them (see :attr:`addresses`). At most 253 replicas.
        keep: how many latencies per replica, request ids and writes the accounting
            keeps (the oldest are dropped first), ≥ 1.
        startup_timeout: seconds to wait for start-up (and for shutdown), in
            (0, 86400].
        concurrency: the queueing mode: each replica runs at most this many requests
            at once (>= 1) and queues the rest in the admission queue of
            :class:`~hedgeclient.server.HedgeMiddleware`, backups behind primaries, so
            that under load latency is mostly queueing. The service's capacity is
            then ``replicas * concurrency / mean latency`` requests per second; offer
            ``utilisation * capacity``. Default ``None``: no limit.
        disconnects: how a replica learns that its client went away: ``"app"`` (the
            default without ``concurrency``): the app watches for it and stops at
            once; ``"middleware"`` (the default with it): the app works like a
            framework handler (it never reads while it works) and serves through
            ``HedgeMiddleware(cancel="all")``, which cancels it, with tied requests
            between the replicas (:class:`~hedgeclient.server.Ties`, a secret drawn
            at start); ``"ignored"``: a framework handler without that middleware,
            which works to its end (the waste the middleware removes).
        middleware: more ``HedgeMiddleware`` arguments (``pushback_queue``,
            ``max_queue``, ``retry_after``, ``cancel``, ``ties``, ...), with
            ``disconnects="middleware"``.

    Raises:
        ValueError: a bad argument (see :class:`ReplicaConfig` for the per-replica ones).
        TypeError: an argument of the wrong type, such as a non-int ``replicas``,
            ``seed``, ``port_base`` or ``keep``, a non-number ``startup_timeout``, a
            non-str ``key_header``, or a ``replica_overrides`` that is not a mapping
            of int indices to :class:`ReplicaConfig` (a bool is never an int here).

    Example usage::

        async with FakeService(replicas=3, latency="lab") as svc:
            async with httpx.AsyncClient() as client:
                response = await client.get(svc.origins[0] + "/")
            assert svc.stats().completed == 1

    Process mode spawns a subprocess that imports the caller's ``__main__`` module:
    a script must guard its entry point with ``if __name__ == "__main__":``, and
    custom latency laws must be importable classes.

    .. versionadded:: 0.1.0
    """

    def __init__(
        self,
        *,
        replicas: int = 3,
        latency: LatencyLaw | str | float = 0.0,
        slowness: Slowness = "server-owned",
        stall: Stall | None = None,
        fault: Fault | None = None,
        generation: Generation | None = None,
        replica_overrides: Mapping[int, ReplicaConfig] | None = None,
        key_header: str | None = None,
        seed: int = 0,
        mode: Mode = "thread",
        server: ServerKind | None = None,
        http2: bool = False,
        port_base: int = 0,
        own_address: bool = False,
        keep: int = 100_000,
        startup_timeout: float = 10.0,
        concurrency: int | None = None,
        disconnects: Disconnects | None = None,
        middleware: Mapping[str, Any] | None = None,
    ) -> None:
        self._spec = service_spec(
            replicas=replicas,
            base=ReplicaConfig(
                latency=latency, slowness=slowness, stall=stall, fault=fault, generation=generation
            ),
            replica_overrides=replica_overrides,
            key_header=key_header,
            seed=seed,
            mode=mode,
            server=server,
            http2=http2,
            port_base=port_base,
            keep=keep,
            concurrency=concurrency,
            disconnects=disconnects,
            middleware=middleware,
            own_address=own_address,
        )
        self._configs = list(self._spec.configs)
        self._timeout = check_number(
            "startup_timeout",
            startup_timeout,
            low=0.0,
            high=MAX_STARTUP_TIMEOUT,
            low_open=True,
            unit="seconds",
            plain=True,
        )
        self._mode: Mode = mode
        self._runner: _ThreadRunner | _ProcessRunner | None = None
        self._origins: list[str] = []
        self._used = False

    def __repr__(self) -> str:
        state = "running" if self._runner else "stopped"
        return f"<FakeService {self._mode} {self._spec.server} {state} {self._origins}>"

    @property
    def origins(self) -> list[str]:
        """The replicas' base URLs by index, such as ``"http://127.0.0.1:54321"``.

        Raises:
            RuntimeError: the service is not running.
        """
        self._running()
        return list(self._origins)

    @property
    def addresses(self) -> list[str]:
        """The replicas' IP addresses by index (``"127.0.0.2"``, ... with ``own_address``).

        Raises:
            RuntimeError: the service is not running.
        """
        return [httpx.URL(origin).host for origin in self.origins]

    @property
    def port(self) -> int:
        """The port every replica listens on, with ``own_address``.

        Raises:
            RuntimeError: the service is not running, or its replicas have ports of
                their own (``own_address=False`` with more than one replica).
        """
        ports = {httpx.URL(origin).port for origin in self.origins}
        if len(ports) != 1:
            msg = "the replicas listen on ports of their own: use `origins`"
            raise RuntimeError(msg)
        port = ports.pop()
        assert port is not None
        return port

    def start(self) -> None:
        """Start every replica; block until each accepts connections (or is reserved).

        Raises:
            RuntimeError: the service was started before (a service starts once).
            OSError: a port cannot be bound.
            TimeoutError: start-up took longer than ``startup_timeout``.
        """
        if self._used:
            msg = "a FakeService starts once; create another one"
            raise RuntimeError(msg)
        self._used = True
        runner = _ThreadRunner(self._spec) if self._mode == "thread" else _ProcessRunner(self._spec)
        self._origins = runner.start(self._timeout)
        self._runner = runner

    def stop(self) -> None:
        """Stop every replica: waiting requests are dropped, ports released. Idempotent."""
        runner, self._runner = self._runner, None
        if runner is not None:
            runner.stop(self._timeout)

    def __enter__(self) -> FakeService:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    async def __aenter__(self) -> FakeService:
        await anyio.to_thread.run_sync(self.start)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(self.stop)

    def _running(self) -> _ThreadRunner | _ProcessRunner:
        if self._runner is None:
            msg = "the FakeService is not running: use `with` or start() first"
            raise RuntimeError(msg)
        return self._runner

    def stats(self) -> ServiceStats:
        """Return a snapshot of the accounting (blocks for a loop hop or a pipe round trip)."""
        stats: ServiceStats = self._running().call("stats")
        return stats

    async def wait_stats(self, condition: Callable[[ServiceStats], bool]) -> ServiceStats:
        """Wait until ``condition(stats)`` holds; return those stats.

        The accounting lives in another thread or process, so this polls every 2 ms
        (each poll is a :meth:`stats` call). Works under asyncio and trio; bound the
        wait with the caller's own cancel scope.

        Args:
            condition: a predicate on a snapshot.

        Example usage::

            with anyio.fail_after(2.0):
                stats = await svc.wait_stats(lambda s: s.abandoned == 1)
        """
        while not condition(stats := self.stats()):  # noqa: ASYNC110 - another thread's state
            await anyio.sleep(0.002)
        return stats

    def reset_stats(self) -> None:
        """Zero every counter and forget latencies, request ids and writes."""
        self._running().call("reset_stats")

    def replica_config(self, index: int) -> ReplicaConfig:
        """Return the configuration replica ``index`` runs with now."""
        return self._configs[index]

    def _change(self, replicas: int | Iterable[int] | None, **changes: Any) -> None:
        runner = self._running()
        indices = range(len(self._configs)) if replicas is None else replicas
        if not isinstance(indices, (int, Iterable)):
            msg = f"`replicas` must be an index, indices or None, got {indices!r}"
            raise TypeError(msg)
        for index in [indices] if isinstance(indices, int) else list(indices):
            msg = f"`replicas` must be indices in [0, {len(self._configs)}), got {index!r}"
            if isinstance(index, bool) or not isinstance(index, int):
                raise TypeError(msg)
            if not 0 <= index < len(self._configs):
                raise ValueError(msg)
            config = dataclasses.replace(self._configs[index], **changes)
            runner.call("configure", index, config)
            self._configs[index] = config

    def set_latency(
        self, latency: LatencyLaw | str | float, *, replicas: int | Iterable[int] | None = None
    ) -> None:
        """Switch the latency law of some replicas, for the requests that arrive next.

        Args:
            latency: a law, its string form, or a constant in seconds.
            replicas: an index, several, or None (default) for all.

        Raises:
            TypeError: a latency that is neither a law, a str nor a number, or an
                index that is not an int (a bool is neither a number nor an int).
            ValueError: a bad law or index.
        """
        self._change(replicas, latency=latency)

    def slowdown(self, factor: float, *, replicas: int | Iterable[int] | None = None) -> None:
        """Multiply every latency drawn by ``factor``: a broad slowdown.

        Args:
            factor: > 0; ``slowdown(1.0)`` recovers.
            replicas: an index, several, or None (default) for all.

        Raises:
            TypeError: a factor that is not a number, or an index that is not an int
                (a bool is neither).
            ValueError: a factor ≤ 0 or a bad index.
        """
        self._change(replicas, slowdown=factor)

    def set_fault(
        self, fault: Fault | None, *, replicas: int | Iterable[int] | None = None
    ) -> None:
        """Set the fault of some replicas; :class:`Down` stops them listening.

        A replica taken down drops the requests it was serving (``failed``); one brought
        back up listens on the same port again. Blocks until that is done.

        Args:
            fault: the fault, or None to heal.
            replicas: an index, several, or None (default) for all.

        Raises:
            TypeError: an index that is not an int (or a bool).
            ValueError: a bad fault or index.
        """
        self._change(replicas, fault=fault)

    def set_stall(
        self, stall: Stall | None, *, replicas: int | Iterable[int] | None = None
    ) -> None:
        """Set the periodic stalls of some replicas.

        Args:
            stall: the stalls, or None to stop them.
            replicas: an index, several, or None (default) for all.

        Raises:
            TypeError: an index that is not an int (or a bool).
            ValueError: a bad stall or index.
        """
        self._change(replicas, stall=stall)
