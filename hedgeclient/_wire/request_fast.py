"""Building an attempt's request with less of httpx's per-call work, feature-detected.

Every attempt copies the caller's request (``_routing.attempt_request``). Two steps of
that copy go through httpx's private attributes when the installed httpx stores what
they expect, checked once at import (else the public API is used):

- the attempt header is appended to the copy's ``Headers._list`` (raw name, lower-case
  name, value) when the request has no header of that name, without the encoding and
  look-up work of ``Headers.__setitem__``;
- a body that may be sent again is stored as ``Request._content``, where ``read()``
  would store it, without iterating it again.

``tests/unit/test_replay_body.py`` and ``tests/unit/test_request_fast.py`` check both
paths of each.

Strictly private.
"""

from __future__ import annotations

from typing import Any

import httpx

__all__ = ["CONTENT_SLOT", "HEADER_LIST", "set_header"]


def _header_list_works() -> bool:
    """Whether ``httpx.Headers`` keeps its items as a list of ``(raw key, lower-case key,
    value)`` bytes in ``_list``, as :func:`set_header` writes them."""
    try:
        headers = httpx.Headers({"A": "1"})
        items: Any = headers._list
        if items != [(b"A", b"a", b"1")]:
            return False
        items.append((b"Hedge-Attempt", b"hedge-attempt", b"2"))
        return headers["hedge-attempt"] == "2" and headers.raw[-1] == (b"Hedge-Attempt", b"2")
    except Exception:  # any change in httpx internals: the public API instead
        return False


HEADER_LIST = _header_list_works()


def set_header(headers: httpx.Headers, key: str, value: str) -> None:
    """``headers[key] = value`` for an ASCII ``key`` and ``value``: appended to httpx's item
    list when no item has that name yet (the usual case, without the encoding and
    look-up work of ``Headers.__setitem__``), else through ``__setitem__``."""
    if HEADER_LIST:
        names = _encoded.get(key)
        if names is None:
            names = _encoded[key] = (key.encode("ascii"), key.lower().encode("ascii"))
        raw, lower = names
        items: Any = headers._list
        for item in items:
            if item[1] == lower:
                break
        else:
            items.append((raw, lower, value.encode("ascii")))
            return
    headers[key] = value


_encoded: dict[str, tuple[bytes, bytes]] = {}  # header name -> its raw and lower-case bytes


def _content_slot_works() -> bool:
    """Whether an ``httpx.Request``'s body, once read, is its ``_content`` attribute
    (``read()`` stores it there and ``.content`` returns it)."""
    try:
        probe = httpx.Request("POST", "http://a", stream=httpx.ByteStream(b"x"))
        probe._content = b"body"
        return probe.content == b"body" and probe.read() == b"body"
    except Exception:  # any change in httpx internals: read() the body instead
        return False


CONTENT_SLOT = _content_slot_works()
