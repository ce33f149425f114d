"""FakeService's queueing-mode arguments are checked before anything starts."""

from __future__ import annotations

import pytest

from hedgeclient.testing import FakeService


def test_concurrency_needs_the_middleware() -> None:
    """A queue is the middleware's: concurrency with disconnects='ignored' is refused."""
    with pytest.raises(ValueError, match=r"^`concurrency` and `middleware` need disconnects="):
        FakeService(concurrency=2, disconnects="ignored")


def test_concurrency_checked() -> None:
    """concurrency is an int >= 1."""
    with pytest.raises(ValueError, match=r"^`concurrency` must be"):
        FakeService(concurrency=0)


def test_disconnects_checked() -> None:
    """disconnects is one of app, middleware, ignored."""
    with pytest.raises(ValueError, match=r"^`disconnects` must be 'app', 'middleware' or"):
        FakeService(disconnects="sometimes")  # type: ignore[arg-type]


def test_middleware_arguments_checked_early() -> None:
    """A bad middleware argument fails at construction; the service's own are refused."""
    with pytest.raises(ValueError, match=r"^`retry_after` must be"):
        FakeService(concurrency=1, middleware={"retry_after": -1})
    with pytest.raises(ValueError, match=r"^`middleware` must not set \['max_concurrency'\]"):
        FakeService(concurrency=1, middleware={"max_concurrency": 3})
