"""TEMP experiment (not committed)."""
import types
from _server_apps import *  # noqa
from _server_apps import plain
import hedgeclient.server._middleware as _mw
from hedgeclient.server import HedgeMiddleware
unwatched = HedgeMiddleware(plain, cancel="none", metrics=False)
default = HedgeMiddleware(plain, metrics=False)
_mw._CURRENT = types.SimpleNamespace(set=id, reset=id)
