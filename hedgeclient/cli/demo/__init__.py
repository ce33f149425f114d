"""``hedgeclient demo``: plain against hedged on the fake slow server. Strictly private."""

from hedgeclient.cli.demo._command import register, run

__all__ = ["register", "run"]
