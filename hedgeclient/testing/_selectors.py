"""A deterministic replica selector for tests.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import final

from hedgeclient import AttemptResult

__all__ = ["FirstReplica"]


@final
class FirstReplica:
    """A :class:`~hedgeclient.ReplicaSelector` that picks the first eligible replica.

    The primary attempt always goes to the first configured replica, the first backup
    to the second, and so on, so a test knows which replica each attempt reaches
    (``replica_overrides={0: slow}`` makes the primary slow). Not for production: it
    neither spreads load nor passes over failing replicas.

    .. versionadded:: 0.1.0
    """

    def choose(self, replicas: Sequence[str], exclude: Collection[str]) -> str | None:
        """Return the first of ``replicas`` not in ``exclude``, or ``None``."""
        return next((r for r in replicas if r not in exclude), None)

    def attempt_started(self, replica: str) -> None:
        """Ignored: this selector keeps no state."""

    def attempt_finished(
        self,
        replica: str,
        *,
        result: AttemptResult,
    ) -> None:
        """Ignored: this selector keeps no state."""
