"""When and whether: the hedge delay, the hedge budget, which requests may be hedged.

Pure policy: the clock is injected; no task API, no httpcore, no Prometheus. The
delay is computed here (``delay``, ``adaptive`` over ``window`` and ``histogram``),
and every reason a backup is not sent is chosen by ``eligibility`` (with the budget of
``budget``); ``routes`` is per-route opt-in and ``decide_on``; ``tied`` the tied
requests' offset and headers.

Strictly private.
"""
