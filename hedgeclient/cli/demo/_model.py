"""``hedgeclient demo``: what one run measured. Strictly private.

:mod:`._measure` fills these; :mod:`._report` reads them. Times are seconds.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

from hedgeclient.cli.demo._options import Options

__all__ = ["Phase", "Run"]


@dataclass
class Phase:
    """What one client sent, got and cost over the measured rounds. Strictly private.

    Attributes:
        name: ``plain`` or ``hedged``.
        children: each HTTP request's time to full response, seconds, by request index
            (NaN for a request that failed; :meth:`finish` drops those).
        parents: with fan-out, each logical request's time until its last child
            finished, seconds, by parent index; else None.
        requests: HTTP requests sent by the caller (backups not counted).
        errors: HTTP requests that raised or got a status other than 200.
        received: requests the servers received during the phase's rounds (backups
            included).
        elapsed: wall-clock seconds spent in the phase's rounds.
        cpu: the client process's CPU seconds over those rounds (all its threads); with
            ``elapsed``, how busy the measuring client was.
        lags: how late the client's event loop woke a sleeping probe task, seconds, one
            value per wake-up during the phase's rounds: the client's own scheduling
            delay, which every measured latency also contains.
        backups: backup requests sent (from the transport's records).
        won: requests whose backup answered first.
        suppressed: requests whose due backup was not sent, by reason.
        delays: ``HedgeInfo.delay`` of each hedged response, seconds (None: suspended).
        final_delay: the hedge delay the route's next request would get, seconds.
    """

    name: str
    children: list[float]
    parents: list[float] | None
    requests: int
    errors: int = 0
    received: int = 0
    elapsed: float = 0.0
    cpu: float = 0.0
    lags: list[float] = field(default_factory=list)
    backups: int = 0
    won: int = 0
    suppressed: Counter[str] = field(default_factory=Counter)
    delays: list[float | None] = field(default_factory=list)
    final_delay: float | None = None

    @classmethod
    def empty(cls, name: str, parents: int, fanout: int) -> Phase:
        """A phase of ``parents`` logical requests of ``fanout`` HTTP requests, none sent."""
        return cls(
            name=name,
            children=[math.nan] * (parents * fanout),
            parents=[math.nan] * parents if fanout > 1 else None,
            requests=parents * fanout,
        )

    def finish(self) -> None:
        """Drop the entries of failed requests (and of parents with a failed child)."""
        self.children = [x for x in self.children if not math.isnan(x)]
        if self.parents is not None:
            self.parents = [x for x in self.parents if not math.isnan(x)]


@dataclass
class Run:
    """Everything measured by one demo run. Strictly private.

    Attributes:
        options: the validated options.
        plain: the plain client's phase.
        hedged: the hedged client's phase.
        warmup_delay: the hedge delay once the hedged client's warm-up ended, seconds.
        warmup_left: whether the adaptive delay left its warm-up before measurement.
        elapsed: the whole run's wall-clock seconds, server start and stop included.
        metrics_url: where the metrics were served, or None.
        cores: the CPU cores the client could use (its affinity), >= 1.
        load_average: the machine's 1, 5 and 15 minute load averages at the end of the
            run, or None where the OS has none: other work shows there.
    """

    options: Options
    plain: Phase
    hedged: Phase
    warmup_delay: float | None
    warmup_left: bool
    elapsed: float = 0.0
    metrics_url: str | None = None
    cores: int = 1
    load_average: tuple[float, float, float] | None = None
