"""An attempt's ``httpx.Request`` built without httpx's per-call work, where the public
API costs too much for a step every attempt makes.

Every attempt sends its own copy of the caller's request (``_wire.send``). Four steps
of that copy go through httpx's private attributes, each feature-detected once at
import (else the public API is used), each checked against the public call by
``tests/unit/test_compat_httpx.py`` on both paths. Their cost was measured against the
public call (``benchmarks/bench_primitives.py``, callgrind, httpx 0.29; issue 25 keeps
a shortcut only where the public call costs more than about 1 µs per attempt;
``docs/benchmarks.md``, "Unit costs"):

- **the replica's origin**: ``URL.copy_with(scheme=, host=, port=)`` re-parses and
  re-validates the whole URL (+143 k instructions, 15 to 25 µs, on every attempt).
  Both URLs were parsed and normalised by httpx already, so the origin fields of the
  parsed form (``URL._uri_reference``, a ``NamedTuple``) are swapped instead, in a
  tuple built whole (``_replace`` runs Python code of ``collections``);
- **the headers**: ``Headers.__setitem__`` encodes and looks the name up again
  (+8.4 k instructions, about 1 µs, for each of the attempt header and ``Host``); the
  copy's ``Headers._list`` (raw name, lower-case name, value) is built with both set
  instead, as ``__setitem__`` sets them (the first of that name replaced, the others
  removed, else appended);
- **the request**: ``httpx.Request(...)`` checks and copies what the caller's request
  already holds checked (its method, URL, headers); the copy's five attributes are set
  on ``Request.__new__`` instead (about 2 µs per attempt with the headers' step,
  measured with ``timeit``, httpx 0.29);
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

__all__ = ["FAST_BODY", "FAST_HEADER", "FAST_REQUEST", "FAST_URL", "attempt_copy"]


_FIELDS = ("scheme", "userinfo", "host", "port", "path", "query", "fragment")  # ParseResult's


def _url_works() -> bool:
    """Whether a URL's origin can be swapped in its parsed form (``_uri_reference``)."""
    try:
        probe = httpx.URL("http://a:1/p?q")
        ref: Any = probe._uri_reference
        url = httpx.URL.__new__(httpx.URL)
        url._uri_reference = tuple.__new__(type(ref), ("http", "", "b", 2, "/p", "q", None))
        return ref._fields == _FIELDS and str(url) == "http://b:2/p?q"
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


def _request_works() -> bool:
    """Whether an ``httpx.Request`` given a stream holds exactly ``method``, ``url``,
    ``headers``, ``extensions`` and ``stream`` (what :func:`attempt_copy` sets)."""
    try:
        stream = httpx.ByteStream(b"")
        probe = httpx.Request("GET", "http://a/p", headers={"A": "1"}, stream=stream)
        built = httpx.Request.__new__(httpx.Request)
        built.method, built.url, built.headers = probe.method, probe.url, probe.headers
        built.extensions, built.stream = {}, stream
        return vars(built) == vars(probe) and not hasattr(httpx.Request, "__slots__")
    except Exception:  # any change in httpx internals: the public API instead
        return False


FAST_URL = _url_works()
FAST_HEADER = _header_works()
FAST_BODY = _body_works()
FAST_REQUEST = _request_works()

_encoded: dict[str, tuple[bytes, bytes]] = {}  # header name -> its raw and lower-case bytes


def attempt_copy(
    request: httpx.Request,
    origin: httpx.URL | None,
    stream: httpx.SyncByteStream | httpx.AsyncByteStream,
    extensions: dict[str, Any],
    body: bytes | None,
    header: str | None,
    value: str,
    host: bool = False,
) -> httpx.Request:
    """A new ``httpx.Request`` for one attempt of ``request``.

    Args:
        request: the caller's request; never modified.
        origin: an origin URL whose scheme, host and port replace the request's (its
            path, query and fragment stay), or ``None`` to keep the request's URL.
        stream: the copy's body stream.
        extensions: the copy's extensions (copied, as httpx copies the dict).
        body: the body's bytes, stored as read (``.content`` works), or ``None`` to
            leave the copy unread.
        header: a header name (an ASCII token) set to ``value`` (ASCII) on the copy,
            replacing one of that name, or ``None`` for none.
        value: its value.
        host: set the copy's ``Host`` header to ``origin``'s (given) host and port.
    """
    url = request.url
    if origin is not None:
        if FAST_URL:
            target: Any = origin._uri_reference
            ref: Any = url._uri_reference
            url = httpx.URL.__new__(httpx.URL)
            url._uri_reference = tuple.__new__(  # its fields in _FIELDS' order (checked)
                type(ref),
                (target.scheme, ref.userinfo, target.host, target.port, ref.path, ref.query,
                 ref.fragment),
            )  # fmt: skip
        else:
            url = url.copy_with(scheme=origin.scheme, host=origin.host, port=origin.port)
    if FAST_HEADER and FAST_REQUEST:
        items: Any = list(request.headers._list)
        if header is not None:
            names = _encoded.get(header)
            if names is None:
                names = _encoded[header] = (header.encode("ascii"), header.lower().encode())
            _set(items, names[0], names[1], value.encode("ascii"))
        if host:
            _set(items, b"Host", b"host", url.netloc)
        headers = httpx.Headers.__new__(httpx.Headers)
        headers._list, headers._encoding = items, None  # as Headers(request.headers)
        copy = httpx.Request.__new__(httpx.Request)
        copy.method, copy.url, copy.headers = request.method, url, headers
        copy.extensions, copy.stream = dict(extensions), stream
    else:
        copy = httpx.Request(
            request.method, url, headers=request.headers, stream=stream, extensions=extensions
        )
        if header is not None:
            copy.headers[header] = value
        if host:
            copy.headers["Host"] = url.netloc.decode("ascii")
    if body is not None:
        if FAST_BODY:
            copy._content = body
        else:
            copy.read()
            copy.stream = stream  # read() swaps in an httpx.ByteStream, a generator
    return copy


def _set(items: list[tuple[bytes, bytes, bytes]], raw: bytes, lower: bytes, value: bytes) -> None:
    """``Headers.__setitem__`` on a headers' item list: the first item named ``lower``
    replaced, any later one removed; else the item appended."""
    for index, item in enumerate(items):
        if item[1] == lower:
            items[index] = (raw, lower, value)
            later = items[index + 1 :]
            if any(other[1] == lower for other in later):
                items[index + 1 :] = [other for other in later if other[1] != lower]
            return
    items.append((raw, lower, value))
