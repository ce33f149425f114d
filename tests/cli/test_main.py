"""The ``hedgeclient`` command as a whole: version, help, metavars, the links it prints."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest

import hedgeclient
from hedgeclient.cli import main
from hedgeclient.cli._main import build_parser
from hedgeclient.cli._output import DOCS_URL

ROOT = Path(__file__).resolve().parents[2]

METAVARS = {
    "N",  # a count
    "Q",  # a quantile, in (0, 1)
    "FRACTION",  # in [0, 1]
    "DURATION",  # '30ms' or seconds
    "DURATIONS",  # comma-separated durations
    "LAW",  # a latency law
    "PORT",
    "FILE",
    "NAME",
}
"""The metavars a flag's value may have, besides a ``{choice,...}`` list."""


def subcommands() -> dict[str, argparse.ArgumentParser]:
    """Each subcommand's parser, by name."""
    parser = build_parser()
    (action,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    """`hedgeclient --version` prints the package version and exits 0."""
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"hedgeclient {hedgeclient.__version__}\n"


@pytest.mark.parametrize("module", ["hedgeclient", "hedgeclient.cli"])
def test_python_dash_m(module: str) -> None:
    """`python -m hedgeclient` and `python -m hedgeclient.cli` are the command."""
    done = subprocess.run(
        [sys.executable, "-m", module, "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout) == (0, f"hedgeclient {hedgeclient.__version__}\n")


def test_every_option_has_help_and_a_known_metavar() -> None:
    """Every option of every subcommand says what it does, and a value is named from one
    small vocabulary (N, Q, DURATION, LAW, ... or its choices)."""
    problems = []
    for name, parser in subcommands().items():
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            where = f"{name} {'/'.join(action.option_strings) or action.dest}"
            if not (action.help or "").strip():
                problems.append(f"{where}: no help")
            if action.nargs == 0:
                continue
            metavar = action.metavar
            if not isinstance(metavar, str):
                problems.append(f"{where}: no metavar")
            elif not (metavar in METAVARS or re.fullmatch(r"\{[a-z-]+(,[a-z-]+)*\}", metavar)):
                problems.append(f"{where}: metavar {metavar!r}")
    assert problems == []


def test_a_flag_shared_by_subcommands_is_spelled_alike() -> None:
    """`--latency`, `--slowness`, `--seed`, `--fanout` take the same metavar everywhere."""
    seen: dict[str, set[str]] = {}
    for parser in subcommands().values():
        for action in parser._actions:
            for flag in action.option_strings:
                seen.setdefault(flag, set()).add(str(action.metavar))
    shared = {flag: metavars for flag, metavars in seen.items() if flag.startswith("--")}
    assert {flag: m for flag, m in shared.items() if len(m) > 1} == {}
    assert seen["--latency"] == {"LAW"}
    assert seen["--fanout"] == {"N"}


def test_serve_slowness_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    """`serve --help` explains both kinds of slowness."""
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--slowness {server-owned,request-owned} server-owned (default): each attempt" in text


def test_the_docs_url_is_the_one_published() -> None:
    """The URL the command cites is pyproject's Documentation URL and mkdocs' site_url."""
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert f'\n[project.urls]\nDocumentation = "{DOCS_URL}"\n' in pyproject
    mkdocs = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert f"\nsite_url: {DOCS_URL}\n" in mkdocs


def test_help_cites_whole_urls_not_repository_paths() -> None:
    """Every help text cites the published docs with the URL on one line, never a path
    of the repository (which a pip-installed user does not have)."""
    texts = [build_parser().format_help()]
    texts += [parser.format_help() for parser in subcommands().values()]
    for text in texts:
        assert "docs/" not in text.replace(DOCS_URL, "")
        for url in re.findall(r"https://hedgeclient\S*", text):
            assert re.fullmatch(re.escape(DOCS_URL) + r"([\w-]+/(#[\w-]+)?)?\)?\.?", url), url
    assert sum(DOCS_URL in text for text in texts) >= 3


def _anchors(page: Path) -> set[str]:
    """The heading anchors of a Markdown page, as mkdocs' toc extension makes them."""
    found = set()
    for line in page.read_text(encoding="utf-8").splitlines():
        if match := re.match(r"^#{1,6}\s+(.*)$", line):
            text = re.sub(r"[`*]", "", match[1]).strip().lower()
            found.add(re.sub(r"[\s]+", "-", re.sub(r"[^\w\s-]", "", text)))
    return found


def test_every_link_the_command_prints_exists() -> None:
    """Each ``docs_link(page, anchor)`` in the command's source names a page of docs/
    and a heading on it."""
    links = set()
    for path in (ROOT / "hedgeclient" / "cli").rglob("*.py"):
        source = path.read_text(encoding="utf-8")
        pattern = r"docs_link\(\s*[\"']([\w-]+)[\"'](?:,\s*[\"']([\w-]+)[\"'])?"
        links |= set(re.findall(pattern, source))
    assert len(links) >= 3
    for page, anchor in links:
        markdown = ROOT / "docs" / f"{page}.md"
        assert markdown.is_file(), page
        if anchor:
            assert anchor in _anchors(markdown), (page, anchor)
