"""The attempt header written straight into httpx's header list gives what
``Headers.__setitem__`` gives, with the fast path on or off."""

from __future__ import annotations

import httpx
import pytest

from hedgeclient._wire import request_fast as _request_fast
from hedgeclient._wire.request_fast import set_header


@pytest.fixture(params=[True, False], ids=["list", "setitem"])
def header_list(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Each test runs with the fast path as detected on this httpx, and without it."""
    assert _request_fast.HEADER_LIST  # the httpx the tests run
    monkeypatch.setattr(_request_fast, "HEADER_LIST", request.param)
    return bool(request.param)


@pytest.mark.parametrize(
    "given",
    [
        {},
        {"Accept": "text/plain", "X-Other": "1"},
        {"hedge-attempt": "7"},  # the caller set it already: replaced, not repeated
        {"Hedge-Attempt": "7", "Accept": "*/*"},
    ],
)
def test_set_header_matches_setitem(header_list: bool, given: dict[str, str]) -> None:
    """The header's raw items, its look-ups and the request's wire form are those of
    ``headers[key] = value``."""
    expected = httpx.Request("GET", "http://svc/", headers=given)
    expected.headers["Hedge-Attempt"] = "2"
    got = httpx.Request("GET", "http://svc/", headers=given)
    set_header(got.headers, "Hedge-Attempt", "2")
    assert got.headers.raw == expected.headers.raw
    assert got.headers.get_list("hedge-attempt") == ["2"]
    assert dict(got.headers) == dict(expected.headers)
