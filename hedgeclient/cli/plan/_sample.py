"""``hedgeclient plan``: read the latency sample, in seconds, and check its unit.

A sample file holds one latency per line (blank lines and ``#`` comments skipped), or
is a CSV file read by ``--column``; ``-`` is stdin. Bare numbers are in ``--unit``,
seconds by default, as everywhere on the command line.

Strictly private: the command line is the interface.
"""

from __future__ import annotations

import csv
import math
import sys
from collections.abc import Iterator, Sequence
from typing import IO

from hedgeclient import analysis
from hedgeclient.cli._args import UsageError
from hedgeclient.cli._output import warn

__all__ = ["UNITS", "check_unit", "read_sample"]

UNITS = {"ms": 1000.0, "s": 1.0}
"""Input units: how many of them make one second."""

_LOOKS_LIKE_MS = 1.0
"""A sample read in seconds whose median is at least this (seconds) looks like ms: an
HTTP call's median latency is rarely a second, a millisecond count often a thousand."""

_LOOKS_LIKE_S = 0.05e-3
"""A sample read in milliseconds whose median is below this (seconds) looks like s."""


def read_sample(path: str, unit: str, column: str | None) -> list[float]:
    """Read latencies from ``path`` (``-``: stdin), converted to seconds.

    Raises:
        UsageError: the file cannot be read, holds no latency, or a value that is not
            a finite latency >= 0 (the message gives its line).
    """
    scale = UNITS[unit]
    try:
        if path == "-":
            values = list(_parse(sys.stdin, path, unit, column))
        else:
            with open(path, encoding="utf-8", newline="") as stream:
                values = list(_parse(stream, path, unit, column))
    except OSError as exc:
        msg = f"cannot read {path!r}: {exc.strerror or exc}"
        raise UsageError(msg) from exc
    except UnicodeDecodeError as exc:
        msg = f"cannot read {path!r}: not UTF-8 text ({exc.reason})"
        raise UsageError(msg) from exc
    if not values:
        msg = f"{path}: no latency values (blank lines and # comments are skipped)"
        raise UsageError(msg)
    return [value / scale for value in values]


def check_unit(sample: Sequence[float], unit: str, source: str, *, explicit: bool) -> None:
    """Refuse a sample read in seconds by default that looks like milliseconds; warn
    (stderr) when one read in milliseconds looks like seconds.

    A median of a second or more read without ``--unit`` is far more often a file of
    milliseconds than of seconds, and the report would print it a thousand times too
    large: the user must say which it is. ``--unit s`` given explicitly is taken at its
    word.

    Raises:
        UsageError: ``unit`` is the default seconds (not ``explicit``) and the median
            is at least :data:`_LOOKS_LIKE_MS` seconds.
    """
    median = analysis.quantile(sample, 0.5)
    if unit == "s" and not explicit and median >= _LOOKS_LIKE_MS:
        msg = (
            f"{source}: read as seconds (the default), the median latency is {median:g} s: "
            "give --unit ms if the values are milliseconds, --unit s if they are seconds"
        )
        raise UsageError(msg)
    if unit == "ms" and median < _LOOKS_LIKE_S:
        warn(
            f"{source}: the median latency is {median * 1000:g} ms; "
            "if the values are seconds, drop --unit ms"
        )


def _parse(stream: IO[str], path: str, unit: str, column: str | None) -> Iterator[float]:
    """Yield the latencies of ``stream``, in ``unit``, checking each one."""
    if column is None:
        for line_number, line in enumerate(stream, start=1):
            text = line.split("#", 1)[0].strip()
            if text:
                yield _latency(text, path, line_number, unit)
        return
    # Comment lines become empty rows, which are skipped but still counted in line_num.
    reader = csv.reader("\n" if line.lstrip().startswith("#") else line for line in stream)
    header = next((row for row in reader if row), None)
    if header is None:
        return
    names = [name.strip() for name in header]
    if column not in names:
        msg = f"{path}: no column {column!r}; columns: {', '.join(names)}"
        raise UsageError(msg)
    index = names.index(column)
    for row in reader:
        if row:
            text = row[index].strip() if index < len(row) else ""
            yield _latency(text, path, reader.line_num, unit)


def _latency(text: str, path: str, line_number: int, unit: str) -> float:
    try:
        value = float(text)
    except ValueError:
        msg = f"{path}, line {line_number}: expected a latency in {unit}, got {text!r}"
        raise UsageError(msg) from None
    if not math.isfinite(value) or value < 0:
        msg = f"{path}, line {line_number}: a latency must be finite and >= 0, got {text!r}"
        raise UsageError(msg)
    return value
