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


def check_int(name: str, value: object, minimum: int) -> int:
    """Return ``value``; raise TypeError unless an int (not bool), ValueError below ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int):
        msg = f"`{name}` must be an int, got {value!r}"
        raise TypeError(msg)
    if value < minimum:
        msg = f"`{name}` must be >= {minimum}, got {value!r}"
        raise ValueError(msg)
    return value
