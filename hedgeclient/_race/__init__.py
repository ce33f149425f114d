"""The engine: one request's race between its primary attempt and its backup requests.

The primary attempt runs in the caller's own task, under one cancel scope. If it may be
hedged, its hedge deadline is registered with the event loop's hedge timer (``_timer``).
Most requests answer first: they cancel the registration and start no task. When the
deadline passes first (or another request finds the primary's replica stalled:
``Race.hedge_early``) and a backup may go, the timer starts one detached task, in a
copy of the caller's context variables, under a cancel scope of the race's: it runs
the request's last backup (``max_hedges=1``, the default) itself, or several through
the *backup driver*'s loop, and judges them as they end; a backup that wins cancels
the primary's scope. After the primary, the caller's task judges what no backup
judged, and a failure there sends the next backup at once.

A backup by delay goes once the primary has been *on the wire* for the hedge delay (its
latency, which the delay is a quantile of, is measured from there): a primary waiting
in the client's own pool queue is not slow on its replica yet, and its backup would
queue behind it. Its hedge is parked meanwhile, at no cost (``Attempt.off_queue``: the
wire calls it as the primary leaves the queue), and a backup held back by the client's
lag counts the primary's wait from the wire too (issue 25).

Whether a due backup goes, and why not, is ``_policy.eligibility``'s; where it goes,
``_replicas.choice``'s; what an ended attempt means, ``_race.verdict``'s (the first
attempt judged ``ok`` wins). Every other attempt is cancelled, so the replica sees a
disconnect, and a loser that had headers has its response closed unread (shielded). A
tied request (``_policy.tied``) sends its first backup, the *twin*, a tie offset after
the primary, to a replica chosen with it; a copy answered "dropped" is neither a winner
nor a failure while another attempt is in flight.

Guarantees, whatever the caller's task does: the caller never returns (nor raises)
while its backups run (every exit path cancels their scope and waits for their end,
shielded); the caller's own cancellation (anyio, trio, or a native ``asyncio`` cancel
such as ``asyncio.timeout``) is what it gets back; never an ``ExceptionGroup``: when
every attempt failed, the caller gets the last failed response if there was one (a 503
from every replica is a 503), else the last attempt's own exception, with its own type.

The race of one request is one class, ``race.Race``: its state, the caller's task, the
timer's callback, each attempt begun, run, ended and judged, the losers closed. Beside
it: ``driver`` (the backup driver, made only when several backups may go: it waits and
starts what the race begins), ``rules`` (what every race of a transport shares) and
``verdict`` (what attempts mean, pure functions). The engine and ``_timer`` are the
only modules that start tasks. It takes a ``send(attempt)`` callable and never imports
the wire. Prior art: tower's
``hedge::select`` (the first future to finish wins and the other is dropped); Finagle's
``BackupRequestFilter``; Dean & Barroso, "The Tail at Scale", CACM 56(2), 2013.

Strictly private.
"""
