"""The ``hedgeclient`` command line: ``demo``, ``plan`` and ``serve``.

The tools on top of the library: they use its public API (:mod:`hedgeclient`,
:mod:`hedgeclient.testing`, :mod:`hedgeclient.analysis`) and nothing in the library
imports them. The console script ``hedgeclient`` and ``python -m hedgeclient`` both call
:func:`main`.

.. versionadded:: 0.1.0
"""

from hedgeclient.cli._main import main

__all__ = ["main"]
