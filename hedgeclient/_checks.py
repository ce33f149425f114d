"""Argument checks shared by the configurable pieces; messages name the parameter.

Strictly private.
"""

from __future__ import annotations

import math
import numbers

__all__ = ["as_seconds", "check_int", "check_number"]


def as_seconds(value: object) -> float | None:
    """Return a real number as a float, or None for anything else.

    Any ``numbers.Real`` but a bool is a number: ``int``, ``float``, ``Fraction``, and
    numpy's scalars, which register there. An int too large for a float gives an
    infinity of its sign, for the caller's range check to refuse (or accept) by name.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    try:
        return float(value)
    except OverflowError:
        return -math.inf if value < 0 else math.inf


def check_number(name: str, value: object) -> float:
    """Return ``value`` as a float; raise TypeError unless a real number (not a bool)."""
    number = as_seconds(value)
    if number is None:
        msg = f"`{name}` must be a number, got {value!r}"
        raise TypeError(msg)
    return number


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
