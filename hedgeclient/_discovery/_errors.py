"""Why a replica source failed to give a replica set: a closed set of kinds.

Strictly private, but for :data:`DiscoveryError`, which ``hedgeclient`` exports.
"""

from __future__ import annotations

from typing import Final, Literal

from hedgeclient._checks import redacted

__all__ = ["KINDS", "DiscoveryError", "DiscoveryFailure"]

DiscoveryError = Literal["not_found", "empty", "timeout", "server_error", "invalid", "source_error"]
"""Why a refresh of a service's replicas failed (the ``error`` label of
``hedgeclient_discovery_errors_total``). The last good set is kept in every case.

- ``not_found``: the DNS name does not exist (NXDOMAIN).
- ``empty``: no replica: no address record, no SRV record, every SRV target ``"."``,
  or a source that gave an empty set.
- ``timeout``: no answer in time (the source's ``timeout``).
- ``server_error``: the nameserver failed (SERVFAIL, REFUSED, unreachable, ...).
- ``invalid``: a source gave something that is not a set of replicas (a value that
  is neither an origin string nor a :class:`~hedgeclient.Replica`, a bad origin).
- ``source_error``: your source raised, or a watch
  (:class:`~hedgeclient.WatchedReplicas`) ended.

.. versionadded:: 0.1.0
"""

KINDS: Final[tuple[DiscoveryError, ...]] = (
    "not_found",
    "empty",
    "timeout",
    "server_error",
    "invalid",
    "source_error",
)


class DiscoveryFailure(Exception):
    """A refresh failed; ``kind`` says why. Strictly private: it never reaches the caller."""

    def __init__(self, message: str, *, kind: DiscoveryError) -> None:
        # Logged, and kept as the last error of statistics(): a source's exception may
        # quote a URL with its password (httpx's HTTPStatusError does).
        super().__init__(redacted(message))
        self.kind: DiscoveryError = kind
