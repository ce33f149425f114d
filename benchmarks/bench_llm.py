"""Hedging streamed LLM calls on the first body byte, measured with the real openai SDK.

Run from the repository root::

    .venv/bin/python benchmarks/bench_llm.py            # 1,500 + 600 rounds
    .venv/bin/python benchmarks/bench_llm.py --quick    # 400 + 200 rounds

The fake model is ``FakeService(mode="process")`` (its own process): three replicas
of ``POST /v1/chat/completions`` that send ``200 OK`` and their headers at once, their
first token after a time drawn from a heavy-tailed law, then 8 tokens at 200 per
second. The client is ``AsyncOpenAI(http_client=httpx.AsyncClient(transport=...))``
with ``stream=True``; time to first token (TTFT) runs from the call to the first
chunk with content. ``--concurrency`` (default 4) workers run **rounds**: one call of
every arm of a case per round, in an order that rotates, so the shared machine's load
drifts over all arms alike. The first ``--warmup`` rounds (default 150: the adaptive
delay needs 100 samples) are left out of every figure.

The winner of each call is the attempt its ``HedgeInfo`` names; its text must be
byte-identical to what the server generated for that attempt (SHA-256), and the tokens
every other attempt generated are wasted: cut off by the disconnect (``abandoned``), or
all sent before the close reached the server (a *late loser*, when the client's event
loop was held up for longer than the generation, as on a loaded machine).

Arms (each with its own transport, delay policy and default ``HedgeBudget``):

- ``plain``: ``HedgedTransport(max_hedges=0)`` (one request per call, same code path);
- ``headers``: the chat route opted in, decided on headers (the default);
- ``first_byte``: the chat route opted in, ``decide_on="first_byte"``;
- ``first_byte_30ms`` (case 2 only): the same at a fixed 30 ms delay, below the
  median TTFT, so that most calls would hedge and the budget must hold the load.

Case 1, server-owned TTFT: ``Mixture(0.95 LogNormal(40 ms, 0.25), 0.05 Pareto(250 ms,
1.5, cap 2 s))``, drawn afresh by every attempt. Targets: first_byte p99 <= half the
plain p99, at <= 7 % extra requests; headers no gain; wasted tokens per hedged call <=
2 on average; every caller's text byte-identical to its winner's (the server's SHA-256
of the text it generated). A p99 of a Pareto tail is a noisy statistic (with 1,350
calls its 95 % interval spans about 0.55 to 1.25 s for this law), so "no gain" is
judged on the slow fraction, P(TTFT > 250 ms), a binomial proportion: headers shows
no gain when its slow fraction is not below plain's by more than two standard errors
of the difference.

Case 2, request-owned TTFT (the same law, keyed by the prompt: every replica is as slow
as the request). Targets: no gain (first_byte p99 within 10 % of plain); extra
requests within the budget's bound ``ratio * calls + burst + min_per_second * s``.

The tables are printed and the results written to ``benchmarks/results/llm.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
import httpx
from _common import command, machine, ms, print_table, quantile, verdict, write_json
from openai import AsyncOpenAI

from hedgeclient import AdaptiveDelay, FixedDelay, HedgeBudget, HedgedTransport, Route
from hedgeclient.testing import FakeService, Generation, LogNormal, Mixture, Pareto

LLM = "http://llm"
LAW = Mixture([(0.95, LogNormal(median=0.040, sigma=0.25)), (0.05, Pareto(0.25, 1.5, cap=2.0))])
GENERATION = Generation(tokens_per_second=200, tokens=8)
ROUTE = "/v1/chat/completions"
SLOW = 0.250  # seconds: the tail component's minimum, the "slow call" threshold


@dataclass
class Arm:
    """One way of calling: its transport and what its calls measured."""

    name: str
    transport: HedgedTransport
    client: AsyncOpenAI | None = None
    ttft: list[float] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    texts: dict[str, str] = field(default_factory=dict)
    winners: dict[str, str] = field(default_factory=dict)  # request id -> attempt number


def arm(name: str, svc: FakeService) -> Arm:
    """Build the arm ``name`` over ``svc``'s replicas (see the module docstring)."""
    decide: Literal["headers", "first_byte"] = "headers" if name == "headers" else "first_byte"
    routes = [Route(method="POST", path=ROUTE, hedge=True, decide_on=decide)]
    delay = FixedDelay(0.030) if name == "first_byte_30ms" else AdaptiveDelay()
    transport = HedgedTransport(
        httpx.AsyncHTTPTransport(limits=httpx.Limits(max_connections=32)),
        replicas={LLM: svc.origins},
        routes=routes,
        delay=delay,
        max_hedges=0 if name == "plain" else 1,
        budget=HedgeBudget(),
        metrics=False,
        name=name,
    )
    return Arm(name, transport)


async def call(one: Arm, request_id: str, prompt: str, measured: bool) -> None:
    """One streamed completion; record its TTFT and text when ``measured``."""
    assert one.client is not None
    start = time.perf_counter()
    first = None
    text = ""
    raw = await one.client.chat.completions.with_raw_response.create(
        model="fake",
        messages=[{"role": "user", "content": prompt}],
        stream=True,
        extra_headers={"x-request-id": request_id},
    )
    async for chunk in raw.parse():
        content = chunk.choices[0].delta.content if chunk.choices else None
        if content and first is None:
            first = time.perf_counter() - start
        text += content or ""
    if measured:
        assert first is not None
        one.ttft.append(first)
        one.ids.append(request_id)
        one.texts[request_id] = text
        one.winners[request_id] = str(raw.http_response.extensions["hedge"].attempt)


async def run_case(
    svc: FakeService, arms: list[Arm], rounds: int, warmup: int, concurrency: int, case: str
) -> float:
    """Run ``rounds`` interleaved rounds over ``arms``; return the wall time, seconds."""
    async with httpx.AsyncClient(transport=arms[0].transport) as c0:
        clients = [c0]
        for one in arms[1:]:
            clients.append(httpx.AsyncClient(transport=one.transport))
        for one, http_client in zip(arms, clients, strict=True):
            one.client = AsyncOpenAI(
                api_key="bench", base_url=f"{LLM}/v1", http_client=http_client, max_retries=0
            )
        counter = iter(range(rounds))
        start = time.perf_counter()

        async def worker() -> None:
            for r in counter:
                order = arms[r % len(arms) :] + arms[: r % len(arms)]
                for one in order:
                    # the same prompt in every arm: request-owned draws the same TTFT
                    await call(one, f"{case}-{one.name}-{r}", f"round {r}", r >= warmup)

        async with anyio.create_task_group() as tg:
            for _ in range(concurrency):
                tg.start_soon(worker)
        wall = time.perf_counter() - start
        for http_client in clients[1:]:
            await http_client.aclose()
    return wall


def summarize(one: Arm, svc_stats: Any, plain_p99: float | None) -> dict[str, Any]:
    """The figures of one arm, from its calls and the server's accounting."""
    visits = [svc_stats.visits(rid) for rid in one.ids]
    sent = sum(len(v) for v in visits)
    hedged = [(rid, v) for rid, v in zip(one.ids, visits, strict=True) if len(v) > 1]
    # Every token a loser generated is wasted (billed), whether the server saw the
    # disconnect (abandoned) or had sent it all before the close (a late loser).
    wasted = [sum(x.tokens for x in v if x.attempt != one.winners[rid]) for rid, v in hedged]
    late = sum(
        x.outcome == "completed" and x.attempt != one.winners[r] for r, v in hedged for x in v
    )
    mismatched = []
    for rid, vs in zip(one.ids, visits, strict=True):
        winners = [x for x in vs if x.attempt == one.winners[rid]]
        digest = hashlib.sha256(one.texts[rid].encode()).hexdigest()
        if len(winners) != 1 or winners[0].text_sha256 != digest:
            mismatched.append(
                {
                    "request_id": rid,
                    "text": one.texts[rid],
                    "visits": [(x.replica, x.attempt, x.outcome, x.tokens) for x in vs],
                }
            )
    p99 = quantile(one.ttft, 0.99)
    slow = sum(t > SLOW for t in one.ttft) / len(one.ttft)
    budget = one.transport.budget.statistics()
    policy = one.transport.delay_policy
    delays = policy.delays() if isinstance(policy, AdaptiveDelay) else None
    return {
        "arm": one.name,
        "calls": len(one.ids),
        "ttft_p50_ms": ms(quantile(one.ttft, 0.50)),
        "ttft_p99_ms": ms(p99),
        "ttft_p999_ms": ms(quantile(one.ttft, 0.999)),
        "p99_vs_plain": None if plain_p99 is None else p99 / plain_p99,
        "slow_fraction": slow,
        "extra_requests": (sent - len(one.ids)) / len(one.ids),
        "hedged_calls": len(hedged),
        "wasted_tokens_per_hedge": sum(wasted) / len(wasted) if wasted else 0.0,
        "wasted_tokens_max": max(wasted, default=0),
        "late_losers": late,
        "text_mismatches": len(mismatched),
        "mismatch_details": mismatched,
        "budget_deposits": budget.deposits,
        "budget_withdrawals": budget.withdrawals,
        "delays_s": delays,
    }


async def case(
    name: str, slowness: Any, arm_names: list[str], args: argparse.Namespace, rounds: int
) -> dict[str, Any]:
    """Run one case on its own fake model; return its rows and wall time."""
    svc = FakeService(
        replicas=3, latency=LAW, slowness=slowness, generation=GENERATION, mode="process",
        seed=args.seed, keep=1_000_000,
    )  # fmt: skip
    async with svc:
        arms = [arm(n, svc) for n in arm_names]
        wall = await run_case(svc, arms, rounds, args.warmup, args.concurrency, name)
        with anyio.fail_after(30.0):  # the losers' disconnects reach the server in ms
            stats = await svc.wait_stats(lambda s: all(r.in_flight == 0 for r in s.replicas))
    plain = quantile(arms[0].ttft, 0.99)
    rows = [summarize(a, stats, None if a.name == "plain" else plain) for a in arms]
    for row, one in zip(rows, arms, strict=True):
        row["budget_bound"] = 0.1 * row["budget_deposits"] + 10 + 1.0 * wall
        await one.transport.aclose()
    return {"case": name, "slowness": slowness, "rounds": rounds, "wall_s": wall, "arms": rows}


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


async def main(args: argparse.Namespace) -> None:
    before = uptime()
    rounds1, rounds2 = (400, 200) if args.quick else (1500, 600)
    one = await case(
        "server_owned", "server-owned", ["plain", "headers", "first_byte"], args, rounds1
    )
    two = await case(
        "request_owned", "request-owned", ["plain", "first_byte", "first_byte_30ms"], args, rounds2
    )
    after = uptime()
    arms1 = {a["arm"]: a for a in one["arms"]}
    arms2 = {a["arm"]: a for a in two["arms"]}
    fb, hd, pl = arms1["first_byte"], arms1["headers"], arms1["plain"]
    p0, p1, n = pl["slow_fraction"], hd["slow_fraction"], pl["calls"]
    se = ((p0 * (1 - p0) + p1 * (1 - p1)) / n) ** 0.5
    targets = {
        "first_byte_p99_at_most_half_plain": (fb["p99_vs_plain"], fb["p99_vs_plain"] <= 0.5),
        "first_byte_extra_requests_at_most_7pct": (
            fb["extra_requests"], fb["extra_requests"] <= 0.07
        ),
        "headers_no_gain": (
            f"slow {p1:.3f} vs plain {p0:.3f} (2 SE {2 * se:.3f}); p99/plain "
            f"{hd['p99_vs_plain']:.2f}",
            p0 - p1 <= 2 * se,
        ),
        "wasted_tokens_per_hedge_at_most_2": (
            fb["wasted_tokens_per_hedge"], fb["wasted_tokens_per_hedge"] <= 2.0
        ),
        "texts_byte_identical": (
            sum(a["text_mismatches"] for a in [*one["arms"], *two["arms"]]),
            all(a["text_mismatches"] == 0 for a in [*one["arms"], *two["arms"]]),
        ),
        "request_owned_no_gain": (
            arms2["first_byte"]["p99_vs_plain"], arms2["first_byte"]["p99_vs_plain"] >= 0.9
        ),
        "request_owned_extra_within_budget": (
            arms2["first_byte_30ms"]["extra_requests"],
            all(
                a["budget_withdrawals"] <= a["budget_bound"]
                for a in two["arms"] if a["arm"] != "plain"
            ),
        ),
    }  # fmt: skip
    for result in (one, two):
        print_table(
            f"{result['case']}: {result['rounds']} rounds, {result['wall_s']:.0f} s",
            ["arm", "calls", "TTFT p50 ms", "p99 ms", "p99/plain", "slow", "extra req",
             "hedged", "wasted tok/hedge", "max", "late losers", "text mismatches"],
            [[a["arm"], a["calls"], a["ttft_p50_ms"], a["ttft_p99_ms"], a["p99_vs_plain"],
              a["slow_fraction"], a["extra_requests"], a["hedged_calls"],
              a["wasted_tokens_per_hedge"],
              a["wasted_tokens_max"], a["late_losers"], a["text_mismatches"]]
             for a in result["arms"]],
        )  # fmt: skip
    print_table(
        "targets", ["target", "measured", "verdict"],
        [[k, v, verdict(ok)] for k, (v, ok) in targets.items()],
    )  # fmt: skip
    path = write_json(
        "llm",
        {
            "command": command(),
            "machine": machine(),
            "uptime_before": before,
            "uptime_after": after,
            "law": repr(LAW),
            "generation": repr(GENERATION),
            "concurrency": args.concurrency,
            "warmup_rounds": args.warmup,
            "cases": [one, two],
            "targets": {k: {"measured": v, "pass": ok} for k, (v, ok) in targets.items()},
        },
    )
    print(f"\nwrote {path}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="400 + 200 rounds")
    parser.add_argument("--concurrency", type=int, default=4, help="workers (default 4)")
    parser.add_argument("--warmup", type=int, default=150, help="rounds left out (default 150)")
    parser.add_argument("--seed", type=int, default=1, help="the fake model's seed")
    anyio.run(main, parser.parse_args())
