# One set of commands, the same on a fresh machine, a developer's and CI.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
EXTRAS ?= dev

.PHONY: help install demo test lint typecheck pytest bench clean

help: ## Show the targets
	@grep -E '^[a-z]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	@echo "Installing toolwire and its dependencies into $(VENV) (once; later runs skip this)..."
	$(BIN)/pip install --quiet -e ".[$(EXTRAS)]"
	@touch $(STAMP)

install: $(STAMP) ## Create .venv and install toolwire with the dev tools

demo: $(STAMP) ## Run the bookkeeping assistant once
	$(BIN)/toolwire demo

lint: $(STAMP) ## ruff
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

typecheck: $(STAMP) ## mypy --strict
	$(BIN)/mypy

pytest: $(STAMP) ## The test suite only
	$(BIN)/pytest -q

test: lint typecheck pytest ## Everything: lint, types, the whole suite

bench: $(STAMP) ## The benchmarks; figures go to benchmarks/RESULTS.md
	$(BIN)/python benchmarks/run_all.py

clean: ## Remove the virtual environment
	rm -rf $(VENV)
