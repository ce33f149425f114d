"""Where each attempt goes: the primary, then backups to replicas not yet tried.

A backup goes to a replica with no attempt of the same request in flight: a backup to
the same replica shares its slowness and buys nothing (docs/how-it-works.md). The
:class:`~hedgeclient.ReplicaSelector` makes the choice among the candidates.

Strictly private.
"""

from __future__ import annotations

from collections.abc import Sequence

from hedgeclient._attempt import PENDING, Attempt
from hedgeclient._replicas import ReplicaSelector

__all__ = ["choose_backup", "choose_primary"]


def choose_primary(selector: ReplicaSelector, replicas: Sequence[str] | None, origin: str) -> str:
    """The primary attempt's replica (``origin`` itself for an unconfigured origin).

    Raises:
        ValueError: the selector chose a replica it was not given.
    """
    if replicas is None:
        return origin
    chosen = selector.choose(replicas, ())
    if chosen is None:
        return replicas[0]
    if chosen not in replicas:
        raise _not_a_replica(selector, chosen, replicas)
    return chosen


def choose_backup(
    selector: ReplicaSelector,
    replicas: Sequence[str] | None,
    origin: str,
    attempts: Sequence[Attempt],
) -> str | None:
    """An untried replica if any, else one with no attempt of ours in flight; ``None``
    when every replica has one (``origin`` again for an unconfigured origin).

    Raises:
        ValueError: the selector chose a replica it was not given.
    """
    if replicas is None:  # an unconfigured origin: the same origin again
        return origin
    chosen = selector.choose(replicas, {a.replica for a in attempts})
    if chosen is None:
        busy = {a.replica for a in attempts if a.state == PENDING}
        chosen = selector.choose(replicas, busy)
    if chosen is not None and chosen not in replicas:
        raise _not_a_replica(selector, chosen, replicas)
    return chosen


def _not_a_replica(
    selector: ReplicaSelector, chosen: object, replicas: Sequence[str]
) -> ValueError:
    """The error for a selector that chose outside ``replicas`` (a bug in the selector)."""
    msg = (
        f"{selector!r}.choose() returned {chosen!r}: a ReplicaSelector must return one of "
        f"the replicas it is given ({list(replicas)!r}) or None"
    )
    return ValueError(msg)
