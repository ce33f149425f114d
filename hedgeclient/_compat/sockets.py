"""The sockets of a sync httpx transport, watched so that a losing attempt can be stopped.

A sync client's engine runs each attempt on a thread blocked in httpcore's socket read
(``_timer._threads``). To stop a loser, another thread shuts its socket down: the read
returns at once, httpcore closes the connection (the replica sees the client leave) and
frees its pool slot. Finding that socket needs httpcore's public ``NetworkBackend``
interface, wrapped: each stream notes its socket on the scope of the thread that reads
or writes it. ``httpx.HTTPTransport`` takes no ``network_backend`` argument (httpx
builds its pool itself), so :func:`watch` swaps the backend of the pool it built: the
private ``_pool._network_backend`` (httpcore 1.0.x), read and written here only, where
the pool has the structure it expects; else nothing is watched and losers run on
until their replica answers (said once in the log).

A loser may also be stuck in ``connect()`` (its replica vanished: the kernel drops its
SYNs), with no stream yet: a shutdown of a connecting socket aborts its connect at once
(``ECONNRESET`` on Linux). httpcore's ``SyncBackend`` makes the socket inside
``socket.create_connection``, out of reach, so for that backend :class:`_WatchedBackend`
connects the socket itself, noted on the scope before it connects, with the same
options and error mapping, and hands it to httpcore's own ``SyncStream``: a private
class (``httpcore._backends.sync``), imported here only, feature-detected (without it a
connect runs as httpcore's, and a loser stuck there waits out its connect timeout).

HTTP/1.1 only (:func:`speaks_http2`): httpcore's sync HTTP/2 connection is not safe for
threads. Its stream ids, HPACK state and frame writes are not serialised, so concurrent
requests on one connection corrupt it (``StreamIDTooLowError``, ``KeyError``,
``LocalProtocolError``: a new user's test, 5-10 per 640 hedged requests on 8 threads;
pydantic/httpx2#1153 serialises them in a fork). A sync client's engine sends more
requests at once than its callers do (its backups), so a sync transport that speaks
HTTP/2 is refused; an async one serves HTTP/2 on the engine's event-loop thread. And one
socket carries every stream of an HTTP/2 connection: it could not be shut down for one.

Strictly private.
"""

from __future__ import annotations

import contextlib
import logging
import socket
from collections.abc import Iterable
from typing import Any, final

import httpcore
import httpx

from hedgeclient._compat.pool import pool_of
from hedgeclient._timer import ThreadScope, thread_state

__all__ = ["speaks_http2", "watch"]

_SyncStream: Any
try:  # httpcore's own stream around a connected socket (see the module doc)
    from httpcore._backends.sync import SyncStream as _SyncStream
except ImportError:  # another httpcore: connects go through its backend as they are
    _SyncStream = None

logger = logging.getLogger("hedgeclient")

_STOPPED = "hedgeclient: attempt stopped, another attempt won"


@final
class _WatchedStream(httpcore.NetworkStream):
    """An httpcore stream that notes its socket on the calling thread's scope."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner
        # Called by httpcore often (``is_readable`` as each request takes a connection):
        # the inner stream's own, with no frame of ours between.
        self.get_extra_info = inner.get_extra_info  # type: ignore[method-assign]
        self._sock: socket.socket | None = inner.get_extra_info("socket")

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        scope: ThreadScope | None = getattr(thread_state, "scope", None)
        sock = self._sock
        if scope is None or sock is None:  # no attempt to stop (a body read after the race)
            return self._inner.read(max_bytes, timeout)
        scope.sock = sock
        try:
            if scope.cancelled:  # stopped before it blocked: the shutdown found no socket
                raise httpcore.ReadError(_STOPPED)
            return self._inner.read(max_bytes, timeout)
        finally:
            scope.sock = None

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        scope: ThreadScope | None = getattr(thread_state, "scope", None)
        sock = self._sock
        if scope is None or sock is None:
            self._inner.write(buffer, timeout)
            return
        scope.sock = sock
        try:
            if scope.cancelled:  # never send a request that has already lost
                raise httpcore.WriteError(_STOPPED)
            self._inner.write(buffer, timeout)
        finally:
            scope.sock = None

    def close(self) -> None:
        """Shut the socket down, then close it. httpcore's sync pool may close a
        connection on one thread (as idle, just handed to another request) while an
        attempt on another thread blocks reading it: closing alone frees the descriptor
        but leaves that read blocked until its timeout, where no cancel can reach it any
        more (a new user's test: a request held its backup's answer for the 2 s read
        timeout). A shutdown wakes the read at once."""
        sock = self._sock
        if sock is not None:
            with contextlib.suppress(OSError):  # not connected, or closed already
                sock.shutdown(socket.SHUT_RDWR)
        self._inner.close()

    def start_tls(
        self,
        ssl_context: Any,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        return _WatchedStream(self._inner.start_tls(ssl_context, server_hostname, timeout))


@final
class _WatchedBackend(httpcore.NetworkBackend):
    """A pool's own network backend, its streams watched."""

    def __init__(self, inner: httpcore.NetworkBackend) -> None:
        self._inner = inner
        self._own_connects = _SyncStream is not None and type(inner) is httpcore.SyncBackend

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        scope: ThreadScope | None = getattr(thread_state, "scope", None)
        if scope is None or not self._own_connects:
            stream = self._inner.connect_tcp(host, port, timeout, local_address, socket_options)
        else:
            sock = _connect(scope, host, port, timeout, local_address)
            try:
                for option in socket_options or ():
                    sock.setsockopt(*option)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError as exc:
                sock.close()
                raise httpcore.ConnectError(str(exc)) from exc
            stream = _SyncStream(sock)
        return _WatchedStream(stream)

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        stream = self._inner.connect_unix_socket(path, timeout, socket_options)
        return _WatchedStream(stream)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def _connect(
    scope: ThreadScope, host: str, port: int, timeout: float | None, local_address: str | None
) -> socket.socket:
    """``socket.create_connection`` with each socket noted on ``scope`` as it connects
    (a cancel shuts it down, which aborts the connect), httpcore's errors raised.

    Raises:
        httpcore.ConnectTimeout: ``timeout`` seconds passed (each address's own).
        httpcore.ConnectError: every address failed, or the scope was cancelled.
    """
    source = None if local_address is None else (local_address, 0)
    error: OSError | None = None
    try:
        addresses = socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)
    except OSError as exc:
        raise httpcore.ConnectError(str(exc)) from exc
    for family, kind, proto, _, address in addresses:
        sock = socket.socket(family, kind, proto)
        scope.sock = sock
        try:
            if scope.cancelled:
                raise ConnectionAbortedError(_STOPPED)
            sock.settimeout(timeout)
            if source is not None:
                sock.bind(source)
            sock.connect(address)
        except TimeoutError as exc:
            sock.close()
            raise httpcore.ConnectTimeout(str(exc)) from exc
        except OSError as exc:
            sock.close()
            error = exc
            if scope.cancelled:
                break
            continue
        finally:
            scope.sock = None
        return sock
    raise httpcore.ConnectError(str(error)) from error


def watch(transport: object) -> bool:
    """Watch the sockets of ``transport``'s httpcore pool (an ``httpx.HTTPTransport``):
    return whether they are (else its losers cannot be stopped: logged once)."""
    pool = pool_of(transport)
    backend = getattr(pool, "_network_backend", None)
    if pool is None or not isinstance(pool, httpcore.ConnectionPool) or backend is None:
        if isinstance(transport, httpx.MockTransport):  # no sockets: nothing to stop
            return False
        logger.warning(
            "hedgeclient: %r is not an httpx.HTTPTransport whose sockets hedgeclient can "
            "watch: a losing attempt through it runs on until its replica answers",
            transport,
        )
        return False
    if not isinstance(backend, _WatchedBackend):
        pool._network_backend = _WatchedBackend(backend)
    return True


def speaks_http2(transport: object) -> bool:
    """Whether ``transport`` is an httpcore-pooled sync transport that may speak HTTP/2
    (``httpx.HTTPTransport(http2=True)``; the pool's private ``_http2``, httpcore 1.0.x),
    which a sync client's engine refuses (see the module doc)."""
    return isinstance(transport, httpx.BaseTransport) and bool(
        getattr(pool_of(transport), "_http2", False)
    )
