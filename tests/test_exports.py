"""The public surface: what ``hedgeclient`` exports, and that each export is documented."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

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


DEPRECATED = {
    "hedgeclient": {
        "DecideOn": "Literal['headers', 'first_byte']",
        "HedgeHook": "Callable[[RequestRecord], None]",
    },
    "hedgeclient.analysis": {"PRESETS": "lab_sample()"},
    "hedgeclient.server": {"CancelMode": "Literal['hedged', 'all', 'none']"},
    "hedgeclient.testing": {
        "Disconnects": "Literal['app', 'middleware', 'ignored']",
        "Mode": "Literal['thread', 'process']",
        "ServerKind": "Literal['uvicorn', 'hypercorn']",
        "Slowness": "Literal['server-owned', 'request-owned']",
        "iter_large_body": "large_body_sha256(size)",
    },
}
"""The names deprecated in this release, by module, and a part of the replacement the
warning names (docs/api.md, "What is public, and why")."""

ALL = {
    "hedgeclient": 32,
    "hedgeclient.analysis": 14,
    "hedgeclient.instrumentation": 6,
    "hedgeclient.server": 6,
    "hedgeclient.testing": 34,
}
"""How many names each public module exports: a name added or removed is a decision
(docs/api.md says which, and why)."""


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_the_public_names_are_counted(name: str) -> None:
    """Each public module exports the number of names docs/api.md accounts for."""
    assert len(importlib.import_module(name).__all__) == ALL[name]


@pytest.mark.parametrize(
    ("module_name", "name"),
    [(module, name) for module, names in DEPRECATED.items() for name in names],
)
def test_a_deprecated_name_still_works_and_warns(module_name: str, name: str) -> None:
    """A deprecated name is out of ``__all__``, still importable for this release, and
    its DeprecationWarning names the replacement."""
    module = importlib.import_module(module_name)
    assert name not in module.__all__
    with pytest.warns(DeprecationWarning, match=rf"^{module_name}\.{name} is deprecated") as caught:
        value = getattr(module, name)
    (warning,) = caught
    message = str(warning.message)
    assert message.startswith(
        f"{module_name}.{name} is deprecated and will be removed in the next release: "
    )
    assert DEPRECATED[module_name][name] in message
    assert warning.filename == __file__  # it points at the caller's line
    assert value is not None


def test_an_unknown_name_is_still_an_attribute_error() -> None:
    """The deprecation hook answers only for its names: any other is missing, as in a
    module without one."""
    with pytest.raises(
        AttributeError, match=re.escape("module 'hedgeclient' has no attribute 'Nope'")
    ):
        hedgeclient.Nope  # noqa: B018 - the attribute access is the test


def test_every_constructor_parameter_is_documented() -> None:
    """Each of ``HedgedTransport``'s parameters has its ``Args:`` entry, in the order of
    the signature, and ``docs/api.md``'s table of parameters names each once."""
    doc = inspect.getdoc(hedgeclient.HedgedTransport) or ""
    args = doc.split("\nArgs:\n", 1)[1].split("\n\n", 1)[0]
    documented = re.findall(r"^    (\w+): ", args, flags=re.MULTILINE)
    signature = list(inspect.signature(hedgeclient.HedgedTransport).parameters)
    assert documented == signature
    assert len(signature) == 24
    page = (Path(__file__).parent.parent / "docs" / "api.md").read_text(encoding="utf-8")
    section = page.split("### The transport's parameters", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    named = re.findall(r"`(\w+)`", " ".join(row.split("|")[1] for row in rows))
    assert sorted(named) == sorted(signature)
