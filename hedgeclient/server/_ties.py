"""This replica's side of tied requests: its copies, the drop endpoint, the messages.

A tied copy registers as it arrives. If its twin already started elsewhere (a drop
message came first), it is dropped on arrival; while it waits in the admission queue
a drop message removes it from the queue; once it starts, this replica sends one drop
message to its twin's replica (if that is a configured peer, and unless the twin's
own message already came). Both copies start within one message delay of each other
only rarely, when the client's ``offset`` exceeds that delay; then both run, and the
pair costs two messages. The message is sent from a detached task, so the handler
starts at once; a message that fails is logged at debug level and counted, never
retried: then both copies run, as with a hedge.

Source: Dean & Barroso, "The Tail at Scale", CACM 56(2), 2013, "tied requests".

Strictly private.
"""

from __future__ import annotations

import contextvars
import json
import logging
import re
import time
from collections import OrderedDict
from typing import final

import anyio
import httpx

from hedgeclient._tied import TIE_HEADER
from hedgeclient._timer import current_timer
from hedgeclient.server._admission import Admission, Ticket
from hedgeclient.server._auth import TieAuth
from hedgeclient.server._config import Ties, canonical_origin
from hedgeclient.server._exchange import Receive, Scope, Send
from hedgeclient.server._stats import Counters

__all__ = ["TieBook", "TieCopy", "valid_tie"]

logger = logging.getLogger("hedgeclient.server")

_TIE = re.compile(rb"[0-9a-f]{32}")
MAX_REMEMBERED = 100_000  # ties remembered at most (each ~100 bytes)


def valid_tie(value: bytes) -> str | None:
    """The tie id in a header value, or ``None`` if it is not one (32 hex digits)."""
    return value.decode("ascii") if _TIE.fullmatch(value) else None


@final
class TieCopy:
    """One tied copy on this replica: queued (``ticket``) or running. Strictly private."""

    __slots__ = ("running", "ticket", "tie", "twin_started")

    def __init__(self, tie: str) -> None:
        self.tie = tie
        self.ticket: Ticket | None = None
        self.running = False
        self.twin_started = False


@final
class TieBook:
    """Strictly private: see the module docstring.

    Args:
        ties: the configuration.
        counters: the middleware's counters.
        admission: the admission queue, or ``None`` (copies start at once).
    """

    __slots__ = (
        "_admission",
        "_auth",
        "_client",
        "_closed",
        "_copies",
        "_counters",
        "_idle",
        "_sending",
        "_started",
        "_ties",
        "path",
    )

    def __init__(self, ties: Ties, counters: Counters, admission: Admission | None) -> None:
        self._ties = ties
        self.path = ties.path
        self._auth = TieAuth(ties.secret_bytes, ties.parsed_networks, ties.max_skew, ties.path)
        self._counters = counters
        self._admission = admission
        self._copies: dict[str, TieCopy] = {}
        self._started: OrderedDict[str, float] = OrderedDict()  # tie -> expiry (monotonic)
        self._client: httpx.AsyncClient | None = None
        self._closed = False
        self._sending = 0  # drop messages in flight
        self._idle: anyio.Event | None = None  # set when the last one ends, while closing

    # -- this replica's copies ------------------------------------------------------

    def arrive(self, tie: str) -> TieCopy | None:
        """Register a copy; ``None`` when it is to be dropped (its twin started)."""
        if self._started.pop(tie, None) is not None:
            self._counters.dropped_on_arrival += 1
            return None
        copy = self._copies[tie] = TieCopy(tie)
        return copy

    def start(self, copy: TieCopy, twin: bytes | None) -> None:
        """The copy starts to execute: tell its twin's replica, once."""
        copy.running = True
        copy.ticket = None
        if copy.twin_started or twin is None:
            return
        origin = canonical_origin(twin.decode("latin-1"))
        if origin is None or origin not in self._ties.peer_origins:
            return
        url = origin + self.path
        current_timer().spawn(contextvars.Context(), lambda: self._send_drop(url, copy))

    def end(self, copy: TieCopy) -> None:
        """The copy is finished (answered, dropped or cancelled)."""
        if self._copies.get(copy.tie) is copy:
            del self._copies[copy.tie]

    def _twin_started(self, tie: str) -> str:
        """A drop message for ``tie`` came: drop our copy if it still waits."""
        copy = self._copies.get(tie)
        if copy is None:  # not here yet (or finished): drop it if it comes
            now = time.monotonic()
            started = self._started
            while started:
                oldest, expiry = next(iter(started.items()))
                if expiry > now and len(started) < MAX_REMEMBERED:
                    break
                del started[oldest]
            started[tie] = now + self._ties.remember
            return "unknown"
        copy.twin_started = True
        ticket = copy.ticket
        if ticket is not None and self._admission is not None and self._admission.drop(ticket):
            self._counters.dropped_queued += 1
            return "dropped"
        self._counters.twins_running += 1
        return "running"

    # -- messages ---------------------------------------------------------------------

    async def _send_drop(self, url: str, copy: TieCopy) -> None:
        self._sending += 1
        try:
            await self._send_drop_now(url, copy)
        finally:
            self._sending -= 1
            if self._sending == 0 and self._idle is not None:
                self._idle.set()

    async def _send_drop_now(self, url: str, copy: TieCopy) -> None:
        tie = copy.tie
        if self._closed:
            return
        self._counters.messages_sent += 1
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self._ties.timeout, trust_env=False)
        headers = {TIE_HEADER: tie, **self._auth.sign(tie)}
        try:
            response = await self._client.post(url, headers=headers)
        except httpx.HTTPError as exc:
            self._counters.messages_failed += 1
            logger.debug("hedgeclient.server: drop message to %s failed: %r", url, exc)
            return
        if response.status_code in (401, 403):
            logger.warning(
                "hedgeclient.server: %s refused a drop message (%s): are the Ties' secret "
                "and networks the same on every replica?",
                url,
                response.text,
            )

    async def aclose(self) -> None:
        """Send no more drop messages; let those in flight end (at most their
        ``timeout``), then close their client. Idempotent."""
        self._closed = True
        if self._sending:
            self._idle = anyio.Event()
            with anyio.move_on_after(self._ties.timeout):
                await self._idle.wait()
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    # -- the endpoint -----------------------------------------------------------------

    async def endpoint(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve ``POST <path>``: a drop message from a peer."""
        if scope["method"] != "POST":
            await _answer(send, 405, {"error": "use POST"}, [(b"allow", b"POST")])
            return
        more = True
        while more:  # the body is ignored; read it so the connection stays usable
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            more = message.get("more_body", False)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        tie = valid_tie(headers.get(TIE_HEADER, "").encode("latin-1"))
        if tie is None:
            self._counters.messages_refused += 1
            await _answer(send, 400, {"error": f"{TIE_HEADER} must be 32 hex digits"})
            return
        refusal = self._auth.refusal(scope, tie, headers)
        if refusal is not None:
            self._counters.messages_refused += 1
            status = 403 if refusal == "address not allowed" else 401
            await _answer(send, status, {"error": refusal})
            return
        self._counters.messages_received += 1
        result = self._twin_started(tie)
        await _answer(send, 404 if result == "unknown" else 200, {"tie": tie, "result": result})


async def _answer(
    send: Send, status: int, body: dict[str, str], extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    content = json.dumps(body).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(content)).encode()),
        *(extra or []),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": content})
