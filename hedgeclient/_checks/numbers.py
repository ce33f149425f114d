"""Numbers: the checks of every count, ratio and time parameter, in one message shape.

Every configurable piece of hedgeclient (the delay policies, the histogram, the budget,
the replica selector, the metrics, the fake server's configuration) checks its numbers
here, at construction, so that every message has one shape:

- ``TypeError``: "`name` must be a number of seconds in (0, 3600], got '5s'";
- ``ValueError``: "`name` must be a number of seconds in (0, 3600], got 60000",
  "`name` must be a finite number >= 1, got inf", "`name` must be in (0, 1), got 1.5".

A number is any ``numbers.Real`` but a bool (``int``, ``float``, ``Fraction``, numpy's
scalars), returned as a float; ``plain=True`` narrows that to ``int`` and ``float``,
for the fake server's frozen configuration dataclasses, which keep the value as given
(it is compared, hashed, printed and pickled to the subprocess of process mode, so it
stays a built-in).

"""

from __future__ import annotations

import math
import numbers

from hedgeclient._checks.text import shown

__all__ = [
    "HOUR",
    "as_seconds",
    "check_delay",
    "check_int",
    "check_number",
    "check_optional_int",
    "check_seconds",
]

HOUR = 3600.0
"""The longest plausible time parameter, in seconds: windows, delays, cool-downs.

Larger values are refused rather than taken as hours: they are almost always
milliseconds written where seconds are expected (``window=60000``).
"""


def as_seconds(value: object, *, plain: bool = False) -> float | None:
    """Return a real number as a float, or None for anything else.

    Any ``numbers.Real`` but a bool is a number: ``int``, ``float``, ``Fraction``, and
    numpy's scalars, which register there (only ``int`` and ``float`` if ``plain``). An
    int too large for a float gives an infinity of its sign, for the caller's range
    check to refuse (or accept) by name.
    """
    if isinstance(value, bool):
        return None
    if plain:
        if not isinstance(value, (int, float)):
            return None
    elif not isinstance(value, numbers.Real):
        return None
    try:
        return float(value)
    except OverflowError:
        return -math.inf if value < 0 else math.inf


def _fmt(bound: float) -> str:
    """A bound as messages print it: ``0``, ``1``, ``3600``, ``0.5``."""
    return str(int(bound)) if float(bound).is_integer() else repr(float(bound))


def _range(low: float, high: float, low_open: bool, high_open: bool) -> str:
    """The range as messages print it: ``in (0, 1]``, ``>= 0``, ``< 5``, or ``""``."""
    if math.isfinite(low) and math.isfinite(high):
        left, right = "(" if low_open else "[", ")" if high_open else "]"
        return f"in {left}{_fmt(low)}, {_fmt(high)}{right}"
    if math.isfinite(low):
        return f"{'>' if low_open else '>='} {_fmt(low)}"
    if math.isfinite(high):
        return f"{'<' if high_open else '<='} {_fmt(high)}"
    return ""


def check_number(
    name: str,
    value: object,
    *,
    low: float = -math.inf,
    high: float = math.inf,
    low_open: bool = False,
    high_open: bool = False,
    unit: str = "",
    allow_inf: bool = False,
    or_none: bool = False,
    bounds: str | None = None,
    plain: bool = False,
) -> float:
    """Return ``value`` as a float if it is a number in the range; raise otherwise.

    Args:
        name: the parameter, as the messages name it.
        value: the argument.
        low: the lower bound (``-math.inf``: none).
        high: the upper bound (``math.inf``: none).
        low_open: whether ``low`` itself is refused.
        high_open: whether ``high`` itself is refused.
        unit: the unit the messages give ("seconds"), or ``""``.
        allow_inf: also accept ``math.inf`` (meaning "no limit"); NaN never is.
        or_none: say in the messages that ``None`` is also accepted (the caller
            handles ``None`` before calling).
        bounds: the range as the messages print it, when a bound is another
            parameter (``"in (0, every=0.6)"``); default: built from the bounds.
        plain: accept only ``int`` and ``float`` (see the module docstring).

    Raises:
        TypeError: ``value`` is not a number (a bool never is).
        ValueError: ``value`` is NaN, infinite (unless ``allow_inf``) or out of range.
    """
    text = _range(low, high, low_open, high_open) if bounds is None else bounds
    two_sided = math.isfinite(low) and math.isfinite(high)
    kind = f"a number of {unit}" if unit else "a number"
    tail = (" or math.inf" if allow_inf else "") + (" or None" if or_none else "")
    number = as_seconds(value, plain=plain)
    if number is None:
        msg = f"`{name}` must be {' '.join(filter(None, (kind, text)))}{tail}, got {shown(value)}"
        raise TypeError(msg)
    if allow_inf and number == math.inf and not isinstance(value, numbers.Rational):
        return number  # math.inf itself; an int (Fraction) too large for a float is refused
    if not (
        math.isfinite(number)
        and (number > low if low_open else number >= low)
        and (number < high if high_open else number <= high)
    ):
        if two_sided:
            what = f"{kind} {text}" if unit else text
        else:
            what = f"{kind if allow_inf else kind.replace('a ', 'a finite ', 1)} {text}"
        msg = f"`{name}` must be {what.strip()}{tail}, got {shown(value)}"
        raise ValueError(msg)
    return number + 0.0  # -0.0 is 0.0 (it reached HedgeInfo.delay as given)


def check_seconds(
    name: str,
    value: object,
    *,
    low: float = 0.0,
    high: float = HOUR,
    low_open: bool = False,
    allow_inf: bool = False,
    or_none: bool = False,
) -> float:
    """Return a time parameter as float seconds, in ``[low, high]`` (``(low, high]``).

    The default range is [0, 1 hour] (:data:`HOUR`): see there why longer is refused.

    Raises:
        TypeError: ``value`` is not a number.
        ValueError: ``value`` is out of range, NaN, or infinite (unless ``allow_inf``).
    """
    return check_number(
        name,
        value,
        low=low,
        high=high,
        low_open=low_open,
        unit="seconds",
        allow_inf=allow_inf,
        or_none=or_none,
    )


def _int_range(minimum: int | None, maximum: int | None, unit: str) -> str:
    if minimum is None:
        text = "" if maximum is None else f"<= {maximum}"
    elif maximum is None:
        text = f">= {minimum}"
    else:
        text = f"in [{minimum}, {maximum}]"
    return f"{text} {unit}".strip() if unit else text


def check_int(
    name: str,
    value: object,
    minimum: int | None,
    maximum: int | None = None,
    *,
    unit: str = "",
    or_none: bool = False,
) -> int:
    """Return ``value`` as an ``int`` if it is an integer (any ``numbers.Integral``,
    numpy's too, but a bool) in ``[minimum, maximum]``.

    Args:
        name: the parameter, as the messages name it.
        value: the argument.
        minimum: the lowest value allowed; ``None`` for no bound.
        maximum: the highest value allowed; ``None`` for no bound.
        unit: the unit the messages give after the range ("bytes"), or ``""``.
        or_none: say in the messages that ``None`` is also accepted.

    Raises:
        TypeError: ``value`` is not an integer (a bool is not).
        ValueError: ``value`` is out of range.
    """
    bounds = _int_range(minimum, maximum, unit)
    tail = " or None" if or_none else ""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        kind = " ".join(filter(None, ("an int", bounds)))
        msg = f"`{name}` must be {kind}{tail}, got {shown(value)}"
        raise TypeError(msg)
    number = int(value)
    if (minimum is not None and number < minimum) or (maximum is not None and number > maximum):
        msg = f"`{name}` must be {bounds}{tail}, got {shown(value)}"
        raise ValueError(msg)
    return number


def check_optional_int(
    name: str, value: object, minimum: int | None, maximum: int | None = None
) -> int | None:
    """Return ``None`` for ``None``, else :func:`check_int` (whose messages add "or None")."""
    if value is None:
        return None
    return check_int(name, value, minimum, maximum, or_none=True)


def check_delay(value: object, parameter: str, expected: str) -> float:
    """Return ``value`` as float seconds if it is a finite number ≥ 0, else raise.

    No upper bound: a :class:`~hedgeclient.DelayPolicy` may answer any finite delay (the
    bound on a fixed delay is :class:`~hedgeclient.FixedDelay`'s ``max_delay``).

    Args:
        value: the candidate delay.
        parameter: the parameter name the messages give (``"delay"``, ``"seconds"``).
        expected: what the TypeError says is allowed (``"a number of seconds"``).

    Raises:
        TypeError: ``value`` is not a real number (``numbers.Real``; bools are refused).
        ValueError: ``value`` is negative, NaN or infinite.
    """
    if as_seconds(value) is None:
        msg = f"`{parameter}` must be {expected}, got {shown(value)}"
        raise TypeError(msg)
    return check_number(parameter, value, low=0.0, unit="seconds")
