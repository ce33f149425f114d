"""``hedgeclient plan``: the hedging trade table of a latency sample. Strictly private."""

from hedgeclient.cli.plan._command import register, run

__all__ = ["register", "run"]
