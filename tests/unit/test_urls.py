"""The fast replica-URL rewrite gives exactly what ``httpx.URL.copy_with`` gives."""

from __future__ import annotations

import httpx
import pytest

from hedgeclient._wire import urls as _urls

URLS = [
    "http://catalog/items/42?x=1&y=%20z",
    "https://catalog.example/",
    "http://svc:8080/a/b/../c;p?q#frag",
    "http://svc/caf%C3%A9/%F0%9F%98%80",
    "https://svc.example/search?q=a+b&q=c",
    "http://svc",
]
REPLICAS = ["http://127.0.0.1:8001", "https://10.0.0.7:443", "http://[::1]:9000", "http://h"]


@pytest.mark.parametrize("url", URLS)
@pytest.mark.parametrize("replica", REPLICAS)
def test_fast_rewrite_matches_copy_with(url: str, replica: str) -> None:
    """Path, query and fragment are kept; scheme, host and port are the replica's."""
    source, target = httpx.URL(url), httpx.URL(replica)
    expected = source.copy_with(scheme=target.scheme, host=target.host, port=target.port)
    got = _urls.replica_url(source, target)
    assert got == expected
    assert str(got) == str(expected)
    assert (got.raw_scheme, got.raw_host, got.port, got.raw_path) == (
        expected.raw_scheme,
        expected.raw_host,
        expected.port,
        expected.raw_path,
    )


def test_fast_path_is_active_on_this_httpx() -> None:
    """The feature probe succeeds on the pinned httpx (else we silently lose 30 µs)."""
    assert _urls._FAST is True


def test_fallback_matches(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the fast path off, the public ``copy_with`` is used, same result."""
    monkeypatch.setattr(_urls, "_FAST", False)
    source, target = httpx.URL(URLS[0]), httpx.URL(REPLICAS[0])
    assert str(_urls.replica_url(source, target)) == "http://127.0.0.1:8001/items/42?x=1&y=%20z"
