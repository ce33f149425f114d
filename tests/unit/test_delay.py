"""FixedDelay and check_delay: the seconds unit, the max_delay bound and its message."""

from __future__ import annotations

import math
import re

import pytest

from hedgeclient import AdaptiveDelay, FixedDelay, SnapshotDelayPolicy
from hedgeclient._checks import check_delay
from hedgeclient._policy.delay import MAX_DELAY, routed_delays


def test_the_default_bound_is_adaptive_delays_cut_off() -> None:
    """5 s is accepted, anything above refused: the default max_delay of AdaptiveDelay."""
    assert MAX_DELAY == 5.0
    assert FixedDelay(5).seconds == 5.0
    with pytest.raises(ValueError, match=r"^`delay` \(FixedDelay `seconds`\) is in seconds"):
        FixedDelay(5.001)


@pytest.mark.parametrize(
    ("seconds", "hint"),
    [
        (30, ": for 30 ms write 0.030; to hedge after 30 s, use FixedDelay(30, "),
        (5.5, ": for 5.5 ms write 0.0055; to hedge after 5.5 s, use FixedDelay(5.5, "),
        (60000, "; to hedge after 60000 s, use FixedDelay(60000, "),  # not ms either
    ],
)
def test_a_delay_in_milliseconds_gets_the_seconds_it_meant(seconds: float, hint: str) -> None:
    """The message names delay, the unit, the range, and what to write instead."""
    expected = (
        f"`delay` (FixedDelay `seconds`) is in seconds and must be in [0, 5] (`max_delay`), "
        f"got {seconds!r}{hint}max_delay=math.inf)"
    )
    with pytest.raises(ValueError, match=rf"^{re.escape(expected)}$"):
        FixedDelay(seconds)


def test_max_delay_lifts_or_lowers_the_bound() -> None:
    """FixedDelay(30, max_delay=math.inf) is 30 s; max_delay=1 refuses 2 s."""
    assert FixedDelay(30, max_delay=math.inf).hedge_delay("r") == 30.0
    with pytest.raises(ValueError, match=r"must be in \[0, 1\] \(`max_delay`\), got 2: "):
        FixedDelay(2, max_delay=1)


def test_a_sub_second_delay_gets_no_milliseconds_hint() -> None:
    """0.01 above max_delay=0.001 is not a number of milliseconds: no 'for 0.01 ms' hint."""
    expected = (
        "`delay` (FixedDelay `seconds`) is in seconds and must be in [0, 0.001] "
        "(`max_delay`), got 0.01; to hedge after 0.01 s, use FixedDelay(0.01, max_delay=math.inf)"
    )
    with pytest.raises(ValueError, match=rf"^{re.escape(expected)}$"):
        FixedDelay(0.01, max_delay=0.001)


def test_check_delay_has_no_upper_bound() -> None:
    """A policy's answer is only checked finite and >= 0: 3000 s is a valid answer."""
    assert check_delay(3000, "delay", "a number of seconds") == 3000.0
    with pytest.raises(TypeError, match=r"^`delay` must be a number of seconds, got '1'$"):
        check_delay("1", "delay", "a number of seconds")
    with pytest.raises(
        ValueError, match=r"^`delay` must be a finite number of seconds >= 0, got -1$"
    ):
        check_delay(-1, "delay", "a number of seconds")


def test_routed_delays_track_the_transport_policys_routes() -> None:
    """A transport's AdaptiveDelay beside a route's own FixedDelay: the merged snapshot
    lists the routes the adaptive one tracks and the named route (``tracks_routes``);
    over a transport's FixedDelay it tracks none, so every route seen gets a gauge."""
    adaptive = AdaptiveDelay(initial_delay=0.1, clock=lambda: 0.0)
    adaptive.record("GET http://a", 0.020, censored=False)
    merged = routed_delays(adaptive, ((FixedDelay(0.5), "export"),))
    assert isinstance(merged, SnapshotDelayPolicy)
    snapshot = merged.delay_snapshot()
    assert (dict(snapshot.routes), snapshot.tracks_routes) == (
        {"GET http://a": 0.1, "export": 0.5},
        True,
    )
    fixed = routed_delays(FixedDelay(0.030), ((adaptive, "search"),))
    assert isinstance(fixed, SnapshotDelayPolicy)
    assert not fixed.delay_snapshot().tracks_routes
