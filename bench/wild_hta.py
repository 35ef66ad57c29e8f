"""HTA's temporal breakdown beside ours on every single-rank Kineto trace of the wild corpus.

    TRACEFLOW_HTA_PYTHON=/path/to/peers/python TRACEFLOW_WILD=/work/wild python bench/wild_hta.py

HTA (run for real in its own venv, one process per trace) breaks down its whole trace less the last
profiler iteration (its reader drops that one) into kernel time (first GPU event start to last end),
idle, compute (the union of compute kernels) and non-compute (the rest: communication and memory
not under compute). Ours: the step rows of step_breakdown but the last step's (all rows, the GPU work outside
steps included, when the trace has fewer than two steps): wall, idle, compute, exposed comm + memory.
Prints a Markdown table (µs), and for each trace whether the figures agree to the µs.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WILD = Path(os.environ.get("TRACEFLOW_WILD", ROOT.parent / "shared" / "wild"))
HTA = os.environ.get("TRACEFLOW_HTA_PYTHON", "")
SCRIPT = """
import json, sys
from hta.trace_analysis import TraceAnalysis
df = TraceAnalysis(trace_dir=sys.argv[1]).get_temporal_breakdown(visualize=False)
print(json.dumps(df[["rank", "idle_time(us)", "compute_time(us)", "non_compute_time(us)", "kernel_time(us)"]]
                 .to_dict(orient="records")))
"""


def ours(path: Path, tmp: Path):
    import duckdb

    import traceflow
    db = tmp / "o.duckdb"
    traceflow.ingest([str(path)], str(db))
    con = duckdb.connect(str(db), read_only=True)
    row = con.execute("""
        with last as (select max(start_ns) filter (where part = 'step') as s, count(*) filter (where part = 'step') as n
                      from step_breakdown)
        select sum(wall_ns), sum(idle_ns), sum(compute_ns), sum(exposed_comm_ns + exposed_memory_ns)
        from step_breakdown, last where last.n < 2 or (part = 'step' and start_ns < last.s)""").fetchone()
    con.close()
    return None if row is None or row[0] is None else [round(v / 1000) for v in row]


def main():
    if not HTA or not Path(HTA).exists():
        sys.exit("set TRACEFLOW_HTA_PYTHON to a python with Holistic Trace Analysis installed")
    manifest = json.loads((ROOT / "tests" / "wild" / "manifest.json").read_text())
    jobs = {}
    for e in manifest:
        jobs.setdefault(e["job"], []).append(e)
    print("| trace | HTA wall, idle, compute, non-compute (µs) | ours | agree |")
    print("|---|---|---|---|")
    for _job, es in sorted(jobs.items()):
        if len(es) != 1 or es[0]["shape"].get("format") != "kineto-json":
            continue
        p = WILD / es[0]["file"]
        if not p.exists():
            continue
        with tempfile.TemporaryDirectory() as t:
            tmp = Path(t)
            (tmp / "in").mkdir()
            shutil.copyfile(p, tmp / "in" / (p.name if p.name.endswith((".json", ".json.gz")) else p.name + ".json"))
            try:
                r = subprocess.run([HTA, "-c", SCRIPT, str(tmp / "in")], capture_output=True, text=True, timeout=600, cwd=tmp)
                h = json.loads(r.stdout.strip().splitlines()[-1])[0] if r.returncode == 0 and r.stdout.strip() else None
            except (subprocess.TimeoutExpired, json.JSONDecodeError, IndexError):
                h = None
            hv = None if h is None else [round(h["kernel_time(us)"]), round(h["idle_time(us)"]),
                                         round(h["compute_time(us)"]), round(h["non_compute_time(us)"])]
            try:
                o = ours(p, tmp)
            except Exception as e:  # noqa: BLE001 - a row per trace, whatever happens
                o = f"error: {str(e).splitlines()[0][:80]}"
            agree = "—" if hv is None or not isinstance(o, list) else ("yes" if all(abs(a - b) <= 1 for a, b in zip(hv, o)) else "no")
            why = "" if h is not None else (r.stderr.strip().splitlines() or ["HTA failed"])[-1][:80]
            print(f"| {es[0]['file']} | {hv if hv else 'HTA: ' + why} | {o} | {agree} |", flush=True)


if __name__ == "__main__":
    main()
