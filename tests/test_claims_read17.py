"""Issue 41, the claim-by-claim read of session 17 (unseen public jobs): each wrong or misleading
claim fixed in the general case, checked on its real input against a plain reading of the raw file
(json / gzip / sqlite3). Each test skips with one line where its wild file is absent."""
from __future__ import annotations

import gzip
import json
import re
import sqlite3
import statistics
import sys
from pathlib import Path

import pytest
from conftest import WILD

import traceflow
from traceflow import verdict

sys.path.insert(0, str(Path(__file__).parent))
import claim_oracle
import intervals
import rocm_raw

_DBS: dict[str, tuple[str, dict]] = {}


def _job(rel: str, tmp_path_factory) -> tuple[str, dict]:
    """(database, findings) of one wild file, ingested once."""
    path = WILD / rel
    if not path.exists():
        pytest.skip(f"{rel} not in the wild corpus at {WILD} (set TRACEFLOW_WILD)")
    if rel not in _DBS:
        db = str(tmp_path_factory.mktemp("read17") / "job.duckdb")
        traceflow.ingest([str(path)], db)
        with traceflow.open(db) as j:
            _DBS[rel] = (db, j.findings())
    return _DBS[rel]


def _sql(db: str, q: str):
    import duckdb
    con = duckdb.connect(db, read_only=True)
    try:
        return con.execute(q).fetchall()
    finally:
        con.close()


_STEPS = "(SELECT step FROM tf_internal.findings_steps WHERE NOT warmup)"


def _no_op_by_range(path: Path) -> dict[str, float]:
    """Per user-annotation name, the host time inside it on its thread that no CPU op or runtime call
    covers (plain Python over the raw Kineto JSON)."""
    d = json.loads(gzip.decompress(path.read_bytes()))
    ranges, busy = [], {}
    for e in d["traceEvents"]:
        if e.get("ph") != "X" or not isinstance(e.get("ts"), (int, float)):
            continue
        key, a, b = (e.get("pid"), e.get("tid")), e["ts"], e["ts"] + (e.get("dur") or 0)
        if e.get("cat") == "user_annotation" and not str(e.get("name", "")).startswith("ProfilerStep"):
            ranges.append((key, a, b, e["name"]))
        elif e.get("cat") in ("cpu_op", "cuda_runtime", "cuda_driver"):
            busy.setdefault(key, []).append((a, b))
    merged = {key: intervals.union(iv) for key, iv in busy.items()}
    per: dict[str, float] = {}
    for key, a, b, name in ranges:
        covered = intervals.measure(intervals.clip(merged.get(key, []), a, b))
        per[name] = per.get(name, 0.0) + (b - a) - covered
    return per


@pytest.mark.parametrize("rel", ["tracelens-fused/hta_trace_filter_fused.json.gz", "tracelens-fused/param_dlrm8_fused.json.gz"])
def test_the_host_class_gives_each_cause_its_own_figure(rel, tmp_path_factory):
    """W1/W2: "88% of the critical path is host time in no traced op, 542.8 ms/step" gave the whole host
    class to its largest cause; step_causes splits it (fused hta: no_op 281.9 inside `## backward ##`,
    cpu_op 248.0 ms). Each part is stated with its own figure, and the parts are step_causes' own."""
    db, f = _job(rel, tmp_path_factory)
    row = next(r for r in f["findings"] if r["kind"] == "dominant" and r["class"] == "host")
    parts = _sql(db, f"""SELECT cause, sum(path_ns) / (SELECT count(*) FROM {_STEPS}) FROM step_causes
                         WHERE class = 'host' AND step IN {_STEPS} GROUP BY cause ORDER BY 2 DESC""")
    big = [(c, ns) for c, ns in parts if ns >= 0.05 * row["value_ns"]]
    assert len(big) >= 2  # the read: two causes of the host class, each material
    line = next(x for x in f["lines"] if x.startswith("Host-bound"))
    for cause, ns in big[:3]:
        assert f"{ns / 1e6:,.1f} ms" in row["sentence"], (cause, row["sentence"])
    assert "host time in no traced op, " not in row["sentence"] + line
    assert f"{big[0][1] / 1e6:,.1f} ms" in line and f"{big[1][1] / 1e6:,.1f} ms" in line
    if rel.startswith("tracelens-fused/hta"):
        # the range named for the no_op part is the one holding the most host time outside every op in the
        # raw file (`## backward ##`: 180-191 ms per rank and step)
        raw = _no_op_by_range(WILD / rel)
        assert f"inside {max(raw, key=raw.get)} with no op traced" in row["sentence"], (row["sentence"], sorted(raw.items(), key=lambda x: -x[1])[:3])


def test_launch_bound_steps_follow_the_queued_split(tmp_path_factory):
    """M11: "steps 551, 552 spent up to 35% … waiting for kernel launches" where 98% of that idle came
    after the launch calls had returned. Checked against the raw file: per launch, the idle before its
    kernel that lies after its call returned."""
    rel = "tracelens-fused/hta_trace_filter_fused.json.gz"
    db, f = _job(rel, tmp_path_factory)
    row = next(r for r in f["findings"] if r["kind"] == "launch_bound_steps")
    assert "waiting for kernel launches" not in row["sentence"]
    m = re.search(r"but (\d+)% of that idle came after the launch calls had returned", row["sentence"])
    assert m, row["sentence"]
    exposed, queued = _sql(db, f"""SELECT sum(exposed_ns), sum(exposed_queued_ns) FROM launch_overhead
                                   WHERE step IN ({', '.join(map(str, row['steps']))})""")[0]
    assert int(m.group(1)) == round(100 * queued / exposed)
    # the raw file: per rank, each GPU op launched in those steps, the GPU idle before it (from the end of
    # the rank's GPU work before it, or its call's start if later) and the part after its call returned
    exposed_raw, queued_raw = _raw_launch_idle(WILD / rel, row["steps"])
    assert queued_raw >= 0.9 * exposed_raw and int(m.group(1)) >= 90, (queued_raw, exposed_raw)


def _raw_launch_idle(path: Path, steps: list[int]) -> tuple[float, float]:
    d = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    ev = [e for e in d if e.get("ph") == "X" and isinstance(e.get("ts"), (int, float))]
    rank_of = lambda e: (e.get("args") or {}).get("rank", e.get("pid"))  # the fused format: args.rank
    windows = {(rank_of(e), int(e["name"].split("#")[1])): (e["ts"], e["ts"] + e["dur"]) for e in ev
               if str(e.get("name", "")).startswith("ProfilerStep#")}
    calls = {(rank_of(e), e["args"]["correlation"]): e for e in ev
             if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in (e.get("args") or {})}
    gpu: dict = {}
    for e in ev:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            gpu.setdefault(rank_of(e), []).append(e)
    exposed = queued = 0.0
    for rank, ops in gpu.items():
        ops.sort(key=lambda e: e["ts"])
        reach = -1.0
        for e in ops:
            c = calls.get((rank, (e.get("args") or {}).get("correlation")))
            inside = c and any(a <= c["ts"] < b for (q, s), (a, b) in windows.items() if q == rank and s in steps)
            if inside and reach >= 0:
                start = max(reach, c["ts"])
                if e["ts"] > start:
                    exposed += e["ts"] - start
                    queued += max(0.0, e["ts"] - max(reach, c["ts"] + c["dur"]))
            reach = max(reach, e["ts"] + e["dur"])
    return exposed, queued


def _con(db: str):
    import duckdb
    return duckdb.connect(db, read_only=True)


def test_the_short_form_never_cuts_inside_a_parenthesis(tmp_path_factory):
    """Smaller: finding 3 of the fused hta job was cut mid-parenthesis at 300 characters; the copy
    share is of the GPU window, not of the GPU's time."""
    _, f = _job("tracelens-fused/hta_trace_filter_fused.json.gz", tmp_path_factory)
    for x in [f["headline"], *f["lines"], *f["caveats"]]:
        assert x.count("(") == x.count(")"), x
        assert len(x) <= verdict.LINE_MAX
    assert any("of the steps' GPU window (wall time)" in x for x in f["lines"])
    assert not any("of the GPU time" in x for x in f["sentences"])


def _nsys_syncs(path: Path) -> dict:
    """Per process: stream syncs, their blocked time, and how many follow (previous runtime call on the
    thread) a cudaMemcpyAsync whose copy is pageable; memset calls' durations."""
    c = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    names = dict(c.execute("select id, value from StringIds"))
    # the export's own enum names its memory kinds (nsys-ai's: 0 Pageable, 1 Pinned, 2 Device)
    kinds = {i for i, n in c.execute("select id, name from ENUM_CUDA_MEM_KIND") if "pageable" in str(n).lower()}
    pageable = {k for k, s, d in c.execute("select correlationId, srcKind, dstKind from CUPTI_ACTIVITY_KIND_MEMCPY")
                if {s, d} & kinds}
    out: dict = {}
    prev: dict = {}
    memset: list[int] = []
    for a, b, n, k, tid in c.execute('select start, "end", nameId, correlationId, globalTid from CUPTI_ACTIVITY_KIND_RUNTIME order by start'):
        nm = names.get(n, "").split("_v")[0]
        pid = tid >> 24
        o = out.setdefault(pid, {"n": 0, "ns": 0, "after": 0})
        if nm == "cudaStreamSynchronize":
            o["n"] += 1
            o["ns"] += b - a
            p = prev.get(tid)
            o["after"] += bool(p and p[0].startswith("cudaMemcpyAsync") and p[1] in pageable)
        if nm.startswith("cudaMemsetAsync"):
            memset.append(b - a)
        prev[tid] = (nm, k)
    c.close()
    return {"procs": out, "memset": memset}


def test_syncs_after_pageable_copies_lead_and_launch_advice_fits_the_idle(tmp_path_factory):
    """W3, M1-M3 (nsys-ai mfu_2gpu_after): 15 tiny pageable HtoD copies per step each followed by a
    stream sync (138-152 ms blocked per rank) are the fix worth the most (the replay's 37.6 ms), not
    "CUDA graphs / fusion"; the launch finding says its idle is mostly before memsets and copies, names
    the one cudaMemsetAsync outlier, and advises no CUDA graph where the step blocks."""
    rel = "nsys-ai/mfu_2gpu_after.sqlite"
    db, f = _job(rel, tmp_path_factory)
    raw = _nsys_syncs(WILD / rel)
    procs = [p for p in raw["procs"].values() if p["n"]]
    top = next(r for r in f["findings"] if r.get("fix"))
    assert top["kind"] == "host_syncs" and top["evidence"] == "cudaStreamSynchronize"
    assert top["per_step"] == statistics.mean(p["n"] for p in procs) == 15
    assert abs(top["value_ns"] - statistics.mean(p["ns"] for p in procs)) <= 0.01 * top["value_ns"]
    assert top["n"] == statistics.mean(p["after"] for p in procs)  # every one of them after a pageable copy
    assert "non_blocking=True" in top["fix"] and "non_blocking=True" in f["headline"]
    ok, why = claim_oracle.ORACLES["host_syncs"](claim_oracle.Job(_con(db)), top)
    assert ok, why
    assert not any("CUDA graph" in (r.get("fix") or "") for r in f["findings"])
    launch = next(r for r in f["findings"] if r["kind"] == "launch_names")
    assert not launch["fix"] and "no launch fix fits" in launch["sentence"]
    assert "memsets and copies" in launch["sentence"] and "(5 kernel names, 3 memset/copy)" in launch["sentence"]
    x = re.search(r"one cudaMemsetAsync call of (\d+)x its median", launch["sentence"])
    ratio = max(raw["memset"]) / statistics.median(raw["memset"])
    assert x and abs(int(x.group(1)) - ratio) <= 0.02 * ratio, (launch["sentence"], ratio)
    # no caveat states a ranking the figures contradict (was: "over the capture the fix above recovers more
    # (21.3 ms)" beside a 37.6 ms gain)
    assert not f.get("whatif_note")


def test_a_blocking_hip_copy_is_a_sync_in_the_replay(tmp_path_factory):
    """W4 (rocmprofiledata mytrace.rpd): 22 hipMemcpyWithStream calls block 345.6 ms waiting for the
    GPU (their copies 0.75 ms); the replay held that as fixed host work, so "compute x0.5 would gain
    2.5 ms" with 407 ms of kernels. A blocking copy call is a sync: halving the kernels now gains
    close to half their time."""
    rel = "rocmprofiledata/mytrace.rpd.gz"
    db, f = _job(rel, tmp_path_factory)
    c = rocm_raw._open(WILD / rel)
    try:
        calls = c.execute("""select count(*), sum(a.end - a.start) from rocpd_api a join rocpd_string s on s.id = a.apiName_id
                             where s.string = 'hipMemcpyWithStream'""").fetchone()
        kernels = rocm_raw.rpd_raw(WILD / rel)
    finally:
        c.close()
    got = _sql(db, "SELECT count(*), sum(blocked_ns) FROM sync WHERE name = 'hipMemcpyWithStream' AND reason = 'sync memcpy'")[0]
    assert got == (calls[0], calls[1]) and calls[0] == 22
    kernel_ns = kernels["kernel_ns"]  # 407 ms of kernels in a 453 ms window
    with traceflow.open(db) as j:
        gain = j.whatif(None, scale_kind={"compute": 0.5})[0]["gain_ns"]
    assert gain >= 0.4 * kernel_ns / 2, (gain, kernel_ns)
    bound = next(r for r in f["findings"] if r["kind"] == "yardstick" and r["evidence"].startswith("compute"))
    assert bound["gain_ns"] >= 0.4 * kernel_ns / 2
