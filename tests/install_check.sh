#!/usr/bin/env bash
# Installs traceflow as a user does and runs it: a wheel into a fresh venv with only its declared
# dependencies (no dev extras), every module imported, `postmortem` on a bundled Kineto job and,
# when ../shared is present, on an nsys job. A dependency missing from pyproject.toml fails here.
set -euo pipefail
PY=${1:-python3}
SHARED=${2:-../shared}
cd "$(dirname "$0")/.."
work=$(mktemp -d "${TMPDIR:-/tmp}/tf-install-XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "install-check: building the wheel and installing it into a fresh venv (declared dependencies only)"
"$PY" -m pip wheel -q --no-deps --no-build-isolation -w "$work/dist" . 2>"$work/build.log" \
  || "$PY" -m pip wheel -q --no-deps -w "$work/dist" . || { cat "$work/build.log"; exit 1; }
"$PY" -m venv "$work/venv"
"$work/venv/bin/pip" install -q --disable-pip-version-check -c requirements-dev.lock "$work"/dist/*.whl
cd "$work"   # away from the source tree: the installed package, not ./traceflow, is imported
"$work/venv/bin/python" - <<'PY'
import importlib, pkgutil, traceflow
names = [m.name for m in pkgutil.walk_packages(traceflow.__path__, "traceflow.")]
for n in names:
    importlib.import_module(n)
print(f"install-check: imported {len(names)} modules")
PY
"$work/venv/bin/python" - "$OLDPWD" <<'PY'
# every module and SQL file of the source tree is in the wheel (a package left out of pyproject.toml
# imports nowhere above, since walk_packages only sees what was installed)
import pathlib, sys, traceflow
src, inst = pathlib.Path(sys.argv[1]), pathlib.Path(traceflow.__file__).parent
want = {p.relative_to(src / "traceflow") for p in (src / "traceflow").rglob("*.py")}
want |= {pathlib.Path("queries") / p.relative_to(src / "queries") for p in (src / "queries").rglob("*.sql")}
have = {p.relative_to(inst) for p in inst.rglob("*") if p.suffix in (".py", ".sql")}
missing = sorted(map(str, want - have))
if missing:
    sys.exit(f"install-check: the wheel lacks {missing}")
print(f"install-check: the wheel holds all {len(want)} modules and SQL files")
PY
"$work/venv/bin/traceflow" postmortem "$OLDPWD"/fixtures/ddp4_sync_stall/rank-*.pt.trace.json.gz -o "$work/pm-kineto" >/dev/null
test -s "$work/pm-kineto/report.html"
"$work/venv/bin/traceflow" diff "$work/pm-kineto/job.duckdb" "$work/pm-kineto/job.duckdb" -o "$work/diff.html" >/dev/null
"$work/venv/bin/traceflow" scaling "$work/pm-kineto/job.duckdb" "$work/pm-kineto/job.duckdb" >/dev/null
test -s "$work/diff.html"
# Dask is an extra: without it, --cluster says how to get it (one line), and nothing else changes
if "$work/venv/bin/traceflow" ingest "$OLDPWD"/fixtures/ddp4_sync_stall/rank-0.pt.trace.json.gz -o "$work/c.duckdb" \
     --cluster local:2 2>"$work/cluster.err"; then
  echo "install-check: --cluster ran without the cluster extra"; exit 1
fi
grep -q "traceflow\[cluster\]" "$work/cluster.err" || { cat "$work/cluster.err"; exit 1; }
# the MCP SDK is an extra too: `traceflow mcp` without it says how to get it, in one line, exit 3
"$work/venv/bin/traceflow" mcp "$work/pm-kineto/job.duckdb" 2>"$work/mcp.err" </dev/null && { echo "install-check: mcp ran without the mcp extra"; exit 1; }
[ $? -eq 3 ] && grep -q "traceflow\[mcp\]" "$work/mcp.err" || { cat "$work/mcp.err"; exit 1; }
nsys="$OLDPWD/$SHARED/fixtures/h100/nsys/ddp4_sync_stall"
case "$SHARED" in /*) nsys="$SHARED/fixtures/h100/nsys/ddp4_sync_stall";; esac
if [ -d "$nsys" ]; then
  "$work/venv/bin/traceflow" postmortem "$nsys"/rank*.sqlite -o "$work/pm-nsys" >/dev/null
  test -s "$work/pm-nsys/report.html"
  echo "install-check: postmortem ran on a Kineto and an nsys job"
else
  echo "install-check: postmortem ran on a Kineto job; nsys job skipped ($nsys absent)"
fi
