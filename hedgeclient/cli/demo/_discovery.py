"""``hedgeclient demo --discovery``: replicas behind one DNS name, one joins, one leaves.

Four replicas of the fake slow service run in a subprocess, each on its own loopback
address (``FakeService(own_address=True)``: 127.0.0.2 to 127.0.0.5, one port), as pods
behind a Kubernetes headless Service. :class:`~hedgeclient.testing.FakeNameserver`
answers the name ``api.demo.test`` on 127.0.0.1 with a 1 s TTL, and the hedged client
finds the replicas with ``DnsReplicas(nameserver=...)``; everything else is the
library's defaults. Hedged requests go out without pause, ``concurrency`` at once:

1. the name starts with three replicas;
2. at a quarter of the run the fourth is added to the name (it joins);
3. at half the run the first is removed from the name (it leaves); once the client
   has seen its removal and its last attempts have ended, it is stopped (it refuses
   connections from then on).

The report says when the client saw each change, when the new replica got its first
primary, how many attempts reached the leaving replica after its removal was seen
(none is the target), and how many requests failed (none is the target).

Strictly private: the command line is the interface.
"""

import argparse
import json
import sys
from typing import Any

import anyio

from hedgeclient.cli import _args
from hedgeclient.cli._args import UsageError
from hedgeclient.cli._laws import latency_law
from hedgeclient.cli._output import print_table
from hedgeclient.cli.demo._discovery_run import (
    DEFAULT_SECONDS,
    MIN_SECONDS,
    NAME,
    DiscoveryOptions,
    discover,
)
from hedgeclient.cli.demo._options import DEFAULT_CONCURRENCY

__all__ = ["options_of", "print_report", "run"]


def options_of(args: argparse.Namespace) -> DiscoveryOptions:
    """Check the flags ``--discovery`` takes; raise :class:`UsageError` on bad input."""
    seconds = DEFAULT_SECONDS
    if args.seconds is not None:
        seconds = _args.duration(args.seconds, "--seconds", maximum=3600.0)
        if seconds < MIN_SECONDS:
            allowed = f"[{MIN_SECONDS:g}, 3600]"
            msg = f"--seconds must be in {allowed} with --discovery, got {args.seconds!r}"
            raise UsageError(msg)
    concurrency = DEFAULT_CONCURRENCY
    if args.concurrency is not None:
        concurrency = _args.integer(args.concurrency, "--concurrency", 1, 1000)
    return DiscoveryOptions(
        seconds=seconds,
        concurrency=concurrency,
        latency=args.latency,
        law=latency_law(args.latency),
        seed=_args.integer(args.seed, "--seed", 0),
        backend=_args.choice(args.backend, "--backend", ("asyncio", "trio")),
    )


def _span(since: float, until: float | None) -> str:
    return f"{since:.1f} s - " + ("end" if until is None else f"{until:.1f} s")


def run(args: argparse.Namespace) -> int:
    """Run ``hedgeclient demo --discovery``; print the report (or ``--json``)."""
    options = options_of(args)
    try:
        import dns.message  # noqa: F401 - the 'cli' extra
    except ImportError:
        msg = "--discovery needs dnspython: pip install 'hedgeclient[cli]'"
        raise UsageError(msg) from None
    if not args.json and sys.stdout.isatty():
        print(f"... {options.seconds:g} s of hedged traffic to {NAME}", file=sys.stderr)
    figures = anyio.run(discover, options, backend=options.backend)
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    print_report(figures)
    return 0


def print_report(figures: dict[str, Any]) -> None:
    """Print the figures of :func:`discover` as text."""
    join, leave = figures["join"], figures["leave"]
    print(
        f"{len(figures['replicas'])} replicas of the fake service behind {figures['name']} "
        f"(TTL {figures['ttl_seconds']} s), {figures['concurrency']} requests in flight for "
        f"{figures['seconds']:g} s, DnsReplicas and the library's defaults"
    )
    print(
        f"joins:  {join['replica']} added at {join['at_seconds']:.1f} s; seen after "
        f"{join['seen_after_seconds']:.2f} s; its first primary after "
        f"{join['first_primary_after_seconds']:.2f} s (bound: TTL + 1 s = "
        f"{join['bound_seconds']:g} s)"
    )
    print(
        f"leaves: {leave['replica']} removed at {leave['at_seconds']:.1f} s; seen after "
        f"{leave['seen_after_seconds']:.2f} s; attempts sent to it after that: "
        f"{leave['attempts_after_seen']} (before: {leave['attempts_before_seen']}); "
        f"stopped at {leave['stopped_at_seconds']:.1f} s"
    )
    rows = [
        [
            r["replica"],
            r["role"],
            _span(r["in_name_from_seconds"], r["in_name_until_seconds"]),
            str(r["primaries"]),
            str(r["backups"]),
        ]
        for r in figures["replicas"]
    ]
    print_table(["replica", "", "in the name", "primaries", "backups"], rows)
    print(
        f"requests {figures['requests']}, failed {figures['failed']}; "
        f"p50 {figures['p50_seconds'] * 1000:.1f} ms, p99 {figures['p99_seconds'] * 1000:.1f} ms, "
        f"extra load {figures['extra_load']:.1%}"
    )
