"""Argument checks shared by the configurable pieces; messages name the parameter.

Strictly private.
"""

from __future__ import annotations

__all__ = ["check_int", "check_number"]


def check_number(name: str, value: object) -> float:
    """Return ``value`` as a float; raise TypeError unless it is an int or float (not bool)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        msg = f"`{name}` must be a number, got {value!r}"
        raise TypeError(msg)
    return float(value)


def check_int(name: str, value: object, minimum: int, maximum: int | None = None) -> int:
    """Return ``value``; raise TypeError unless an int (not bool), ValueError out of range.

    The range is ``[minimum, maximum]``, or ``>= minimum`` when ``maximum`` is None.
    """
    bounds = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
    if isinstance(value, bool) or not isinstance(value, int):
        kind = "an int" if maximum is None else f"an int {bounds}"
        msg = f"`{name}` must be {kind}, got {value!r}"
        raise TypeError(msg)
    if value < minimum or (maximum is not None and value > maximum):
        msg = f"`{name}` must be {bounds}, got {value!r}"
        raise ValueError(msg)
    return value
