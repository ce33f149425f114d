"""``hedgeclient demo --discovery`` end to end on loopback: a replica joins, one leaves.

The real demo runs (the fake service in a subprocess, each replica on its own loopback
address; the embedded FakeNameserver; a real clock), shortened to 6 s, and the test
asserts what the issue asks of discovery whatever the machine's load: no failed
request, the joining replica gets primaries once its addition is seen (during the
run), the leaving one gets no attempt once its removal is seen. (That each is seen
within TTL + 1 s is a matter of instants, which a loaded machine moves: asserted in
virtual time by tests/test_discovery.py.) Marked ``slow``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from hedgeclient.cli import main
from hedgeclient.cli.demo._discovery import print_report

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_join_and_leave(capsys: pytest.CaptureFixture[str], backend: str) -> None:
    """6 s of hedged traffic: 0 failed, the joiner serves primaries once it is seen,
    the leaver gets 0 attempts after its removal is seen, the counts add up."""
    argv = ["demo", "--discovery", "--json", "--seconds", "6", "--backend", backend]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert err == ""
    figures: dict[str, Any] = json.loads(out)
    join, leave = figures["join"], figures["leave"]
    by_role = {r["role"]: r for r in figures["replicas"]}
    assert figures["failed"] == 0
    assert figures["requests"] > 100  # thousands on a quiet machine: a sanity floor
    assert [r["role"] for r in figures["replicas"]] == ["leaves", "stays", "stays", "joins"]
    # Every request has one primary, on one of the four replicas.
    assert sum(r["primaries"] for r in figures["replicas"]) == figures["requests"]
    # The joiner: added a quarter into the run (never earlier), seen, and serving
    # primaries from then on, while the traffic ran (so seen well within the run: with
    # the 30 s a TTL-less client would wait, it would get none).
    assert join["replica"] == by_role["joins"]["replica"]
    assert 1.5 <= join["at_seconds"] < 6.0
    assert join["bound_seconds"] == 2.0  # TTL + 1 s, what the report compares against
    assert 0 <= join["seen_after_seconds"] <= join["first_primary_after_seconds"]
    assert join["at_seconds"] + join["first_primary_after_seconds"] < 6.0
    assert by_role["joins"]["primaries"] > 0
    # The leaver: served before, nothing after its removal was seen, then stopped.
    assert leave["replica"] == by_role["leaves"]["replica"]
    assert leave["at_seconds"] >= 3.0
    assert leave["seen_after_seconds"] >= 0
    assert leave["attempts_after_seen"] == 0
    assert by_role["leaves"]["primaries"] > 0
    assert leave["stopped_at_seconds"] >= leave["at_seconds"] + leave["seen_after_seconds"] + 1.0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--seconds", "3"], "--seconds must be in [6, 3600] with --discovery, got '3'"),
        (["--seconds", "soon"], "--seconds must be a duration such as '30ms' or '0.03' "
            "(seconds), got 'soon'"),
        (["--concurrency", "0"], "--concurrency must be an integer in [1, 1000], got '0'"),
    ],
)  # fmt: skip
def test_bad_flags(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    """A bad flag with --discovery is one line on stderr and exit status 2."""
    assert main(["demo", "--discovery", *argv]) == 2
    assert capsys.readouterr().err == f"hedgeclient: error: {message}\n"


def test_report_text(capsys: pytest.CaptureFixture[str]) -> None:
    """The text report gives each change, its delays, the per-replica counts, failures."""
    replica = {"role": "stays", "in_name_from_seconds": 0.0, "in_name_until_seconds": None}
    figures = {
        "name": "api.demo.test", "ttl_seconds": 1, "seconds": 12.0, "concurrency": 8,
        "requests": 30, "failed": 0, "p50_seconds": 0.025, "p99_seconds": 0.0801,
        "extra_load": 0.05,
        "join": {"replica": "http://127.0.0.5:80", "at_seconds": 3.0,
            "seen_after_seconds": 0.5, "first_primary_after_seconds": 0.51,
            "bound_seconds": 2.0},
        "leave": {"replica": "http://127.0.0.2:80", "at_seconds": 6.0,
            "seen_after_seconds": 0.25, "attempts_before_seen": 2,
            "attempts_after_seen": 0, "stopped_at_seconds": 7.25},
        "replicas": [
            {**replica, "replica": "http://127.0.0.2:80", "role": "leaves",
                "in_name_until_seconds": 6.0, "primaries": 10, "backups": 1},
            {**replica, "replica": "http://127.0.0.3:80", "primaries": 10, "backups": 0},
            {**replica, "replica": "http://127.0.0.4:80", "primaries": 5, "backups": 0},
            {**replica, "replica": "http://127.0.0.5:80", "role": "joins",
                "in_name_from_seconds": 3.0, "primaries": 5, "backups": 1},
        ],
    }  # fmt: skip
    print_report(figures)
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == (
        "joins:  http://127.0.0.5:80 added at 3.0 s; seen after 0.50 s; its first primary "
        "after 0.51 s (bound: TTL + 1 s = 2 s)"
    )
    assert lines[2] == (
        "leaves: http://127.0.0.2:80 removed at 6.0 s; seen after 0.25 s; attempts sent to "
        "it after that: 0 (before: 2); stopped at 7.2 s"
    )
    assert lines[4].split() == ["http://127.0.0.2:80", "leaves", "0.0", "s", "-", "6.0", "s",
        "10", "1"]  # fmt: skip
    assert lines[7].split() == ["http://127.0.0.5:80", "joins", "3.0", "s", "-", "end", "5", "1"]
    assert lines[-1] == "requests 30, failed 0; p50 25.0 ms, p99 80.1 ms, extra load 5.0%"
