"""Composite latency laws: a weighted mixture, and a service time with random pauses.

Their quantiles have no closed form: they are found by bisection on the distribution
function, to 1e-12 s (the convention of ``docs/how-it-works.md``: the smallest v with
``P(X > v) <= 1 - q``).

Prior art: Dean & Barroso, "The Tail at Scale", CACM 56(2), 2013 (a fixed service
time plus occasional pauses: garbage collection, background work).

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import final

from hedgeclient._checks import as_seconds, check_number
from hedgeclient.testing._laws import Constant, LatencyLaw, _check_q, _check_seconds, _invert

__all__ = ["Mixture", "Pauses"]


@final
@dataclass(frozen=True, slots=True)
class Mixture:
    """With probability ``weight_i / sum(weights)``, draw from ``law_i``.

    Args:
        components: ``(weight, law)`` pairs; weights finite and > 0; not empty.

    Raises:
        TypeError: a weight that is not a number, or a law that is not a :class:`LatencyLaw`
            (the message names the pair: ``components[1][0]`` is its weight).
        ValueError: no component, or a weight that is not finite and > 0.

    .. versionadded:: 0.1.0
    """

    components: tuple[tuple[float, LatencyLaw], ...]

    def __init__(self, components: Sequence[tuple[float, LatencyLaw]]) -> None:
        if not components:
            msg = "`components` must hold at least one (weight, law) pair, got none"
            raise ValueError(msg)
        for index, (weight, law) in enumerate(components):
            check_number(f"components[{index}][0]", weight, low=0.0, low_open=True, plain=True)
            if not isinstance(law, LatencyLaw):
                msg = f"`components[{index}][1]` must be a LatencyLaw, got {law!r}"
                raise TypeError(msg)
        object.__setattr__(self, "components", tuple(components))

    def _weights(self) -> list[float]:
        total = sum(w for w, _ in self.components)
        return [w / total for w, _ in self.components]

    def sample(self, rng: random.Random) -> float:
        """Pick a component by weight, then draw from it."""
        u = rng.random()
        for weight, (_, law) in zip(self._weights(), self.components, strict=True):
            u -= weight
            if u < 0.0:
                return law.sample(rng)
        return self.components[-1][1].sample(rng)

    def cdf(self, x: float) -> float:
        """Return the weighted sum of the components' cdfs."""
        return sum(
            w * law.cdf(x) for w, (_, law) in zip(self._weights(), self.components, strict=True)
        )

    def quantile(self, q: float) -> float:
        """Return the mixture's q-quantile, found by bisection (to 1e-12 s)."""
        _check_q(q)
        bounds = [law.quantile(q) for _, law in self.components]
        return _invert(self.cdf, q, min(bounds), max(bounds))


@final
@dataclass(frozen=True, slots=True)
class Pauses:
    """A service time plus, with probability ``p``, a pause (a GC, a busy disk).

    Args:
        service: the law of the service time (a float means :class:`Constant`).
        pause: the pause, seconds, ≥ 0.
        p: the probability of a pause, in [0, 1].

    Raises:
        TypeError: a service that is neither a law nor a number, a pause or p that is
            not a number (a bool is not a number).
        ValueError: a negative pause, or p outside [0, 1].

    .. versionadded:: 0.1.0
    """

    service: LatencyLaw
    pause: float
    p: float

    def __init__(self, service: LatencyLaw | float, pause: float, p: float) -> None:
        seconds = as_seconds(service, plain=True)
        if seconds is not None:
            _check_seconds("service", seconds)  # named here, not as Constant's `value`
            law: LatencyLaw = Constant(seconds)
        elif isinstance(service, LatencyLaw):
            law = service
        else:
            msg = f"`service` must be a LatencyLaw or a number of seconds, got {service!r}"
            raise TypeError(msg)
        _check_seconds("pause", pause)
        check_number("p", p, low=0.0, high=1.0, plain=True)
        object.__setattr__(self, "service", law)
        object.__setattr__(self, "pause", pause)
        object.__setattr__(self, "p", p)

    def sample(self, rng: random.Random) -> float:
        """Return a service time, plus ``pause`` with probability ``p``."""
        paused = rng.random() < self.p
        return self.service.sample(rng) + (self.pause if paused else 0.0)

    def cdf(self, x: float) -> float:
        """Return ``(1 - p) F(x) + p F(x - pause)``."""
        return (1.0 - self.p) * self.service.cdf(x) + self.p * self.service.cdf(x - self.pause)

    def quantile(self, q: float) -> float:
        """Return the q-quantile, found by bisection (to 1e-12 s)."""
        base = self.service.quantile(q)
        return _invert(self.cdf, q, base, base + self.pause)
