"""Rewrite a request URL onto a replica: same path, query and fragment, another origin.

``httpx.URL.copy_with(scheme=..., host=..., port=...)`` re-parses and re-validates the
whole URL (about 30 µs a call on the project's benchmark machine), on every attempt of
every request. Both inputs are already parsed and normalised by httpx, so the fast
path swaps the origin fields of httpx's parsed form (a ``NamedTuple``) directly, about
1 µs. It depends on httpx's private ``URL._uri_reference``: it is feature-detected
once, and ``tests/unit/test_urls.py`` checks it against ``copy_with`` on many URLs.

Strictly private.
"""

from __future__ import annotations

from typing import Any

import httpx

__all__ = ["origin_key", "replica_url"]


def _fast_path_works() -> bool:
    try:
        probe = httpx.URL("http://a:1/p?q")
        ref: Any = probe._uri_reference
        replaced = ref._replace(host="b", port=2)
        url = httpx.URL.__new__(httpx.URL)
        url._uri_reference = replaced
        return str(url) == "http://b:2/p?q"
    except Exception:  # any change in httpx internals: use the public API
        return False


_FAST = _fast_path_works()


def replica_url(url: httpx.URL, replica: httpx.URL) -> httpx.URL:
    """Return ``url`` with the scheme, host and port of ``replica`` (an origin URL)."""
    if _FAST:
        target: Any = replica._uri_reference
        new = httpx.URL.__new__(httpx.URL)
        new._uri_reference = url._uri_reference._replace(
            scheme=target.scheme, host=target.host, port=target.port
        )
        return new
    return url.copy_with(scheme=replica.scheme, host=replica.host, port=replica.port)


def origin_key(url: httpx.URL) -> object:
    """A cheap hashable key naming ``url``'s origin as parsed (scheme, host, port as
    written): equal keys mean equal origins. Not normalised: a cache key only."""
    if _FAST:
        ref: Any = url._uri_reference
        return (ref.scheme, ref.host, ref.port)
    return (url.scheme, url.host, url.port)
