"""HTA's temporal breakdown beside ours on every single-rank Kineto trace of the wild corpus.

    TRACEFLOW_HTA_PYTHON=/path/to/peers/python TRACEFLOW_WILD=/work/wild python bench/wild_hta.py [substring ...]

HTA (run for real in its own venv, one process per trace) breaks down its whole trace less the last
profiler iteration (its reader drops that one) into kernel time (first GPU event start to last end),
idle, compute (the union of compute kernels) and non-compute (the rest: communication and memory
not under compute). Ours: the step rows of step_breakdown but the last step's (all rows, the GPU work outside
steps included, when the trace has fewer than two steps): wall, idle, compute, exposed comm + memory.
Prints a Markdown table (µs), and for each trace whether the figures agree to the µs.
"""
from __future__ import annotations

import gzip
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from intervals import measure  # noqa: E402  (the plain-Python interval arithmetic the tests use)

WILD = Path(os.environ.get("TRACEFLOW_WILD", ROOT.parent / "shared" / "wild"))
HTA = os.environ.get("TRACEFLOW_HTA_PYTHON", "")
SCRIPT = """
import json, sys
from hta.trace_analysis import TraceAnalysis
df = TraceAnalysis(trace_dir=sys.argv[1]).get_temporal_breakdown(visualize=False)
print(json.dumps(df[["rank", "idle_time(us)", "compute_time(us)", "non_compute_time(us)", "kernel_time(us)"]]
                 .to_dict(orient="records")))
"""


def single_rank_kineto(only: list[str]):
    """(manifest name, path) of every single-rank Kineto trace of the corpus present under WILD; with
    `only`, those whose name holds one of its substrings."""
    manifest = json.loads((ROOT / "tests" / "wild" / "manifest.json").read_text())
    jobs: dict[str, list] = {}
    for e in manifest:
        jobs.setdefault(e["job"], []).append(e)
    for _job, es in sorted(jobs.items()):
        if len(es) != 1 or es[0]["shape"].get("format") != "kineto-json":
            continue
        p = WILD / es[0]["file"]
        if p.exists() and (not only or any(x in es[0]["file"] for x in only)):
            yield es[0]["file"], p


def peer_copy(p: Path, tmp: Path) -> Path:
    """The trace copied into tmp/in under a name the peers read (.json or .json.gz)."""
    (tmp / "in").mkdir()
    dst = tmp / "in" / (p.name if p.name.endswith((".json", ".json.gz")) else p.name + ".json")
    shutil.copyfile(p, dst)
    return dst


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
    # The same figures over HTA's selection, from our gpu_ops: with two ProfilerSteps or more, the GPU
    # ops whose launch call is in the trace and starts before the last step's host start (HTA's
    # _filter_irrelevant_gpu_kernels), wherever they run; otherwise every GPU op. Each interval in
    # whole µs as HTA's reader keeps it (start rounded up, end down); wall = first start .. last end.
    hta = con.execute("""
        with last as (select max(start_ns) as s, count(*) as n from steps where source = 'ProfilerStep'),
        sel as (select start_ns // 1000 + (start_ns % 1000 > 0)::INT as s, end_ns // 1000 as e, category = 'compute' as c
                from gpu_ops, last where last.n < 2 or (api_start_ns is not null and api_start_ns < last.s)),
        a as (select c, s, e, row_number() over () as i
              from (select true as c, s, e from sel union all select false, s, e from sel where c)),
        u as (select c, s, e, i, max(e) over (partition by c order by s, e, i rows between unbounded preceding and 1 preceding) as pe
              from a),
        g as (select c, s, e, sum(case when pe is null or s > pe then 1 else 0 end)
                                  over (partition by c order by s, e, i rows unbounded preceding) as k from u),
        m as (select c, k, min(s) as s, max(e) as e from g group by c, k)
        select (select max(e) - min(s) from sel), sum(e - s) filter (where c), sum(e - s) filter (where not c) from m""").fetchone()
    con.close()
    if row is None or row[0] is None:
        return None, None
    mine = [round(v / 1000) for v in row]
    if hta is None or hta[0] is None:
        return mine, None
    wall, busy, comp = hta[0], hta[1], hta[2] or 0
    return mine, [wall, wall - busy, comp, busy - comp]


GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"}


def hta_definitions(path: Path, tmp: Path) -> str:
    """Which of HTA's definitions that the selection above does not replay apply to this trace, read
    from the raw file and our database (docs/step-attribution.md, "HTA on the wild corpus")."""
    with (gzip.open(path) if path.name.endswith(".gz") else open(path, "rb")) as f:
        doc = json.load(f)
    events = doc.get("traceEvents", []) if isinstance(doc, dict) else doc
    n: dict[str, int] = {}
    spans: dict[str, list[tuple[int, int]]] = {}
    epoch_fraction = False
    for e in events:
        a = e.get("args")
        if e.get("ph") != "X" or not isinstance(a, dict) or "stream" not in a:
            continue
        if e.get("cat") not in GPU_CATS:  # its breakdown takes every event with a stream as GPU time
            n[str(e.get("cat"))] = n.get(str(e.get("cat")), 0) + 1
            if isinstance(e.get("ts"), (int, float)) and isinstance(e.get("dur"), (int, float)):
                spans.setdefault(str(e.get("cat")), []).append((math.ceil(e["ts"]), math.floor(e["ts"] + e["dur"])))
        ts = e.get("ts")
        epoch_fraction |= isinstance(ts, float) and ts > 1e12 and ts != int(ts)
    import duckdb
    con = duckdb.connect(str(tmp / "o.duckdb"), read_only=True)
    # HTA's communication kernels are NCCL's by name; ours come from derive/comm_kernels.sql's table.
    comm = con.execute("select count(*) from gpu_ops where category = 'communication' and name not ilike '%nccl%'").fetchone()
    con.close()
    parts = [f"counts {v} {k} events (they carry a stream; {measure(spans.get(k, []))} µs)" for k, v in sorted(n.items())]
    if comm and comm[0]:
        parts.append(f"counts {comm[0]} communication kernels not named NCCL as compute")
    if epoch_fraction and not (isinstance(doc, dict) and doc.get("baseTimeNanoseconds")):
        parts.append("rounds float64 µs since the epoch (0.25 µs apart)")
    return "; ".join(parts)


def close(ref, x) -> bool:
    """Every figure within 1 µs (both sides round to whole µs)."""
    return isinstance(x, list) and all(abs(a - b) <= 1 for a, b in zip(ref, x))


def main():
    if not HTA or not Path(HTA).exists():
        sys.exit("set TRACEFLOW_HTA_PYTHON to a python with Holistic Trace Analysis installed")
    print("| trace | HTA wall, idle, compute, non-compute (µs) | ours (step rows) | ours over HTA's selection | agree |")
    print("|---|---|---|---|---|")
    for name, p in single_rank_kineto(sys.argv[1:]):
        with tempfile.TemporaryDirectory() as t:
            tmp = Path(t)
            peer_copy(p, tmp)
            try:
                r = subprocess.run([HTA, "-c", SCRIPT, str(tmp / "in")], capture_output=True, text=True, timeout=600, cwd=tmp)
                h = json.loads(r.stdout.strip().splitlines()[-1])[0] if r.returncode == 0 and r.stdout.strip() else None
            except (subprocess.TimeoutExpired, json.JSONDecodeError, IndexError):
                h = None
            hv = None if h is None else [round(h["kernel_time(us)"]), round(h["idle_time(us)"]),
                                         round(h["compute_time(us)"]), round(h["non_compute_time(us)"])]
            o: object
            try:
                o, w = ours(p, tmp)
            except Exception as e:  # noqa: BLE001 - a row per trace, whatever happens
                o, w = f"error: {str(e).splitlines()[0][:80]}", None
            # yes: our step rows give HTA's figures; selection: they differ only by what HTA selects
            # (its last-iteration trim, launches missing from the trace) and its whole µs; no: a
            # definition of the kind docs/step-attribution.md lists (events HTA counts, kernel classes).
            agree = "—" if hv is None or not isinstance(o, list) else "yes" if close(hv, o) else "selection" if close(hv, w) else "no"
            if agree == "no":
                agree += ": HTA " + (hta_definitions(p, tmp) or "(no definition found: a difference to explain)")
            why = "" if h is not None else (r.stderr.strip().splitlines() or ["HTA failed"])[-1][:80]
            print(f"| {name} | {hv if hv else 'HTA: ' + why} | {o} | {w} | {agree} |", flush=True)


if __name__ == "__main__":
    main()
