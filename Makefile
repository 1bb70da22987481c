# Two entry points (see README): `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test setup setup-test clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

setup: $(BIN)/python
	$(BIN)/pip install --quiet -e ".[charts]"

setup-test: $(BIN)/python
	$(BIN)/pip install --quiet -e '.[test]'

# Ingest the sample captures in captures/ and show what talked to what.
demo: setup
	rm -f demo.duckdb
	$(BIN)/tracekit ingest captures/*.pcap captures/*.pcapng --db demo.duckdb --label source=sample
	$(BIN)/tracekit captures --db demo.duckdb
	$(BIN)/tracekit sessions --db demo.duckdb

test: setup-test
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) demo.duckdb .pytest_cache
