"""The ``--latency`` option of ``demo`` and ``serve``: a latency law, in seconds.

The forms are those of :func:`hedgeclient.testing.parse_law`, plus one name of the
command line's own: ``demo``, the demo's default law (:data:`DEMO_LAW`).

Strictly private: the command line is the interface.
"""

from __future__ import annotations

from hedgeclient.cli._args import UsageError
from hedgeclient.cli._output import warn
from hedgeclient.testing import Empirical, LatencyLaw, parse_law

__all__ = ["DEMO_LAW", "LATENCY_HELP", "SLOWNESS_HELP", "latency_law"]

DEMO_LAW = "mix:0.97*lognormal:median=0.025,sigma=0.3|0.03*lognormal:median=0.25,sigma=0.2"
"""``--latency demo``: 97 % of calls log-normal around 25 ms, 3 % of them a pause
around 250 ms (a collection, a busy disk). Unlike the ``lab`` sample it has no atoms:
its quantiles are not on the edge between two values, so a rolling p95 and a measured
p99 do not jump between two far-apart values from one run to the next. Its scale keeps
a client's own scheduling delays (milliseconds on a busy machine) small beside the
hedge delay."""

LATENCY_HELP = (
    "latency law in seconds: demo, lab, 0.005, lognormal:median=0.01,sigma=1, "
    "pareto:scale=0.005,alpha=1.5, file:PATH[,unit=ms], ..."
)

SLOWNESS_HELP = (
    "server-owned (default): each attempt draws its own latency, so a backup is "
    "independent of its primary; request-owned: a request is as slow on every replica, "
    "so a backup never helps"
)

_LOOKS_LIKE_MS = 1.0
"""A sample file read in seconds whose median is at least this many seconds is
probably in milliseconds: the command says so."""


_MAX_CONSTANT = 5.0
"""Seconds: a bare ``--latency`` above this is almost always milliseconds (the demo's
clients time out at 5 s)."""


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def latency_law(text: str, flag: str = "--latency") -> LatencyLaw:
    """Parse ``--latency``; warn when a sample file read in seconds looks like milliseconds.

    Raises:
        UsageError: a form :func:`~hedgeclient.testing.parse_law` refuses, a sample
            file that cannot be read, or a bare constant above 5 s (milliseconds meant).
    """
    form = DEMO_LAW if text.strip().lower() == "demo" else text
    bare = form.strip().removeprefix("constant:")
    if _is_number(bare) and float(bare) > _MAX_CONSTANT:
        msg = (
            f"{flag} is in seconds: a constant latency of {bare} s is above {_MAX_CONSTANT:g} s "
            f"(for {bare} ms write '{float(bare) / 1000:g}'), got {text!r}"
        )
        raise UsageError(msg)
    try:
        law = parse_law(form)
    except ValueError as exc:
        msg = f"{flag} {text!r}: {exc}"
        raise UsageError(msg) from None
    except OSError as exc:
        reason = f"cannot read {exc.filename!r}: {exc.strerror}" if exc.filename else str(exc)
        msg = f"{flag} {text!r}: {reason}"
        raise UsageError(msg) from None
    if isinstance(law, Empirical) and "unit=ms" not in form:
        median = law.quantile(0.5)
        if median >= _LOOKS_LIKE_MS and form.strip().lower().startswith("file:"):
            warn(
                f"{flag} {text!r}: the median latency is {median:g} seconds; if the file "
                f"holds milliseconds, write '{text.strip()},unit=ms'"
            )
    return law
