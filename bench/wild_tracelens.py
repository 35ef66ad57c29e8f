"""TraceLens's GPU timeline beside ours on every single-rank Kineto trace of the wild corpus.

    TRACEFLOW_TRACELENS_PYTHON=/path/to/tracelens/python TRACEFLOW_WILD=/work/wild python bench/wild_tracelens.py [substring ...]

TraceLens (AMD-AGI/TraceLens, run for real in its own venv, one process per trace, 600 s each) builds
its call tree (TreePerfAnalyzer.from_file) and breaks the whole trace down (get_df_gpu_timeline):
total (first GPU event start to last end), idle, computation (the union of kernels and memsets that
are not communication), exposed communication (NCCL/RCCL names and `cross_device_reduce`, not
under computation), exposed memcpy (copies under neither). By default it keeps only the GPU events
its tree links to a launch (an `ac2g` flow event); it is run here with include_unlinked_kernels=True
so that both sides cover every GPU op of the trace, and the number it links is printed beside the
number of our GPU ops whose launch call is in the trace.

Ours: every row of step_breakdown (steps and the before / after rows: they tile the GPU timeline):
wall, idle, compute, exposed comm, exposed memory; and the same five figures over TraceLens's
classes, from our gpu_ops (memsets counted as computation). Prints a Markdown table (µs).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from intervals import subtract, union  # the plain-Python interval arithmetic the tests use
from wild_hta import close, peer_copy, single_rank_kineto

TL = os.environ.get("TRACEFLOW_TRACELENS_PYTHON", "")
SCRIPT = """
import json, logging, sys, warnings
logging.disable(logging.WARNING); warnings.filterwarnings("ignore")
from TraceLens import TreePerfAnalyzer
t = TreePerfAnalyzer.from_file(sys.argv[1], include_unlinked_kernels=True)
m = {r["type"]: r["time ms"] * 1000 for r in t.get_df_gpu_timeline().to_dict(orient="records")}
gpu = [e for e in t.tree.events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
m["n_gpu"], m["n_linked"] = len(gpu), sum(1 for e in gpu if e.get("tree"))
print(json.dumps(m))
"""
FIGS = ["total_time", "idle_time", "computation_time", "exposed_comm_time", "exposed_memcpy_time"]


def ours(path: Path, tmp: Path):
    import duckdb

    import traceflow
    db = tmp / "o.duckdb"
    traceflow.ingest([str(path)], str(db))
    con = duckdb.connect(str(db), read_only=True)
    row = con.execute("""select sum(wall_ns), sum(idle_ns), sum(compute_ns), sum(exposed_comm_ns), sum(exposed_memory_ns)
                         from step_breakdown""").fetchone()
    ops = con.execute("select start_ns, end_ns, kind, category, api_start_ns is not null from gpu_ops").fetchall()
    # Communication kernels of our table (derive/comm_kernels.sql) that TraceLens's names do not catch.
    unknown = con.execute("""select count(*) from gpu_ops where category = 'communication'
                             and not regexp_matches(name, 'nccl|rccl|cross_device_reduce', 'i')""").fetchone()
    con.close()
    if row is None or row[0] is None:
        return None, None, None, 0
    mine = [round(v / 1000) for v in row]
    # TraceLens's classes over our ops: computation = kernels and memsets that are not communication.
    comp = union([(s, e) for s, e, k, c, _ in ops if c != "communication" and k != "memcpy"])
    comm = union([(s, e) for s, e, k, c, _ in ops if c == "communication"])
    copy = union([(s, e) for s, e, k, c, _ in ops if k == "memcpy" and c != "communication"])
    every = union([(s, e) for s, e, *_ in ops])
    wall = every[-1][1] - every[0][0]
    busy = sum(e - s for s, e in every)
    classes = [wall, wall - busy, sum(e - s for s, e in comp), subtract(comm, comp), subtract(copy, comp + comm)]
    return mine, [round(v / 1000) for v in classes], sum(1 for *_, launched in ops if launched), unknown[0] if unknown else 0


def main():
    if not TL or not Path(TL).exists():
        sys.exit("set TRACEFLOW_TRACELENS_PYTHON to a python with TraceLens installed")
    print("| trace | TraceLens total, idle, computation, exposed comm, exposed memcpy (µs) | ours (all rows) "
          "| ours in TraceLens's classes | agree | GPU ops linked: TraceLens / ours |")
    print("|---|---|---|---|---|---|")
    for name, p in single_rank_kineto(sys.argv[1:]):
        with tempfile.TemporaryDirectory() as t:
            tmp = Path(t)
            src = peer_copy(p, tmp)
            try:
                r = subprocess.run([TL, "-c", SCRIPT, str(src)], capture_output=True, text=True, timeout=600, cwd=tmp)
                h = json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 and r.stdout.strip() else None
                why = "" if h is not None else (r.stderr.strip().splitlines() or ["TraceLens failed"])[-1][:90]
            except subprocess.TimeoutExpired:
                h, why = None, "timed out after 600 s"
            except (json.JSONDecodeError, IndexError):
                h, why = None, "no figures printed"
            tv = None if h is None else [round(h[k]) for k in FIGS]
            o: object
            try:
                o, w, n_launched, unknown = ours(p, tmp)
            except Exception as e:  # noqa: BLE001 - a row per trace, whatever happens
                o, w, n_launched, unknown = f"error: {str(e).splitlines()[0][:80]}", None, None, 0
            # yes: our rows give TraceLens's five figures; classes: they do once memsets count as
            # computation (TraceLens's class) over the same ops; no: see docs/step-attribution.md.
            agree = "—" if tv is None or not isinstance(o, list) else "yes" if close(tv, o) else "classes" if close(tv, w) else "no"
            if agree == "no" and unknown:
                agree += f": {unknown} communication kernels TraceLens counts as computation"
            links = "" if h is None else f"{h['n_linked']} of {h['n_gpu']} / {n_launched}"
            print(f"| {name} | {tv if tv else 'TraceLens: ' + why} | {o} | {w} | {agree} | {links} |", flush=True)


if __name__ == "__main__":
    main()
