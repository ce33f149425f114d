"""``hedgeclient demo --plot``: both latency tails, ``1 - F`` on a log scale.

Strictly private: the command line is the interface.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from typing import Any

from hedgeclient.cli._args import UsageError
from hedgeclient.cli.demo._model import Run

__all__ = ["plot"]


def _survival(sample: Sequence[float]) -> tuple[list[float], list[float]]:
    """The empirical ``1 - F`` at each distinct value (ms), the last point (0) dropped."""
    xs = sorted(sample)
    n = len(xs)
    points = sorted(set(xs))[:-1]
    return [x * 1000 for x in points], [(n - bisect_right(xs, x)) / n for x in points]


def _predicted_survival(sample: Sequence[float], delay: float) -> tuple[list[float], list[float]]:
    """``P(X > t) * P(X > t - d)`` (``P(X > t)`` for ``t <= d``) on its step grid, in ms."""
    xs = sorted(sample)
    n = len(xs)
    ts, ps = [], []
    for t in sorted({*xs, *(x + delay for x in xs)}):
        p = (n - bisect_right(xs, t)) / n
        if t > delay:
            p *= (n - bisect_right(xs, t - delay)) / n
        if p > 0:
            ts.append(t * 1000)
            ps.append(p)
    return ts, ps


def plot(run: Run, report: dict[str, Any], path: str) -> None:
    """Save the latency tails of both clients (``1 - F``, log y axis) to ``path`` (PNG).

    Raises:
        UsageError: ``path`` cannot be written.
    """
    import matplotlib  # lazy: the optional 'plot' extra

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 5))
    fanout = run.options.fanout
    curves = [("plain", run.plain.children, "C0"), ("hedged", run.hedged.children, "C1")]
    if fanout > 1:
        curves = [(f"{name} child", sample, color) for name, sample, color in curves]
        curves += [
            (f"plain parent (n={fanout})", run.plain.parents or [], "C2"),
            (f"hedged parent (n={fanout})", run.hedged.parents or [], "C3"),
        ]
    for label, sample, color in curves:
        if sample:
            axes.step(*_survival(sample), where="post", label=label, color=color)
    delay = report["hedged"]["delay"]["predict_seconds"]
    if delay is not None and run.plain.children:
        axes.step(
            *_predicted_survival(run.plain.children, delay),
            where="post",
            linestyle="--",
            color="C1",
            alpha=0.6,
            label="hedged child, predicted" if fanout > 1 else "hedged, predicted",
        )
        axes.axvline(
            delay * 1000, color="grey", linestyle=":", label=f"delay {delay * 1000:.1f} ms"
        )
    axes.set_yscale("log")
    axes.set_xlabel("latency, ms (time to the full response)")
    axes.set_ylabel("P(latency > x)")
    axes.set_title(f"hedgeclient demo: {report['summary']}", fontsize=8, wrap=True)
    axes.grid(visible=True, which="both", alpha=0.3)
    axes.legend()
    figure.tight_layout()
    try:
        figure.savefig(path, dpi=120)
    except OSError as exc:
        msg = f"--plot: cannot write {path!r}: {exc.strerror or exc}"
        raise UsageError(msg) from None
    finally:
        plt.close(figure)
