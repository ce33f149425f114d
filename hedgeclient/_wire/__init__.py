"""One attempt at the httpx/httpcore boundary: its request, its send, its trace.

``send`` builds the attempt's request for its replica (the ``httpx.Request`` itself
through ``_compat.httpx``), follows it off the pool's queue (httpcore's ``trace``),
trims a backup's timeouts, and sends it through the inner transport it was given;
``first_byte`` ends an attempt at its first body byte (a race decided there).

Strictly private.
"""
