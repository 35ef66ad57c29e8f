# Two commands: `make demo` and `make test`. Both create the venv when it is missing.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
SHARED ?= ../shared
export PIP_DISABLE_PIP_VERSION_CHECK=1

.PHONY: demo test test-all fuzz bench venv chromium clean

$(BIN)/traceflow: pyproject.toml requirements-dev.lock
	@command -v $(PY) >/dev/null || { echo "need $(PY) (Python >= 3.11) on PATH"; exit 1; }
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements-dev.lock
	$(BIN)/pip install -q --no-deps -e .
	@touch $@

venv: $(BIN)/traceflow

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
	  { (apt-get install -y -q chromium >/dev/null 2>&1 || (apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null)) \
	    || sudo -n apt-get install -y -q chromium >/dev/null 2>&1 \
	    || echo "note: chromium not installed; browser tests will skip"; }

test: venv chromium
	$(BIN)/python -m pytest -q -n 2 -m "not slow" tests

test-all: venv chromium
	$(BIN)/python -m pytest -q -n 2 tests

fuzz: venv
	TRACEFLOW_FUZZ=full $(BIN)/python -m pytest -q -n 2 tests/test_corpus.py tests/test_robustness.py

bench: venv
	$(BIN)/python bench/run.py --shared $(SHARED)

clean:
	rm -rf $(VENV) out bench/work .pytest_cache
