"""Transports sharing a ``client`` name: each scrape-time gauge of the name covers every
live transport bound under it (the delay of each of their routes, their budgets summed,
their replicas), and a transport garbage collected leaves.

Hand-built records drive the hooks for exact values; the end-to-end test runs two real
transports on asyncio and on trio.
"""

from __future__ import annotations

import gc
import math
import random
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from hedgeclient import (
    AdaptiveDelay,
    AttemptRecord,
    FixedDelay,
    HedgeBudget,
    HedgedTransport,
    PowerOfTwoChoices,
    RequestRecord,
    Route,
)
from hedgeclient.instrumentation import PrometheusMetrics
from hedgeclient.testing import ScriptedReplicas

NAME = "default"
DELAY = "hedgeclient_hedge_delay_seconds"
TOKENS = "hedgeclient_budget_tokens"
CATALOG, PRICES = "GET http://catalog", "GET http://prices"


class FakeClock:
    """A clock that stands still, in seconds (the adaptive delay's window never slides)."""

    def __call__(self) -> float:
        return 0.0


def transport(service: str, **kwargs: Any) -> HedgedTransport:
    """A transport of ``service`` (two replicas) named ``default``, reporting nowhere
    itself (the test binds it), over a never-called MockTransport."""
    kwargs.setdefault("delay", 0.030)
    kwargs.setdefault("metrics", False)
    return HedgedTransport(
        httpx.MockTransport(lambda request: httpx.Response(200)),
        replicas={service: [service + "-1", service + "-2"]},
        **kwargs,
    )


def record(route: str, delay: float | None = 0.030, **kwargs: Any) -> RequestRecord:
    """A RequestRecord of client ``default``: a primary that answered in 11 ms."""
    fields: dict[str, Any] = {
        "client": NAME,
        "route": route,
        "outcome": "ok",
        "duration": 0.011,
        "delay": delay,
        "attempts": (
            AttemptRecord(
                kind="primary",
                replica="http://r",
                started=0.0,
                duration=0.011,
                outcome="won",
                status=200,
                censored=False,
            ),
        ),
        "suppressed": None,
    }
    fields.update(kwargs)
    return RequestRecord(**fields)


def adaptive(route: str, seconds: float) -> AdaptiveDelay:
    """An adaptive delay that learned ``route`` from 10 samples of ``seconds``."""
    policy = AdaptiveDelay(min_samples=5, initial_delay=0.1, clock=FakeClock())
    for _ in range(10):
        policy.record(route, seconds, censored=False)
    return policy


def delays(registry: CollectorRegistry) -> dict[str, float]:
    """The delay series of client ``default``: route -> seconds."""
    return {
        sample.labels["route"]: sample.value
        for metric in registry.collect()
        if metric.name == DELAY
        for sample in metric.samples
        if sample.labels["client"] == NAME
    }


def value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    """``registry.get_sample_value`` of client ``default``."""
    return registry.get_sample_value(name, {"client": NAME, **labels})


# -- the delay gauge ----------------------------------------------------------------------


def test_two_live_transports_of_one_name_show_both_routes(registry: CollectorRegistry) -> None:
    """Two adaptive transports of one name, one route each: both routes' delays are
    shown, each at its own policy's estimate, the second built or not."""
    metrics = PrometheusMetrics.for_registry(registry)
    catalog_policy, prices_policy = adaptive(CATALOG, 0.020), adaptive(PRICES, 0.040)
    catalog = transport("http://catalog", delay=catalog_policy)
    catalog_hook = metrics.bind(catalog)
    catalog_hook(record(CATALOG, catalog_policy.hedge_delay(CATALOG)))
    assert delays(registry) == {CATALOG: catalog_policy.delays()[CATALOG]}
    prices = transport("http://prices", delay=prices_policy)
    prices_hook = metrics.bind(prices)  # built, not used yet
    assert delays(registry) == {CATALOG: catalog_policy.delays()[CATALOG]}
    prices_hook(record(PRICES, prices_policy.hedge_delay(PRICES)))
    shown = delays(registry)
    assert shown == {
        CATALOG: catalog_policy.delays()[CATALOG],
        PRICES: prices_policy.delays()[PRICES],
    }
    assert shown == pytest.approx({CATALOG: 0.020, PRICES: 0.040}, rel=1 / 128)
    assert catalog.name == prices.name == NAME


def test_a_collected_transport_leaves_the_delay_gauge(registry: CollectorRegistry) -> None:
    """Once one of two transports of a name is garbage collected, its route leaves the
    delay gauge; the other's stays (the counters of both stay)."""
    metrics = PrometheusMetrics.for_registry(registry)
    catalog_policy, prices_policy = adaptive(CATALOG, 0.020), adaptive(PRICES, 0.040)
    catalog = transport("http://catalog", delay=catalog_policy)
    prices = transport("http://prices", delay=prices_policy)
    metrics.bind(catalog)(record(CATALOG, catalog_policy.hedge_delay(CATALOG)))
    metrics.bind(prices)(record(PRICES, prices_policy.hedge_delay(PRICES)))
    assert set(delays(registry)) == {CATALOG, PRICES}
    del catalog
    gc.collect()
    assert delays(registry) == {PRICES: prices_policy.delays()[PRICES]}
    labels = {"route": CATALOG, "outcome": "ok"}
    assert value(registry, "hedgeclient_requests_total", **labels) == 1
    assert PrometheusMetrics.for_registry(registry).statistics().transports == 1
    assert prices.name == NAME


def test_one_route_under_two_delays_shows_the_higher(registry: CollectorRegistry) -> None:
    """Two fixed delays of one name, one route: the gauge shows the higher delay,
    whichever transport was bound last."""
    metrics = PrometheusMetrics.for_registry(registry)
    slow = transport("http://catalog", delay=FixedDelay(0.050))
    quick = transport("http://catalog", delay=FixedDelay(0.020))
    metrics.bind(slow)(record(CATALOG, 0.050))
    metrics.bind(quick)(record(CATALOG, 0.020))
    assert delays(registry) == {CATALOG: 0.050}
    del slow
    gc.collect()
    assert delays(registry) == {CATALOG: 0.020}
    assert quick.name == NAME


def test_a_learned_delay_wins_over_another_transports_fixed_one(
    registry: CollectorRegistry,
) -> None:
    """An adaptive transport and a fixed one of one name: the adaptive route shows the
    delay learned for it (not the higher fixed delay, which holds for every route), the
    fixed transport's route its fixed delay."""
    metrics = PrometheusMetrics.for_registry(registry)
    policy = adaptive(PRICES, 0.020)
    fixed = transport("http://catalog", delay=FixedDelay(0.200))
    learned = transport("http://prices", delay=policy)
    metrics.bind(fixed)(record(CATALOG, 0.200))
    metrics.bind(learned)(record(PRICES, policy.hedge_delay(PRICES)))
    assert delays(registry) == {CATALOG: 0.200, PRICES: policy.delays()[PRICES]}
    assert delays(registry)[PRICES] == pytest.approx(0.020, rel=1 / 128)
    assert fixed.name == learned.name


def test_a_route_suspended_by_one_transport_is_nan(registry: CollectorRegistry) -> None:
    """A route one transport of the name has at its cutoff is NaN (a gap), although
    another one hedges it."""
    metrics = PrometheusMetrics.for_registry(registry)
    cut = AdaptiveDelay(min_samples=5, max_delay=0.5, initial_delay=0.1, clock=FakeClock())
    for _ in range(10):
        cut.record(CATALOG, 2.0, censored=False)
    assert cut.hedge_delay(CATALOG) is None
    suspended = transport("http://catalog", delay=cut)
    hedging = transport("http://catalog", delay=adaptive(CATALOG, 0.020))
    metrics.bind(suspended)(record(CATALOG, None, suppressed="cutoff"))
    metrics.bind(hedging)(record(CATALOG, 0.020))
    gauge = delays(registry)[CATALOG]
    assert math.isnan(gauge)
    del suspended
    gc.collect()
    assert delays(registry) == pytest.approx({CATALOG: 0.020}, rel=1 / 128)
    assert hedging.name == NAME


# -- budgets, retries, loop lag -------------------------------------------------------------


def test_budgets_of_one_name_are_summed(registry: CollectorRegistry) -> None:
    """The budget gauge of a name is the sum of its transports' budgets, a budget two
    of them share counted once; a collected transport's budget leaves the sum."""
    metrics = PrometheusMetrics.for_registry(registry)
    shared = HedgeBudget(burst=5, min_per_second=0)
    first = transport("http://catalog", budget=HedgeBudget(burst=7, min_per_second=0))
    second = transport("http://prices", budget=HedgeBudget(burst=3, min_per_second=0))
    third = transport("http://stock", budget=shared)
    fourth = transport("http://stock", budget=shared)
    for built in (first, second, third, fourth):
        metrics.bind(built)
    assert value(registry, TOKENS) == 7 + 3 + 5
    assert first.budget.try_withdraw()
    assert shared.try_withdraw()
    assert value(registry, TOKENS) == 6 + 3 + 4
    text = generate_latest(registry).decode()
    assert text.count("hedgeclient_budget_tokens{") == 1
    del first
    gc.collect()
    assert value(registry, TOKENS) == 3 + 4
    del third
    gc.collect()
    assert value(registry, TOKENS) == 3 + 4  # the shared budget lives on in the fourth
    assert second.name == fourth.name == NAME


def test_route_budgets_and_retries_of_one_name_are_summed(registry: CollectorRegistry) -> None:
    """A route's own budgets over the transports of a name are summed under its label,
    a budget shared by two transports once; the retries drawn on the name's budgets
    are summed over distinct budgets."""
    shared = HedgeBudget(burst=2, min_per_second=0)
    main = HedgeBudget(ratio=0.1, burst=2, min_per_second=0)

    def routes(burst: int) -> list[Route]:
        return [
            Route(path="/export/*", name="export", budget=HedgeBudget(burst=burst)),
            Route(path="/orders", name="orders", budget=shared),
        ]

    first = transport("http://catalog", routes=routes(7), budget=main, metrics=registry)
    second = transport("http://catalog", routes=routes(4), budget=main, metrics=registry)
    route = "hedgeclient_route_budget_tokens"
    assert value(registry, route, route="export") == 7 + 4
    assert value(registry, route, route="orders") == 2
    assert value(registry, TOKENS) == 2
    assert [main.try_retry() for _ in range(3)] == [True, False, False]
    assert value(registry, "hedgeclient_budget_retries_total") == 1
    assert value(registry, "hedgeclient_budget_retries_refused_total") == 2
    other = HedgeBudget(ratio=0.1, burst=2, min_per_second=0)
    third = transport("http://catalog", budget=other, metrics=registry)
    assert [other.try_retry() for _ in range(2)] == [True, False]
    assert value(registry, "hedgeclient_budget_retries_total") == 1 + 1
    assert value(registry, "hedgeclient_budget_retries_refused_total") == 2 + 1
    assert value(registry, TOKENS) == pytest.approx(0.9 + 0.9)  # a retry costs 1.1 tokens
    del first
    gc.collect()
    assert value(registry, route, route="export") == 4
    assert second.name == third.name == NAME


class LagSource:
    """A metrics source with an event loop lag, in seconds."""

    def __init__(self, lag: float) -> None:
        self.name = NAME
        self.delay_policy = FixedDelay(0.030)
        self.budget = HedgeBudget(burst=1)
        self.event_loop_lag = lag


def test_event_loop_lag_of_one_name_is_the_highest(registry: CollectorRegistry) -> None:
    """The loop lag of a name is the highest of its live transports', whichever was
    bound last; a collected one leaves."""
    metrics = PrometheusMetrics.for_registry(registry)
    late, quick = LagSource(0.004), LagSource(0.001)
    metrics.bind(late)
    metrics.bind(quick)
    lag = "hedgeclient_event_loop_lag_seconds"
    assert value(registry, lag) == 0.004
    quick.event_loop_lag = 0.006
    assert value(registry, lag) == 0.006
    del quick
    gc.collect()
    assert value(registry, lag) == 0.004
    assert late.name == NAME


# -- replica series -------------------------------------------------------------------------


def eject(selector: PowerOfTwoChoices, replica: str, replicas: list[str]) -> None:
    """Eject ``replica`` by three black-holed connects (``connect_stalled``)."""
    selector.choose(replicas, ())
    for _ in range(3):
        selector.attempt_started(replica)
        selector.attempt_finished(replica, result="connect_stalled")


def test_replica_series_of_one_name_are_the_union(registry: CollectorRegistry) -> None:
    """Two transports of one name, one service in common: the union of their services
    and replicas, a replica ejected by either selector shown ejected, ejections summed
    over distinct selectors (a selector a third transport shares, once)."""
    svc = ["http://a", "http://b"]
    first_selector = PowerOfTwoChoices(rng=random.Random(1), clock=lambda: 0.0)
    second_selector = PowerOfTwoChoices(rng=random.Random(2), clock=lambda: 0.0)
    first = HedgedTransport(
        replicas={"http://svc": svc, "http://solo": ["http://d"]},
        selector=first_selector,
        metrics=registry,
    )
    second = HedgedTransport(
        replicas={"http://svc": ["http://b", "http://c"]},
        selector=second_selector,
        metrics=registry,
    )
    third = HedgedTransport(
        replicas={"http://svc": svc}, selector=second_selector, metrics=registry
    )
    eject(first_selector, "http://a", svc)
    eject(second_selector, "http://c", ["http://b", "http://c"])
    assert value(registry, "hedgeclient_replicas", service="http://svc") == 3
    assert value(registry, "hedgeclient_replicas", service="http://solo") == 1
    ejected = "hedgeclient_replica_ejected"
    assert {
        replica: value(registry, ejected, service="http://svc", replica=replica)
        for replica in ("http://a", "http://b", "http://c")
    } == {"http://a": 1, "http://b": 0, "http://c": 1}
    total = "hedgeclient_replica_ejections_total"
    assert value(registry, total, cause="connect_stalled") == 2
    assert value(registry, "hedgeclient_replica_ejections_refused_total") == 0
    del first
    gc.collect()
    assert value(registry, "hedgeclient_replicas", service="http://solo") is None
    assert value(registry, ejected, service="http://svc", replica="http://a") == 0
    assert value(registry, total, cause="connect_stalled") == 1
    assert second.name == third.name == NAME


# -- end to end, asyncio and trio --------------------------------------------------------


@pytest.mark.anyio
async def test_two_transports_of_one_name_end_to_end(registry: CollectorRegistry) -> None:
    """Two HedgedTransports for two services, both named ``default``, hedging on a
    running loop: both routes' delays and both budgets are shown while both live; once
    one is collected, only the other's."""
    script = ScriptedReplicas({host: [0.001] for host in "abcd"})
    # Warming up (fewer samples than min_samples): each route at its initial delay, so
    # no backup goes on a busy machine either and no token is spent.
    policies = [AdaptiveDelay(min_samples=50, initial_delay=seconds) for seconds in (0.5, 0.4)]
    services = {
        "http://catalog": ["http://a", "http://b"],
        "http://prices": ["http://c", "http://d"],
    }
    clients = []
    for (service, replicas), policy, burst in zip(services.items(), policies, (7, 3), strict=True):
        built = HedgedTransport(
            httpx.MockTransport(script.handler),
            replicas={service: replicas},
            delay=policy,
            budget=HedgeBudget(burst=burst, min_per_second=0),
            metrics=registry,
        )
        clients.append(httpx.AsyncClient(transport=built, base_url=service))
    for client in clients:
        for _ in range(6):
            (await client.get("/x")).raise_for_status()
    catalog, prices = (policy.delays() for policy in policies)
    assert catalog == {CATALOG: 0.5}
    assert prices == {PRICES: 0.4}
    assert delays(registry) == {CATALOG: 0.5, PRICES: 0.4}
    assert value(registry, TOKENS) == 7 + 3
    await clients[0].aclose()
    del clients[0], built
    gc.collect()
    assert delays(registry) == prices
    assert value(registry, TOKENS) == 3
    assert value(registry, "hedgeclient_requests_total", route=CATALOG, outcome="ok") == 6
    await clients[0].aclose()
