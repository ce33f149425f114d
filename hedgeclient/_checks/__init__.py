"""Argument checks, in one place: each names the parameter, the unit and the range.

Every configurable piece of hedgeclient checks its arguments at construction with
these, so that every message has one shape ("`quantile` must be in (0, 1), got 1.5"):

- :mod:`~hedgeclient._checks.numbers`: counts, ratios and times (seconds);
- :mod:`~hedgeclient._checks.values`: names, headers, methods, statuses, callables
  and choices;
- :mod:`~hedgeclient._checks.text`: values as the messages show them (short, and
  never a URL's password);
- :mod:`~hedgeclient._checks.transport`: ``HedgedTransport``'s own arguments and the
  parts they build (its inner transport, delay policy, budget, selector, routes,
  zones, ``max_hedges`` and ``extra_load``). It imports the policies it builds, so
  it is imported by its path, never re-exported here: the pieces it builds import
  this package.

This package re-exports the first three, which import nothing of hedgeclient's but the
base modules (``tests/test_layers.py``).
"""

from hedgeclient._checks.numbers import (
    HOUR,
    as_seconds,
    check_delay,
    check_int,
    check_number,
    check_optional_int,
    check_seconds,
)
from hedgeclient._checks.text import redacted, shown
from hedgeclient._checks.values import (
    KNOWN_METHODS,
    check_attempt_header,
    check_bool,
    check_clock,
    check_hooks,
    check_name,
    check_other_origins,
    check_route_key,
    parse_methods,
    parse_statuses,
)

__all__ = [
    "HOUR",
    "KNOWN_METHODS",
    "as_seconds",
    "check_attempt_header",
    "check_bool",
    "check_clock",
    "check_delay",
    "check_hooks",
    "check_int",
    "check_name",
    "check_number",
    "check_optional_int",
    "check_other_origins",
    "check_route_key",
    "check_seconds",
    "parse_methods",
    "parse_statuses",
    "redacted",
    "shown",
]
