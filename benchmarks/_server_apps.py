"""The hello-world ASGI applications ``bench_server.py overhead`` serves with uvicorn.

Strictly private to ``benchmarks/``: ``uvicorn _server_apps:<name>`` from this folder.
"""

from __future__ import annotations

from typing import Any

from hedgeclient.server import HedgeMiddleware

_HEADERS = [(b"content-type", b"text/plain"), (b"content-length", b"13")]


async def plain(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Hello, world: raw ASGI, no framework."""
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": _HEADERS})
    await send({"type": "http.response.body", "body": b"Hello, world!"})


# The defaults (cancel="hedged"): requests without the attempt header take the fast path
# (one look at the headers); requests with it (hedged attempts) are watched.
default = HedgeMiddleware(plain, metrics=False)
# cancel="none": attempts counted and handed to the handler, nothing watched.
unwatched = HedgeMiddleware(plain, cancel="none", metrics=False)
# cancel="all": every request watched, the attempt header or not.
watched = HedgeMiddleware(plain, cancel="all", metrics=False)
# With an admission queue too (never full at this load).
queued = HedgeMiddleware(plain, cancel="all", max_concurrency=64, metrics=False)


async def _hello(request: Any) -> Any:
    from starlette.responses import PlainTextResponse

    return PlainTextResponse("Hello, world!")


def _starlette() -> Any:
    from starlette.applications import Starlette
    from starlette.routing import Route

    return Starlette(routes=[Route("/", _hello)])


# The same hello world as a Starlette application, alone and behind the middleware.
starlette = _starlette()
starlette_default = HedgeMiddleware(_starlette(), metrics=False)
starlette_watched = HedgeMiddleware(_starlette(), cancel="all", metrics=False)

# The rows of `bench_server.py overhead`: (application, the attempt header sent or not,
# the application it is compared with), in the order measured.
ROWS = {
    "plain": ("plain", False, "plain"),
    "default": ("default", False, "plain"),
    "default, hedged requests": ("default", True, "plain"),
    "none, hedged requests": ("unwatched", True, "plain"),
    "all": ("watched", False, "plain"),
    "all, hedged requests": ("watched", True, "plain"),
    "all + queue, hedged requests": ("queued", True, "plain"),
    "starlette": ("starlette", False, "starlette"),
    "starlette default": ("starlette_default", False, "starlette"),
    "starlette default, hedged requests": ("starlette_default", True, "starlette"),
    "starlette all": ("starlette_watched", False, "starlette"),
}
