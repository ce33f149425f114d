"""The clock of the pure pieces: a callable returning monotonic float seconds.

The histogram, the budget, the adaptive delay and the replica selector take an
injected ``clock`` so their tests run synchronously on a fake one; by default they
read ``anyio.current_time()`` (the event loop's clock, so trio's ``MockClock`` drives
them too), looked up at call time because it needs a running event loop.

Strictly private.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio

__all__ = ["Clock", "check_clock", "default_clock"]

Clock = Callable[[], float]


def default_clock() -> float:
    """``anyio.current_time()``: the running event loop's clock, in seconds."""
    return anyio.current_time()


def check_clock(clock: object) -> Clock:
    """Return ``clock``, or :func:`default_clock` if it is ``None``.

    Raises:
        TypeError: ``clock`` is neither ``None`` nor callable.
    """
    if clock is None:
        return default_clock
    if not callable(clock):
        msg = f"`clock` must be a callable returning seconds, or None, got {clock!r}"
        raise TypeError(msg)
    return clock
