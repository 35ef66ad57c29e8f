"""Issue 41's known leftovers after session 18's read (helper claims7): each fixed in the general case
and checked on its real input against a plain reading of the raw file (json / gzip / sqlite3, or the
claim oracle's own reading). Each test skips with one line where its file is absent
(TRACEFLOW_WILD=/work/wild-all holds the wild ones)."""
from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import pytest
from conftest import WILD

import traceflow

sys.path.insert(0, str(Path(__file__).parent))
import claim_oracle
from test_claims_read18 import _con, _job  # one input ingested once, for every read's tests


def test_start_up_blocking_is_said_once_not_per_step(tmp_path_factory):
    """rocm-blogs' rocprof v1 --hip-trace of a PyTorch vector add: "Rank 0 blocks 276.0 ms/step in 6
    hipMemcpyWithStream", where 275.0 ms is the first call's runtime start-up, before any GPU op. From the
    raw HIP / OPS / COPY tables: the calls' time after the first GPU op is the per-step figure, the time
    before it is said apart, once."""
    path = WILD / "rocm-blogs" / "roc-profiling_HIP_trace_results.db"
    db, f = _job(path, tmp_path_factory)
    c = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        first = min(a for t in ("OPS", "COPY") for a, in c.execute(f"select BeginNs from {t}"))
        calls = c.execute("select BeginNs, EndNs from HIP where Name = 'hipMemcpyWithStream'").fetchall()
    finally:
        c.close()
    before = sum(max(0, min(b, first) - a) for a, b in calls)
    after = sum(b - a for a, b in calls) - before
    assert before > 100 * after  # the file's shape: start-up dwarfs the recurring blocking
    row = next(r for r in f["findings"] if r["kind"] == "host_syncs")
    assert abs(row["value_ns"] - after) <= 2000 and abs(row["evidence_ns"] - before) <= 2000, (row["value_ns"], after, before)
    short = next(line for line in f["lines"] if "hipMemcpyWithStream" in line)
    assert f"{after / 1e6:.1f} ms/step" in short and f"{before / 1e6:.1f} ms more once, before the first GPU op" in short
    assert f"{(before + after) / 1e6:.1f} ms/step" not in "\n".join(f["lines"])
    con = _con(db)
    try:
        verdicts = claim_oracle.check(con, [row])
        assert con.execute(row["repro_sql"]).fetchone()[0] == pytest.approx(after, abs=2000)
    finally:
        con.close()
    assert verdicts[0][1] == "correct", verdicts[0][2]


def test_the_kernel_named_is_the_one_taking_the_most_time(tmp_path_factory):
    """deepseek train.json (H800, DeepEP): "compute-bound … longest: FlashAttnBwd" named the longest
    segment on the critical path, where the oracle (and a reader) takes the kernel with the most run
    time. The sentence now says which it means, "the kernel taking the most time", with its figure;
    from the raw file: the compute kernel (not DeepEP / NCCL) with the most time in the ProfilerStep."""
    import json
    path = WILD / "deepseek" / "train.json"
    db, f = _job(path, tmp_path_factory)
    ev = [e for e in json.loads(path.read_bytes())["traceEvents"] if e.get("ph") == "X"]
    (lo, hi), = [(e["ts"], e["ts"] + e["dur"]) for e in ev if str(e.get("name", "")).startswith("ProfilerStep#")]
    launched = {e["args"]["correlation"] for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")
                and "correlation" in (e.get("args") or {}) and lo <= e["ts"] < hi}
    per: dict = {}
    for e in ev:
        if e.get("cat") == "kernel" and (e.get("args") or {}).get("correlation") in launched \
                and not claim_oracle.COMM.search(e["name"]):
            per[e["name"]] = per.get(e["name"], 0) + e["dur"] * 1000
    top = max(per, key=per.get)
    row = next(r for r in f["findings"] if r["kind"] == "dominant" and r["class"] == "compute")
    assert row["evidence"] == top and abs(row["evidence_ns"] - per[top]) <= 0.01 * per[top], (row["evidence"][:80], top[:80])
    assert "the kernel taking the most time: " in row["sentence"] and f"{per[top] / 1e6:.1f} ms per step" in row["sentence"]
    assert "longest:" not in row["sentence"]
    con = _con(db)
    try:
        moved = dict(row, evidence_ns=round(row["evidence_ns"] * 1.5))
        assert [v for _, v, _ in claim_oracle.check(con, [row, moved])] == ["correct", "wrong"]
    finally:
        con.close()


def _whatif_section(db: str, tmp_path) -> str:
    """The report's what-if section, as text (tags stripped)."""
    import html
    import re
    page = tmp_path / "r.html"
    with traceflow.open(db) as j:
        j.write_report(str(page))
    s = page.read_text()
    seg = s[s.index('id="whatif"'):]
    seg = seg[:seg.index("</section>")]
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", seg)))


def test_the_reports_what_if_withholds_the_bound_the_verdict_withholds(tmp_path_factory, tmp_path):
    """deepseek train.json: the verdict withholds "compute x0.5" (the host on the path waits on a busy
    GPU: idle 0.5 of 129.0 ms in the raw file, test_claims_read18), yet the report's what-if chart showed
    its 2.5 ms gain as if a fix. The section now gives the verdict's reason and no gain for it."""
    db, f = _job(WILD / "deepseek" / "train.json", tmp_path_factory)
    held = next(r for r in f["findings"] if r["kind"] == "bound_withheld")
    assert any(x["scenario"] == held["evidence"] and x["gain_ns"] > 0 for x in f["fixes"])  # the replay gave one
    text = _whatif_section(db, tmp_path)
    assert f"No {held['evidence']} bound" in text
    assert not any(x.startswith(held["evidence"]) for x in text.split(" ms ")), text
    assert f"{held['evidence']} " not in text.replace(f"No {held['evidence']} bound", "")


def test_the_reports_what_if_lists_yardsticks_apart_as_bounds(tmp_path_factory, tmp_path):
    """rocm-blogs' rocprof v1 vector add: "memory x0.5" is a yardstick (the verdict's "Bounds, not
    fixes"); the report listed it among the fixes. It is now in the bounds' table, after the fixes."""
    db, f = _job(WILD / "rocm-blogs" / "roc-profiling_HIP_trace_results.db", tmp_path_factory)
    bound = next(x for x in f["fixes"] if x.get("reference"))
    text = _whatif_section(db, tmp_path)
    fixes_part, bounds_part = text.split("Bounds, not fixes")
    assert bound["scenario"] not in fixes_part and bound["scenario"] in bounds_part
    assert all(x["scenario"].split(" (")[0] in fixes_part for x in f["fixes"] if not x.get("reference")
               and not x["scenario"].startswith("no stragglers"))


@pytest.mark.parametrize("rel", ["rocprof-unified-viewer/decode_kernel_trace.csv", "amd-hpc/merged_nccl_only.json.gz"])
def test_the_oracle_recomputes_unrecorded_work_and_catches_a_moved_figure(rel, tmp_path_factory):
    """unrecorded_work (rocprofv3 decode CSVs: 178 of 180 hipLaunchKernel with no kernel; TraceFuse's
    NCCL-only output: 4 ranks of collective kernels and no host event) had no entry in the claim
    oracle. Its own reading of the raw files (the CSVs / the fused JSON by args.rank) gives the row's
    ranks, count and share; a moved count or a dropped rank reads wrong."""
    db, f = _job(WILD / rel, tmp_path_factory)
    row = next(r for r in f["findings"] if r["kind"] == "unrecorded_work")
    assert "unrecorded_work" in claim_oracle.ORACLES
    bad = dict(row, n=(row["n"] or 0) + 5, share_pct=(row["share_pct"] or 0) + 3) if row["n"] else dict(row, ranks=row["ranks"][1:])
    con = _con(db)
    try:
        got = claim_oracle.check(con, [row, bad])
    finally:
        con.close()
    assert [v for _, v, _ in got] == ["correct", "wrong"], [w for _, _, w in got]


# CUDA's own words, which advice on a ROCm rank must not use (PyTorch's API keeps its names there:
# torch.cuda.synchronize(), torch.cuda.CUDAGraph, PYTORCH_NO_CUDA_MEMORY_CACHING beside HIP's)
_CUDA_ONLY = ("CUDA graph", "CUDA_MODULE_LOADING", "NVTX", "cudaMalloc", "cudaFree", "cudaMemcpyAsync", "cudaHostRegister",
              "other CUDA calls")


@pytest.mark.parametrize("rel", ["amd-hpc/merged_all_events.json.gz", "tracelens-ddp/train_resnet18.json.gz",
                                 "xla/jax08_gemm.tw003.trace.json.gz", "rocm-blogs/roc-profiling_HIP_trace_results.db"])
def test_advice_on_rocm_uses_rocms_words(rel, tmp_path_factory):
    """ROCm jobs (PyTorch DDP on MI-series GPUs, PyTorch with caching off, JAX GEMM, a HIP vector add)
    were told "kernel fusion (no CUDA graph: the step blocks)", "CUDA_MODULE_LOADING=EAGER". The raw file
    shows the platform (HIP runtime calls); every sentence, line, caveat and fix is in its words, and a
    graph, where one is named, is a HIP graph."""
    import re
    path = WILD / rel
    db, f = _job(path, tmp_path_factory)
    if path.suffix == ".db":
        c = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            names = [n for n, in c.execute("select Name from HIP")]
        finally:
            c.close()
    else:  # every event's name: XLA's trace files keep the runtime calls under no Kineto category
        import gzip
        import json
        names = [str(e.get("name")) for e in json.loads(gzip.decompress(path.read_bytes()))["traceEvents"] if e.get("ph") == "X"]
    calls = [n.lstrip("_") for n in names if re.match(r"_*(hip|cuda|cu)[A-Z]", n)]
    assert calls and all(n.startswith("hip") for n in calls)  # a ROCm run: HIP's runtime calls, none of CUDA's
    said = [f["headline"], *f["lines"], *f["caveats"], *f["sentences"],
            *[r.get(k) or "" for r in f["findings"] for k in ("fix", "fix_short")]]
    bad = [s for s in said if any(w in s for w in _CUDA_ONLY)]
    assert not bad, bad
    graphs = [s for s in said if re.search(r"(?i)\bgraphs?\b", s) and "HIP graph" in s]
    if rel.startswith("amd-hpc"):  # its launch fix names the graph it cannot use
        assert graphs, said


# --- READ-session19 (reader19's claim-by-claim read of GPUPuzzlers' traces) ---------------------------

def _events(path: Path) -> list[dict]:
    import gzip
    import json
    return [e for e in json.loads(gzip.decompress(path.read_bytes()))["traceEvents"] if e.get("ph") == "X"]


def _sync_pairs(ev: list[dict]) -> tuple[int, float, dict]:
    """The cudaStreamSynchronize calls right after a pageable copy's cudaMemcpyAsync on their thread:
    (how many, the pairs' blocked time in ns, that time by copy direction), plain Python over the raw file."""
    pageable = {e["args"]["correlation"]: e["name"] for e in ev if e.get("cat") == "gpu_memcpy" and "Pageable" in e["name"]}
    by_tid: dict = {}
    for e in sorted((e for e in ev if e.get("cat") == "cuda_runtime"), key=lambda e: e["ts"]):
        by_tid.setdefault((e["pid"], e["tid"]), []).append(e)
    n, ns, dirs = 0, 0.0, {}
    for calls in by_tid.values():
        for a, b in zip(calls, calls[1:]):
            copy = pageable.get((a.get("args") or {}).get("correlation"))
            if b["name"] == "cudaStreamSynchronize" and copy:
                n, ns = n + 1, ns + (a["dur"] + b["dur"]) * 1000
                d = "DtoH" if "DtoH" in copy else "HtoD"
                dirs[d] = dirs.get(d, 0) + a["dur"] * 1000
    return n, ns, dirs


def test_syncs_after_pageable_copy_calls_are_claimed_with_the_copies_blocking(tmp_path_factory):
    """READ-session19 W3, M1, M2 (GPUPuzzlers addition_d2h_sync_final: 4,096 `x[i].cpu()` in a loop): the
    what-if table's largest gain, no host syncs 60.1 ms, was called "no recorded cause", since the syncs
    alone block 4.2 ms and the copy calls right before them 55.8 ms. The pairs are claimed (their figure
    from the raw file), ranked first, with the fix for device-to-host reads (not pin + non_blocking,
    which reads before the copy lands); the pageable-copy finding points to that fix."""
    path = WILD / "gpupuzzlers" / "addition_d2h_sync_final.json.gz"
    db, f = _job(path, tmp_path_factory)
    n, ns, dirs = _sync_pairs(_events(path))
    assert n >= 4096 and set(dirs) == {"DtoH"}
    row = next(r for r in f["findings"] if r["kind"] == "host_syncs")
    assert row["n"] == n and abs(row["value_ns"] - ns) <= 0.01 * ns, (row["n"], row["value_ns"], n, ns)
    assert f["findings"].index(row) == min(i for i, r in enumerate(f["findings"]) if r.get("fix"))  # the first fix
    assert f["headline"].startswith(f"Top problem: {n} cudaStreamSynchronize")
    assert "keep those values on the GPU" in row["fix"] and "non_blocking=True and read them after an event" in row["fix"]
    copy = next(r for r in f["findings"] if r["kind"] == "pageable_copy")
    assert not copy["fix"] and "the fix is the blocking-call finding's" in copy["sentence"]
    assert not any("no recorded cause" in c for c in f["caveats"]), f["caveats"]
    con = _con(db)
    try:
        assert claim_oracle.check(con, [row])[0][1] == "correct"
        moved = dict(row, value_ns=row["value_ns"] - 55e6)  # the syncs alone: what the claim said before
        assert claim_oracle.check(con, [moved])[0][1] == "wrong"
    finally:
        con.close()


def test_pageable_copies_both_ways_are_split_by_direction(tmp_path_factory):
    """READ-session19 W5, W6, W7 (GPUPuzzlers swimming_in_streams): "Pageable copies (Memcpy DtoH …) take
    242.5 ms/step" where HtoD holds 163.7 ms of it; "Copy-bound … is HtoD pageable memory copies, 215.1
    ms/step" for the whole copy class; and two gains (84.2 and 191.9 ms) for one change. Each direction
    gets its own figure from the raw file, the copy-bound line each cause's, and the one change one gain."""
    path = WILD / "gpupuzzlers" / "swimming_in_streams.json.gz"
    db, f = _job(path, tmp_path_factory)
    ev = _events(path)
    per: dict = {}
    for e in ev:
        if e.get("cat") == "gpu_memcpy" and "Pageable" in e["name"]:
            d = "DtoH" if "DtoH" in e["name"] else "HtoD"
            per[d] = per.get(d, 0) + e["dur"] * 1000
    copy = next(r for r in f["findings"] if r["kind"] == "pageable_copy")
    for d, ns in per.items():
        assert f"{d} {ns / 1e6:.1f} ms" in copy["sentence"], (d, ns, copy["sentence"])
    bound = next(x for x in f["lines"] if x.startswith("Copy-bound"))
    parts = {c: float(v) for c, v in __import__("re").findall(r"(\w+ \w+) ([\d.]+) ms", bound.split("/step", 1)[1])}
    assert len(parts) >= 2 and parts["HtoD pageable"] * 1e6 <= per["HtoD"], bound
    n, ns, dirs = _sync_pairs(ev)
    row = next(r for r in f["findings"] if r["kind"] == "host_syncs")
    assert row["n"] == n and abs(row["value_ns"] - ns) <= 0.01 * ns
    assert not copy["fix"] and [r["kind"] for r in f["findings"] if r.get("fix")] == ["host_syncs"]
    assert "non_blocking=True" in row["fix"]  # both directions: pin + non_blocking, not the read-back advice


def _self_time(ev: list[dict], name: str) -> float:
    """ns of the trace's cpu_ops named `name` not covered by another cpu_op or runtime call nested in
    them on their thread (their own time), plain Python with tests/intervals.py."""
    import intervals
    by: dict = {}
    for e in ev:
        if e.get("cat") in ("cpu_op", "cuda_runtime") and e.get("dur"):
            by.setdefault((e["pid"], e["tid"]), []).append(e)
    total = 0.0
    for es in by.values():
        mine = [(e["ts"], e["ts"] + e["dur"]) for e in es if e["name"] == name and e.get("cat") == "cpu_op"]
        if not mine:
            continue
        inner = [(e["ts"], e["ts"] + e["dur"]) for e in es if e["name"] != name]
        total += intervals.measure(mine) - intervals.measure(intervals.intersect(intervals.union(mine), intervals.union(inner)))
    return total * 1000


def test_a_host_cause_names_only_an_op_or_range_that_holds_half_of_it(tmp_path_factory):
    """READ-session19 W1, W2 (GPUPuzzlers addition_d2h_sync_final): "119.1 ms framework CPU work in ops
    (aten::add_), 75.4 ms inside aten::add_ with no op traced": aten::add_'s own time in the whole raw
    file is under half of the first, and time with no op traced cannot lie inside an op. Each cause now
    names only what holds half of that cause's own path time."""
    path = WILD / "gpupuzzlers" / "addition_d2h_sync_final.json.gz"
    db, f = _job(path, tmp_path_factory)
    ev = _events(path)
    ops = {e["name"] for e in ev if e.get("cat") == "cpu_op"}
    import re
    line = next(x for x in f["lines"] if x.startswith("Host-bound"))
    cpu = float(re.search(r"([\d.]+) ms framework CPU work in ops", line).group(1)) * 1e6
    named = [n for n in ops if n in line]
    assert all(_self_time(ev, n) >= 0.5 * cpu for n in named), (named, line)
    assert "inside aten::" not in line  # time with no op traced is inside no op
    assert _self_time(ev, "aten::add_") < 0.5 * cpu and "aten::add_" not in line, line


def test_a_runtime_call_written_twice_is_read_once(tmp_path_factory):
    """READ-session19 W11 (pipit saxpy-mpi-cuda, nsys 2022.2): each CUDA call is two rows of
    CUPTI_ACTIVITY_KIND_RUNTIME (`cudaMemcpy` and `cudaMemcpy_v3020`, one correlation id, one nested in
    the other): "30 cudaMemcpy/step block 748.7 ms (DtoH copy)". From the raw table, per correlation id
    once: 15 calls, their blocking, both directions."""
    import re
    path = WILD / "pipit" / "saxpy-mpi-cuda_nsys_perlmutter0.sqlite"
    db, f = _job(path, tmp_path_factory)
    c = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        names = dict(c.execute("select id, value from StringIds"))
        calls: dict = {}
        for a, b, n, k in c.execute('select start, "end", nameId, correlationId from CUPTI_ACTIVITY_KIND_RUNTIME'):
            if re.sub(r"_v\d+$", "", names[n]) == "cudaMemcpy":
                calls[k] = max(calls.get(k, 0), b - a)
        kinds = {k: s for k, s in c.execute("select correlationId, copyKind from CUPTI_ACTIVITY_KIND_MEMCPY")}
    finally:
        c.close()
    assert len(calls) == 15 and len(set(kinds[k] for k in calls)) == 2  # two directions
    row = next(r for r in f["findings"] if r["kind"] == "host_syncs")
    assert row["per_step"] == len(calls) and abs(row["value_ns"] - sum(calls.values())) <= 0.01 * sum(calls.values())
    assert f["headline"].startswith(f"Top problem: {len(calls)} cudaMemcpy/step") and "HtoD" in f["headline"]
    assert "read-back" not in f["headline"]  # the fix fits both directions


def test_a_python_builtin_reads_by_its_name(tmp_path_factory):
    """READ-session19 M11 (GPUPuzzlers cuda-queue-puzzlers): "2.9 ms in <…> (no op traced)" where 2.7 ms
    is `<built-in function sleep>` (time.sleep) in the raw file: the name is read, not cut as a C++ template."""
    path = WILD / "gpupuzzlers" / "cuda-queue-puzzlers.trace.json.gz"
    db, f = _job(path, tmp_path_factory)
    sleeps = [e for e in _events(path) if e.get("name") == "<built-in function sleep>"]
    assert sum(e["dur"] for e in sleeps) >= 2000  # us: the harness sleeps between its blocks
    assert "<built-in function sleep>" in f["headline"] and not any("<…>" in x for x in [f["headline"], *f["lines"]])


def test_a_cold_start_in_allocator_calls_is_told_to_warm_up(tmp_path_factory):
    """READ-session19 M3, M4 (GPUPuzzlers vector_flops1, a cold script): two cudaFree of 225.8 and
    258.4 ms inside the first aten::mm (cuBLAS's start-up) were told "keep the caching allocator warm",
    and the step "launch-bound up to 100 %". From the raw file: a few allocator calls over 10 ms hold
    most of the allocator time; the fix is a warm-up, with their count and time, and the launch-bound
    line calls that idle allocator time."""
    path = WILD / "gpupuzzlers" / "vector_flops1.json.gz"
    db, f = _job(path, tmp_path_factory)
    alloc = [e for e in _events(path) if e.get("cat") == "cuda_runtime" and e["name"] in ("cudaFree", "cudaMalloc")]
    long = [e for e in alloc if e["dur"] >= 10_000]
    assert 0 < len(long) <= 4 and sum(e["dur"] for e in long) >= 0.8 * sum(e["dur"] for e in alloc)
    row = next(r for r in f["findings"] if r["kind"] == "dominant" and r["class"] == "host")
    assert row["fix"].startswith("warm up before profiling") and "caching allocator" not in row["fix"]
    assert f"{len(long)} cudaFree call(s) took {sum(e['dur'] for e in long) / 1e3:.1f} ms" in row["fix"], row["fix"]
    line = next(x for x in f["lines"] if x.startswith("Launch-bound"))
    assert "allocator time, not launch cost" in line and "waiting for kernel launches" not in line


def test_distinct_zero_length_host_events_are_kept(tmp_path_factory):
    """READ-session19 W4 (GPUPuzzlers vector_flops1 and six more): "dropped 80 host ops recorded twice" for
    zero-length python_function events that share a microsecond but are distinct (each its own Profiler
    Event Index). Every zero-length host event of the raw file is a host op."""
    path = WILD / "gpupuzzlers" / "vector_flops1.json.gz"
    db, f = _job(path, tmp_path_factory)
    ev = _events(path)
    raw = sum(1 for e in ev if e.get("dur") == 0 and e.get("cat") in ("python_function", "cuda_runtime", "cpu_op"))
    index = [(e.get("args") or {}).get("Profiler Event Index") for e in ev if e.get("dur") == 0 and e.get("cat") == "python_function"]
    assert len(index) == len(set(index))  # distinct events, not copies
    con = _con(db)
    try:
        kept = con.execute("SELECT count(*) FROM host_ops WHERE start_ns = end_ns").fetchone()[0]
    finally:
        con.close()
    assert kept == raw, (kept, raw)


@pytest.mark.parametrize("rel", ["gpupuzzlers/p2p_copy.json.gz", "pipit/saxpy-mpi-cuda_nsys_perlmutter0.sqlite"])
def test_the_empty_mfu_reason_fits_the_program(rel, tmp_path_factory):
    """READ-session19 M6, M13 (GPUPuzzlers p2p_copy: peer copies only; pipit's CUDA C + MPI saxpy): the
    empty MFU was told to record shapes (record_shapes=True, emit_nvtx), PyTorch advice for a trace with
    no compute kernel or no PyTorch at all. The reason is the file's; the oracle reads it there."""
    db, f = _job(WILD / rel, tmp_path_factory)
    row = next(r for r in f["findings"] if r["kind"] == "mfu_empty")
    assert "record_shapes" not in row["sentence"] and "torch" not in row["sentence"], row["sentence"]
    con = _con(db)
    try:
        verdict_, why = claim_oracle.check(con, [row])[0][1:]
    finally:
        con.close()
    assert verdict_ == "correct", why


def test_page_migrations_are_not_ops_missing_their_launch(tmp_path_factory):
    """READ-session19 M9 (isc25-icon gpu.sqlite, C++ stdpar on managed memory): "launch latency for 5,510
    GPU ops (100%) — the launch call is not in the trace": they are unified-memory page migrations
    (copyKind CUDA_MEMCPY_KIND_UVM_*), demand paging that no call launches; the kernels and the copy have theirs."""
    path = WILD / "isc25-icon" / "gpu.sqlite"
    db, f = _job(path, tmp_path_factory)
    c = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        uvm = {i for i, n in c.execute("select id, name from ENUM_CUDA_MEMCPY_OPER") if "UVM" in n}
        n_uvm = sum(1 for ck, in c.execute("select copyKind from CUPTI_ACTIVITY_KIND_MEMCPY") if ck in uvm)
        calls = {k for k, in c.execute("select correlationId from CUPTI_ACTIVITY_KIND_RUNTIME")}
        other = [k for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY")
                 for k, ck in c.execute(f"select correlationId, {'copyKind' if 'MEMCPY' in t else 'NULL'} from {t}") if ck not in uvm]
    finally:
        c.close()
    assert n_uvm >= 5000 and all(k in calls for k in other)
    assert not [r for r in f["findings"] if r["kind"] == "cannot_answer" and r["evidence"] == "launch latency"]


def test_a_warm_up_recovers_the_module_load_with_the_first_launch(tmp_path_factory):
    """Lead's item 8 (shared h100 nsys graphs, step 4): a 10.9 ms cuLibraryLoadData (a module load) before
    a 5.4 ms first cudaLaunchKernel; the headline's warm-up recovered the launch stall alone (5.4 ms) while
    a caveat called the replay removing that step's jit_compile time (7.7 ms) "no recorded cause". The
    warm-up's gain is the larger replay, and no caveat contradicts it."""
    from conftest import FIX
    folder = FIX / "h100" / "nsys" / "graphs"
    files = sorted(folder.glob("*.sqlite")) if folder.is_dir() else []
    if not files:
        pytest.skip(f"{folder} not found (set TRACEFLOW_SHARED)")
    c = sqlite3.connect(f"file:{files[0]}?mode=ro", uri=True)
    try:
        names = dict(c.execute("select id, value from StringIds"))
        calls = [(names[n], b - a) for a, b, n in c.execute('select start, "end", nameId from CUPTI_ACTIVITY_KIND_RUNTIME')]
    finally:
        c.close()
    loads = [ns for nm, ns in calls if nm.startswith("cuLibraryLoadData")]
    assert loads and max(loads) > 5e6  # a module load of milliseconds in the file
    db = str(tmp_path_factory.mktemp("graphs") / "job.duckdb")
    traceflow.ingest([str(p) for p in files], db)
    with traceflow.open(db) as j:
        f = j.findings()
        stall_only = max(x["gain_ns"] for x in j.whatif(steps=[4], no_launch_stall=True))
    top = next(r for r in f["findings"] if r.get("fix"))
    assert top["fix"].startswith("warm up") and top["recover_ns"] > stall_only, (top["recover_ns"], stall_only)
    assert not any("no recorded cause" in x for x in f["caveats"]), f["caveats"]
