"""Latency laws from text: the ``--latency`` string and a sample file.

The string form (seconds everywhere)::

    lab                                       the lab sample of docs/how-it-works.md
    0.005  or  constant:0.005                 every request takes 5 ms
    lognormal:median=0.01,sigma=1
    pareto:scale=0.005,alpha=1.5[,cap=2]
    pauses:service=0.005,pause=0.2,p=0.01     5 ms, plus 200 ms with probability 1%
    empirical:0.010=40,0.012=25               run lengths, seconds=count
    file:PATH[,unit=ms]                       one latency per line (seconds by default)
    mix:0.9*constant:0.005|0.1*lognormal:median=0.05,sigma=0.5

A sample file holds one latency per line; blank lines and lines starting with ``#``
are skipped. Its unit is seconds unless ``unit="ms"``.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import math
import os
from typing import Literal

from hedgeclient.testing._empirical import LAB, Empirical
from hedgeclient.testing._laws import Constant, LatencyLaw, LogNormal, Pareto
from hedgeclient.testing._mixtures import Mixture, Pauses

__all__ = ["load_sample", "parse_law"]

_FORMS = "'lab', '0.005', 'constant:0.005', 'lognormal:median=0.01,sigma=1', 'pareto:...', "
_FORMS += "'pauses:...', 'empirical:0.010=40,...', 'file:PATH[,unit=ms]', 'mix:W*LAW|W*LAW'"


def _number(field: str, raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        msg = f"`latency` parameter `{field}` must be a finite number, got {raw!r}"
        raise ValueError(msg)
    return value


def _params(body: str, allowed: tuple[str, ...], required: int) -> list[float]:
    values: dict[str, float] = {}
    for item in filter(None, body.split(",")):
        name, sep, raw = item.partition("=")
        name = name.strip()
        if not sep or name not in allowed:
            msg = f"`latency` parameter must be one of {', '.join(allowed)} as NAME=VALUE, "
            msg += f"got {item!r}"
            raise ValueError(msg)
        values[name] = _number(name, raw.strip())
    missing = [name for name in allowed[:required] if name not in values]
    if missing:
        msg = f"`latency` needs parameter `{missing[0]}`, got {body!r}"
        raise ValueError(msg)
    return [values.get(name, math.nan) for name in allowed]


def parse_law(text: str) -> LatencyLaw:
    """Build a latency law from its string form (see the module docstring).

    Args:
        text: for example ``"lab"`` or ``"lognormal:median=0.01,sigma=1"``.

    Returns:
        The law; its latencies are in seconds.

    Raises:
        TypeError: ``text`` is not a str.
        ValueError: an unknown form, a missing or non-numeric parameter, or a value
            the law itself refuses (such as a negative latency).
    """
    if not isinstance(text, str):
        msg = f"`text` must be a str such as 'lab' or 'constant:0.005', got {text!r}"
        raise TypeError(msg)
    kind, _, body = text.strip().partition(":")
    kind = kind.lower()
    if kind == "lab" and not body:
        return LAB
    if kind == "constant":
        body = body.removeprefix("value=")
        return Constant(_number("value", body))
    if kind == "lognormal":
        median, sigma = _params(body, ("median", "sigma"), 2)
        return LogNormal(median, sigma)
    if kind == "pareto":
        scale, alpha, cap = _params(body, ("scale", "alpha", "cap"), 2)
        return Pareto(scale, alpha, None if math.isnan(cap) else cap)
    if kind == "pauses":
        service, pause, p = _params(body, ("service", "pause", "p"), 3)
        return Pauses(service, pause, p)
    if kind == "empirical":
        table: dict[float, int] = {}
        for item in filter(None, body.split(",")):
            value, _, count = item.partition("=")
            number = _number("count", count)
            if not number.is_integer():
                msg = f"`latency` run length counts must be integers ≥ 1, got {count!r}"
                raise ValueError(msg)
            table[_number("seconds", value)] = int(number)
        return Empirical(table)
    if kind == "file" and body:
        path, sep, unit = body.rpartition(",unit=")
        if sep and unit in ("s", "ms"):
            return load_sample(path, unit="ms" if unit == "ms" else "s")
        return load_sample(body)
    if kind == "mix" and body:
        parts = [part.partition("*") for part in body.split("|")]
        return Mixture([(_number("weight", w), parse_law(law)) for w, _, law in parts])
    if body == "" and kind:
        try:
            return Constant(float(kind))
        except ValueError:
            pass
    msg = f"`latency` must be one of {_FORMS}, got {text!r}"
    raise ValueError(msg)


def load_sample(path: str | os.PathLike[str], *, unit: Literal["s", "ms"] = "s") -> Empirical:
    """Load measured latencies, one per line, as an :class:`Empirical` law.

    Args:
        path: a text file; blank lines and ``#`` comments are skipped.
        unit: ``"s"`` (seconds, the default) or ``"ms"`` (milliseconds, converted).

    Returns:
        The law drawing uniformly from the file's values, in seconds.

    Raises:
        ValueError: a bad ``unit``, a line that is not a number ≥ 0 (the message
            gives its line number), or a file without any latency.
        OSError: the file cannot be read.
    """
    if unit not in ("s", "ms"):
        msg = f"`unit` must be 's' or 'ms', got {unit!r}"
        raise ValueError(msg)
    scale = 1e-3 if unit == "ms" else 1.0
    samples: list[float] = []
    with open(path, encoding="utf-8") as lines:
        for lineno, line in enumerate(lines, start=1):
            raw = line.strip()
            if not raw or raw.startswith("#"):
                continue
            try:
                value = float(raw)
            except ValueError:
                value = math.nan
            if not (math.isfinite(value) and value >= 0.0):
                msg = f"`path` line {lineno} must be a latency ≥ 0 in {unit}, got {raw!r}"
                raise ValueError(msg)
            samples.append(value * scale)
    if not samples:
        msg = f"`path` must hold at least one latency, got none in {os.fspath(path)!r}"
        raise ValueError(msg)
    return Empirical.from_samples(samples)
