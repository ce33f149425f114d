"""Deterministic large bodies, so a client can check what it received by its hash.

Byte ``i`` of every large body is ``i % 251``: a period prime to every power of two, so
a chunk that is lost, repeated or reordered changes the hash.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

__all__ = ["iter_large_body", "large_body", "large_body_sha256"]

_PERIOD = 251
_BLOCK = bytes(i % _PERIOD for i in range(_PERIOD * 263))  # 66,013 ≥ 250 + 65,536 bytes


def iter_large_body(size: int, chunk: int = 65_536) -> Iterator[bytes]:
    """Yield the ``size`` bytes of the large body in chunks of at most ``chunk`` bytes.

    Args:
        size: the body's length in bytes, ≥ 0.
        chunk: the largest piece yielded, bytes, in [1, 65,536].

    Raises:
        ValueError: a negative size or a chunk outside [1, 65,536].
    """
    if size < 0:
        msg = f"`size` must be ≥ 0 bytes, got {size!r}"
        raise ValueError(msg)
    if not 1 <= chunk <= 65_536:
        msg = f"`chunk` must be in [1, 65536] bytes, got {chunk!r}"
        raise ValueError(msg)
    sent = 0
    while sent < size:
        n = min(chunk, size - sent)
        start = sent % _PERIOD
        yield _BLOCK[start : start + n]
        sent += n


def large_body(size: int) -> bytes:
    """Return the whole large body of ``size`` bytes (see :func:`iter_large_body`)."""
    return b"".join(iter_large_body(size))


def large_body_sha256(size: int) -> str:
    """Return the hex SHA-256 of the large body of ``size`` bytes, as a client computes it."""
    digest = hashlib.sha256()
    for piece in iter_large_body(size):
        digest.update(piece)
    return digest.hexdigest()
