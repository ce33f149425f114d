"""The public surface: what ``hedgeclient`` exports, and that each export is documented."""

from __future__ import annotations

import importlib
import inspect

import pytest

import hedgeclient

PUBLIC_MODULES = [
    "hedgeclient",
    "hedgeclient.analysis",
    "hedgeclient.instrumentation",
    "hedgeclient.server",
    "hedgeclient.testing",
]


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_all_is_sorted_and_resolvable(name: str) -> None:
    """``__all__`` is sorted, has no duplicates, and every name resolves."""
    module = importlib.import_module(name)
    exported = list(module.__all__)
    assert exported == sorted(exported)
    assert len(set(exported)) == len(exported)
    missing = [n for n in exported if not hasattr(module, n)]
    assert missing == []


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_every_public_callable_has_a_docstring(name: str) -> None:
    """Every exported class and function carries its own docstring."""
    module = importlib.import_module(name)
    undocumented = [
        n
        for n in module.__all__
        if (inspect.isclass(obj := getattr(module, n)) or inspect.isfunction(obj))
        and not (obj.__doc__ or "").strip()
    ]
    assert undocumented == []


def test_top_level_names() -> None:
    """The names a user reaches for are importable from the package root."""
    assert {
        "HedgedTransport",
        "AdaptiveDelay",
        "FixedDelay",
        "HedgeBudget",
        "hedge_info",
    } <= set(hedgeclient.__all__)
    assert hedgeclient.__version__ == importlib.import_module("hedgeclient._version").__version__


def test_package_is_typed() -> None:
    """The package ships ``py.typed`` (PEP 561)."""
    from importlib.resources import files

    assert files("hedgeclient").joinpath("py.typed").is_file()
