"""The clock of the pure pieces: a callable returning monotonic float seconds.

The histogram, the budget, the adaptive delay and the replica selector take an
injected ``clock`` so their tests run synchronously on a fake one; by default they
read ``anyio.current_time()`` (the event loop's clock, so trio's ``MockClock`` drives
them too), looked up at call time because it needs a running event loop; on a thread
that drives a sync client's engine (``_timer._threads``), ``time.monotonic()``, the
clock of its timer. The check of a ``clock`` argument is ``_checks.check_clock``.

Strictly private.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final

import anyio
import sniffio

__all__ = ["THREADS", "Clock", "default_clock"]

Clock = Callable[[], float]

THREADS: Final = "hedgeclient-threads"
"""sniffio's name of a thread while it drives a sync client's engine (its
``thread_local.name``, ``_timer._threads``)."""


def default_clock() -> float:
    """The running event loop's clock in seconds, ``anyio.current_time()``; on a thread
    that drives a sync client's engine, ``time.monotonic()``."""
    if sniffio.thread_local.name == THREADS:
        return time.monotonic()
    return anyio.current_time()
