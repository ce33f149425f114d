"""Latency laws and their string form: exact quantiles, seeded draws, validation."""

from __future__ import annotations

import pickle
import random
import re
from pathlib import Path

import pytest

from hedgeclient.testing import (
    LAB,
    Constant,
    Empirical,
    LatencyLaw,
    LogNormal,
    Mixture,
    Pareto,
    Pauses,
    load_sample,
    parse_law,
)


def test_lab_preset_is_the_hedging_sample() -> None:
    """The lab preset holds the 100 calls of HEDGING.md as run lengths."""
    table = dict(zip(LAB.values, LAB.counts, strict=True))
    assert table == {
        0.010: 40, 0.012: 25, 0.015: 15, 0.020: 10, 0.030: 5, 0.050: 3, 0.120: 1, 0.300: 1
    }  # fmt: skip
    assert LAB.size == 100


@pytest.mark.parametrize(
    ("q", "expected"),
    [
        (0.5, 0.012),  # HEDGING.md: median 12 ms
        (0.95, 0.030),  # p95 30 ms
        (0.99, 0.120),  # p99 120 ms
        (0.4, 0.010),  # P(X > 10 ms) = 0.60 <= 0.60: exactly on the boundary
        (0.41, 0.012),
        (0.9, 0.020),
        (0.999, 0.300),
    ],
)
def test_lab_quantiles_are_exact(q: float, expected: float) -> None:
    """The q-quantile is the smallest v with P(X > v) <= 1 - q, exactly on the sample."""
    assert LAB.quantile(q) == expected


def test_lab_cdf_steps_at_the_sample_values() -> None:
    """The distribution function is the cumulative fraction of the sample."""
    assert LAB.cdf(0.009) == 0.0
    assert LAB.cdf(0.010) == 0.40
    assert LAB.cdf(0.0125) == 0.65
    assert LAB.cdf(0.300) == 1.0


def test_empirical_draws_uniformly_from_the_sample() -> None:
    """Each of the 100 values is drawn with probability 1/100 (seeded, 100,000 draws)."""
    rng = random.Random(7)
    draws = [LAB.sample(rng) for _ in range(100_000)]
    share = draws.count(0.010) / len(draws)
    assert abs(share - 0.40) < 0.01  # binomial sd is 0.0015: 6 sd of slack
    assert set(draws) == set(LAB.values)


def test_seeded_draws_replay() -> None:
    """The same seed gives the same latencies."""
    first = [LAB.sample(random.Random(3)) for _ in range(5)]
    assert first == [LAB.sample(random.Random(3)) for _ in range(5)]


def test_lognormal_sample_median_is_near_the_parameter() -> None:
    """The median of 20,001 seeded draws is within 3% of the median parameter."""
    law = LogNormal(median=0.010, sigma=1.0)
    rng = random.Random(11)
    draws = sorted(law.sample(rng) for _ in range(20_001))
    # The sample median's sd is about sigma * sqrt(pi/2) / sqrt(n) = 0.9% in log terms.
    assert draws[10_000] == pytest.approx(0.010, rel=0.03)
    assert law.quantile(0.5) == pytest.approx(0.010)
    assert law.cdf(law.quantile(0.95)) == pytest.approx(0.95)


def test_pareto_tail_and_cap() -> None:
    """Pareto's quantile is scale * (1 - q) ** (-1 / alpha); the cap clips it."""
    law = Pareto(scale=0.005, alpha=2.0)
    assert law.quantile(0.75) == pytest.approx(0.010)
    assert law.cdf(0.010) == pytest.approx(0.75)
    assert min(law.sample(random.Random(1)) for _ in range(1000)) >= 0.005
    capped = Pareto(scale=0.005, alpha=0.5, cap=0.1)
    assert capped.quantile(0.999) == 0.1
    assert max(capped.sample(random.Random(2)) for _ in range(1000)) <= 0.1


def test_constant() -> None:
    """A constant law always gives its value."""
    law = Constant(0.005)
    assert law.sample(random.Random()) == 0.005
    assert law.quantile(0.99) == 0.005
    assert law.cdf(0.004) == 0.0


def test_pauses_add_a_pause_with_probability_p() -> None:
    """5 ms of service, plus 200 ms with probability 1%: p99 is 5 ms, p99.5 is 205 ms."""
    law = Pauses(0.005, pause=0.2, p=0.01)
    assert law.quantile(0.99) == pytest.approx(0.005)
    assert law.quantile(0.995) == pytest.approx(0.205)
    rng = random.Random(5)
    paused = sum(law.sample(rng) > 0.1 for _ in range(100_000)) / 100_000
    assert abs(paused - 0.01) < 0.002  # binomial sd 0.0003


def test_mixture_weights_and_quantile() -> None:
    """A 90/10 mixture draws each component by weight; its p95 is the median of the tail."""
    law = Mixture([(9.0, Constant(0.005)), (1.0, LogNormal(0.050, 0.5))])
    assert law.quantile(0.95) == pytest.approx(0.050)
    rng = random.Random(9)
    share = sum(law.sample(rng) == 0.005 for _ in range(100_000)) / 100_000
    assert abs(share - 0.9) < 0.005  # binomial sd 0.001


def test_every_law_is_a_picklable_latency_law() -> None:
    """Laws satisfy the protocol and survive pickling (process mode ships them)."""
    laws = [LAB, Constant(0.0), LogNormal(0.01, 1.0), Pareto(0.005, 1.5), Pauses(0.005, 0.2, 0.1)]
    laws.append(Mixture([(1.0, LAB), (1.0, Constant(0.001))]))
    for law in laws:
        assert isinstance(law, LatencyLaw)
        assert pickle.loads(pickle.dumps(law)) == law


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("lab", LAB),
        ("0.005", Constant(0.005)),
        ("constant:0.005", Constant(0.005)),
        ("constant:value=0.005", Constant(0.005)),
        ("lognormal:median=0.01,sigma=1", LogNormal(0.01, 1.0)),
        ("pareto:scale=0.005,alpha=1.5", Pareto(0.005, 1.5)),
        ("pareto:scale=0.005,alpha=1.5,cap=2", Pareto(0.005, 1.5, 2.0)),
        ("pauses:service=0.005,pause=0.2,p=0.01", Pauses(0.005, 0.2, 0.01)),
        ("empirical:0.010=40,0.012=25", Empirical({0.010: 40, 0.012: 25})),
        ("mix:9*constant:0.005|1*lab", Mixture([(9.0, Constant(0.005)), (1.0, LAB)])),
    ],
)
def test_parse_law(text: str, expected: LatencyLaw) -> None:
    """Each string form builds the law it names."""
    assert parse_law(text) == expected


def test_sample_file_in_seconds_and_milliseconds(tmp_path: Path) -> None:
    """A file holds one latency per line; comments and blank lines are skipped."""
    path = tmp_path / "sample.txt"
    path.write_text("# measured\n10\n12\n\n12\n300\n")
    law = load_sample(path, unit="ms")
    assert law == Empirical({0.010: 1, 0.012: 2, 0.300: 1})
    assert parse_law(f"file:{path},unit=ms") == law
    path.write_text("0.010\n0.012\n")
    assert parse_law(f"file:{path}") == Empirical({0.010: 1, 0.012: 1})


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Constant(-0.001), "`value` must be a finite number of seconds >= 0, got -0.001"),
        (lambda: Empirical({}), "`table` must hold at least one latency, got an empty table"),
        (lambda: Empirical({-1.0: 3}), "`table` must be a finite number of seconds >= 0, got -1.0"),
        (lambda: Empirical({0.01: 0}), "`table[0.01]` must be >= 1, got 0"),
        (lambda: LogNormal(0.0, 1.0), "`median` must be a finite number of seconds > 0, got 0.0"),
        (lambda: LogNormal(0.01, -1.0), "`sigma` must be in [0, 10], got -1.0"),
        (lambda: LogNormal(0.01, 1e308), "`sigma` must be in [0, 10], got 1e+308"),
        (lambda: Pareto(0.005, 0.0), "`alpha` must be a finite number > 0, got 0.0"),
        (lambda: Pauses(0.005, 0.2, 1.5), "`p` must be in [0, 1], got 1.5"),
        (
            lambda: Pauses(-1, 0.2, 0.1),
            "`service` must be a finite number of seconds >= 0, got -1.0",
        ),
        (lambda: Mixture([]), "`components` must hold at least one (weight, law) pair, got none"),
        (lambda: LAB.quantile(1.0), "`q` must be in (0, 1), got 1.0"),
        (
            lambda: parse_law("lognormal:median=0.01"),
            "`latency` needs parameter `sigma`, got 'median=0.01'",
        ),
        (
            lambda: parse_law("constant:fast"),
            "`latency` parameter `value` must be a finite number, got 'fast'",
        ),
        (
            lambda: parse_law("constant:-1"),
            "`value` must be a finite number of seconds >= 0, got -1.0",
        ),
    ],
)
def test_bad_configuration_names_the_field(build: object, message: str) -> None:
    """A bad law is refused with a ValueError naming the field and the bad value."""
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        build()  # type: ignore[operator]


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Constant("1"), "`value` must be a number of seconds >= 0, got '1'"),
        (lambda: Constant(True), "`value` must be a number of seconds >= 0, got True"),
        (lambda: Empirical({True: 1}), "`table` must be a number of seconds >= 0, got True"),
        (lambda: Empirical({0.01: 2.5}), "`table[0.01]` must be an int >= 1, got 2.5"),
        (
            lambda: Empirical([0.01, 0.02]),
            "`table` must be a mapping of latency (seconds) to count, got [0.01, 0.02]",
        ),
        (lambda: LogNormal(0.01, "1"), "`sigma` must be a number in [0, 10], got '1'"),
        (lambda: Pareto(0.005, True), "`alpha` must be a number > 0, got True"),
        (
            lambda: Pareto(0.005, 1.5, cap="2"),
            "`cap` must be a number of seconds >= scale or None, got '2'",
        ),
        (lambda: Pauses(0.005, 0.2, True), "`p` must be a number in [0, 1], got True"),
        (
            lambda: Pauses(True, 0.2, 0.1),
            "`service` must be a LatencyLaw or a number of seconds, got True",
        ),
        (
            lambda: Mixture([(True, Constant(0.005))]),
            "`components[0][0]` must be a number > 0, got True",
        ),
        (lambda: Mixture([(1.0, 0.005)]), "`components[0][1]` must be a LatencyLaw, got 0.005"),
        (
            lambda: parse_law(5),
            "`text` must be a str such as 'lab' or 'constant:0.005', got 5",
        ),
    ],
)
def test_wrong_type_is_a_type_error_naming_the_field(build: object, message: str) -> None:
    """A wrong type (a bool is no number) is a TypeError naming the field, not a crash later."""
    with pytest.raises(TypeError, match=f"^{re.escape(message)}$"):
        build()  # type: ignore[operator]


def test_unknown_law_form_is_refused() -> None:
    """An unknown string form lists the forms allowed."""
    with pytest.raises(ValueError, match=r"^`latency` must be one of 'lab', .*, got 'fast'$"):
        parse_law("fast")


def test_sample_file_errors_name_the_line(tmp_path: Path) -> None:
    """A non-numeric or negative line is refused with its line number; so is an empty file."""
    path = tmp_path / "sample.txt"
    path.write_text("0.010\n# comment\nabc\n")
    with pytest.raises(ValueError, match=r"^`path` line 3 must be a latency ≥ 0 in s, got 'abc'$"):
        load_sample(path)
    path.write_text("10\n-4\n")
    with pytest.raises(ValueError, match=r"^`path` line 2 must be a latency ≥ 0 in ms, got '-4'$"):
        load_sample(path, unit="ms")
    path.write_text("# nothing\n")
    with pytest.raises(ValueError, match=r"^`path` must hold at least one latency, got none in "):
        load_sample(path)
    with pytest.raises(ValueError, match=r"^`unit` must be 's' or 'ms', got 'us'$"):
        load_sample(path, unit="us")  # type: ignore[arg-type]
