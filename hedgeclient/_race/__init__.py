"""The engine: one request's race between its primary attempt and its backups.

``race`` (what the caller's task runs), ``backups`` (when a backup is due and the
driver that runs them) and ``core`` (the race's state, one attempt, the judging). It
takes a ``send(attempt)`` callable and never imports the wire.

Strictly private.
"""
