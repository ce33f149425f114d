"""Bad input: every parameter refused at construction, every latency taken in the request path.

A constructor or policy parameter of the wrong type, out of range, non-finite or empty
raises ``TypeError`` or ``ValueError`` naming the parameter and what is allowed. A
latency the histogram cannot track (0, negative after a clock step, hours, NaN) is
clamped or counted, never raised.
"""

from __future__ import annotations

import logging
import math
import numbers
import random
import re
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import httpx
import pytest

from hedgeclient import (
    AdaptiveDelay,
    FixedDelay,
    HedgeBudget,
    HedgedTransport,
    HedgePolicy,
    PowerOfTwoChoices,
    Route,
)
from hedgeclient._discovery._errors import DiscoveryFailure
from hedgeclient._policy.histogram import RotatingHistogram


def transport(**kwargs: Any) -> HedgedTransport:
    """A HedgedTransport without metrics (the parameter under test aside)."""
    kwargs.setdefault("metrics", False)
    return HedgedTransport(**kwargs)


BUILDERS: dict[str, Callable[..., object]] = {
    "HedgedTransport": transport,
    "AdaptiveDelay": AdaptiveDelay,
    "HedgeBudget": HedgeBudget,
    "PowerOfTwoChoices": PowerOfTwoChoices,
    "FixedDelay": FixedDelay,
}

TWO = {"http://s": ["http://a", "http://b"]}


def case(
    builder: str, kwargs: dict[str, Any], error: type[Exception], message: str, **marks: Any
) -> Any:
    """One row of the table: the message is matched whole (``re.escape``, anchored)."""
    # A function's repr carries its address: name it, so that ids are the same in every
    # process (pytest-xdist workers compare them).
    shown = {
        k: [getattr(f, "__name__", f) for f in v] if k == "hooks" and isinstance(v, list) else v
        for k, v in kwargs.items()
    }
    param_id = f"{builder}-{'-'.join(f'{k}={v!r}' for k, v in shown.items())}"
    return pytest.param(builder, kwargs, error, message, id=param_id[:90], **marks)


T, V = TypeError, ValueError
# A fixed delay's range, as every message refusing one gives it (HedgedTransport(delay=x)
# is FixedDelay(x)); a number too long to print whole, as messages give it.
FIXED = "`delay` (FixedDelay `seconds`) is in seconds and must be in [0, 5] (`max_delay`), "
HUGE = "1.000e+400 (an int of 401 digits)"


async def _async_hook(record: object) -> None:
    """An async hook: refused, a coroutine nobody would await."""


CASES = [
    # HedgedTransport
    case("HedgedTransport", {"transport": 1}, T,
         "`transport` must be an httpx.AsyncBaseTransport, got 1"),
    case("HedgedTransport", {"replicas": [("a", "b")]}, T,
         "`replicas` must be a mapping of origin to replica origins, got [('a', 'b')]"),
    case("HedgedTransport", {"replicas": {"http://s": "http://a"}}, T,
         "`replicas['http://s']` must be a list of origins, a DnsReplicas, a SrvReplicas, an "
         "async callable or an async iterable of replica sets, got 'http://a'"),
    case("HedgedTransport", {"replicas": {"http://s": []}}, V,
         "`replicas['http://s']` must list at least one replica, got []"),
    case("HedgedTransport", {"replicas": {"ftp://s": ["http://a"]}}, V,
         "`replicas` must be an absolute http:// or https:// origin, got 'ftp://s'"),
    case("HedgedTransport", {"replicas": {"": ["http://a"]}}, V,
         "`replicas` must be an absolute http:// or https:// origin, got ''"),
    case("HedgedTransport", {"replicas": {"http://s/p": ["http://a"]}}, V,
         "`replicas` must be an origin (scheme, host and port only, no path, query or "
         "credentials), got 'http://s/p'"),
    case("HedgedTransport", {"replicas": {"http://s": ["http://a", "http://a"]}}, V,
         "`replicas['http://s']` lists a replica twice: ['http://a', 'http://a']"),
    case("HedgedTransport", {"replicas": {1: ["http://a"]}}, T,
         "`replicas` must be an origin string like 'http://host:port', got 1"),
    case("HedgedTransport", {"replicas": {"http://s": [None]}}, T,
         "`replicas['http://s']` must be an origin string like 'http://host:port' or a "
         "Replica, got None"),
    case("HedgedTransport", {"delay": -1}, V, f"{FIXED}got -1"),
    case("HedgedTransport", {"delay": math.nan}, V, f"{FIXED}got nan"),
    case("HedgedTransport", {"delay": math.inf}, V, f"{FIXED}got inf"),
    case("HedgedTransport", {"delay": "0.03"}, T,
         "`delay` must be a number of seconds or a DelayPolicy, got '0.03'"),
    case("HedgedTransport", {"delay": True}, T,
         "`delay` must be a number of seconds or a DelayPolicy, got True"),
    case("HedgedTransport", {"max_hedges": 5}, V,
         "`max_hedges` must be in [0, 4] (MAX_HEDGES_LIMIT: at most 4 backups per request; "
         "with static lists of two or more replicas, at most replicas - 1), got 5"),
    case("HedgedTransport", {"methods": ["GET", 1]}, T,
         "`methods` must hold method names (str), got 1 in ['GET', 1]"),
    case("HedgedTransport", {"non_fatal_statuses": [429, 503]}, V,
         "`non_fatal_statuses` must not hold 429 (Too Many Requests): it asks the client to "
         "slow down, so no backup is ever sent after it (pushback)"),
    case("HedgedTransport", {"hooks": [_async_hook]}, T,
         f"`hooks` must be plain (synchronous) callables, got the coroutine function "
         f"{_async_hook!r}: schedule async work from a plain hook instead"),
    case("HedgedTransport", {"max_hedges": -1}, V, "`max_hedges` must be in [0, 4], got -1"),
    case("HedgedTransport", {"max_hedges": 1.0}, T,
         "`max_hedges` must be an int in [0, 4], got 1.0"),
    case("HedgedTransport", {"max_hedges": 2, "replicas": TWO}, V,
         "`max_hedges` must be in [0, 1] (replicas - 1: each backup goes to another "
         "replica, and the largest service, 'http://s', lists 2; a service with one "
         "address allows up to 4, its backups going to that address over other "
         "connections), got 2"),
    case("HedgedTransport", {"max_hedges": 5, "replicas": TWO}, V,
         "`max_hedges` must be in [0, 1] (replicas - 1: each backup goes to another "
         "replica, and the largest service, 'http://s', lists 2; a service with one "
         "address allows up to 4, its backups going to that address over other "
         "connections), got 5"),
    case("HedgedTransport", {"methods": "GET"}, T,
         "`methods` must be a collection of method names, got 'GET'"),
    case("HedgedTransport", {"methods": None}, T,
         "`methods` must be a collection of method names, got None"),
    case("HedgedTransport", {"methods": ["GET", "FETCH"]}, V,
         "`methods` has unknown method(s) ['FETCH']; allowed: CONNECT, DELETE, GET, "
         "HEAD, OPTIONS, PATCH, POST, PUT, QUERY, TRACE"),
    case("HedgedTransport", {"non_fatal_statuses": [99]}, V,
         "`non_fatal_statuses` must hold error statuses in [400, 599], got 99"),
    case("HedgedTransport", {"non_fatal_statuses": [200]}, V,
         "`non_fatal_statuses` must hold error statuses in [400, 599], got 200"),
    case("HedgedTransport", {"non_fatal_statuses": ["503"]}, T,
         "`non_fatal_statuses` must hold ints in [400, 599], got '503'"),
    case("HedgedTransport", {"non_fatal_statuses": 503}, T,
         "`non_fatal_statuses` must be a collection of ints, got 503"),
    case("HedgedTransport", {"budget": 1}, T, "`budget` must be a HedgeBudget or None, got 1"),
    case("HedgedTransport", {"selector": 1}, T, "`selector` must implement ReplicaSelector, got 1"),
    case("HedgedTransport", {"route_key": "GET"}, T,
         "`route_key` must be a callable request -> str, got 'GET'"),
    case("HedgedTransport", {"attempt_header": ""}, V,
         "`attempt_header` must be a non-empty header name or None, got ''"),
    case("HedgedTransport", {"attempt_header": 1}, T,
         "`attempt_header` must be a header name (str) or None, got 1"),
    case("HedgedTransport", {"attempt_header": "Bad Header\n"}, V,
         "`attempt_header` must be an HTTP header name (an RFC 9110 token) or None, "
         "got 'Bad Header\\n'"),
    case("HedgedTransport", {"attempt_header": "Host"}, V,
         "`attempt_header` must not be a header HTTP or the request relies on (such as "
         "Host, Content-Length, Authorization), got 'Host'"),
    case("HedgedTransport", {"attempt_header": "content-LENGTH"}, V,
         "`attempt_header` must not be a header HTTP or the request relies on (such as "
         "Host, Content-Length, Authorization), got 'content-LENGTH'"),
    case("HedgedTransport", {"attempt_header": "Idempotency-Key"}, V,
         "`attempt_header` must not be a header HTTP or the request relies on (such as "
         "Host, Content-Length, Authorization), got 'Idempotency-Key'"),
    case("HedgedTransport", {"replicas": {"http://s": ["http://a:99999"]}}, V,
         "`replicas['http://s']` must have a port in [1, 65535], got 'http://a:99999'"),
    case("HedgedTransport", {"replicas": {"http://s": ["http://a"], "http://s:80": ["http://b"]}},
         V, "`replicas` gives the origin 'http://s' twice (as 'http://s' and 'http://s:80'); "
         "list its replicas once"),
    case("HedgedTransport", {"delay": 10**400}, V, f"{FIXED}got {HUGE}"),
    case("HedgeBudget", {"ratio": 10**400}, V, f"`ratio` must be in (0, 1], got {HUGE}"),
    case("PowerOfTwoChoices", {"cooldown": 10**400}, V,
         f"`cooldown` must be a number of seconds in (0, 3600], got {HUGE}"),
    case("AdaptiveDelay", {"window": 10**400}, V,
         f"`window` must be a number of seconds in (0, 3600], got {HUGE}"),
    case("HedgedTransport", {"preserve_host": "no"}, T,
         "`preserve_host` must be a bool, got 'no'"),
    case("HedgedTransport", {"hooks": None}, T,
         "`hooks` must be a sequence of callables taking a RequestRecord, got None"),
    case("HedgedTransport", {"hooks": [1]}, T,
         "`hooks` must be a sequence of callables taking a RequestRecord, got [1]"),
    case("HedgedTransport", {"metrics": "yes"}, T,
         "`metrics` must be a bool or a CollectorRegistry, got 'yes'"),
    case("HedgedTransport", {"name": ""}, V, "`name` must be a non-empty string, got ''"),
    case("HedgedTransport", {"name": None}, T, "`name` must be a non-empty string, got None"),
    # AdaptiveDelay
    case("AdaptiveDelay", {"quantile": 0}, V, "`quantile` must be in (0, 1), got 0"),
    case("AdaptiveDelay", {"quantile": 1}, V, "`quantile` must be in (0, 1), got 1"),
    case("AdaptiveDelay", {"quantile": math.nan}, V, "`quantile` must be in (0, 1), got nan"),
    case("AdaptiveDelay", {"quantile": "p95"}, T,
         "`quantile` must be a number in (0, 1), got 'p95'"),
    case("AdaptiveDelay", {"window": 0}, V,
         "`window` must be a number of seconds in (0, 3600], got 0"),
    case("AdaptiveDelay", {"window": math.inf}, V,
         "`window` must be a number of seconds in (0, 3600], got inf"),
    case("AdaptiveDelay", {"window": 60000}, V,
         "`window` must be a number of seconds in (0, 3600], got 60000"),
    case("AdaptiveDelay", {"buckets": 0}, V, "`buckets` must be in [1, 1000], got 0"),
    case("AdaptiveDelay", {"buckets": 10**9}, V,
         "`buckets` must be in [1, 1000], got 1000000000"),
    case("AdaptiveDelay", {"buckets": 1.5}, T, "`buckets` must be an int in [1, 1000], got 1.5"),
    case("AdaptiveDelay", {"min_delay": -1}, V,
         "`min_delay` must be a number of seconds in [0, 3600], got -1"),
    case("AdaptiveDelay", {"min_delay": math.nan}, V,
         "`min_delay` must be a number of seconds in [0, 3600], got nan"),
    case("AdaptiveDelay", {"max_delay": -1}, V,
         "`max_delay` must be a number of seconds in [0, 3600] or math.inf, got -1"),
    case("AdaptiveDelay", {"min_delay": 2, "max_delay": 1}, V,
         "`min_delay` must be <= `max_delay`, got 2.0 > 1.0"),
    case("AdaptiveDelay", {"initial_delay": 10}, V,
         "`initial_delay` must be in [min_delay, max_delay] = [0.001, 5.0], got 10.0"),
    case("AdaptiveDelay", {"initial_delay": math.inf}, V,
         "`initial_delay` must be a number of seconds in [0, 3600], got inf"),
    case("AdaptiveDelay", {"min_samples": 0}, V, "`min_samples` must be >= 1, got 0"),
    case("AdaptiveDelay", {"refresh_samples": 0}, V, "`refresh_samples` must be >= 1, got 0"),
    case("AdaptiveDelay", {"refresh_interval": math.nan}, V,
         "`refresh_interval` must be a number of seconds in [0, 3600] or math.inf, got nan"),
    case("AdaptiveDelay", {"max_routes": 0}, V, "`max_routes` must be >= 1, got 0"),
    case("AdaptiveDelay", {"clock": 1}, T,
         "`clock` must be a callable returning seconds, or None, got 1"),
    # HedgeBudget
    case("HedgeBudget", {"ratio": 0}, V, "`ratio` must be in (0, 1], got 0"),
    case("HedgeBudget", {"ratio": 1.5}, V, "`ratio` must be in (0, 1], got 1.5"),
    case("HedgeBudget", {"ratio": math.nan}, V, "`ratio` must be in (0, 1], got nan"),
    case("HedgeBudget", {"ratio": "10%"}, T, "`ratio` must be a number in (0, 1], got '10%'"),
    case("HedgeBudget", {"burst": 0.5}, V, "`burst` must be a finite number >= 1, got 0.5"),
    case("HedgeBudget", {"burst": math.inf}, V, "`burst` must be a finite number >= 1, got inf"),
    case("HedgeBudget", {"burst": None}, T, "`burst` must be a number >= 1, got None"),
    case("HedgeBudget", {"min_per_second": -1}, V,
         "`min_per_second` must be a finite number >= 0, got -1"),
    case("HedgeBudget", {"min_per_second": math.inf}, V,
         "`min_per_second` must be a finite number >= 0, got inf"),
    case("HedgeBudget", {"max_in_flight": 0}, V, "`max_in_flight` must be >= 1 or None, got 0"),
    case("HedgeBudget", {"max_in_flight": 1.5}, T,
         "`max_in_flight` must be an int >= 1 or None, got 1.5"),
    case("HedgeBudget", {"clock": "now"}, T,
         "`clock` must be a callable returning seconds, or None, got 'now'"),
    # PowerOfTwoChoices
    case("PowerOfTwoChoices", {"failure_threshold": 0}, V,
         "`failure_threshold` must be >= 1, got 0"),
    case("PowerOfTwoChoices", {"failure_threshold": True}, T,
         "`failure_threshold` must be an int >= 1, got True"),
    case("PowerOfTwoChoices", {"cooldown": 0}, V,
         "`cooldown` must be a number of seconds in (0, 3600], got 0"),
    case("PowerOfTwoChoices", {"cooldown": math.nan}, V,
         "`cooldown` must be a number of seconds in (0, 3600], got nan"),
    case("PowerOfTwoChoices", {"cooldown": "5s"}, T,
         "`cooldown` must be a number of seconds in (0, 3600], got '5s'"),
    case("PowerOfTwoChoices", {"rng": 42}, T, "`rng` must be a random.Random or None, got 42"),
    case("PowerOfTwoChoices", {"clock": 0.0}, T,
         "`clock` must be a callable returning seconds, or None, got 0.0"),
    # FixedDelay
    case("FixedDelay", {"seconds": "1"}, T,
         "`seconds` must be a number of seconds, got '1'"),
    case("FixedDelay", {"seconds": -1}, V, f"{FIXED}got -1"),
    case("FixedDelay", {"seconds": math.inf}, V, f"{FIXED}got inf"),
    case("FixedDelay", {"seconds": math.nan}, V, f"{FIXED}got nan"),
    case("FixedDelay", {"seconds": 10**400}, V, f"{FIXED}got {HUGE}"),
    case("FixedDelay", {"seconds": -(10**400)}, V, f"{FIXED}got -{HUGE}"),
    case("FixedDelay", {"seconds": Fraction(10**400, 3)}, V,
         f"{FIXED}got about 3.333e+399 (a Fraction)"),
    case("FixedDelay", {"seconds": 1e308}, V,
         f"{FIXED}got 1e+308; to hedge after 1e+308 s, use FixedDelay(1e+308, max_delay=math.inf)"),
    case("FixedDelay", {"seconds": 10**400, "max_delay": math.inf}, V,
         f"`seconds` must be a finite number of seconds >= 0, got {HUGE}"),
    case("HedgedTransport", {"max_hedges": 10**400}, V,
         "`max_hedges` must be in [0, 4] (MAX_HEDGES_LIMIT: at most 4 backups per request; "
         f"with static lists of two or more replicas, at most replicas - 1), got {HUGE}"),
    case("HedgedTransport", {"delay": 1e308}, V,
         f"{FIXED}got 1e+308; to hedge after 1e+308 s, use FixedDelay(1e+308, max_delay=math.inf)"),
    case("FixedDelay", {"seconds": 30}, V,
         "`delay` (FixedDelay `seconds`) is in seconds and must be in [0, 5] (`max_delay`), "
         "got 30: for 30 ms write 0.030; to hedge after 30 s, use "
         "FixedDelay(30, max_delay=math.inf)"),
    case("HedgedTransport", {"delay": 250}, V,
         "`delay` (FixedDelay `seconds`) is in seconds and must be in [0, 5] (`max_delay`), "
         "got 250: for 250 ms write 0.250; to hedge after 250 s, use "
         "FixedDelay(250, max_delay=math.inf)"),
    case("FixedDelay", {"seconds": 1, "max_delay": -1}, V,
         "`max_delay` must be a number of seconds in [0, 3600] or math.inf, got -1"),
]  # fmt: skip


@pytest.mark.parametrize(("builder", "kwargs", "error", "message"), CASES)
def test_bad_parameter_is_refused_with_its_name_and_range(
    builder: str, kwargs: dict[str, Any], error: type[Exception], message: str, tally: Any
) -> None:
    """A bad parameter raises TypeError or ValueError whose whole message names it and the range."""
    with pytest.raises(error, match=rf"^{re.escape(message)}$"):
        BUILDERS[builder](**kwargs)
    tally("B12 bad parameters refused", faults=1)


# -- latencies outside the trackable range --------------------------------------------


class Clock:
    """A settable clock, in seconds."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_any_real_number_is_a_number_of_seconds() -> None:
    """A Fraction (or a numpy scalar: any ``numbers.Real``) is taken as seconds, as a
    float, kept as a float where it is kept (``HedgePolicy``: it reaches
    ``HedgeInfo.delay``); an int too large for a float is refused by name at every entry
    point, as any number above 3600 s (it was taken as math.inf: found by a new user)."""
    assert transport(delay=Fraction(3, 100)).delay_policy.hedge_delay("r") == 0.03
    assert FixedDelay(Fraction(1, 4)).hedge_delay("r") == 0.25
    adaptive = AdaptiveDelay(max_delay=math.inf, quantile=Fraction(9, 10))
    assert (adaptive.quantile, repr(adaptive)) == (
        0.9,
        "AdaptiveDelay(quantile=0.9, window=60.0, max_delay=inf, routes=0)",
    )
    policy = HedgePolicy(min_delay=Fraction(1, 2), max_delay=Fraction(3, 4))
    assert [(type(v), v) for v in (policy.min_delay, policy.max_delay)] == [
        (float, 0.5),
        (float, 0.75),
    ]
    huge = 10**400
    for make in (
        lambda: AdaptiveDelay(max_delay=huge),
        lambda: AdaptiveDelay(refresh_interval=huge),
        lambda: FixedDelay(0.01, max_delay=huge),
        lambda: HedgePolicy(max_delay=huge),
        lambda: Route(path="/x", max_delay=huge),
    ):
        with pytest.raises(ValueError, match=r"must be a number of seconds in \[0, 3600\]"):
            make()


def test_an_initial_delay_out_of_range_by_default_says_so() -> None:
    """A ``max_delay`` below the default ``initial_delay`` names the default as the
    culprit, not a value the user never gave (found by a new user)."""
    with pytest.raises(ValueError, match=r"got 0\.1 \(its default: give one in that range\)$"):
        AdaptiveDelay(max_delay=0.05)
    with pytest.raises(ValueError, match=r"= \[0\.001, 5\.0\], got 7\.0$"):
        AdaptiveDelay(initial_delay=7.0)


def test_untrackable_latencies_are_clamped_and_counted(tally: Any) -> None:
    """0 s, a negative step, two hours, infinity and NaN: never raised, clamped or counted."""
    clock = Clock()
    histogram = RotatingHistogram(clock=clock)
    for seconds in (0.0, -0.250, 7200.0, math.inf, math.nan, 0.010):
        histogram.record(seconds)
    stats = histogram.statistics()
    assert (stats.recorded, stats.clamped, stats.invalid, stats.count) == (5, 4, 1, 5)
    assert histogram.quantile(0.2) == pytest.approx(2e-6)  # 0 and -0.25 s: the 1 µs bucket
    assert histogram.quantile(1.0) == pytest.approx(3600.0, rel=1 / 128)  # the top: 1 hour
    tally("B12 untrackable latencies", faults=6)


def test_tail_beyond_max_delay_moves_the_estimate_and_zero_never_wins(tally: Any) -> None:
    """90 x 50 ms, 10 x 20 s, a 0 s and a 0.2 ms sample: the delay is never 0, the tail counts."""
    clock = Clock()
    policy = AdaptiveDelay(clock=clock, min_delay=0.0)  # even with no floor
    route = "GET http://svc"
    seen: list[float | None] = []
    samples = [0.0, 0.0002] + [0.050] * 90 + [20.0] * 10
    for seconds in samples:
        policy.record(route, seconds, censored=False)
        seen.append(policy.hedge_delay(route))
    stats = policy.statistics().routes[route]
    assert (stats.samples, stats.clamped, stats.warming_up) == (102, 1, False)
    assert all(d is None or d > 0 for d in seen)
    # The p95 of this sample is 20 s, above max_delay (5 s): hedging is suspended
    # (None, the `cutoff` reason), not fed a 50 ms delay by ignoring the tail.
    assert seen[-1] is None
    # Without the 20 s tail the same window gives the 50 ms bucket (never 0).
    lower = AdaptiveDelay(clock=clock, min_delay=0.0)
    for seconds in samples[:92]:
        lower.record(route, seconds, censored=False)
    for _ in range(10):
        lower.record(route, 0.050, censored=False)
    delay = lower.hedge_delay(route)
    assert delay is not None
    assert 0.050 <= delay < 0.050 * (1 + 1 / 128) + 1e-6
    # Hours: clamped to the top of the range (1 hour) and counted, still the tail.
    top = AdaptiveDelay(clock=clock, max_delay=math.inf, min_samples=1)
    top.record(route, 7200.0, censored=False)
    assert top.statistics().clamped == 1
    assert top.hedge_delay(route) == pytest.approx(3600.0, rel=1 / 128)
    # Zeros only: clamped to 1 µs, the delay is its bucket's edge, not 0.
    zeros = AdaptiveDelay(clock=clock, min_delay=0.0, min_samples=1)
    zeros.record(route, 0.0, censored=False)
    zero_delay = zeros.hedge_delay(route)
    assert zero_delay is not None
    assert 0 < zero_delay < 1e-5
    tally("B17 latencies outside the histogram's range", faults=len(samples) + 2)


@pytest.mark.anyio
async def test_failing_delay_policy_never_fails_a_request(
    caplog: pytest.LogCaptureFixture, tally: Any
) -> None:
    """A delay policy whose record() raises is logged; the request still gets its response."""

    class Broken:
        def hedge_delay(self, route: str) -> float:
            return 0.5

        def record(self, route: str, seconds: float, *, censored: bool) -> None:
            msg = "clock went backwards"
            raise ArithmeticError(msg)

    client_transport = HedgedTransport(
        httpx.MockTransport(lambda request: httpx.Response(204)),
        replicas={"http://svc": ["http://a", "http://b"]},
        delay=Broken(),
        selector=PowerOfTwoChoices(rng=random.Random(0)),
        metrics=False,
    )
    with caplog.at_level(logging.WARNING, logger="hedgeclient"):
        async with httpx.AsyncClient(transport=client_transport) as client:
            response = await client.get("http://svc/x")
    assert response.status_code == 204
    assert [r.getMessage() for r in caplog.records] == ["hedgeclient: delay policy record() failed"]
    tally("B12 failing delay policy", faults=1, requests=1)


@pytest.mark.anyio
async def test_delay_policy_failing_for_a_post_never_fails_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A POST is never hedged, so its delay is asked only to report a suppressed backup:
    a policy whose hedge_delay() raises then is logged, and the POST still succeeds."""

    class Broken:
        def hedge_delay(self, route: str) -> float:
            msg = "no estimate"
            raise LookupError(msg)

        def record(self, route: str, seconds: float, *, censored: bool) -> None:
            pass

    records: list[Any] = []
    client_transport = HedgedTransport(
        httpx.MockTransport(lambda request: httpx.Response(201)),
        replicas={"http://svc": ["http://a", "http://b"]},
        delay=Broken(),
        metrics=False,
        hooks=[records.append],
    )
    with caplog.at_level(logging.WARNING, logger="hedgeclient"):
        async with httpx.AsyncClient(transport=client_transport) as client:
            response = await client.post("http://svc/x", content=b"1")
    assert response.status_code == 201
    assert (response.extensions["hedge"].suppressed, records[0].suppressed) == (None, None)
    assert [r.getMessage() for r in caplog.records] == [
        "hedgeclient: delay policy hedge_delay() failed"
    ]


@pytest.mark.anyio
async def test_a_requests_bad_bounds_get_one_short_line(tally: Any) -> None:
    """Per-request settings (``extensions={"hedge": {...}}``) out of range or below the
    route's delay: one line under 200 characters naming the request's key and the range,
    the route's own settings in words (no parameter of the request's), nothing sent."""
    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(204)

    expected = {
        "max_delay": f"`extensions['hedge']['max_delay']` must be a number of seconds in "
        f"[0, 3600] or math.inf, got {HUGE}",
        "delay": f"`extensions['hedge']['delay']` must be a number of seconds in [0, 5] or "
        f"None, got {HUGE}",
        "max_hedges": f"`extensions['hedge']['max_hedges']` must be in [0, 4] or None, got {HUGE}",
    }
    async with httpx.AsyncClient(
        transport=HedgedTransport(httpx.MockTransport(handler), metrics=False)
    ) as client:
        for key, message in expected.items():
            with pytest.raises(ValueError, match=rf"^{re.escape(message)}$"):
                await client.get("http://svc/x", extensions={"hedge": {key: 10**400}})
        # AdaptiveDelay(): its min_delay, 0.001 s, is the shortest delay it gives.
        message = (
            "`extensions['hedge']['max_delay']` must be >= the route's delay (its `min_delay`), "
            "got 0.0005 < 0.001 (above `max_delay` no backup is sent: hedging would be off)"
        )
        with pytest.raises(ValueError, match=rf"^{re.escape(message)}$"):
            await client.get("http://svc/x", extensions={"hedge": {"max_delay": 0.0005}})
        assert max(len(m) for m in [message, *expected.values()]) < 200
    assert sent == []
    tally("B12 bad parameters refused", faults=len(expected) + 1)


HUGE_BUILDERS: dict[str, Callable[[object], object]] = {
    "FixedDelay": lambda x: FixedDelay(x),  # type: ignore[arg-type]
    "HedgedTransport.delay": lambda x: transport(delay=x),
    "HedgedTransport.max_hedges": lambda x: transport(max_hedges=x),
    "AdaptiveDelay.window": lambda x: AdaptiveDelay(window=x),  # type: ignore[arg-type]
    "AdaptiveDelay.quantile": lambda x: AdaptiveDelay(quantile=x),  # type: ignore[arg-type]
    "HedgeBudget.ratio": lambda x: HedgeBudget(ratio=x),  # type: ignore[arg-type]
    "HedgePolicy.max_delay": lambda x: HedgePolicy(max_delay=x),  # type: ignore[arg-type]
    "Route.delay": lambda x: Route(path="/x", delay=x),  # type: ignore[arg-type]
}


@pytest.mark.parametrize("builder", list(HUGE_BUILDERS))
@pytest.mark.parametrize(
    "huge",
    [10**400, -(10**5000), 1e308, Fraction(10**5000, 7)],
    ids=["int-401-digits", "int-5001-digits", "1e308", "fraction"],
)
def test_huge_numbers_give_one_short_line(builder: str, huge: object) -> None:
    """Every entry point refuses a huge number (an int of 401 or 5,001 digits, 1e308) with
    one line under 200 characters naming the parameter and its range, never the ``repr``
    limit's ValueError from inside the check nor hundreds of digits. A Fraction too large
    for a float is no ``math.inf`` (``HedgePolicy(max_delay=...)`` took it as one)."""
    with pytest.raises((TypeError, ValueError)) as raised:  # max_hedges=1e308: TypeError
        HUGE_BUILDERS[builder](huge)
    text = str(raised.value)
    assert text.startswith("`"), text  # the parameter, first
    assert "must be" in text
    assert re.search(r"\[0, [45]\]|\(0, 1\]|\(0, 3600\]|\(0, 1\)|>= 0|\[0, 3600\]", text), text
    assert "\n" not in text
    assert len(text) < 200, text


# -- found by a new user (issue of 2026-12-05): early, short, named, no password --------


def test_a_window_sliced_below_a_microsecond_is_refused_by_name() -> None:
    """``window=5e-324, buckets=1000`` is inside each documented range, but its slices
    are 0.0 s: ``statistics()`` raised ZeroDivisionError from the histogram. It is
    refused at construction, naming both parameters and the window that would do."""
    message = (
        "`window` / `buckets` (a slice) must be at least 1e-06 s, got 5e-324 / 1000: "
        "give window >= 0.001 or fewer buckets"
    )
    for build in (AdaptiveDelay, RotatingHistogram):
        with pytest.raises(ValueError, match=rf"^{re.escape(message)}$"):
            build(window=5e-324, buckets=1000)
    # At the bound (window = buckets x 1 µs, as the message computes it) it works.
    clock = Clock()
    policy = AdaptiveDelay(window=123 * 1e-6, buckets=123, min_samples=1, clock=clock)
    policy.record("r", 0.010, censored=False)
    clock.now += 1e-5
    assert policy.statistics().routes["r"].recorded == 1
    assert RotatingHistogram(window=0.001, buckets=1000, clock=clock).statistics().count == 0


LONG_MESSAGES: dict[str, Callable[[], object]] = {
    "HedgePolicy(hedge=10**400)": lambda: HedgePolicy(hedge=10**400),  # type: ignore[arg-type]
    "HedgePolicy(hedge=Fraction)": lambda: HedgePolicy(hedge=Fraction(10**400, 3)),  # type: ignore[arg-type]
    "non_fatal_statuses=[10**400]": lambda: transport(non_fatal_statuses=[10**400]),
    "non_fatal_statuses=[Fraction]": lambda: transport(non_fatal_statuses=[Fraction(10**400, 3)]),
    "non_fatal_statuses='x'*300": lambda: transport(non_fatal_statuses=["x" * 300]),
    "methods=['GET'*100]": lambda: transport(methods=["GET" * 100]),
    "methods=100 unknown": lambda: transport(methods=[f"M{i}" for i in range(100)]),
    "methods=['GET']*100+[1]": lambda: transport(methods=["GET"] * 100 + [1]),
    "FixedDelay(2**63)": lambda: FixedDelay(2**63),
    "HedgedTransport(delay=2**63)": lambda: transport(delay=2**63),
    "attempt_header='Host'": lambda: transport(attempt_header="Host"),
    "attempt_header='x y'*100": lambda: transport(attempt_header="x y" * 100),
    "routes=Route()": lambda: transport(routes=Route()),
    "routes=['x'*300]": lambda: transport(routes=["x" * 300]),
    "Route(path='x'*300)": lambda: Route(path="x" * 300),
    "Route(name='x'*300, max_hedges=9)": lambda: Route(name="x" * 300, max_hedges=9),
    "hooks=[1]*300": lambda: transport(hooks=[1] * 300),
    "name=10**400": lambda: transport(name=10**400),
    "budget='x'*300": lambda: transport(budget="x" * 300),
    "replicas: a long origin": lambda: transport(
        replicas={"http://s": ["http://" + "a" * 300 + "/p"]}
    ),
    "replicas: a long port": lambda: transport(replicas={"http://s": ["http://a:x" + "1" * 300]}),
}


@pytest.mark.parametrize("label", list(LONG_MESSAGES))
def test_every_refusal_is_one_short_line(label: str) -> None:
    """Each refusal (these gave 216 to 979 characters: a 401-digit int, a 300-character
    string, a route's whole repr, the list of 23 reserved headers) is one line under 200
    characters that starts with the parameter's name."""
    with pytest.raises((TypeError, ValueError)) as raised:
        LONG_MESSAGES[label]()
    text = str(raised.value)
    assert text.startswith("`"), text
    assert "\n" not in text
    assert len(text) < 200, (len(text), text)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: HedgePolicy(hedge=10**400), T,
         f"`hedge` must be True, False or None, got {HUGE}"),
        (lambda: transport(non_fatal_statuses=[10**400]), V,
         f"`non_fatal_statuses` must hold error statuses in [400, 599], got {HUGE}"),
        (lambda: transport(methods=["GET" * 100]), V,
         "`methods` has unknown method(s) ['GETGETGETGETGETGETGETGETGETGETGETGETGE... (304 "
         "characters); allowed: CONNECT, DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT, QUERY, "
         "TRACE"),
        (lambda: FixedDelay(2**63), V,
         f"{FIXED}got 9223372036854775808; to hedge after 9.223e+18 s, use "
         "FixedDelay(9.223e+18, max_delay=math.inf)"),
        (lambda: transport(routes=Route()), T,
         "`routes` must be a sequence of Route, got one Route: give [Route(...)]"),
        (lambda: Route(path="x" * 300), V,
         "`Route.path` must be a glob over the URL path, starting with '/' or '*' (such as "
         "'/v1/*'), got 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx... (302 characters)"),
    ],
    ids=["hedge", "non_fatal_statuses", "methods", "FixedDelay", "routes", "Route.path"],
)  # fmt: skip
def test_long_values_are_abbreviated_in_the_message(
    call: Callable[[], object], error: type[Exception], message: str
) -> None:
    """A huge number by its magnitude, a long text by its start and length, one Route
    given for a list by what to write instead."""
    with pytest.raises(error, match=rf"^{re.escape(message)}$"):
        call()


@pytest.mark.parametrize(
    ("replicas", "message"),
    [
        ({"http://svc": ["http://admin:s3cret@10.0.0.7:8080"]},
         "`replicas['http://svc']` must be an origin (scheme, host and port only, no path, "
         "query or credentials), got 'http://admin:***@10.0.0.7:8080'"),
        ({"http://admin:s3cret@svc": ["http://10.0.0.7:8080"]},
         "`replicas` must be an origin (scheme, host and port only, no path, query or "
         "credentials), got 'http://admin:***@svc'"),
        ({"http://svc": ["http://tok3n@10.0.0.7"]},
         "`replicas['http://svc']` must be an origin (scheme, host and port only, no path, "
         "query or credentials), got 'http://***@10.0.0.7'"),
        ({"http://svc": ["admin:s3cret@10.0.0.7:8080"]},
         "`replicas['http://svc']` must be an absolute http:// or https:// origin, got "
         "'admin:***@10.0.0.7:8080'"),
        ({"http://svc": ["http://admin:s3cret@[::1"]},
         "`replicas['http://svc']` must be an absolute http(s) origin, got "
         "'http://admin:***@[::1' (Invalid port: ':1')"),
    ],
    ids=["replica", "logical", "token", "no-scheme", "invalid"],
)  # fmt: skip
def test_an_origin_with_credentials_is_refused_without_its_password(
    replicas: dict[str, list[str]], message: str
) -> None:
    """A replica origin with credentials was echoed whole into the error (and so into
    logs and bug reports): the password is masked (``admin:***@``), a user alone too
    (it may be a token)."""
    with pytest.raises(ValueError, match=rf"^{re.escape(message)}$") as raised:
        transport(replicas=replicas)
    assert "s3cret" not in str(raised.value)
    assert "tok3n" not in str(raised.value)


def test_a_discovered_origin_with_credentials_is_logged_without_its_password() -> None:
    """A source that gives an origin with credentials: the failure discovery keeps and
    logs (``DiscoveryFailure``) never holds the password."""
    failure = DiscoveryFailure(
        "Client error '401' for url 'https://bot:hunter2@registry/v1/replicas'",
        kind="source_error",
    )
    assert str(failure) == "Client error '401' for url 'https://bot:***@registry/v1/replicas'"


class _Integral:
    """An integer that is no ``int``, as numpy's ``int64`` is (``numbers.Integral``)."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __int__(self) -> int:
        return self.value

    def __repr__(self) -> str:
        return f"_Integral({self.value})"


numbers.Integral.register(_Integral)


def test_any_integer_is_a_status_and_a_count() -> None:
    """``np.int64`` passed for ``max_hedges`` but not in ``non_fatal_statuses``: any
    ``numbers.Integral`` is taken in both, kept as a plain ``int``; one above the bound
    of ``max_hedges`` gets the bound's reason, as an int does."""
    built = transport(non_fatal_statuses=[_Integral(503)], max_hedges=_Integral(2))
    assert [(type(s), s) for s in built._non_fatal] == [(int, 503)]
    with pytest.raises(ValueError, match=r"^`non_fatal_statuses` must hold error statuses "):
        transport(non_fatal_statuses=[_Integral(200)])
    with pytest.raises(ValueError, match=r"^`max_hedges` must be in \[0, 1\] \(replicas - 1: "):
        transport(replicas=TWO, max_hedges=_Integral(3))


@pytest.mark.anyio
async def test_a_requests_bad_key_or_type_is_named_as_given() -> None:
    """``extensions={"hedge": {1: 2}}`` named the key as the string ``'1'``: its repr
    now; ``hedge_decide_on=1`` (a wrong type) is a TypeError; a ``route_key`` that
    returns ``""`` is refused as ``Route(name="")`` is. Nothing is sent."""
    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(204)

    mock = httpx.MockTransport(handler)
    async with httpx.AsyncClient(transport=transport(transport=mock)) as client:
        message = (
            "`extensions['hedge']` has unknown key(s) ['x', 1]; allowed: ['budget', "
            "'decide_on', 'delay', 'hedge', 'max_delay', 'max_hedges', 'min_delay', 'on_backup']"
        )
        with pytest.raises(ValueError, match=rf"^{re.escape(message)}$"):
            await client.get("http://svc/x", extensions={"hedge": {1: 2, "x": 3}})
        message = "`extensions['hedge_decide_on']` must be 'headers' or 'first_byte', got 1"
        with pytest.raises(TypeError, match=rf"^{re.escape(message)}$"):
            await client.get("http://svc/x", extensions={"hedge_decide_on": 1})
        with pytest.raises(TypeError, match=r"^`extensions\['hedge'\]\['decide_on'\]` must be "):
            await client.get("http://svc/x", extensions={"hedge": {"decide_on": 1}})
    with pytest.raises(TypeError, match=r"^`Route\(path='/x'\)\.decide_on` must be 'headers' "):
        Route(path="/x", decide_on=1)  # type: ignore[arg-type]
    keyed = transport(transport=mock, route_key=lambda request: "")
    async with httpx.AsyncClient(transport=keyed) as client:
        message = "`route_key` must return a non-empty str, got ''"
        with pytest.raises(ValueError, match=rf"^{re.escape(message)}$"):
            await client.get("http://svc/x")
    with pytest.raises(ValueError, match=r"^`Route\(name=''\)\.name` must be a non-empty str "):
        Route(name="")
    assert sent == []
