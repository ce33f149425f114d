"""The clock of the pure pieces: a callable returning monotonic float seconds.

The histogram, the budget, the adaptive delay and the replica selector take an
injected ``clock`` so their tests run synchronously on a fake one; by default they
read ``anyio.current_time()`` (the event loop's clock, so trio's ``MockClock`` drives
them too), looked up at call time because it needs a running event loop. The check of
a ``clock`` argument is ``_checks.check_clock``.

Strictly private.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio

__all__ = ["Clock", "default_clock"]

Clock = Callable[[], float]


def default_clock() -> float:
    """``anyio.current_time()``: the running event loop's clock, in seconds."""
    return anyio.current_time()
