"""Issue 41, the claim-by-claim read of session 19 (READ-session19.md W4, W5, W6, W8, W9, W11, W12,
M6, M11): each wrong or misleading claim fixed in the general case, checked on its real input against
a plain reading of the raw file (sqlite3 / json / gzip). Each test skips with one line where its wild
file is absent."""
from __future__ import annotations

import re
import sqlite3

import claim_oracle
import duckdb
import pytest
from conftest import WILD

import traceflow

_DBS: dict[tuple[str, ...], tuple[str, dict]] = {}


def _job(rels: tuple[str, ...], tmp_path_factory) -> tuple[str, dict]:
    """(database, findings) of wild files read as one job, ingested once."""
    paths = [WILD / r for r in rels]
    for p in paths:
        if not p.exists():
            pytest.skip(f"{p.relative_to(WILD)} not in the wild corpus at {WILD} (set TRACEFLOW_WILD)")
    if rels not in _DBS:
        db = str(tmp_path_factory.mktemp("read19") / "job.duckdb")
        traceflow.ingest([str(p) for p in paths], db)
        with traceflow.open(db) as j:
            _DBS[rels] = (db, j.findings())
    return _DBS[rels]


SAXPY = "pipit/saxpy-mpi-cuda_nsys_perlmutter0.sqlite"


def _saxpy_memcpy_calls() -> list[tuple[int, int, str]]:
    """Each cudaMemcpy call of the saxpy export once, (start, end, copy direction), in plain Python:
    rows of one thread and correlation id, the inner (`cudaMemcpy_v3020`) inside the outer
    (`cudaMemcpy`), are one call; the copy it made is the MEMCPY row of that correlation id."""
    c = sqlite3.connect(f"file:{WILD / SAXPY}?mode=ro", uri=True)
    names = dict(c.execute("select id, value from StringIds"))
    kinds = dict(c.execute("select id, name from ENUM_CUDA_MEMCPY_OPER")) if c.execute(
        "select 1 from sqlite_master where name = 'ENUM_CUDA_MEMCPY_OPER'").fetchone() else {1: "HTOD", 2: "DTOH"}
    copy = {k: kinds.get(ck, str(ck)) for k, ck in c.execute("select correlationId, copyKind from CUPTI_ACTIVITY_KIND_MEMCPY")}
    calls: dict = {}
    for a, b, n, k, t in c.execute('select start, "end", nameId, correlationId, globalTid from CUPTI_ACTIVITY_KIND_RUNTIME'):
        if re.sub(r"_v\d+$", "", names[n]) == "cudaMemcpy":
            lo, hi = calls.get((t, k), (a, b))
            calls[t, k] = (min(lo, a), max(hi, b))
    return [(a, b, copy.get(k, "")) for (t, k), (a, b) in calls.items()]


def test_an_nsys_2022_export_counts_each_call_once(tmp_path_factory):
    """W11 (headline): pipit's saxpy rank (nsys 2022.2) stores every runtime call twice, an outer row and
    an inner `_v3020` one with the same thread and correlation id. "30 cudaMemcpy/step block 748.7 ms"
    was 15 calls blocking 374.3 ms: the figure, the headline and the claim oracle give the plain count."""
    db, f = _job((SAXPY,), tmp_path_factory)
    raw = _saxpy_memcpy_calls()
    assert len(raw) == 15
    row = next(r for r in f["findings"] if r["kind"] == "host_syncs" and r["evidence"] == "cudaMemcpy")
    assert row["per_step"] == len(raw)
    assert abs(row["value_ns"] - sum(b - a for a, b, _ in raw)) < 1000
    assert f"{len(raw)} cudaMemcpy" in f["headline"] and "30 cudaMemcpy" not in f["headline"]
    con = duckdb.connect(db, read_only=True)
    try:
        n_db = con.execute("select count(*) from host_ops where name = 'cudaMemcpy'").fetchone()[0]
        assert n_db == len(raw)
        got = claim_oracle.check(con, [row])
    finally:
        con.close()
    assert got[0][1] == "correct", got[0][2]


HOST_CATS = {"cpu_op", "python_function", "cuda_runtime", "cuda_driver"}


@pytest.mark.parametrize("rel", ["gpupuzzlers/vector_flops1.json.gz", "gpupuzzlers/fusion_mwe_trace.json.gz",
                                 "gpupuzzlers/swimming_in_streams.json.gz", "gpupuzzlers/p2p_single_tensor.json.gz",
                                 "gpupuzzlers/cuda-queue-puzzlers.trace.json.gz", "gpupuzzlers/cudagraph_mwe.json.gz",
                                 "gpupuzzlers/p2p_copy.json.gz"])
def test_distinct_zero_length_host_events_are_not_dropped_as_recorded_twice(rel, tmp_path):
    """W4 (a warning on 7 files): zero-length python_function events of one name in one microsecond,
    each with its own Profiler Event Index, were dropped and warned "recorded twice". Raw: no host
    event equals another in every field with its args; so none is dropped and the host events the
    database holds are the file's."""
    import gzip
    import json
    path = WILD / rel
    if not path.exists():
        pytest.skip(f"{rel} not in the wild corpus at {WILD} (set TRACEFLOW_WILD)")
    ev = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    host = [e for e in ev if e.get("ph") == "X" and e.get("cat") in HOST_CATS]
    keys = [json.dumps(e, sort_keys=True) for e in host]
    assert len(set(keys)) == len(keys)  # no true copy in the file
    same_but_index = len(host) - len({json.dumps({k: v for k, v in e.items() if k != "args"}, sort_keys=True) for e in host})
    assert same_but_index > 0  # events that only their args tell apart: what was dropped
    db = tmp_path / "j.duckdb"
    res = traceflow.ingest([str(path)], str(db))
    assert not [w for w in res.warnings if "recorded twice" in w], res.warnings
    con = duckdb.connect(str(db), read_only=True)
    try:
        n = con.execute("select count(*) from host_ops where kind in ('cpu_op', 'python', 'cuda_runtime', 'cuda_driver')").fetchone()[0]
    finally:
        con.close()
    assert n == len(host)
