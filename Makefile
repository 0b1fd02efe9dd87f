# The two commands of the project: `make run` and `make test`.
# Each creates .venv in the repository root if it is missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test bench clean-venv

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Stamp files so that a changed pyproject.toml reinstalls.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[experiments,notebooks]"
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $@ $(VENV)/.installed

run: $(VENV)/.installed
	$(BIN)/jaxcredit run

test: $(VENV)/.installed-dev
	$(BIN)/ruff check jaxcredit tests experiments
	$(BIN)/python -m pytest -q -n 2 --dist loadfile --durations=25

bench: $(VENV)/.installed
	$(BIN)/jaxcredit bench estimators

clean-venv:
	rm -rf $(VENV)
