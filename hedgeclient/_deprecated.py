"""Deprecated public names: still importable for one release, with a warning that names
the replacement (``docs/api.md``, "What is public, and why").

A public package lists its deprecated names in a table and sets its module
``__getattr__`` (PEP 562) to :func:`deprecated_names`'s result: a name missing from the
module's namespace is looked up there, imported from where it lives now, and returned
after a ``DeprecationWarning`` that points at the caller's line.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Mapping

__all__ = ["Moved", "deprecated_names"]

Moved = tuple[str, str, str]
"""Where a deprecated name lives now and what to use instead: ``(module, attribute,
instead)``, e.g. ``("hedgeclient._events", "HedgeHook", "annotate a hook as ...")``."""


def deprecated_names(package: str, moved: Mapping[str, Moved]) -> Callable[[str], object]:
    """Return the module ``__getattr__`` of ``package`` for its deprecated names.

    Args:
        package: the public package's name (``"hedgeclient.testing"``).
        moved: deprecated name -> where it lives now and what to use instead.

    Returns:
        A function of a name that warns and returns the object, or raises
        ``AttributeError`` (as a module does) for a name that is not in ``moved``.
    """

    def __getattr__(name: str) -> object:
        try:
            module, attribute, instead = moved[name]
        except KeyError:
            msg = f"module {package!r} has no attribute {name!r}"
            raise AttributeError(msg) from None
        warnings.warn(
            f"{package}.{name} is deprecated and will be removed in the next release: {instead}",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(module), attribute)

    return __getattr__
