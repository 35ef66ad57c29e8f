# Two commands: `make demo` and `make test`. Both create the venv when it is missing.
# `make test` is the quick suite (under 10 minutes on 2 idle cores); `make test-slow` the rest: bigger inputs,
# Dask clusters, the bad-input corpus, the install check and the peer (HTA) comparison. CI runs both.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
SHARED ?= ../shared
export PIP_DISABLE_PIP_VERSION_CHECK=1

.PHONY: demo demo-next docs-figures test test-slow test-all fuzz bench bench-cluster venv dev chromium install-check peers lint clean

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
	@$(MAKE) -s --no-print-directory demo-next

# What to open next, each command one that works in this venv: the demo's venv holds only the declared
# dependencies, so DuckDB's shell (duckdb-cli, a dev dependency) is there only after `make dev`.
demo-next:
	@echo
	@echo "Report:   out/postmortem/report.html (open in a browser, works offline)"
	@echo "Perfetto: out/postmortem/job.perfetto-trace (drop onto https://ui.perfetto.dev)"
	@echo "SQL:      $(BIN)/traceflow sql out/postmortem/job.duckdb \"select * from idle_gaps order by dur_ns desc limit 5\""
	@if [ -x $(BIN)/duckdb ]; then echo "Shell:    $(BIN)/duckdb -readonly out/postmortem/job.duckdb"; \
	  else echo "Shell:    make dev, then $(BIN)/duckdb -readonly out/postmortem/job.duckdb (the DuckDB shell)"; fi

# The docs' pictures and figures of the bundled job from the demo's output (docs/report.png, the
# report's heights in docs/reading-the-output.md): run after a change to the report or the verdict.
docs-figures: demo chromium
	$(BIN)/python bench/docs_figures.py --demo out/postmortem

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

# Hypothesis keeps its folder in the venv too (tests/test_critical_path_walk.py, test_robustness.py)
export HYPOTHESIS_STORAGE_DIRECTORY := $(CURDIR)/$(VENV)/.cache/hypothesis

# Lint and types, as habits: ruff with the rules the code's noqa comments assume, mypy on the package.
# Their caches live in the venv: a clone keeps nothing but the venv after `make test`.
lint: dev
	$(BIN)/ruff check --cache-dir $(VENV)/.cache/ruff traceflow bench tests
	$(BIN)/python -m mypy --cache-dir $(VENV)/.cache/mypy traceflow

test: dev lint chromium
	$(BIN)/python -m pytest -q -n 2 -m "not slow" tests

# Marked slow (tests/conftest.py says which and why): bigger inputs, clusters, the corpus, HTA.
test-slow: dev chromium install-check peers
	TRACEFLOW_HTA_PYTHON=$(CURDIR)/$(PEERS)/bin/python $(BIN)/python -m pytest -q -n 2 -m slow tests

test-all: test test-slow

# Installs as a user does: the wheel into a fresh venv with nothing but its declared dependencies,
# then every module imported and `postmortem` run on a Kineto and (when ../shared is here) an nsys job.
install-check: venv
	@bash tests/install_check.sh $(PY) $(SHARED)

fuzz: dev
	TRACEFLOW_FUZZ=full $(BIN)/python -m pytest -q -n 2 tests/test_corpus.py tests/test_robustness.py

bench: dev
	$(BIN)/python bench/run.py --shared $(SHARED) $(BENCH_ARGS)

# Dask LocalCluster (2 worker processes) against the local ingest at 64 and 256 ranks, then 4,096 ranks on the
# cluster alone, 8 ranks of each checked against their local ingest (docs/scale-out.md: the client's GPU-sharing
# detection grows as the cube of the ranks, so 4,096 does not finish yet; CLUSTER_RANKS="64 256" runs the rest)
CLUSTER_RANKS ?= 64 256 4096
bench-cluster: dev
	$(BIN)/python bench/cluster.py --ranks $(CLUSTER_RANKS) --local-max 256 --sample 8

clean:
	rm -rf $(VENV) $(PEERS) out bench/work .pytest_cache .pytest-tmp
