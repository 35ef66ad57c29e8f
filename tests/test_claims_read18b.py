"""Issue 41, the claim-by-claim read of session 18, jobs 4-6 (READ-session18.md W5, W6, M9): each
wrong or misleading claim fixed in the general case, checked on its real input against a plain
reading of the raw file (json / gzip). W7 and M12-M17 are fixed, with their tests, on branch
claims5 (tests/test_claims_read18.py). Each test skips with one line where its wild file is absent."""
from __future__ import annotations

from pathlib import Path

import pytest
from conftest import WILD
from intervals import union

import traceflow

_DBS: dict[tuple[str, ...], tuple[str, dict]] = {}


def _job(rels: tuple[str, ...], tmp_path_factory) -> tuple[str, dict]:
    """(database, findings) of wild files read as one job, ingested once."""
    paths = [WILD / r for r in rels]
    for p in paths:
        if not p.exists():
            pytest.skip(f"{p.relative_to(WILD)} not in the wild corpus at {WILD} (set TRACEFLOW_WILD)")
    if rels not in _DBS:
        db = str(tmp_path_factory.mktemp("read18b") / "job.duckdb")
        traceflow.ingest([str(p) for p in paths], db)
        with traceflow.open(db) as j:
            _DBS[rels] = (db, j.findings())
    return _DBS[rels]


XLA_A, XLA_G = "xla/jax08_attention.tw003.trace.json.gz", "xla/jax08_gemm.tw003.trace.json.gz"


def _xla_raw(path: Path) -> tuple[float, int, set[str]]:
    """(first event's time in us, collective kernels, XLA module names) of an XLA trace viewer JSON."""
    import gzip
    import json
    import re
    d = json.loads(gzip.decompress(path.read_bytes()))
    ev = [e for e in d["traceEvents"] if isinstance(e, dict)]
    procs = {e["pid"]: e["args"]["name"] for e in ev if e.get("ph") == "M" and e.get("name") == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e.get("ph") == "M" and e.get("name") == "thread_name"}
    dev = [e for e in ev if e.get("ph") == "X" and "/device:" in procs.get(e.get("pid"), "")]
    coll = sum(1 for e in dev if threads.get((e["pid"], e["tid"]), "").startswith("Stream")
               and re.search(r"(?i)nccl|rccl|all-reduce|all-gather|reduce-scatter", e["name"]))
    modules = {e["name"] for e in dev if threads.get((e["pid"], e["tid"]), "").startswith("XLA Modules")}
    return min(e["ts"] for e in ev if isinstance(e.get("ts"), (int, float))), coll, modules


def test_separate_xla_captures_are_refused(tmp_path):
    """W5, W6: two JAX programs profiled each on its own (XProf trace JSON: times after each
    capture's start, no wall clock) were read as one 2-rank job whose ranks "share one GPU", their
    kernels "overlapping" because both clocks start at 0. Raw: both files start within a day of 0
    (capture-relative), hold no collective, and run different XLA modules: refused with one line
    naming the file, exit 3, nothing written."""
    paths = [WILD / XLA_A, WILD / XLA_G]
    for p in paths:
        if not p.exists():
            pytest.skip(f"{p.relative_to(WILD)} not in the wild corpus at {WILD} (set TRACEFLOW_WILD)")
    raw = [_xla_raw(p) for p in paths]
    assert all(t < 86_400e6 and coll == 0 for t, coll, _ in raw)  # capture-relative clocks, no collective
    assert raw[0][2] and raw[1][2] and not raw[0][2] & raw[1][2]  # two different programs
    import subprocess
    import sys
    out = tmp_path / "mix"
    run = subprocess.run([sys.executable, "-m", "traceflow", "postmortem", *map(str, paths), "-o", str(out), "-j", "1"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 3, run.stdout + run.stderr  # was 0: one job, "Ranks 0, 1 share one GPU"
    err = [x for x in run.stderr.splitlines() if "error" in x]
    assert len(err) == 1 and str(paths[1]) in err[0] and "capture" in err[0], run.stderr
    assert "share one GPU" not in run.stdout and not out.exists()


def _xla_threads(path: Path):
    """(events 'X', thread names by (pid, tid), process names by pid) of an XLA trace viewer JSON."""
    import gzip
    import json
    d = json.loads(gzip.decompress(path.read_bytes()))
    ev = [e for e in d["traceEvents"] if isinstance(e, dict)]
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e.get("ph") == "M" and e.get("name") == "thread_name"}
    procs = {e["pid"]: e["args"]["name"] for e in ev if e.get("ph") == "M" and e.get("name") == "process_name"}
    return [e for e in ev if e.get("ph") == "X" and isinstance(e.get("ts"), (int, float))], threads, procs


def test_idle_with_nothing_on_the_issuing_thread_is_no_traced_op(tmp_path_factory):
    """M9: JAX attention on one MI300X. 20.6 ms of the GPU's idle lie where the python thread (which
    issues the work) and the launching threads hold no event; only a PjRt thread-pool callback
    (BufferSequencingEvent::Execute, a wait for a buffer) spans it. It was "framework CPU work inside
    ops"; it is host time in no traced op. Raw: the GPU idle (stream threads) that no event of the
    python thread or of the Host Threads covers."""
    db, f = _job((XLA_A,), tmp_path_factory)
    ev, threads, procs = _xla_threads(WILD / XLA_A)
    gpu = union([(e["ts"], e["ts"] + e["dur"]) for e in ev if threads.get((e["pid"], e["tid"]), "").startswith("Stream")])
    host = union([(e["ts"], e["ts"] + e["dur"]) for e in ev if "/host:CPU" in procs.get(e["pid"], "")
                   and (threads.get((e["pid"], e["tid"])) == "python" or threads.get((e["pid"], e["tid"]), "").startswith("Host Threads"))])
    bare = 0.0
    for (_, a), (b, _) in zip(gpu, gpu[1:]):
        bare += (b - a) - sum(max(0.0, min(b, y) - max(a, x)) for x, y in host)
    bare_ns = bare * 1e3
    assert bare_ns > 15e6  # most of the idle: nothing on the issuing threads
    dom = next(r for r in f["findings"] if r["kind"] == "dominant")
    assert dom["class"] == "host" and dom["cause"] == "no_op", dom  # was cpu_op: "framework CPU work inside ops"
    assert abs(dom["evidence_ns"] - bare_ns) <= 0.01 * bare_ns, (dom["evidence_ns"], bare_ns)
    line = next(x for x in f["lines"] if x.startswith("Host-bound"))
    assert f"{bare_ns / 1e6:.1f} ms in no traced op" in line, line


DECODE = "rocprof-unified-viewer/decode_kernel_trace.csv"


def test_idle_beside_launches_with_no_kernel_may_be_unrecorded_work(tmp_path_factory):
    """M16: rocprofv3's kernel and HIP API CSVs of a llama.cpp decode, sampled apart: most launch calls
    have no kernel in the kernel trace, so the GPU idle (89 % of the path) may be GPU work the trace did
    not record. It was "GPU idle with nothing else on the path". Raw: the launch calls of the API CSV
    whose correlation id no kernel of the kernel CSV carries."""
    import csv
    api = WILD / DECODE.replace("kernel_trace", "hip_api_trace")
    if not api.exists():
        pytest.skip(f"{api.relative_to(WILD)} not in the wild corpus at {WILD} (set TRACEFLOW_WILD)")
    db, f = _job((DECODE,), tmp_path_factory)
    with open(WILD / DECODE, newline="") as fh:
        kernels = {r["Correlation_Id"] for r in csv.DictReader(fh)}
    with open(api, newline="") as fh:
        launches = [r for r in csv.DictReader(fh) if "LaunchKernel" in r["Function"] or "GraphLaunch" in r["Function"]]
    missing = [r for r in launches if r["Correlation_Id"] not in kernels]
    assert len(missing) >= max(10, 0.1 * len(launches)), (len(missing), len(launches))
    dom = next(r for r in f["findings"] if r["kind"] == "dominant")
    assert dom["class"] == "idle" and dom["cause"] == "unrecorded work", dom  # was 'nothing recorded'
    text = " ".join([f["headline"], *f["lines"]])
    assert "nothing else on the path" not in text and "may be GPU work the trace did not record" in f["headline"], text
