# Entry points, self-contained on a machine with only Python 3.11+ and make:
#   make demo   - create .venv, install, run the demo on its embedded fake server
#   make test   - create .venv, install, run the test suite (asyncio and trio, on two
#                 pytest-xdist workers); as root
#                 with apt-get it first installs SYSTEM_DEPS, else the tests that need
#                 them skip, saying how to get them
#   make lint   - ruff check, ruff format --check, mypy --strict
#   make docs   - build the documentation into site/ (mkdocs, warnings as errors)
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SYSTEM_DEPS := prometheus dnsmasq-base

.PHONY: demo test lint docs check clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/hedgeclient demo

test: $(STAMP)
	scripts/system-deps $(SYSTEM_DEPS)
	$(BIN)/python -m pytest -q -rs -n 2

lint: $(STAMP)
	$(BIN)/ruff check hedgeclient _hedgeclient_pytestplugin.py tests benchmarks scripts
	$(BIN)/ruff format --check hedgeclient _hedgeclient_pytestplugin.py tests benchmarks scripts
	$(BIN)/mypy --strict hedgeclient _hedgeclient_pytestplugin.py tests/typing

# Not --quiet: it drops the warnings that --strict counts, and a broken build passes.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict -d site
	@echo "docs: open site/index.html"

check: lint test

clean:
	rm -rf $(VENV) build dist site
