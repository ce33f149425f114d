"""The request extensions hedgeclient reads, and a check for near misses of them.

``extensions={"hedged": False}`` (for ``"hedge"``) would otherwise be ignored without a
word, and the request hedged: a GET meant to go once could go twice. A key that nearly
spells one of ours is refused before anything is sent; every other key (httpx's
``timeout``, ``trace``, ``sni_hostname``, another library's) passes untouched.

An error rather than a warning: the mistake is in code, the same on every call, so it
shows on the first test run; and a warning would let the request be hedged anyway.

Strictly private.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

__all__ = ["KNOWN_EXTENSIONS", "OUR_EXTENSIONS", "check_extensions", "near_miss"]

OUR_EXTENSIONS: Final = ("hedge", "hedge_decide_on", "tie")
"""The request extensions hedgeclient reads (``_policy.eligibility``, ``_policy.routes``,
``_request``)."""

_HTTPX_EXTENSIONS: Final = frozenset(
    {"timeout", "trace", "sni_hostname", "target", "http_version", "network_stream"}
)
"""Those httpx and httpcore read or set (httpx docs, "Request Extensions"): never
checked, whatever they look like."""

KNOWN_EXTENSIONS: Final = frozenset(OUR_EXTENSIONS) | _HTTPX_EXTENSIONS
"""Keys that need no look."""

_MAX_VERDICTS: Final = 1024
_verdicts: dict[str, str | None] = {}
"""Key -> our key it nearly spells, or None: keys are literals in code, so few; each is
judged once. Cleared when full, so a client building keys at run time stays bounded."""


def _one_edit(a: str, b: str) -> bool:
    """Whether ``a`` is ``b`` with one letter inserted, deleted, changed, or two
    neighbours swapped (Damerau's edits: F. J. Damerau, CACM 7(3), 1964)."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        diff = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
        if len(diff) == 1:
            return True
        i, j = diff[0], diff[-1]
        return len(diff) == 2 and j == i + 1 and a[i] == b[j] and a[j] == b[i]
    short, long = (a, b) if len(a) < len(b) else (b, a)
    i = next((k for k, (x, y) in enumerate(zip(short, long, strict=False)) if x != y), len(short))
    return short[i:] == long[i + 1 :]


def near_miss(key: str) -> str | None:
    """Return the extension of ours ``key`` nearly spells, ``""`` when it looks like
    one of ours but spells none closely, or ``None`` when it is none of our business.

    A near miss is, after lower-casing and reading ``-`` as ``_``: one of our keys
    (``"Hedge"``, ``"hedge-decide-on"``); any key starting ``hedg`` that is not ours
    (``"hedged"``, ``"hedging"``; ``"hedge_delay"``, which hedgeclient does not read);
    one edit from ``hedge`` or ``hedge_decide_on`` starting ``h`` (``"hegde"``);
    ``decide_on``; ``ties`` or ``tied``. Nothing else: a short key such as ``tie`` is
    one edit from many words (``time``, ``tip``), so only its two inflections count.
    """
    norm = key.lower().replace("-", "_")
    if norm in OUR_EXTENSIONS:
        return norm
    if norm in ("decide_on", "decideon"):
        return "hedge_decide_on"
    if norm in ("ties", "tied"):
        return "tie"
    edits = norm.startswith("h") and [ours for ours in OUR_EXTENSIONS[:2] if _one_edit(norm, ours)]
    if edits:
        return edits[0]
    if not norm.startswith("hedg"):
        return None
    squashed = norm.replace("_", "")
    if squashed in ("hedged", "hedges", "hedging", "hedgeing"):
        return "hedge"
    if any(word in squashed for word in ("decid", "first", "byte")):
        return "hedge_decide_on"
    return ""


def check_extensions(extensions: Mapping[str, object]) -> None:
    """Refuse a request whose extensions hold a near miss of one of ours.

    The request path calls it only when the extensions hold more than httpx's
    ``timeout`` (which ``httpx.AsyncClient`` sets on every request), so most requests
    pay a length check and one dict lookup (docs/benchmarks.md has the count).

    Raises:
        ValueError: a key nearly spells one of ours (see :func:`near_miss`); the
            message names the key, the one it nearly spells if any, and our keys.
    """
    for key in extensions:
        if key in KNOWN_EXTENSIONS or not isinstance(key, str):
            continue
        if key in _verdicts:
            meant = _verdicts[key]
        else:
            if len(_verdicts) >= _MAX_VERDICTS:
                _verdicts.clear()
            meant = _verdicts[key] = near_miss(key)
        if meant is not None:
            ours = ", ".join(repr(k) for k in OUR_EXTENSIONS)
            guess = f": did you mean {meant!r}?" if meant else ""
            msg = (
                f"`extensions[{key!r}]` is not an extension hedgeclient reads{guess} "
                f"(hedgeclient reads {ours}; other keys pass untouched)"
            )
            raise ValueError(msg)
