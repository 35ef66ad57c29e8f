# Two commands: `make demo` and `make test`. Both create the venv when it is missing.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
SHARED ?= ../shared
export PIP_DISABLE_PIP_VERSION_CHECK=1

.PHONY: demo test test-all fuzz bench bench-cluster venv dev chromium install-check peers lint clean

# The demo's venv holds only what the package declares (versions pinned by the lock as constraints);
# the test venv adds the dev set (pytest, hypothesis, torch for recording real traces in tests).
$(BIN)/traceflow: pyproject.toml requirements-dev.lock
	@command -v $(PY) >/dev/null || { echo "need $(PY) (Python >= 3.11) on PATH"; exit 1; }
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c requirements-dev.lock -e .
	@touch $@

$(VENV)/.dev: $(BIN)/traceflow requirements-dev.lock
	$(BIN)/pip install -q -r requirements-dev.lock
	@touch $@

venv: $(BIN)/traceflow
dev: $(VENV)/.dev

demo: venv
	@mkdir -p out
	$(BIN)/traceflow postmortem fixtures/ddp4_sync_stall/rank-*.pt.trace.json.gz -o out/postmortem
	@echo
	$(BIN)/traceflow query out/postmortem/job.duckdb steps --step 4
	@echo
	@echo "Report:   out/postmortem/report.html (open in a browser, works offline)"
	@echo "Perfetto: out/postmortem/job.perfetto-trace (drop onto https://ui.perfetto.dev)"
	@echo "Shell:    $(BIN)/duckdb -readonly out/postmortem/job.duckdb"

# Debian's chromium drives the report test; installed here when missing (needs root or sudo).
chromium:
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || \
	  { echo "installing Debian's chromium with apt-get (for the report's browser tests)"; \
	    (apt-get install -y -q chromium >/dev/null 2>&1 || (apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null)) \
	    || sudo -n apt-get install -y -q chromium >/dev/null 2>&1 \
	    || echo "note: chromium not installed; browser tests will skip"; }

# Holistic Trace Analysis in a venv of its own: the suite compares our figures with its temporal breakdown.
PEERS := .peers-venv
$(PEERS)/.hta:
	@echo "installing Holistic Trace Analysis (traceinsight) into $(PEERS) for the comparison test"
	@$(PY) -m venv $(PEERS) && $(PEERS)/bin/pip install -q traceinsight==0.6.1 && touch $@ \
	  || echo "note: HTA could not be installed; the comparison test will skip"

peers: $(PEERS)/.hta

# Lint and types, as habits: ruff with the rules the code's noqa comments assume, mypy on the package.
lint: dev
	$(BIN)/ruff check traceflow bench tests
	$(BIN)/python -m mypy traceflow

test: dev lint chromium install-check peers
	TRACEFLOW_HTA_PYTHON=$(CURDIR)/$(PEERS)/bin/python $(BIN)/python -m pytest -q -n 2 -m "not slow" tests

test-all: dev chromium install-check peers
	TRACEFLOW_HTA_PYTHON=$(CURDIR)/$(PEERS)/bin/python $(BIN)/python -m pytest -q -n 2 tests

# Installs as a user does: the wheel into a fresh venv with nothing but its declared dependencies,
# then every module imported and `postmortem` run on a Kineto and (when ../shared is here) an nsys job.
install-check: venv
	@bash tests/install_check.sh $(PY) $(SHARED)

fuzz: dev
	TRACEFLOW_FUZZ=full $(BIN)/python -m pytest -q -n 2 tests/test_corpus.py tests/test_robustness.py

bench: dev
	$(BIN)/python bench/run.py --shared $(SHARED)

# Dask LocalCluster against the local ingest at 16 and 64 ranks (not in make test; docs/scale-out.md)
bench-cluster: dev
	$(BIN)/python bench/cluster.py --shared $(SHARED) --ranks 16 64 256

clean:
	rm -rf $(VENV) $(PEERS) out bench/work .pytest_cache
