"""The code in the docs runs: every Python block of ``docs/*.md`` and ``README.md``.

Conventions in the Markdown, an HTML comment on the line just before a fenced block:

- A ``python`` block runs, unless marked ``<!-- test: skip -->`` (say why in the text).
- ``<!-- test: pytest -->``: the ``python`` block is a pytest module; it is written to a
  temporary directory and run by pytest in a subprocess, so that the ``fake_service``
  fixture and anyio's ``anyio`` marker come from their installed plugins, as for a user.
- ``<!-- test: stdout -->`` before a ``text`` block: what the ``python`` block before it
  prints, exactly.
- ``<!-- test: output -->`` before a ``console`` block: its first line is
  ``$ hedgeclient ...``; the command runs and must print exactly the rest of the block.

Replica origins in the snippets are placeholders, replaced by the origins of one
``FakeService`` (thread mode, constant 2 ms latency) started for this module:

    http://10.0.0.7:8080   replica 0
    http://10.0.0.8:8080   replica 1
    http://10.0.0.9:8080   replica 2
    http://10.0.0.98:8080  replica 3, Down (connection refused)
    http://10.0.0.99:8080  replica 4, Down (connection refused)

Logical origins (``http://catalog``, ...) are left alone: the transport maps them.

Every block runs as a script, the way the docs tell a reader to run it: a block with
top-level ``await`` is put inside ``async def main():`` and run by ``asyncio.run(main())``
(and once more by ``trio.run(main)``), as "Running the examples" in the quickstart says;
any other block runs as it is. Each run gets a temporary working directory. A page with
top-level ``await`` links to that section before its first such block.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import io
import os
import re
import runpy
import shlex
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from hedgeclient.testing import Down, FakeService, ReplicaConfig

ROOT = Path(__file__).resolve().parent.parent
SOURCES = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]

PLACEHOLDERS = (
    "http://10.0.0.7:8080",
    "http://10.0.0.8:8080",
    "http://10.0.0.9:8080",
    "http://10.0.0.98:8080",
    "http://10.0.0.99:8080",
)
DOWN = (3, 4)
"""Indices of the replicas behind the placeholders that refuse connections."""

_FENCE = re.compile(r"^```(\w*)\s*$")
_MARK = re.compile(r"^<!--\s*test:\s*(\w+)\b.*-->\s*$")


@dataclass
class Block:
    """One fenced code block of a Markdown file."""

    path: Path
    line: int
    lang: str
    mark: str | None
    code: str
    stdout: str | None = None

    @property
    def id(self) -> str:
        return f"{self.path.name}:{self.line}"


def parse(path: Path) -> list[Block]:
    """Return the fenced blocks of ``path``; a ``stdout`` block attaches to the one before."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    index = 0
    while index < len(lines):
        fence = _FENCE.match(lines[index])
        if fence is None:
            index += 1
            continue
        end = index + 1
        while end < len(lines) and lines[end].rstrip() != "```":
            end += 1
        previous = lines[index - 1] if index else ""
        mark = _MARK.match(previous)
        code = "\n".join(lines[index + 1 : end]) + "\n"
        block = Block(path, index + 1, fence[1], mark[1] if mark else None, code)
        if block.mark == "stdout":
            owner = next((b for b in reversed(blocks) if b.lang == "python"), None)
            assert owner is not None, f"{block.id}: a stdout block follows no python block"
            owner.stdout = code
        else:
            blocks.append(block)
        index = end + 1
    return blocks


BLOCKS = [block for path in SOURCES for block in parse(path)]
SCRIPTS = [b for b in BLOCKS if b.lang == "python" and b.mark not in ("skip", "pytest")]
PYTEST_MODULES = [b for b in BLOCKS if b.lang == "python" and b.mark == "pytest"]
COMMANDS = [b for b in BLOCKS if b.lang == "console" and b.mark == "output"]


@pytest.fixture(scope="module")
def origins() -> Iterator[list[str]]:
    """The fake service's origins, by placeholder index."""
    down = {i: ReplicaConfig(fault=Down()) for i in DOWN}
    with FakeService(replicas=len(PLACEHOLDERS), latency=0.002, replica_overrides=down) as svc:
        yield svc.origins


def substitute(code: str, origins: list[str]) -> str:
    """Replace each placeholder origin by the fake replica's."""
    for placeholder, origin in zip(PLACEHOLDERS, origins, strict=True):
        code = code.replace(placeholder, origin)
    return code


def uses_top_level_await(code: str) -> bool:
    """Whether ``code`` only compiles with top-level ``await`` (a script would refuse it)."""
    compiled = compile(code, "<block>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    return bool(compiled.co_flags & inspect.CO_COROUTINE)


def as_script(code: str, backend: str) -> str:
    """``code`` as a script, as "Running the examples" in the quickstart says: top-level
    ``await`` code goes inside ``async def main()``, run by ``asyncio.run`` (or
    ``trio.run``); any other code as it is."""
    if backend == "script":
        return code
    run = "asyncio.run(main())" if backend == "asyncio" else "trio.run(main)"
    body = textwrap.indent(code, "    ")
    return f"import {backend}\n\n\nasync def main() -> None:\n{body}\n\n{run}\n"


def run_script(source: str, directory: Path) -> str:
    """Write ``source`` to a file in ``directory`` and run it as ``__main__``; return
    what it printed."""
    path = directory / "snippet.py"
    path.write_text(source, encoding="utf-8")
    compile(source, str(path), "exec")  # a plain script: top-level await is a SyntaxError
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        runpy.run_path(str(path), run_name="__main__")
    return out.getvalue()


def backends(block: Block) -> list[str]:
    """Both event loops for top-level ``await`` code, else one run."""
    return ["asyncio", "trio"] if uses_top_level_await(block.code) else ["script"]


def test_conventions_are_used() -> None:
    """The docs have runnable blocks of every kind, and no unknown marks."""
    assert SCRIPTS
    assert PYTEST_MODULES
    assert COMMANDS
    assert any(b.path.name == "README.md" for b in SCRIPTS)
    unknown = [b.id for b in BLOCKS if b.mark not in (None, "skip", "pytest", "output")]
    assert unknown == []


@pytest.mark.parametrize(
    ("block", "backend"),
    [pytest.param(b, name, id=f"{b.id}-{name}") for b in SCRIPTS for name in backends(b)],
)
def test_snippet_runs(
    block: Block,
    backend: str,
    origins: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Python block of the docs runs as a script against the fake server and prints
    what it says."""
    monkeypatch.chdir(tmp_path)
    printed = run_script(as_script(substitute(block.code, origins), backend), tmp_path)
    if block.stdout is not None:
        assert printed == substitute(block.stdout, origins)


RUNNING_THE_EXAMPLES = "quickstart.md#running-the-examples"


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_pages_with_top_level_await_say_how_to_run_it(path: Path) -> None:
    """A page whose examples use top-level ``await`` (a SyntaxError in a script) links to
    the quickstart's "Running the examples" before its first such block."""
    blocks = [b for b in BLOCKS if b.path == path and b.lang == "python"]
    first = next((b for b in blocks if uses_top_level_await(b.code)), None)
    if first is None or path.name == "quickstart.md":
        return
    before = "\n".join(path.read_text(encoding="utf-8").splitlines()[: first.line])
    assert RUNNING_THE_EXAMPLES in before


def test_running_the_examples_is_explained() -> None:
    """The quickstart's section shows the wrapping this module uses, and names
    ``python -m asyncio``."""
    quickstart = (ROOT / "docs" / "quickstart.md").read_text(encoding="utf-8")
    section = quickstart.split("## Running the examples", 1)[1].split("\n## ", 1)[0]
    assert "python -m asyncio" in section
    template = as_script("...  # the example, indented\n", "asyncio")
    assert f"```python\n{template}```" in section


def section(page: str, heading: str) -> str:
    """The text of ``## heading`` on ``docs/page``, up to the next ``##`` heading."""
    text = (ROOT / "docs" / page).read_text(encoding="utf-8")
    return text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def test_install_says_it_is_from_a_clone() -> None:
    """The quickstart's install says the package is not on PyPI yet and installs from a
    clone, before any `pip install hedgeclient` of the future."""
    install = section("quickstart.md", "Install")
    assert "not on PyPI yet: install it from a clone" in install
    assert install.index("pip install .") < install.index("pip install hedgeclient")


def test_budget_page_sizes_the_pool_for_backups() -> None:
    """docs/budget.md says to size the connection pool for primaries plus backups, with
    an example that sets both httpx limits and caps the backups in flight."""
    text = section("budget.md", "Size the pool for the backups")
    assert "PoolTimeout" in text
    example = next(b for b in BLOCKS if b.path.name == "budget.md" and "Limits(" in b.code)
    assert "max_connections=connections" in example.code
    assert "max_keepalive_connections=connections" in example.code
    assert "HedgeBudget(max_in_flight=backups)" in example.code


def _subprocess_env() -> dict[str, str]:
    env = dict(os.environ)
    for name in ("PYTEST_ADDOPTS", "PYTEST_DISABLE_PLUGIN_AUTOLOAD", "PYTEST_PLUGINS"):
        env.pop(name, None)
    return env


@pytest.mark.parametrize("block", [pytest.param(b, id=b.id) for b in PYTEST_MODULES])
def test_pytest_snippet_passes(block: Block, tmp_path: Path) -> None:
    """A test module of the docs passes under pytest, with the installed plugins."""
    (tmp_path / "pytest.ini").write_text("[pytest]\nfilterwarnings = error\n", encoding="utf-8")
    (tmp_path / "test_snippet.py").write_text(block.code, encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_snippet.py"],
        cwd=tmp_path,
        env=_subprocess_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("block", [pytest.param(b, id=b.id) for b in COMMANDS])
def test_console_output_matches(block: Block) -> None:
    """A ``$ hedgeclient ...`` block shows exactly what the command prints."""
    first, _, expected = block.code.partition("\n")
    assert first.startswith("$ hedgeclient "), f"{block.id}: not a hedgeclient command"
    argv = shlex.split(first[2:])
    result = subprocess.run(
        [sys.executable, "-m", "hedgeclient", *argv[1:]],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == expected


FIRST_EXAMPLES = [("README.md", "## Five lines"), ("docs/index.md", "## In five lines")]


@pytest.mark.parametrize(("page", "heading"), FIRST_EXAMPLES, ids=[p for p, _ in FIRST_EXAMPLES])
def test_first_example_runs_as_pasted(page: str, heading: str, tmp_path: Path) -> None:
    """The first example a reader meets names no placeholder replica (it starts its own,
    so it needs no substitution) and, pasted into ``python -m asyncio`` as its text
    says, prints what its stdout block shows."""
    after = (ROOT / page).read_text(encoding="utf-8").split(f"\n{heading}\n", 1)[1]
    block = next(b for b in BLOCKS if b.path == ROOT / page and b.lang == "python")
    assert block.code in after.split("\n## ", 1)[0]  # the section's own first block
    assert "python -m asyncio" in after.split("```", 1)[0]
    assert not any(p in block.code for p in PLACEHOLDERS)
    assert not re.search(r"\b10\.0\.0\.\d+", block.code)
    result = subprocess.run(
        [sys.executable, "-m", "asyncio"],
        input=block.code + "\n",  # the blank line a reader types to end the block
        cwd=tmp_path,
        env=_subprocess_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    printed = re.sub(r"(>>> |\.\.\. )", "", result.stdout).strip()
    assert block.stdout is not None
    assert printed == block.stdout.strip()
