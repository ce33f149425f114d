"""This replica's side of tied requests: its copies, the drop endpoint, the messages.

One message per tied pair at most, by design: only one side of a pair ever sends.
The copy sent first (attempt 1, the *leader*) starts as soon as it may and sends
nothing; the replica remembers that it started. The *follower* (the twin, attempt 2 or
more), as it is about to start (it leaves the admission queue, or finds a free slot),
asks the leader's replica, holding its slot while it waits: ``POST <twin><path>``.
There the leader's replica, deciding alone, so that the pair's two copies never both
run:

- drops the leader if it still waits in the queue (``dropped``): the follower runs;
- answers ``running`` if the leader started (or already finished): the follower is
  dropped before any work (503 with ``Hedge-Tie-Dropped``);
- answers ``unknown`` (404) if the leader has not come yet, and drops it when it comes
  (the tie is remembered for ``remember`` seconds): the follower runs.

A follower whose leader's replica is not a configured peer, or that gets no answer
within the ``timeout``, runs (then both copies may run, as with a hedge); the failure
is logged at debug level and counted, never retried. The follower waits one message's
round trip before it starts, with its slot held; the leader never waits.

Dean & Barroso's tied requests let each copy tell its twin's server as it starts, so
two copies that start within one message delay of each other both run and send a
message each; here the leader's replica decides, so the pair sends one message and
runs one copy (unless that message fails).

Source: Dean & Barroso, "The Tail at Scale", CACM 56(2), 2013, "tied requests".

Strictly private.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections import OrderedDict
from typing import Literal, final

import httpx

from hedgeclient._policy.tied import TIE_HEADER
from hedgeclient._timer import loop_id
from hedgeclient.server._admission import Admission, Ticket
from hedgeclient.server._auth import TieAuth
from hedgeclient.server._config import Ties, canonical_origin
from hedgeclient.server._exchange import Receive, Scope, Send
from hedgeclient.server._stats import Counters

__all__ = ["TieBook", "TieCopy", "valid_tie"]

logger = logging.getLogger("hedgeclient.server")

_TIE = re.compile(rb"[0-9a-f]{32}")
MAX_REMEMBERED = 100_000  # ties remembered at most, per kind (each ~100 bytes)

Answer = Literal["dropped", "running", "asking", "unknown"]


def valid_tie(value: bytes) -> str | None:
    """The tie id in a header value, or ``None`` if it is not one (32 hex digits)."""
    return value.decode("ascii") if _TIE.fullmatch(value) else None


@final
class TieCopy:
    """One tied copy on this replica: queued (``ticket``), asking, or running.
    Strictly private."""

    __slots__ = ("asking", "running", "ticket", "tie")

    def __init__(self, tie: str) -> None:
        self.tie = tie
        self.ticket: Ticket | None = None
        self.asking = False
        self.running = False


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
        "_claimed",
        "_client",
        "_client_loop",
        "_copies",
        "_counters",
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
        # tie -> expiry (time.monotonic()): leaders that started here; ties whose
        # follower asked before its leader came (the leader is dropped on arrival)
        self._started: OrderedDict[str, float] = OrderedDict()
        self._claimed: OrderedDict[str, float] = OrderedDict()
        self._client: httpx.AsyncClient | None = None
        self._client_loop: int | None = None  # the event loop the client belongs to

    # -- this replica's copies ------------------------------------------------------

    def arrive(self, tie: str) -> TieCopy | None:
        """Register a copy; ``None`` when it is to be dropped (its follower runs)."""
        if self._claimed.pop(tie, None) is not None:
            self._counters.dropped_on_arrival += 1
            return None
        copy = self._copies[tie] = TieCopy(tie)
        return copy

    def start_leader(self, copy: TieCopy) -> None:
        """A leader starts to execute: remember it, for its follower's question."""
        copy.running = True
        copy.ticket = None
        self._remember(self._started, copy.tie)

    async def start_follower(self, copy: TieCopy, twin: bytes | None) -> bool:
        """A follower is about to execute: ask its leader's replica (if a configured
        peer). False when the leader started there: drop this copy."""
        copy.ticket = None
        origin = None if twin is None else canonical_origin(twin.decode("latin-1"))
        if origin is None or origin not in self._ties.peer_origins:
            copy.running = True
            return True
        copy.asking = True
        try:
            answer = await self._ask(origin + self.path, copy.tie)
        finally:
            copy.asking = False
        if answer == "running":
            self._counters.dropped_on_answer += 1
            return False
        copy.running = True
        return True

    def end(self, copy: TieCopy) -> None:
        """The copy is finished (answered, dropped or cancelled)."""
        if self._copies.get(copy.tie) is copy:
            del self._copies[copy.tie]

    def _remember(self, book: OrderedDict[str, float], tie: str) -> None:
        now = time.monotonic()
        while book:
            oldest, expiry = next(iter(book.items()))
            if expiry > now and len(book) < MAX_REMEMBERED:
                break
            del book[oldest]
        book[tie] = now + self._ties.remember

    def _asked(self, tie: str) -> Answer:
        """A follower elsewhere is about to start: drop our copy if it still waits."""
        copy = self._copies.get(tie)
        if copy is None:
            if tie in self._started:  # started here, and finished since
                self._counters.twins_running += 1
                return "running"
            self._remember(self._claimed, tie)  # not here yet: drop it if it comes
            return "unknown"
        if copy.asking:  # both copies followers (a client that broke the roles): both run
            return "asking"
        ticket = copy.ticket
        if ticket is not None and self._admission is not None and self._admission.drop(ticket):
            self._counters.dropped_queued += 1
            return "dropped"
        self._counters.twins_running += 1
        return "running"

    # -- messages ---------------------------------------------------------------------

    async def _ask(self, url: str, tie: str) -> Answer | None:
        """Send the message; the leader's replica's answer, or ``None`` if it failed.

        Never raises but cancellation: a message that fails for any reason lets the
        follower run (counted, logged at debug level).
        """
        self._counters.messages_sent += 1
        headers = {TIE_HEADER: tie, **self._auth.sign(tie)}
        try:
            response = await self._messenger().post(url, headers=headers)
            result = response.json().get("result") if response.status_code in (200, 404) else None
        except Exception as exc:  # a message must never fail the request
            self._counters.messages_failed += 1
            logger.debug("hedgeclient.server: tie message to %s failed: %r", url, exc)
            return None
        if response.status_code in (401, 403):
            logger.warning(
                "hedgeclient.server: %s refused a tie message (%s): are the Ties' secret "
                "and networks the same on every replica?",
                url,
                response.text,
            )
        if result in ("dropped", "running", "asking", "unknown"):
            return result  # type: ignore[no-any-return]
        self._counters.messages_failed += 1
        return None

    def _messenger(self) -> httpx.AsyncClient:
        """The messages' client on the running event loop: a client's connections belong
        to the loop that opened them, and one middleware may serve several loops in turn
        (a test suite's, a server restarted in-process). One left on an old loop is
        dropped, not closed: its loop is gone or is not ours to run."""
        loop = loop_id()
        if self._client is None or self._client_loop != loop:
            self._client = httpx.AsyncClient(timeout=self._ties.timeout, trust_env=False)
            self._client_loop = loop
        return self._client

    async def aclose(self) -> None:
        """Close the messages' client (at lifespan shutdown). Idempotent; a later
        message, on any loop, opens a new one."""
        client, self._client = self._client, None
        if client is not None and self._client_loop == loop_id():
            await client.aclose()
        self._client_loop = None

    # -- the endpoint -----------------------------------------------------------------

    async def endpoint(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve ``POST <path>``: a follower's question from a peer."""
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
            error = f"{TIE_HEADER} must be 32 lower-case hex digits"
            await _answer(send, 400, {"error": error})
            return
        refusal = self._auth.refusal(scope, tie, headers)
        if refusal is not None:
            self._counters.messages_refused += 1
            status = 403 if refusal == "address not allowed" else 401
            await _answer(send, status, {"error": refusal})
            return
        self._counters.messages_received += 1
        result = self._asked(tie)
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
