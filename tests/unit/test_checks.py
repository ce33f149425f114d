"""_checks: the one set of validators; each message names the parameter, unit and range."""

from __future__ import annotations

import math
import numbers
import re
from fractions import Fraction
from typing import Any

import pytest

from hedgeclient._checks import (
    as_seconds,
    check_int,
    check_number,
    check_optional_int,
    check_seconds,
    parse_statuses,
    redacted,
    shown,
)

T, V = TypeError, ValueError


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        # two-sided, no unit: "in (0, 1)"
        (lambda: check_number("q", 1.5, low=0, high=1, low_open=True, high_open=True), V,
         "`q` must be in (0, 1), got 1.5"),
        (lambda: check_number("q", "x", low=0, high=1, low_open=True, high_open=True), T,
         "`q` must be a number in (0, 1), got 'x'"),
        # one-sided: "a finite number >= 1"
        (lambda: check_number("burst", math.inf, low=1), V,
         "`burst` must be a finite number >= 1, got inf"),
        (lambda: check_number("burst", None, low=1), T, "`burst` must be a number >= 1, got None"),
        # no bound at all
        (lambda: check_number("offset", math.nan, unit="seconds"), V,
         "`offset` must be a finite number of seconds, got nan"),
        # seconds: [0, 1 hour] by default, math.inf when allowed
        (lambda: check_seconds("window", 60000, low_open=True), V,
         "`window` must be a number of seconds in (0, 3600], got 60000"),
        (lambda: check_seconds("max_delay", -1, allow_inf=True), V,
         "`max_delay` must be a number of seconds in [0, 3600] or math.inf, got -1"),
        (lambda: check_seconds("max_delay", -math.inf, allow_inf=True), V,
         "`max_delay` must be a number of seconds in [0, 3600] or math.inf, got -inf"),
        # a bound that is another parameter, and None accepted by the caller
        (lambda: check_number("cap", 0.001, low=0.005, unit="seconds", bounds=">= scale",
                              or_none=True), V,
         "`cap` must be a finite number of seconds >= scale or None, got 0.001"),
        # a bool is never a number; plain refuses what is not an int or a float
        (lambda: check_number("p", True, low=0, high=1), T,
         "`p` must be a number in [0, 1], got True"),
        (lambda: check_number("p", Fraction(1, 2), low=0, high=1, plain=True), T,
         "`p` must be a number in [0, 1], got Fraction(1, 2)"),
        # ints
        (lambda: check_int("buckets", 0, 1, 1000), V, "`buckets` must be in [1, 1000], got 0"),
        (lambda: check_int("buckets", 2.0, 1, 1000), T,
         "`buckets` must be an int in [1, 1000], got 2.0"),
        (lambda: check_int("keep", True, 1), T, "`keep` must be an int >= 1, got True"),
        (lambda: check_int("size", -1, 0, unit="bytes"), V, "`size` must be >= 0 bytes, got -1"),
        (lambda: check_int("seed", "x", None), T, "`seed` must be an int, got 'x'"),
        (lambda: check_optional_int("max_in_flight", 0, 1), V,
         "`max_in_flight` must be >= 1 or None, got 0"),
        (lambda: check_optional_int("max_in_flight", 1.5, 1), T,
         "`max_in_flight` must be an int >= 1 or None, got 1.5"),
        # a number too long to print whole: its magnitude, never hundreds of digits
        (lambda: check_number("q", 10**400, low=0, high=1), V,
         "`q` must be in [0, 1], got 1.000e+400 (an int of 401 digits)"),
        (lambda: check_seconds("window", -(10**400)), V,
         "`window` must be a number of seconds in [0, 3600], got -1.000e+400 (an int of 401 "
         "digits)"),
        (lambda: check_number("burst", Fraction(10**400, 3), low=1), V,
         "`burst` must be a finite number >= 1, got about 3.333e+399 (a Fraction)"),
        (lambda: check_int("buckets", 10**400, 1, 1000), V,
         "`buckets` must be in [1, 1000], got 1.000e+400 (an int of 401 digits)"),
        (lambda: check_int("buckets", "x" * 100, 1, 1000), T,
         "`buckets` must be an int in [1, 1000], got 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx... "
         "(102 characters)"),
    ],
)  # fmt: skip
def test_messages_name_parameter_unit_and_range(
    call: Any, error: type[Exception], message: str
) -> None:
    """Each refusal's whole message names the parameter, the unit, the range and the value."""
    with pytest.raises(error, match=rf"^{re.escape(message)}$"):
        call()


def test_accepted_values_come_back_as_floats_or_ints() -> None:
    """A Fraction is seconds as a float; math.inf passes where allowed; ints stay ints."""
    assert check_seconds("window", Fraction(1, 4)) == 0.25
    assert check_seconds("max_delay", math.inf, allow_inf=True) == math.inf
    assert check_number("p", 1, low=0, high=1, plain=True) == 1.0
    assert repr(check_seconds("delay", -0.0)) == "0.0"  # not -0.0 (it reached HedgeInfo)
    assert check_int("seed", -7, None) == -7
    assert check_optional_int("max_in_flight", None, 1) is None


class _Integral:
    """An integer that is no ``int``, as numpy's ``int64`` is (``numbers.Integral``)."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __int__(self) -> int:
        return self.value


numbers.Integral.register(_Integral)


def test_any_integer_is_an_int_and_comes_back_as_one() -> None:
    """An integer that is no ``int`` (numpy's) passes an int parameter, as an ``int``,
    as it passes a float one (a user's array of settings: found by a new user)."""
    found = check_int("min_samples", _Integral(50), 1)
    assert (type(found), found) == (int, 50)
    with pytest.raises(ValueError, match=r"^`min_samples` must be >= 1, got "):
        check_int("min_samples", _Integral(0), 1)


def test_an_int_too_large_for_a_float_is_no_infinity() -> None:
    """``math.inf`` passes where allowed, an int beyond a float's range is refused like
    any other number above the range (it was taken as math.inf: found by a new user)."""
    assert check_seconds("max_delay", math.inf, allow_inf=True) == math.inf
    for value in (10**400, 10**20):
        with pytest.raises(ValueError, match=r"^`max_delay` must be a number of seconds in "):
            check_seconds("max_delay", value, allow_inf=True)


def test_as_seconds() -> None:
    """Real numbers become floats (huge ints: an infinity of their sign); others None."""
    assert as_seconds(Fraction(3, 100)) == 0.03
    assert as_seconds(-(10**400)) == -math.inf
    assert as_seconds(True) is None
    assert as_seconds("1") is None
    assert as_seconds(Fraction(1, 2), plain=True) is None
    assert as_seconds(2, plain=True) == 2.0


def test_an_int_too_long_for_repr_is_refused_by_name() -> None:
    """An int of more digits than Python prints (4,300) gives the parameter's message,
    not the ValueError of ``repr`` from inside the check (found by a new user)."""
    message = (
        "`window` must be a number of seconds in (0, 3600], got 1.000e+5000 (an int of 5001 digits)"
    )
    with pytest.raises(ValueError, match=rf"^{re.escape(message)}$"):
        check_seconds("window", 10**5000, low_open=True)
    message = "`buckets` must be in [1, 1000], got -1.000e+5000 (an int of 5001 digits)"
    with pytest.raises(ValueError, match=rf"^{re.escape(message)}$"):
        check_int("buckets", -(10**5000), 1, 1000)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("'http://admin:s3cret@10.0.0.7:8080'", "'http://admin:***@10.0.0.7:8080'"),
        ("['http://a:b@h', 'x@y']", "['http://a:***@h', 'x@y']"),  # one URL of a list
        ("https://TOKEN@host/p", "https://***@host/p"),  # a user alone may be a token
        ("http://a:p@ss@h:1/x", "http://a:***@h:1/x"),  # an "@" in the password
        ("'admin:s3cret@h:1'", "'admin:***@h:1'"),  # no scheme: httpx reads one
        ("https://h/x?a=b@c", "https://h/x?a=b@c"),  # an "@" in the query is no userinfo
        ("mail me: bob@x.org", "mail me: bob@x.org"),  # no URL at all
    ],
)
def test_redacted_masks_every_url_password(text: str, expected: str) -> None:
    """A URL's password never reaches a message or a log line (found by a new user: a
    replica origin with credentials was echoed whole); the user stays, to tell accounts
    apart, unless it stands alone (a token)."""
    assert redacted(text) == expected


def test_shown_abbreviates_and_redacts() -> None:
    """``shown`` gives a short repr, never a password, whatever the value's length."""
    assert shown("http://admin:s3cret@10.0.0.7:8080") == "'http://admin:***@10.0.0.7:8080'"
    long = shown(["http://admin:s3cret@host"] * 20)
    assert "s3cret" not in long
    assert long == "['http://admin:***@host', 'http://admin:... (500 characters)"
    assert shown(Fraction(1, 3)) == "Fraction(1, 3)"


def test_statuses_take_any_integer_as_an_int() -> None:
    """``non_fatal_statuses`` takes any ``numbers.Integral`` (numpy's ``int64``), as
    ``max_hedges`` does, and keeps plain ints (found by a new user)."""
    parsed = parse_statuses([_Integral(503), 502])
    assert parsed == {502, 503}
    assert {type(s) for s in parsed} == {int}
    with pytest.raises(ValueError, match=r"^`non_fatal_statuses` must hold error statuses in "):
        parse_statuses([_Integral(200)])
    with pytest.raises(TypeError, match=r"^`non_fatal_statuses` must hold ints in \[400, 599\], "):
        parse_statuses([503.0])
