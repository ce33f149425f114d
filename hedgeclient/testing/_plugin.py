"""The pytest plugin's former home, for installs whose ``pytest11`` entry point still
names it (made before the plugin moved out of the package); reinstalling moves the
entry point to ``_hedgeclient_pytestplugin``, which imports no hedgeclient at load.

Strictly private.
"""

from _hedgeclient_pytestplugin import fake_service

__all__ = ["fake_service"]
