"""hedgeclient's pytest plugin (entry point ``hedgeclient`` in ``pytest11``): the
``fake_service`` fixture.

pytest loads every installed plugin in every run, whether a test uses it or not, so
this module lives outside the ``hedgeclient`` package and imports nothing but pytest:
a run that never asks for ``fake_service`` imports no hedgeclient, httpx or server.
The fake service loads when a test first calls the factory. Hypothesis does the same
with ``_hypothesis_pytestplugin``. ``-p no:hedgeclient`` turns it off.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from hedgeclient.testing import FakeService

__all__ = ["fake_service"]


@pytest.fixture
def fake_service() -> Iterator[Callable[..., FakeService]]:
    """A factory of started :class:`~hedgeclient.testing.FakeService`, stopped at teardown.

    The factory takes the keyword arguments of ``FakeService``; ``mode`` defaults to
    ``"thread"``. Every service it started is stopped when the test ends, last first.

    Example usage::

        @pytest.mark.anyio
        async def test_hedge_wins(fake_service):
            svc = fake_service(replicas=3, latency="lab")
            async with httpx.AsyncClient() as client:
                await client.get(svc.origins[0])
    """
    started: list[FakeService] = []

    def factory(**kwargs: Any) -> FakeService:
        from hedgeclient.testing import FakeService  # lazily, on first use

        service = FakeService(**kwargs)
        service.start()
        started.append(service)
        return service

    yield factory
    while started:
        started.pop().stop()
