"""``hedgeclient demo --llm``: streamed chat completions, hedged on the first body byte.

Three replicas of the fake model (``FakeService``'s ``POST /v1/chat/completions``) run
in a subprocess; each sends ``200 OK`` and its headers at once, its first token after a
heavy-tailed time, then 8 tokens at 200 per second. The same streamed calls go through
three clients in interleaved rounds: plain (one request per call), hedged on headers
(the default decision point: nothing to gain, the headers come at once), and hedged on
the first body byte (``Route(decide_on="first_byte")``). The report gives each one's
time to first token, the extra requests it sent and the tokens its losers generated
before they were cancelled. Calls are plain httpx streams read line by line, as an
SDK's server-sent-event parser reads them.

Strictly private: the command line is the interface.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
import httpx

from hedgeclient import AdaptiveDelay, HedgeBudget, HedgedTransport, Route
from hedgeclient.cli import _args
from hedgeclient.cli._args import UsageError
from hedgeclient.cli._output import fixed, print_table
from hedgeclient.testing import FakeService, Generation, LogNormal, Mixture, Pareto, ServiceStats

__all__ = ["ARMS", "LAW", "SDK_SNIPPET", "run"]

LAW = Mixture([(0.95, LogNormal(median=0.040, sigma=0.25)), (0.05, Pareto(0.25, 1.5, cap=2.0))])
"""Time to first token: 95 % log-normal around 40 ms, 5 % a Pareto tail from 250 ms."""

ARMS = ("plain", "headers", "first_byte")
SLOW = 0.250  # seconds: a call whose first token took longer met the law's tail
DEFAULT_CALLS = 500
DEFAULT_CONCURRENCY = 4
WARMUP = 150  # calls per client before it is measured (the adaptive delay needs 100)
LLM = "http://llm"
SDK_SNIPPET = """\
transport = HedgedTransport(
    replicas={"http://llm": [...replica origins...]},
    routes=[Route(method="POST", path="/v1/chat/completions", hedge=True,
                  decide_on="first_byte")],
)
client = AsyncOpenAI(base_url="http://llm/v1",
                     http_client=httpx.AsyncClient(transport=transport))"""


@dataclass
class _Arm:
    name: str
    client: httpx.AsyncClient
    ttft: list[float] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    winners: list[str] = field(default_factory=list)  # the attempt number that won


def _options(args: argparse.Namespace) -> dict[str, Any]:
    """Check the options ``--llm`` takes; refuse the others by name."""
    others = {
        "--fanout": args.fanout, "--delay": args.delay, "--quantile": args.quantile,
        "--rounds": args.rounds, "--warmup": args.warmup, "--metrics-port": args.metrics_port,
        "--plot": args.plot, "--latency": None if args.latency == "demo" else args.latency,
        "--client": None if args.client == "async" else args.client,
    }  # fmt: skip
    given = [flag for flag, value in others.items() if value is not None]
    if given:
        msg = (
            f"--llm does not take {', '.join(given)}: it takes --requests, --concurrency, "
            "--slowness, --seed, --backend and --json"
        )
        raise UsageError(msg)
    return {
        "calls": DEFAULT_CALLS
        if args.requests is None
        else _args.integer(args.requests, "--requests", 20),
        "concurrency": DEFAULT_CONCURRENCY
        if args.concurrency is None
        else _args.integer(args.concurrency, "--concurrency", 1, 64),
        "slowness": _args.choice(args.slowness, "--slowness", ("server-owned", "request-owned")),
        "seed": _args.integer(args.seed, "--seed", 0),
        "backend": _args.choice(args.backend, "--backend", ("asyncio", "trio")),
        "json": bool(args.json),
    }


def _transport(name: str, origins: list[str]) -> HedgedTransport:
    decide: Literal["headers", "first_byte"] = "headers" if name == "headers" else "first_byte"
    return HedgedTransport(
        replicas={LLM: origins},
        routes=[Route(method="POST", path="/v1/chat/completions", hedge=True, decide_on=decide)],
        delay=AdaptiveDelay(),
        max_hedges=0 if name == "plain" else 1,
        budget=HedgeBudget(),
        metrics=False,
        name=name,
    )


async def _call(arm: _Arm, request_id: str, prompt: str, measured: bool) -> None:
    """One streamed completion, read line by line; record its time to first token."""
    body = {"model": "fake", "messages": [{"role": "user", "content": prompt}], "stream": True}
    headers = {"x-request-id": request_id}
    start = time.perf_counter()
    first = math.nan
    async with arm.client.stream("POST", "/v1/chat/completions", json=body, headers=headers) as r:
        async for line in r.aiter_lines():
            if math.isnan(first) and line.startswith("data: {") and '"content"' in line:
                first = time.perf_counter() - start
    if measured:
        arm.ttft.append(first)
        arm.ids.append(request_id)
        arm.winners.append(str(r.extensions["hedge"].attempt))


async def _measure(options: dict[str, Any]) -> tuple[list[_Arm], ServiceStats]:
    generation = Generation(tokens_per_second=200, tokens=8)
    service = FakeService(
        replicas=3, latency=LAW, slowness=options["slowness"], generation=generation,
        mode="process", seed=options["seed"], keep=1_000_000,
    )  # fmt: skip
    async with service as svc:
        arms = [
            _Arm(name, httpx.AsyncClient(transport=_transport(name, svc.origins), base_url=LLM))
            for name in ARMS
        ]
        rounds = iter(range(WARMUP + options["calls"]))

        async def worker() -> None:
            for r in rounds:
                for arm in arms[r % 3 :] + arms[: r % 3]:  # the order rotates
                    await _call(arm, f"{arm.name}-{r}", f"round {r}", r >= WARMUP)

        try:
            async with anyio.create_task_group() as tg:
                for _ in range(options["concurrency"]):
                    tg.start_soon(worker)
        finally:
            for arm in arms:
                await arm.client.aclose()
        with anyio.fail_after(30.0):  # the losers' disconnects reach the server in ms
            stats = await svc.wait_stats(lambda s: all(x.in_flight == 0 for x in s.replicas))
    return arms, stats


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q * len(ordered) - 1e-9)) - 1]


def _report(arms: list[_Arm], stats: ServiceStats, options: dict[str, Any]) -> dict[str, Any]:
    rows = []
    for arm in arms:
        visits = [stats.visits(rid) for rid in arm.ids]
        hedged = [(w, v) for w, v in zip(arm.winners, visits, strict=True) if len(v) > 1]
        # every token a loser generated is billed: cut off, or sent before the close
        wasted = sum(x.tokens for w, v in hedged for x in v if x.attempt != w)
        rows.append(
            {
                "client": arm.name,
                "calls": len(arm.ids),
                "ttft_p50": _quantile(arm.ttft, 0.50),
                "ttft_p99": _quantile(arm.ttft, 0.99),
                "slow_fraction": sum(t > SLOW for t in arm.ttft) / len(arm.ttft),
                "extra_requests": sum(len(v) - 1 for v in visits) / len(visits),
                "wasted_tokens_per_hedge": wasted / len(hedged) if hedged else 0.0,
            }
        )
    return {"config": {**options, "law": repr(LAW), "replicas": 3}, "clients": rows}


def _print(report: dict[str, Any]) -> None:
    config, rows = report["config"], report["clients"]
    print(
        f"hedgeclient demo --llm: 3 fake model replicas ({config['slowness']} time to first "
        f"token: 95% ~40 ms, 5% from 250 ms), {config['calls']} streamed calls per client, "
        f"{config['concurrency']} at a time\n"
    )
    p50 = fixed([r["ttft_p50"] for r in rows], 1, scale=1000.0)
    p99 = fixed([r["ttft_p99"] for r in rows], 1, scale=1000.0)
    table = [
        [r["client"], a, b, f"{r['slow_fraction']:.1%}", f"{r['extra_requests']:.1%}",
         f"{r['wasted_tokens_per_hedge']:.2f}"]
        for r, a, b in zip(rows, p50, p99, strict=True)
    ]  # fmt: skip
    print_table(
        ["client", "TTFT p50 ms", "TTFT p99 ms", "TTFT > 250 ms", "extra requests",
         "wasted tokens/hedge"],
        table,
    )  # fmt: skip
    plain, headers, first = rows
    print(
        f"\nHedged on headers, the race ends when the headers arrive, at once: p99 "
        f"{headers['ttft_p99'] / plain['ttft_p99']:.2f}x plain, nothing gained.\n"
        f"Hedged on the first byte: p99 {first['ttft_p99'] / plain['ttft_p99']:.2f}x plain "
        f"for {first['extra_requests']:.1%} extra requests; each cancelled loser had "
        f"generated {first['wasted_tokens_per_hedge']:.2f} tokens on average (billed, with "
        "its prompt).\n\nWith the openai SDK:\n\n" + SDK_SNIPPET
    )


def run(args: argparse.Namespace) -> int:
    """Run ``hedgeclient demo --llm``; user errors raise :class:`UsageError`."""
    options = _options(args)
    arms, stats = anyio.run(_measure, options, backend=options["backend"])
    report = _report(arms, stats, options)
    if options["json"]:
        print(json.dumps(report, indent=2))
    else:
        _print(report)
    return 0
