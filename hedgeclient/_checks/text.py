"""Values as messages show them: one short line, and never a URL's credentials.

Every refusal of hedgeclient (a ``TypeError`` or ``ValueError`` at construction or as a
request starts) gives the bad value after "got", and some log lines give an origin. A
message stays one line under about 200 characters (a 401-digit int, a 300-character
string, a list of a thousand items are abbreviated), and the password of a URL's userinfo
(``http://admin:s3cret@10.0.0.7:8080``) is never printed: it reaches logs, tracebacks and
bug reports (``admin:***@``, as httpx's ``URL.__repr__`` writes ``[secure]``).
"""

from __future__ import annotations

import numbers
import re
from decimal import Decimal

__all__ = ["redacted", "shown"]

_SHOWN = 40  # the longest repr a message gives whole, in characters

# The userinfo of a URL in a text: after "//", up to the last "@" before the host
# (RFC 3986, section 3.2.1), stopping at a path, a query, a fragment or a quote, so
# that a list's repr is not read as one URL; or, with no "//" (httpx reads
# "admin:s3cret@host:1" as a scheme and a path), a "user:password@" starting a word.
_USERINFO = re.compile(r"//([^/?#@'\"]*(?:@[^/?#@'\"]*)*)@")
_BARE = re.compile(r"(^|[\s'\"(\[,=])([^/?#@\s'\"]+):[^/?#@\s'\"]*@")


def _mask(match: re.Match[str]) -> str:
    user, colon, _password = match.group(1).partition(":")
    # "user:password@": the user stays, to tell the accounts apart. A user alone may be
    # a token (https://TOKEN@host): it is masked whole.
    return f"//{user}:***@" if colon else "//***@"


def redacted(text: str) -> str:
    """``text`` with every URL's userinfo password replaced by ``***``
    (``http://admin:***@10.0.0.7:8080``); a userinfo of a user alone, which may be a
    token, is masked whole (``http://***@host``)."""
    if "@" not in text:
        return text
    return _BARE.sub(r"\1\2:***@", _USERINFO.sub(_mask, text))


def shown(value: object) -> str:
    """``value`` as a message gives it after "got": its ``repr``, or, when that is
    longer than 40 characters, a number's magnitude (``1.000e+400 (an int of 401
    digits)``, ``about 3.333e+399 (a Fraction)``) or the repr's start and length: a
    message stays one short line. An int too large for ``repr`` (over 4,300 digits)
    is shown too. A URL's password is never shown (:func:`redacted`)."""
    if isinstance(value, numbers.Rational) and not isinstance(value, bool):
        if isinstance(value, numbers.Integral):
            numerator, denominator = int(value), 1
        else:
            numerator, denominator = int(value.numerator), int(value.denominator)
        if abs(numerator) < 10**_SHOWN and denominator < 10**_SHOWN:
            return repr(value)
        about = Decimal(numerator) / Decimal(denominator)
        if denominator == 1:
            return f"{about:.3e} (an int of {about.adjusted() + 1} digits)"
        return f"about {about:.3e} (a {type(value).__name__})"
    text = redacted(repr(value))
    if len(text) <= _SHOWN and "\n" not in text:
        return text
    return f"{text[:_SHOWN].splitlines()[0]}... ({len(text)} characters)"
