"""What a third new user tripped over, each now refused early or said plainly (issue 23)."""

from __future__ import annotations

import re

import httpx
import pytest

from hedgeclient import DiscoveryFailedError, DnsReplicas, HedgedTransport
from hedgeclient.testing import FakeNameserver

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


# -- item 7: refresh_replicas() fails early ---------------------------------------------


@pytest.mark.anyio
async def test_refresh_replicas_raises_naming_each_failing_origin() -> None:
    """Against a real DNS server (FakeNameserver), a name that does not exist makes
    ``refresh_replicas()`` raise DiscoveryFailedError naming that origin, its source
    and why, while the name that resolves gets its set."""
    async with FakeNameserver({"api.test": ["127.0.0.2"]}) as server:
        good = DnsReplicas(nameserver=server.nameserver)
        bad = DnsReplicas(nameserver=server.nameserver)
        transport = HedgedTransport(
            replicas={"http://api.test:8080": good, "http://nothere.test:8080": bad},
            metrics=False,
        )
        message = (
            "hedgeclient: refreshing the replicas failed for 1 of 2 discovered service(s): "
            f"'http://nothere.test:8080' (DnsReplicas('nothere.test', family='any', "
            f"nameserver='{server.nameserver}')): nothere.test does not exist (NXDOMAIN); "
            "it has no replica yet"
        )
        with pytest.raises(DiscoveryFailedError, match=rf"^{re.escape(message)}$") as raised:
            await transport.refresh_replicas()
        assert raised.value.failures == {
            "http://nothere.test:8080": "nothere.test does not exist (NXDOMAIN)"
        }
        stats = transport.replica_statistics()
        assert stats["http://api.test:8080"].replicas == ("http://127.0.0.2:8080",)
        assert stats["http://nothere.test:8080"].replicas == ()
        server.set_records({})  # now api.test fails too, with a set to keep
        with pytest.raises(DiscoveryFailedError, match=r"it keeps its last 1 replica\(s\)"):
            await transport.refresh_replicas()
        assert transport.replica_statistics()["http://api.test:8080"].replicas == (
            "http://127.0.0.2:8080",
        )
        await transport.aclose()


@pytest.mark.anyio
async def test_refresh_replicas_is_quiet_when_every_set_resolves() -> None:
    """A transport whose discovered services all resolve, or that has only static
    lists, returns from ``refresh_replicas()`` without an error."""
    async with FakeNameserver({"api.test": ["127.0.0.2"]}) as server:
        source = DnsReplicas(nameserver=server.nameserver)
        transport = HedgedTransport(replicas={"http://api.test:8080": source}, metrics=False)
        assert await transport.refresh_replicas() is None
        await transport.aclose()
    static = HedgedTransport(replicas={"http://s": ["http://a", "http://b"]}, metrics=False)
    assert await static.refresh_replicas() is None
    await static.aclose()
