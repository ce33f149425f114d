"""``hedgeclient demo``: progress bars on a terminal, nothing otherwise. Strictly private."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["Progress", "Tick"]

Tick = Callable[[], None]


class Progress:
    """Rich progress bars on a terminal; nothing otherwise. Strictly private."""

    def __init__(self, enabled: bool) -> None:
        self._progress: Any = None
        if enabled:
            try:
                from rich.progress import Progress as RichProgress  # lazy: the 'cli' extra
            except ImportError:  # no rich: no bars, the report still prints
                return
            self._progress = RichProgress(transient=True)

    def __enter__(self) -> Progress:
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._progress is not None:
            self._progress.stop()

    def bar(self, description: str, total: int) -> Tick:
        """Add a bar of ``total`` steps; return the function that advances it by one."""
        progress = self._progress
        if progress is None:
            return lambda: None
        task = progress.add_task(description, total=total)
        return lambda: progress.advance(task)

    def note(self, text: str) -> None:
        """Print a line of commentary above the bars (on a terminal only)."""
        if self._progress is not None:
            self._progress.console.print(text, highlight=False)
