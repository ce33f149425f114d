"""What a third new user tripped over, each now refused early or said plainly (issue 23)."""

from __future__ import annotations

import re

import httpx
import pytest

from hedgeclient import HedgedTransport

NOT_SYNC = (
    "HedgedTransport is an async transport (an httpx.AsyncBaseTransport): use it with "
    "httpx.AsyncClient; httpx.Client needs a sync transport, and hedgeclient has no "
    "sync path yet"
)


# -- item 6: a sync httpx.Client -------------------------------------------------------


def test_a_sync_client_is_refused_at_with() -> None:
    """``with httpx.Client(transport=HedgedTransport())`` raises a TypeError saying to
    use httpx.AsyncClient, not an AttributeError about ``__enter__``."""
    client = httpx.Client(transport=HedgedTransport(metrics=False))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=rf"^{re.escape(NOT_SYNC)}$"), client:
        pytest.fail("the body of `with client:` ran")


def test_a_sync_client_is_refused_at_its_first_request_and_close() -> None:
    """Without ``with``, the first request and ``close()`` raise the same TypeError,
    before anything is sent; mounts go the same way."""
    transport = HedgedTransport(metrics=False)
    client = httpx.Client(transport=transport)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=rf"^{re.escape(NOT_SYNC)}$"):
        client.get("http://127.0.0.1:9/")
    with pytest.raises(TypeError, match=rf"^{re.escape(NOT_SYNC)}$"):
        client.close()
    mounted = httpx.Client(mounts={"http://": transport})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match=rf"^{re.escape(NOT_SYNC)}$"):
        mounted.get("http://127.0.0.1:9/")
