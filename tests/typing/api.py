"""Type-checked, never run: the public API as a user writes it (``mypy --strict``)."""

from __future__ import annotations

import httpx

from hedgeclient import (
    AdaptiveDelay,
    FixedDelay,
    HedgeBudget,
    HedgedTransport,
    HedgeInfo,
    PowerOfTwoChoices,
    RequestRecord,
)


def on_request(record: RequestRecord) -> None:
    seconds: float = record.duration
    hedged: bool = record.hedged
    del seconds, hedged


async def main() -> None:
    budget = HedgeBudget(ratio=0.05, burst=5, min_per_second=0.5)
    transport = HedgedTransport(
        httpx.AsyncHTTPTransport(http2=False),
        replicas={"http://catalog": ["http://10.0.0.7:8080", "http://10.0.0.8:8080"]},
        delay=AdaptiveDelay(quantile=0.95, window=60.0),
        max_hedges=1,
        budget=budget,
        selector=PowerOfTwoChoices(cooldown=2.0),
        hooks=[on_request],
        metrics=False,
        name="catalog",
    )
    fixed = HedgedTransport(delay=FixedDelay(0.030), metrics=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://catalog") as client:
        response = await client.get("/items/42", extensions={"hedge": True})
        info: HedgeInfo = response.extensions["hedge"]
        attempt: int = info.attempt
        del attempt
    await fixed.aclose()
