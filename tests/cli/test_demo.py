"""``hedgeclient demo``: its options and its user errors, before anything runs."""

from __future__ import annotations

import argparse
import os
import socket
import sys
import types
from pathlib import Path

import httpx
import pytest

from hedgeclient import AdaptiveDelay
from hedgeclient.cli import main
from hedgeclient.cli._args import UsageError
from hedgeclient.cli._main import build_parser
from hedgeclient.cli.demo import _clients, _drive, _measure, _options
from hedgeclient.testing import FakeService
from hedgeclient.testing._cluster import _missing


def options(*argv: str) -> _options.Options:
    """The demo's validated options for ``argv``, without running anything."""
    args = build_parser().parse_args(["demo", *argv])
    assert isinstance(args, argparse.Namespace)
    return _options.validate(args)


async def must_not_run(*args: object) -> None:
    """Stands for :func:`_measure.measure` in tests whose error must come before the run."""
    msg = "the demo ran: the error should have come first"
    raise AssertionError(msg)


# --- options ------------------------------------------------------------------------------


def test_defaults_are_the_documented_ones() -> None:
    """No arguments: 4,000 requests, 2 in flight per usable core (at most 8), the
    library's delay, the demo law."""
    opts = options()
    in_flight = min(8, max(2, 2 * len(os.sched_getaffinity(0))))
    assert (opts.parents, opts.fanout, opts.requests, opts.concurrency) == (
        4000,
        1,
        4000,
        in_flight,
    )
    assert (opts.delay, opts.quantile, opts.latency) == (None, None, "demo")
    assert (opts.slowness, opts.rounds, opts.warmup, opts.seed) == ("server-owned", 10, 500, 0)
    assert (opts.json, opts.verbose, opts.metrics_port, opts.plot) == (False, False, None, None)
    assert (opts.backend, opts.client) == ("asyncio", "async")


@pytest.mark.parametrize(("cores", "in_flight"), [(1, 2), (2, 4), (3, 6), (4, 8), (64, 8)])
def test_the_default_concurrency_follows_the_cores(cores: int, in_flight: int) -> None:
    """2 requests in flight per core, from 2 to 8: a 2-core machine gets 4 (8 made its
    client's loop too late for a verdict there)."""
    assert _options.default_concurrency(cores) == in_flight


class _Origins:
    """Stands for a started FakeService: only its origins are read."""

    origins = ("http://127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:3")


def test_the_hedged_client_runs_with_the_library_defaults() -> None:
    """Without --delay or --quantile the demo's transport has the library's default delay
    policy (quantile 0.95 on every law) and budget."""
    transport = _clients._hedged_transport(_Origins(), options(), _drive.Tally())  # type: ignore[arg-type]
    assert repr(transport.delay_policy) == repr(AdaptiveDelay())
    assert transport.budget.statistics() == type(transport.budget)().statistics()
    lab = _clients._hedged_transport(_Origins(), options("--latency", "lab"), _drive.Tally())  # type: ignore[arg-type]
    assert repr(lab.delay_policy) == repr(AdaptiveDelay())


def test_quantile_and_delay_options_reach_the_transport() -> None:
    """`--quantile 0.9` sets the adaptive delay's quantile; `--delay 30ms` a fixed delay."""
    tally = _drive.Tally()
    quantile = _clients._hedged_transport(_Origins(), options("--quantile", "0.9"), tally)  # type: ignore[arg-type]
    assert isinstance(quantile.delay_policy, AdaptiveDelay)
    assert quantile.delay_policy.quantile == 0.9
    fixed = _clients._hedged_transport(_Origins(), options("--delay", "30ms"), tally)  # type: ignore[arg-type]
    assert fixed.delay_policy.hedge_delay("GET http://demo") == 0.030


def test_the_sync_hedged_client_has_the_async_ones_settings() -> None:
    """`--client sync`: SyncHedgedTransport gets what HedgedTransport gets (delay, name,
    selector, budget)."""
    tally = _drive.Tally()
    for argv in [(), ("--quantile", "0.9"), ("--delay", "30ms")]:
        opts = options("--client", "sync", *argv)
        sync = _clients._sync_hedged_transport(_Origins(), opts, tally)  # type: ignore[arg-type]
        async_ = _clients._hedged_transport(_Origins(), opts, tally)  # type: ignore[arg-type]
        try:
            assert repr(sync.delay_policy) == repr(async_.delay_policy)
            assert sync.name == async_.name == "demo"
            assert type(sync.selector) is type(async_.selector)
            assert sync.budget.statistics() == async_.budget.statistics()
        finally:
            sync.close()


def test_fanout_scales_parents_and_concurrency_down() -> None:
    """`--fanout 10`: 200 parents of 10 requests, one parent in flight."""
    opts = options("--fanout", "10")
    assert (opts.parents, opts.requests, opts.concurrency, opts.in_flight) == (200, 2000, 1, 10)
    assert options("--fanout", "1000").parents == 20
    assert options("--fanout", "4", "--requests", "30", "--concurrency", "3").requests == 120


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30ms", 0.030),
        ("30 ms", 0.030),
        ("0.03", 0.030),
        ("0.03s", 0.030),
        ("1.5e-2", 0.015),
        ("0", 0.0),
        ("5", 5.0),
        ("5000ms", 5.0),
        ("adaptive", None),
    ],
)
def test_delay_forms(text: str, seconds: float | None) -> None:
    """`--delay` takes milliseconds with `ms`, else seconds, or `adaptive`."""
    assert _options.parse_delay(text) == (None if seconds is None else pytest.approx(seconds))


@pytest.mark.parametrize(
    "text", ["30 parsecs", "", "ms", "-5ms", "-0.5", "nan", "inf", "1e999", "-inf"]
)
def test_bad_delays(text: str) -> None:
    """Anything but a finite, non-negative duration is a usage error naming `--delay`."""
    with pytest.raises(UsageError, match=r"^--delay must be a duration such as '30ms'"):
        _options.parse_delay(text)


@pytest.mark.parametrize("text", ["30", "5.001", "30000ms", "1e3s"])
def test_delays_above_the_clients_timeout_are_rejected(text: str) -> None:
    """`--delay 30` is 30 seconds, not 30 ms: past the 5 s timeout, a usage error."""
    with pytest.raises(UsageError) as caught:
        _options.parse_delay(text)
    assert str(caught.value) == (
        f"--delay is in seconds and must be in [0, 5] (write '30ms' for milliseconds), got {text!r}"
    )


def test_delay_help_names_the_unit(capsys: pytest.CaptureFixture[str]) -> None:
    """`demo --help` says that a bare `--delay` number is seconds, and the largest one."""
    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--delay DURATION a fixed hedge delay in seconds ('0.03')" in help_text
    assert "at most 5 seconds" in help_text


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--requests", "0"], "--requests must be an integer >= 1, got '0'"),
        (["--requests", "-5"], "--requests must be an integer >= 1, got '-5'"),
        (["--requests", "many"], "--requests must be an integer >= 1, got 'many'"),
        (["--concurrency", "0"], "--concurrency must be an integer in [1, 10000], got '0'"),
        (["--delay", "30 parsecs"], "--delay must be a duration such as '30ms' or '0.03' "
            "(seconds), got '30 parsecs'"),
        (["--fanout", "0"], "--fanout must be an integer in [1, 1000], got '0'"),
        (["--quantile", "1.5"], "--quantile must be in (0, 1), got '1.5'"),
        (["--delay", "30ms", "--quantile", "0.9"], "--quantile sets the adaptive delay; it "
            "does not apply with a fixed --delay"),
        (["--slowness", "sometimes"], "--slowness must be one of server-owned, request-owned, "
            "got 'sometimes'"),
        (["--backend", "curio"], "--backend must be one of asyncio, trio, got 'curio'"),
        (["--client", "threads"], "--client must be one of async, sync, got 'threads'"),
        (["--client", "sync", "--backend", "trio"], "--client sync does not take --backend "
            "trio: it runs both clients on threads, with no event loop (SyncHedgedTransport's "
            "engine on the callers' threads); --backend chooses the async clients' loop"),
        (["--rounds", "0"], "--rounds must be an integer >= 1, got '0'"),
        (["--warmup", "-1"], "--warmup must be an integer >= 0, got '-1'"),
        (["--metrics-port", "70000"], "--metrics-port must be an integer in [0, 65535], "
            "got '70000'"),
        (["--plot", "tails.svg"], "--plot must name a .png file, got 'tails.svg'"),
        (["--delay", "30"], "--delay is in seconds and must be in [0, 5] (write '30ms' for "
            "milliseconds), got '30'"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A user error prints one line on stderr, no traceback, and exits with status 2."""
    assert main(["demo", *argv]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"hedgeclient: error: {message}\n"


def test_bad_latency_law_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    """An unknown law is reported on one line, before any server starts."""
    assert main(["demo", "--latency", "bogus:1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("hedgeclient: error: --latency 'bogus:1': ")
    assert err.count("\n") == 1


def test_plot_without_matplotlib_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--plot` without matplotlib: one line naming `pip install 'hedgeclient[plot]'`."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` fail
    assert main(["demo", "--plot", "tails.png"]) == 2
    assert capsys.readouterr().err == (
        "hedgeclient: error: --plot needs matplotlib: pip install 'hedgeclient[plot]'\n"
    )


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("missing/tails.png", "no such directory {parent!r}"),
        ("folder.png", "it is a directory"),
        ("tails.png", "permission denied"),
    ],
)
def test_plot_that_cannot_be_written_fails_before_the_run(
    name: str,
    reason: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`--plot` into a missing or read-only directory is refused before the ~35 s run."""
    monkeypatch.setitem(sys.modules, "matplotlib", types.ModuleType("matplotlib"))
    monkeypatch.setattr(_measure, "measure", must_not_run)
    (tmp_path / "folder.png").mkdir()
    if reason == "permission denied":  # chmod would not stop root: os.access answers no
        monkeypatch.setattr(os, "access", lambda path, mode: False)
    path = tmp_path / name
    assert main(["demo", "--plot", str(path)]) == 2
    message = f"--plot: cannot write {str(path)!r}: {reason.format(parent=str(path.parent))}"
    assert capsys.readouterr() == ("", f"hedgeclient: error: {message}\n")


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (
            _missing(ModuleNotFoundError("No module named 'uvicorn'", name="uvicorn")),
            "the fake service needs 'uvicorn': install the extra 'hedgeclient[testing]'",
        ),
        (OSError(98, "Address already in use"), "[Errno 98] Address already in use"),
    ],
)
def test_service_that_cannot_start_is_a_usage_error(
    error: Exception,
    reason: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Without uvicorn (no 'cli'/'testing' extra) the demo names the extra: one line, 2."""

    def start(self: FakeService) -> None:
        raise error

    monkeypatch.setattr(FakeService, "start", start)
    assert main(["demo", "--requests", "10", "--warmup", "0", "--rounds", "1"]) == 2
    assert capsys.readouterr() == ("", f"hedgeclient: error: cannot start the service: {reason}\n")


def test_metrics_server_serves_and_stops() -> None:
    """`--metrics-port 0` serves the registry on 127.0.0.1, and the stop releases the port."""
    url, stop = _measure.start_metrics(0)
    assert url is not None
    try:
        response = httpx.get(url)
        assert response.status_code == 200
        assert "python_info" in response.text or "process_" in response.text
    finally:
        stop()
    with pytest.raises(httpx.ConnectError):
        httpx.get(url)


def test_metrics_port_in_use_is_a_usage_error() -> None:
    """A port already taken is reported as a usage error naming the address."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(
            UsageError, match=rf"^--metrics-port: cannot listen on 127\.0\.0\.1:{port}: "
        ):
            _measure.start_metrics(port)
