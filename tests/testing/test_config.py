"""Replica configuration, stalls, large bodies and the quantile of measured latencies."""

from __future__ import annotations

import hashlib
import re

import pytest

from hedgeclient.testing import (
    LAB,
    CloseMidBody,
    Constant,
    Down,
    ErrorStatus,
    FakeService,
    LargeBody,
    ReplicaConfig,
    Reset,
    SlowBody,
    Stall,
    large_body,
    large_body_sha256,
)
from hedgeclient.testing._body import iter_large_body
from hedgeclient.testing._stats import quantile


def test_stall_freezes_arrivals_until_the_window_ends() -> None:
    """A request arriving inside a stall starts when the stall ends."""
    stall = Stall(every=1.0, duration=0.1)
    assert stall.finish(start=0.05, work=0.01) == pytest.approx(0.11)
    assert stall.finish(start=3.02, work=0.01, origin=2.0) == pytest.approx(3.11)


def test_stall_delays_work_that_spans_a_window() -> None:
    """Work running into a stall is paused for the stall's duration, every time."""
    stall = Stall(every=1.0, duration=0.1, offset=0.5)
    assert stall.finish(start=0.45, work=0.1) == pytest.approx(0.65)  # 0.05 + pause + 0.05
    assert stall.finish(start=0.2, work=2.0) == pytest.approx(2.4)  # two windows crossed
    assert stall.finish(start=0.7, work=0.1) == pytest.approx(0.8)  # no window in between


def test_replica_config_parses_laws_and_merges_overrides() -> None:
    """A string or float latency becomes a law; an override's set fields win."""
    base = ReplicaConfig(latency="lab", slowness="server-owned")
    assert base.latency == LAB
    merged = base.merged(ReplicaConfig(fault=Down(), slowdown=10.0))
    assert merged == ReplicaConfig(latency=LAB, slowness="server-owned", fault=Down(), slowdown=10)
    assert base.merged(ReplicaConfig(latency=0.005)).latency == Constant(0.005)
    assert base.merged(None) is base


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Reset(p=1.5), "`p` must be in [0, 1], got 1.5"),
        (lambda: ErrorStatus(p=-0.1), "`p` must be in [0, 1], got -0.1"),
        (lambda: ErrorStatus(status=99), "`status` must be in [200, 599], got 99"),
        (
            lambda: SlowBody(duration=0.0),
            "`duration` must be a number of seconds in (0, 3600], got 0.0",
        ),
        (lambda: SlowBody(duration=1.0, chunks=0), "`chunks` must be >= 1, got 0"),
        (lambda: CloseMidBody(p=2), "`p` must be in [0, 1], got 2"),
        (lambda: LargeBody(size=-1), "`size` must be >= 0 bytes, got -1"),
        (
            lambda: Stall(every=0.0, duration=0.1),
            "`every` must be a number of seconds in (0, 3600], got 0.0",
        ),
        (lambda: Stall(every=1.0, duration=1.0), "`duration` must be in (0, every=1.0), got 1.0"),
        (
            lambda: ReplicaConfig(latency=-0.01),
            "`latency` is in seconds and must be in [0, 10], got -0.01",
        ),
        (
            lambda: FakeService(latency=30),
            "`latency` is in seconds and must be in [0, 10], got 30: for 30 ms write 0.03; "
            "for a replica that never answers, use fault=BlackHole()",
        ),
        (
            lambda: ReplicaConfig(slowness="client-owned"),
            "`slowness` must be 'server-owned' or 'request-owned', got 'client-owned'",
        ),
        (lambda: ReplicaConfig(slowdown=0.0), "`slowdown` must be a finite number > 0, got 0.0"),
        (lambda: FakeService(replicas=0), "`replicas` must be in [1, 256], got 0"),
        (
            lambda: FakeService(latency="lab", fault=ErrorStatus(p=1.5)),
            "`p` must be in [0, 1], got 1.5",
        ),
        (
            lambda: FakeService(replicas=2, replica_overrides={2: ReplicaConfig()}),
            "`replica_overrides` keys must be indices in [0, 2), got 2",
        ),
        (
            lambda: FakeService(http2=True, server="uvicorn"),
            "`server` must be 'uvicorn' or 'hypercorn' (for http2), got 'uvicorn'",
        ),
        (lambda: FakeService(mode="fork"), "`mode` must be 'thread' or 'process', got 'fork'"),
        (
            lambda: FakeService(startup_timeout=float("inf")),
            "`startup_timeout` must be a number of seconds in (0, 86400], got inf",
        ),
        (
            lambda: FakeService(startup_timeout=0.0),
            "`startup_timeout` must be a number of seconds in (0, 86400], got 0.0",
        ),
        (lambda: FakeService(key_header="€"), "`key_header` must be an ASCII header name, got '€'"),
    ],
)
def test_bad_configuration_names_the_field(build: object, message: str) -> None:
    """Bad configuration is refused at construction, naming the field and the value."""
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        build()  # type: ignore[operator]


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Reset(p=True), "`p` must be a number in [0, 1], got True"),
        (lambda: ErrorStatus(200.5), "`status` must be an int in [200, 599], got 200.5"),
        (lambda: ErrorStatus("503"), "`status` must be an int in [200, 599], got '503'"),
        (lambda: SlowBody(0.1, chunks=2.5), "`chunks` must be an int >= 1, got 2.5"),
        (lambda: SlowBody("0.1"), "`duration` must be a number of seconds in (0, 3600], got '0.1'"),
        (lambda: LargeBody(1.5), "`size` must be an int >= 0 bytes, got 1.5"),
        (lambda: LargeBody(True), "`size` must be an int >= 0 bytes, got True"),
        (
            lambda: Stall(every="x", duration=0.1),
            "`every` must be a number of seconds in (0, 3600], got 'x'",
        ),
        (
            lambda: Stall(every=1.0, duration="x"),
            "`duration` must be a number in (0, every=1.0), got 'x'",
        ),
        (
            lambda: Stall(every=1.0, duration=0.1, offset=None),
            "`offset` must be a number of seconds, got None",
        ),
        (lambda: ReplicaConfig(slowdown=True), "`slowdown` must be a number > 0, got True"),
        (
            lambda: ReplicaConfig(latency=True),
            "`latency` must be a LatencyLaw, a law string or a number of seconds, got True",
        ),
        (
            lambda: FakeService(latency=[1]),
            "`latency` must be a LatencyLaw, a law string or a number of seconds, got [1]",
        ),
        (lambda: FakeService(replicas="3"), "`replicas` must be an int in [1, 256], got '3'"),
        (lambda: FakeService(replicas=True), "`replicas` must be an int in [1, 256], got True"),
        (
            lambda: FakeService(replica_overrides={True: ReplicaConfig()}),
            "`replica_overrides` keys must be indices in [0, 3), got True",
        ),
        (
            lambda: FakeService(replica_overrides="0"),
            "`replica_overrides` must be a mapping of replica index to ReplicaConfig, got '0'",
        ),
        (lambda: FakeService(key_header=1), "`key_header` must be a str or None, got 1"),
        (lambda: FakeService(seed="x"), "`seed` must be an int, got 'x'"),
        (
            lambda: FakeService(port_base=20000.5),
            "`port_base` must be 0 or an integer in [1024, 65533], got 20000.5",
        ),
        (
            lambda: FakeService(port_base="2000"),
            "`port_base` must be 0 or an integer in [1024, 65533], got '2000'",
        ),
        (lambda: FakeService(keep=1.5), "`keep` must be an int >= 1, got 1.5"),
        (lambda: FakeService(keep="x"), "`keep` must be an int >= 1, got 'x'"),
        (
            lambda: FakeService(startup_timeout="x"),
            "`startup_timeout` must be a number of seconds in (0, 86400], got 'x'",
        ),
    ],
)
def test_wrong_type_is_a_type_error_naming_the_field(build: object, message: str) -> None:
    """A wrong type (a bool is no number) is a TypeError at construction, not in the server."""
    with pytest.raises(TypeError, match=f"^{re.escape(message)}$"):
        build()  # type: ignore[operator]


def test_large_body_is_deterministic_and_chunk_independent() -> None:
    """The body's bytes do not depend on how it is chunked; its hash is published."""
    size = 200_003
    whole = large_body(size)
    assert len(whole) == size
    assert whole[:3] == bytes([0, 1, 2])
    assert whole[251] == 0
    assert b"".join(iter_large_body(size, chunk=1000)) == whole
    assert large_body_sha256(size) == hashlib.sha256(whole).hexdigest()


def test_quantile_of_measurements_follows_the_hedging_convention() -> None:
    """The q-quantile of measurements is the smallest v with P(X > v) <= 1 - q."""
    values = [0.010] * 40 + [0.012] * 25 + [0.015] * 35
    assert quantile(values, 0.4) == 0.010
    assert quantile(values, 0.5) == 0.012
    assert quantile(values[::-1], 0.99) == 0.015
    with pytest.raises(ValueError, match=r"^`values` must hold at least one latency, got none$"):
        quantile([], 0.5)
