# Two entry points (see README): `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test setup setup-test clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# (then compile the kernels once, so the first real capture does not pay for
# it, and the lab's path forwarder, which is C: tracekit/lab/forwarder.c)
setup: $(BIN)/python
	$(BIN)/pip install --quiet -e .
	$(BIN)/python -m tracekit.pipeline.warmup --into-package captures/lossy-download-server.pcap captures/udp-echo.pcapng
	$(BIN)/python -m tracekit.lab.wan --build

setup-test: $(BIN)/python
	$(BIN)/pip install --quiet -e '.[test]'
	$(BIN)/python -m tracekit.pipeline.warmup --into-package captures/lossy-download-server.pcap captures/udp-echo.pcapng
	$(BIN)/python -m tracekit.lab.wan --build

# Ingest the sample captures and event logs in captures/, analyse them, show
# what the transport and the application did, and draw two charts.
demo: setup
	rm -f demo.duckdb
	$(BIN)/tracekit ingest captures/*.pcap captures/*.pcapng captures/*-events.jsonl \
		captures/serving-static-batching.jsonl --db demo.duckdb --label source=sample
	$(BIN)/tracekit ingest --manifest captures/lab/cross-region.runs.json \
		--manifest captures/lab/counterfactual.runs.json --manifest captures/lab/agent.runs.json \
		--db demo.duckdb | tail -n 3
	$(BIN)/tracekit sessions --db demo.duckdb --capture 1
	$(BIN)/tracekit analyze --db demo.duckdb
	$(BIN)/tracekit handshakes --db demo.duckdb --capture 1
	$(BIN)/tracekit retransmissions --db demo.duckdb --capture 3
	$(BIN)/tracekit rounds --db demo.duckdb --capture 3
	$(BIN)/tracekit stalls --db demo.duckdb --capture 3
	$(BIN)/tracekit requests --db demo.duckdb --capture 1
	$(BIN)/tracekit playback --db demo.duckdb
	$(BIN)/tracekit underruns --db demo.duckdb
	$(BIN)/tracekit serving --db demo.duckdb
	$(BIN)/tracekit attribute --db demo.duckdb --run cross-region-001
	$(BIN)/tracekit ablation --db demo.duckdb --compare path --by connection --levels direct,tunnel \
		--where experiment=cross-region
	$(BIN)/tracekit ablation --db demo.duckdb --compare loss_down --by connection --levels 0.05,0.0 \
		--where experiment=counterfactual
	$(BIN)/tracekit plot time-sequence --db demo.duckdb --capture 3 --flow 0 --out demo-time-sequence
	$(BIN)/tracekit plot buffer --db demo.duckdb --stream local --out demo-playback-buffer
	$(BIN)/tracekit plot attribution --db demo.duckdb --compare path --by connection \
		--levels direct,tunnel --where experiment=cross-region --out demo-attribution
	$(BIN)/tracekit report --db demo.duckdb --experiment cross-region --compare path --by connection \
		--levels direct,tunnel --out demo-report.html

test: setup-test
	$(BIN)/python -m pytest -q -rs -n 2 --dist loadfile --no-loadscope-reorder  # -rs: each skipped test and why; two workers, the lab on one (tests/conftest.py)

clean:
	rm -rf $(VENV) demo.duckdb demo-*.html demo-*.png .pytest_cache
