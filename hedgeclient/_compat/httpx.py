"""An attempt's ``httpx.Request`` built without httpx's per-call work, where the public
API costs too much for a step every attempt makes.

Every attempt sends its own copy of the caller's request (``_wire.send``). Three steps
of that copy go through httpx's private attributes, each feature-detected once at
import (else the public API is used), each checked against the public call by
``tests/unit/test_compat_httpx.py`` on both paths. Their cost was measured against the
public call (``benchmarks/bench_primitives.py``, callgrind, httpx 0.29; issue 25 keeps
a shortcut only where the public call costs more than about 1 µs per attempt;
``docs/benchmarks.md``, "Unit costs"):

- **the replica's origin**: ``URL.copy_with(scheme=, host=, port=)`` re-parses and
  re-validates the whole URL (+143 k instructions, 15 to 25 µs, on every attempt).
  Both URLs were parsed and normalised by httpx already, so the origin fields of the
  parsed form (``URL._uri_reference``, a ``NamedTuple``) are swapped instead;
- **the attempt header**: ``Headers.__setitem__`` encodes and looks the name up again
  (+8.4 k instructions, about 1 µs); appended to the copy's ``Headers._list`` (raw
  name, lower-case name, value) instead, when no header of that name is there;
- **the body**: a body sent again is stored as ``Request._content``, where ``read()``
  stores it, instead of ``read()`` iterating it and the stream put back (+10.7 k
  instructions, about 1 µs).

The origin key the request path caches a request's service by uses the public
``URL.scheme``/``host``/``port`` (0.5 µs more per request than the parsed form's
fields: under the bar).

Strictly private.
"""

from __future__ import annotations

from typing import Any

import httpx

__all__ = ["FAST_BODY", "FAST_HEADER", "FAST_URL", "attempt_copy"]


def _url_works() -> bool:
    """Whether a URL's origin can be swapped in its parsed form (``_uri_reference``)."""
    try:
        probe = httpx.URL("http://a:1/p?q")
        ref: Any = probe._uri_reference
        url = httpx.URL.__new__(httpx.URL)
        url._uri_reference = ref._replace(host="b", port=2)
        return str(url) == "http://b:2/p?q"
    except Exception:  # any change in httpx internals: the public API instead
        return False


def _header_works() -> bool:
    """Whether ``httpx.Headers`` keeps its items as a list of ``(raw key, lower-case key,
    value)`` bytes in ``_list``."""
    try:
        headers = httpx.Headers({"A": "1"})
        items: Any = headers._list
        if items != [(b"A", b"a", b"1")]:
            return False
        items.append((b"Hedge-Attempt", b"hedge-attempt", b"2"))
        return headers["hedge-attempt"] == "2" and headers.raw[-1] == (b"Hedge-Attempt", b"2")
    except Exception:  # any change in httpx internals: the public API instead
        return False


def _body_works() -> bool:
    """Whether a request's body, once read, is its ``_content`` attribute (``read()``
    stores it there and ``.content`` returns it)."""
    try:
        probe = httpx.Request("POST", "http://a", stream=httpx.ByteStream(b"x"))
        probe._content = b"body"
        return probe.content == b"body" and probe.read() == b"body"
    except Exception:  # any change in httpx internals: read() the body instead
        return False


FAST_URL = _url_works()
FAST_HEADER = _header_works()
FAST_BODY = _body_works()

_encoded: dict[str, tuple[bytes, bytes]] = {}  # header name -> its raw and lower-case bytes


def attempt_copy(
    request: httpx.Request,
    origin: httpx.URL | None,
    stream: httpx.SyncByteStream | httpx.AsyncByteStream,
    extensions: dict[str, Any],
    body: bytes | None,
    header: str | None,
    value: str,
) -> httpx.Request:
    """A new ``httpx.Request`` for one attempt of ``request``.

    Args:
        request: the caller's request; never modified.
        origin: an origin URL whose scheme, host and port replace the request's (its
            path, query and fragment stay), or ``None`` to keep the request's URL.
        stream: the copy's body stream.
        extensions: the copy's extensions (httpx copies the dict).
        body: the body's bytes, stored as read (``.content`` works), or ``None`` to
            leave the copy unread.
        header: a header name (an ASCII token) set to ``value`` (ASCII) on the copy,
            replacing one of that name, or ``None`` for none.
        value: its value.
    """
    url = request.url
    if origin is not None:
        if FAST_URL:
            target: Any = origin._uri_reference
            swapped = httpx.URL.__new__(httpx.URL)
            swapped._uri_reference = url._uri_reference._replace(
                scheme=target.scheme, host=target.host, port=target.port
            )
            url = swapped
        else:
            url = url.copy_with(scheme=origin.scheme, host=origin.host, port=origin.port)
    copy = httpx.Request(
        request.method, url, headers=request.headers, stream=stream, extensions=extensions
    )
    if body is not None:
        if FAST_BODY:
            copy._content = body
        else:
            copy.read()
            copy.stream = stream  # read() swaps in an httpx.ByteStream, a generator
    if header is not None:
        # The new request holds its own copy of the headers: set ours on that copy.
        if FAST_HEADER:
            names = _encoded.get(header)
            if names is None:
                names = _encoded[header] = (header.encode("ascii"), header.lower().encode())
            raw, lower = names
            items: Any = copy.headers._list
            for item in items:
                if item[1] == lower:
                    break
            else:
                items.append((raw, lower, value.encode("ascii")))
                return copy
        copy.headers[header] = value
    return copy
