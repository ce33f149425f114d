"""Replica sources of your own, and how ``replicas=`` values are told apart.

``HedgedTransport(replicas={logical: value})`` takes, per logical origin:

- a list of origin strings or :class:`~hedgeclient.Replica` (static, checked at once);
- a :class:`~hedgeclient.DnsReplicas` or :class:`~hedgeclient.SrvReplicas`;
- an async callable with no argument returning the current replicas (an iterable of
  origin strings or ``Replica``), asked every ``interval`` seconds: wrap it in
  :class:`PolledReplicas` to set the interval, or pass it bare (10 s); a plain
  (synchronous) function is accepted too, called in the event loop, so it must not
  block; a generator function is refused;
- an async iterable (or an async generator function) yielding the current replicas
  each time they change, such as a watch on Consul or a Kubernetes EndpointSlice:
  wrap it in :class:`WatchedReplicas` to set its timeout, or pass it bare.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import Any, Final, final

import anyio

from hedgeclient._checks import check_seconds, shown
from hedgeclient._discovery._dns import DnsReplicas, SrvReplicas
from hedgeclient._discovery._errors import DiscoveryFailure
from hedgeclient._replicas.replica import Replica, as_replica
from hedgeclient._replicas.services import Origin

__all__ = ["PolledReplicas", "Source", "WatchedReplicas", "replica_set", "source_of"]

logger = logging.getLogger("hedgeclient")

_DEFAULT_INTERVAL: Final = 10.0
_DEFAULT_TIMEOUT: Final = 10.0
_MAX_TIMEOUT: Final = 60.0

Fetch = Callable[[], Awaitable[Iterable[Any]]]


def replica_set(value: object, where: str) -> list[Replica]:
    """Check what a source gave: a non-empty iterable of origins or Replica objects.

    Duplicates (the same origin twice) are merged, the first kept.

    Raises:
        DiscoveryFailure: ``invalid`` (not an iterable of replicas, a bad origin) or
            ``empty``.
    """
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        msg = f"{where} must give an iterable of origin strings or Replica, got {shown(value)}"
        msg = msg
        raise DiscoveryFailure(msg, kind="invalid")
    seen: dict[str, Replica] = {}
    try:
        for item in value:
            replica = as_replica(item, "replica")
            seen.setdefault(replica.origin, replica)
    except (TypeError, ValueError) as exc:
        msg = f"{where} gave {exc}"
        raise DiscoveryFailure(msg, kind="invalid") from None
    if not seen:
        msg = f"{where} gave no replica"
        raise DiscoveryFailure(msg, kind="empty")
    return list(seen.values())


@final
class PolledReplicas:
    """The replicas an async function of yours returns, asked every ``interval`` seconds.

    The function is called again when ``interval`` has passed (on the next request
    after it; a request never waits for it once a first set is known), and at once
    (at most once a second) after a connection to a replica fails. When it raises,
    times out or returns something that is not a set of replicas, the last good set
    is kept, and the failure is logged and counted
    (``hedgeclient_discovery_errors_total``).

    Args:
        fetch: an async callable with no argument, returning an iterable of origin
            strings (``"http://10.0.0.7:8080"``) or :class:`~hedgeclient.Replica`. A
            plain function is accepted too: it is called in the event loop, so it must
            return at once (no blocking I/O).
        interval: seconds between calls, in (0, 3600]; default 10.
        timeout: seconds a call may take, in (0, 60]; default 10.

    Raises:
        TypeError: ``fetch`` is not callable, is a generator function (sync or async:
            a watch is a :class:`WatchedReplicas`), or a number of the wrong type.
        ValueError: ``interval`` or ``timeout`` out of range.

    .. versionadded:: 0.1.0
    """

    __slots__ = ("_fetch", "interval", "timeout")

    def __init__(
        self,
        fetch: Fetch,
        *,
        interval: float = _DEFAULT_INTERVAL,
        timeout: float = _DEFAULT_TIMEOUT,
    ) -> None:
        if not callable(fetch):
            msg = f"`fetch` must be an async callable returning replicas, got {shown(fetch)}"
            raise TypeError(msg)
        _refuse_generator_function(fetch, "fetch")
        self._fetch = fetch
        self.interval = check_seconds("interval", interval, low_open=True)
        self.timeout = check_seconds("timeout", timeout, low_open=True, high=_MAX_TIMEOUT)

    def __repr__(self) -> str:
        return f"PolledReplicas({self._fetch!r}, interval={self.interval!r})"

    async def resolve(self, logical: Origin) -> tuple[list[Replica], float]:
        """Call the function once; return its replicas and ``interval``.

        Raises:
            DiscoveryFailure: it raised (``source_error``), timed out (``timeout``)
                or gave no valid replica set (``invalid``, ``empty``).
        """
        where = f"{self._fetch!r}"
        try:
            with anyio.fail_after(self.timeout):
                pending: Any = self._fetch()
                value = await pending if inspect.isawaitable(pending) else pending
        except TimeoutError:
            msg = f"{where} took over {self.timeout} s"
            raise DiscoveryFailure(msg, kind="timeout") from None
        except Exception as exc:
            logger.debug("hedgeclient: replica source %s raised", where, exc_info=True)
            msg = f"{where} raised {exc!r}"
            raise DiscoveryFailure(msg, kind="source_error") from None
        return replica_set(value, where), self.interval


@final
class WatchedReplicas:
    """The replicas an async iterable of yours yields, each time they change.

    The hook for a watch (Consul blocking queries, a Kubernetes EndpointSlice watch, a
    configuration service's stream): each value it yields is the whole current set.
    It is iterated in a task of the transport's own, started by the first request
    for its origin (which waits at most ``timeout`` seconds for a first set) and
    stopped by ``aclose()``. A value that is not a set of replicas is logged, counted
    and skipped (the last good set stays). A watch is expected to run until
    ``aclose()``: when the iteration raises or ends, that is logged as a warning and
    counted as ``source_error`` (an ending as "... ended"), the last good set stays,
    and it is started again after ``retry`` seconds, if it can be: an async generator
    function or an iterable whose ``__aiter__`` gives a fresh iterator (an async
    generator object runs once: after it ends, the last set stays for good, with one
    more warning).

    Args:
        source: an async iterable of replica sets, or an async generator function
            (called with no argument).
        timeout: seconds the first request waits for a first set, in (0, 60];
            default 10.
        retry: seconds before iterating again after the iteration failed or ended,
            in (0, 3600]; default 1.

    Raises:
        TypeError: ``source`` is neither an async iterable nor an async generator
            function, or a number of the wrong type.
        ValueError: ``timeout`` or ``retry`` out of range.

    .. versionadded:: 0.1.0
    """

    __slots__ = ("_source", "_used", "retry", "timeout")

    def __init__(
        self,
        source: AsyncIterable[Iterable[Any]] | Callable[[], AsyncIterable[Iterable[Any]]],
        *,
        timeout: float = _DEFAULT_TIMEOUT,
        retry: float = 1.0,
    ) -> None:
        if not (inspect.isasyncgenfunction(source) or isinstance(source, AsyncIterable)):
            msg = "`source` must be an async iterable or an async generator function, "
            msg += f"got {shown(source)}"
            raise TypeError(msg)
        self._source = source
        self._used = False
        self.timeout = check_seconds("timeout", timeout, low_open=True, high=_MAX_TIMEOUT)
        self.retry = check_seconds("retry", retry, low_open=True)

    def __repr__(self) -> str:
        return f"WatchedReplicas({self._source!r})"

    def iterate(self) -> AsyncIterator[Iterable[Any]] | None:
        """A fresh iterator over the source, or None when it cannot start again (an
        iterator, rather than an iterable, runs once)."""
        source = self._source
        if inspect.isasyncgenfunction(source):
            return source().__aiter__()
        assert isinstance(source, AsyncIterable)
        iterator = source.__aiter__()
        if iterator is source:
            if self._used:
                return None
            self._used = True
        return iterator


Source = DnsReplicas | SrvReplicas | PolledReplicas | WatchedReplicas


def _refuse_generator_function(value: object, parameter: str) -> None:
    """A generator function is not a polled source: say what it should be."""
    if inspect.isgeneratorfunction(value):
        msg = (
            f"`{parameter}` must be an async callable returning replicas or an async "
            f"generator function, got a generator function {value!r}: make it `async def`"
        )
        raise TypeError(msg)
    if inspect.isasyncgenfunction(value):
        msg = (
            f"`{parameter}` must be an async callable returning replicas, got an async "
            f"generator function {value!r}: wrap it in WatchedReplicas, or pass it bare"
        )
        raise TypeError(msg)


def source_of(value: object, parameter: str) -> Source | list[Replica]:
    """Tell a ``replicas=`` value apart: a static list (checked now) or a source.

    Raises:
        TypeError: none of the accepted kinds (a bare string, a mapping, a number...).
        ValueError: a static list that is empty, holds a bad origin or one twice.
    """
    if isinstance(value, (DnsReplicas, SrvReplicas, PolledReplicas, WatchedReplicas)):
        return value
    if isinstance(value, (list, tuple)):
        if not value:
            msg = f"`{parameter}` must list at least one replica, got {shown(value)}"
            raise ValueError(msg)
        replicas = [as_replica(item, parameter) for item in value]
        origins = [r.origin for r in replicas]
        if len(set(origins)) != len(origins):
            msg = f"`{parameter}` lists a replica twice: {shown(list(value))}"
            raise ValueError(msg)
        return replicas
    if inspect.isasyncgenfunction(value) or isinstance(value, AsyncIterable):
        return WatchedReplicas(value)
    if callable(value) and not isinstance(value, (str, bytes)):
        _refuse_generator_function(value, parameter)
        return PolledReplicas(value)
    msg = (
        f"`{parameter}` must be a list of origins, a DnsReplicas, a SrvReplicas, an async "
        f"callable or an async iterable of replica sets, got {shown(value)}"
    )
    raise TypeError(msg)
