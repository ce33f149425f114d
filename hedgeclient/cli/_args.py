"""The command line's one set of argument checks, and its user error.

Every subcommand reads its options as text and checks them here, so that the same
mistake gets the same message everywhere: an error names the flag, the value given
(``!r``) and what is allowed, on one line.

Units: every duration on the command line is **seconds** unless it carries a unit
(``30ms``, ``0.03s``), as in the library. :func:`duration` parses one.

Strictly private: the command line is the interface.
"""

from __future__ import annotations

import math
import re

__all__ = [
    "UsageError",
    "choice",
    "duration",
    "integer",
    "number",
    "probability",
]

_DURATION = re.compile(r"^\s*(?P<number>[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(?P<unit>ms|s)?\s*$")
_SCALE = {"ms": 1000.0, "s": 1.0}
"""How many of each unit make one second."""


class UsageError(Exception):
    """A user error: printed as ``hedgeclient: error: <message>``, exit status 2."""


def integer(text: str, flag: str, minimum: int, maximum: int | None = None) -> int:
    """Parse an integer flag in ``[minimum, maximum]`` (no upper bound when None).

    Raises:
        UsageError: not an integer, or out of range.
    """
    try:
        value: int | None = int(text)
    except ValueError:
        value = None
    if value is None or value < minimum or (maximum is not None and value > maximum):
        allowed = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
        msg = f"{flag} must be an integer {allowed}, got {text!r}"
        raise UsageError(msg)
    return value


def number(text: str, flag: str) -> float:
    """Parse a finite number.

    Raises:
        UsageError: not a finite number.
    """
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        msg = f"{flag} must be a number, got {text!r}"
        raise UsageError(msg)
    return value


def probability(text: str, flag: str, *, closed: bool = False) -> float:
    """Parse a number in (0, 1), or in [0, 1] when ``closed``.

    Raises:
        UsageError: not a number, or out of range.
    """
    value = number(text, flag)
    if not (0 <= value <= 1 if closed else 0 < value < 1):
        allowed = "[0, 1]" if closed else "(0, 1)"
        msg = f"{flag} must be in {allowed}, got {text!r}"
        raise UsageError(msg)
    return value


def choice(text: str, flag: str, allowed: tuple[str, ...]) -> str:
    """Return ``text`` if it is one of ``allowed``.

    Raises:
        UsageError: anything else.
    """
    if text not in allowed:
        msg = f"{flag} must be one of {', '.join(allowed)}, got {text!r}"
        raise UsageError(msg)
    return text


def duration(text: str, flag: str, *, unit: str = "s", maximum: float | None = None) -> float:
    """Parse a duration: ``30ms``, ``0.03s``, or a bare number in ``unit``; return seconds.

    Args:
        text: the value as typed.
        flag: the flag's name, for the message.
        unit: the unit of a bare number, ``"s"`` (the default) or ``"ms"``.
        maximum: the largest value allowed, seconds; None for no bound.

    Returns:
        The duration in seconds, >= 0.

    Raises:
        UsageError: not a non-negative finite duration, or above ``maximum`` (the
            message then says how to write milliseconds).
    """
    match = _DURATION.match(text)
    value = float(match["number"]) if match else math.nan
    if match is None or not math.isfinite(value):
        msg = f"{flag} must be a duration such as '30ms' or '0.03' (seconds), got {text!r}"
        raise UsageError(msg)
    seconds = value / _SCALE[match["unit"] or unit]
    if maximum is not None and seconds > maximum:  # the pattern has no sign: never < 0
        msg = (
            f"{flag} is in seconds and must be in [0, {maximum:g}] "
            f"(write '30ms' for milliseconds), got {text!r}"
        )
        raise UsageError(msg)
    return seconds
