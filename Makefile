# Two entry points, both self-contained on a machine with only Python 3.10+:
#   make demo   - create .venv, install, run the demo on its embedded fake server
#   make test   - create .venv, install, run the test suite (asyncio and trio)
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint check clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/hedgeclient demo

test: $(STAMP)
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check hedgeclient tests benchmarks scripts
	$(BIN)/ruff format --check hedgeclient tests benchmarks scripts
	$(BIN)/mypy --strict hedgeclient tests/typing

check: lint test

clean:
	rm -rf $(VENV) build dist
