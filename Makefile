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

# Ingest the sample captures in captures/, analyse them, show what the
# transport did and draw the lossy download's time-sequence graph.
demo: setup
	rm -f demo.duckdb
	$(BIN)/tracekit ingest captures/*.pcap captures/*.pcapng --db demo.duckdb --label source=sample
	$(BIN)/tracekit captures --db demo.duckdb
	$(BIN)/tracekit sessions --db demo.duckdb
	$(BIN)/tracekit analyze --db demo.duckdb
	$(BIN)/tracekit handshakes --db demo.duckdb
	$(BIN)/tracekit retransmissions --db demo.duckdb
	$(BIN)/tracekit rounds --db demo.duckdb
	$(BIN)/tracekit stalls --db demo.duckdb --capture 3
	$(BIN)/tracekit plot time-sequence --db demo.duckdb --capture 3 --flow 0 --out demo-time-sequence

test: setup-test
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) demo.duckdb demo-time-sequence.* .pytest_cache
