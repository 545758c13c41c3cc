# One set of commands, the same on a fresh machine, a developer's and CI.
SHELL        := /bin/bash
.SHELLFLAGS  := -o pipefail -c
PYTHON       ?= python3
VENV         := .venv
BIN          := $(VENV)/bin
PIP          := $(BIN)/pip --disable-pip-version-check

.PHONY: help install demo test lint typecheck pytest bench bench-local clean chromium

help: ## Show the targets
	@grep -E '^[a-z]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

# llama.cpp compiles from source once (minutes on two cores); pip caches the wheel, so later
# installs take seconds. Its build prints progress lines, which are shown so it never looks stuck.
$(VENV)/.local-installed: pyproject.toml | $(BIN)/python
	@if ! $(BIN)/python -c "import llama_cpp" 2>/dev/null; then \
	  echo "Building llama-cpp-python for the embedded model (once; several minutes on two cores)..."; \
	  $(PIP) install -v "llama-cpp-python==0.3.36" 2>&1 \
	    | awk '/^ *\[[0-9]+\/[0-9]+\]/ { n = split($$NF, p, "/"); print "  " $$1 " " p[n]; fflush(); next } \
	           /^Successfully|ERROR|error:/ { print; fflush() }'; \
	fi
	$(PIP) install --quiet -e ".[local]"
	@touch $@

$(VENV)/.dev-installed: pyproject.toml | $(BIN)/python
	@echo "Installing toolwire with its test tools into $(VENV) (once; later runs skip this)..."
	$(PIP) install --quiet -e ".[dev]"
	@touch $@

install: $(VENV)/.dev-installed $(VENV)/.local-installed ## Create .venv with toolwire, the test tools and the embedded model

demo: $(VENV)/.local-installed ## Ask the bookkeeping assistant to book an expense (embedded model unless TOOLWIRE_BASE_URL is set)
	$(BIN)/toolwire demo

lint: install ## ruff
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

typecheck: install ## mypy --strict
	$(BIN)/mypy

# The browser tests drive Debian's Chromium through Playwright (never `playwright install`, which
# downloads a browser). Installed here when root, as in CI; elsewhere those tests say why they skip.
chromium: ## Debian's Chromium for the browser tests (installed when root)
	@if [ -x /usr/bin/chromium ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "Installing Debian's chromium for the browser tests (once)..."; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	else \
	  echo "/usr/bin/chromium is missing and this is not root: the browser tests will be skipped (CI requires them)."; \
	fi

pytest: install chromium ## The test suite only
	@$(BIN)/python -c "import socket; socket.create_connection(('127.0.0.1', 5432), 2)" 2>/dev/null \
	  || echo "PostgreSQL is not reachable at 127.0.0.1:5432: its tests will be skipped (CI requires them)."
	$(BIN)/pytest -q

test: lint typecheck pytest ## Everything: lint, types, the whole suite

bench: install ## The benchmarks beside the peers; figures go to benchmarks/RESULTS.md
	$(PIP) install --quiet -r benchmarks/requirements.txt
	$(BIN)/python benchmarks/run_all.py

bench-local: install ## Tool-call accuracy of the embedded model on the five case sets (~45 minutes)
	$(BIN)/python benchmarks/local_accuracy.py --mode constrained --cases benchmarks/cases/tool_calls.jsonl
	$(BIN)/python benchmarks/local_accuracy.py --mode constrained --cases benchmarks/cases/tool_calls_heldout.jsonl
	$(BIN)/python benchmarks/local_accuracy.py --mode constrained --cases benchmarks/cases/tool_calls_fresh.jsonl
	$(BIN)/python benchmarks/local_accuracy.py --mode constrained --cases benchmarks/cases/tool_calls_late.jsonl
	$(BIN)/python benchmarks/local_accuracy.py --mode constrained --cases benchmarks/cases/tool_calls_fifth.jsonl

clean: ## Remove the virtual environment
	rm -rf $(VENV)
