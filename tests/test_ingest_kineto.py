"""Issue 3: PyTorch profiler (Kineto) traces into the same database."""
from __future__ import annotations

import collections
import gzip
import json
import os
import re
import subprocess
import sys

import pytest
from conftest import BUNDLED, FIX, connect, fixture_files, loose_decoding, needs_shared, read_kineto, run_cli

KINETO_FIXTURES = ["h100/kineto/ddp4_sync_stall", "h100/kineto/ddp4_straggler", "h100/kineto/graphs",
                   "h100/kineto/launch_bound", "public/param-dlrm8", "public/hta-2rank"]
GPU = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
HOST = {"cuda_runtime": "cuda_runtime", "cuda_driver": "cuda_driver", "cpu_op": "cpu_op", "python_function": "python"}


def json_counts(path):
    """Independent counts with Python's json module."""
    d = json.load(gzip.open(path) if path.endswith(".gz") else open(path))
    gpu, host, ranges = collections.Counter(), collections.Counter(), 0
    for e in d["traceEvents"]:
        if e.get("ph") != "X":
            continue
        c = e.get("cat")
        if c in GPU:
            gpu[GPU[c]] += 1
        elif c in HOST:
            host[HOST[c]] += 1
        elif c in ("user_annotation", "gpu_user_annotation"):
            ranges += 1
    return gpu, host, ranges, d.get("distributedInfo", {}).get("rank")


@needs_shared
@pytest.mark.parametrize("rel", KINETO_FIXTURES)
def test_counts_match_json(ingested, rel):
    db = connect(ingested(rel))
    for path in fixture_files(rel):
        gpu, host, ranges, _ = json_counts(path)
        (tid,) = db.execute("select trace_id from traces where source_path = ?", [os.path.abspath(path)]).fetchone()
        got = dict(db.execute("select kind, count(*) from gpu_ops where trace_id = ? group by kind", [tid]).fetchall())
        assert got == dict(gpu), path
        got = dict(db.execute("select kind, count(*) from host_ops where trace_id = ? group by kind", [tid]).fetchall())
        assert got == dict(host), path
        assert db.execute("select count(*) from ranges where trace_id = ?", [tid]).fetchone()[0] == ranges


@needs_shared
def test_times_are_exact_ns(ingested):
    """base + ts*1000 in integer ns, with no float rounding: checked against decimal arithmetic."""
    from decimal import Decimal
    rel = "h100/kineto/graphs"
    path = fixture_files(rel)[0]
    text = gzip.open(path).read().decode()
    base = int(re.search(r'"baseTimeNanoseconds":\s*(\d+)', text).group(1))
    raw = re.findall(r'"ph": "X", "cat": "kernel", "name": "(?:[^"\\]|\\.)*", "pid": [^,]+, "tid": [^,]+,\s*"ts": ([0-9.]+)', text)
    assert len(raw) == 599
    want = sorted(base + int(Decimal(x) * 1000) for x in raw)
    db = connect(ingested(rel))
    got = [r[0] for r in db.execute("select start_ns from gpu_ops where kind = 'kernel' order by start_ns").fetchall()]
    assert got == want


def short_name(demangled: str) -> str:
    s = demangled.replace("(anonymous namespace)", "anon")
    s = re.sub(r"^void\s+", "", s)
    depth, out = 0, []
    for ch in s:  # drop template arguments, stop at the parameter list
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            break
        elif depth == 0:
            out.append(ch)
    return "".join(out).split("::")[-1].strip()


@needs_shared
def test_nsys_and_kineto_recordings_agree(ingested):
    kt = connect(ingested("h100/kineto/ddp4_sync_stall"))
    ns = connect(ingested("h100/nsys/ddp4_sync_stall"))
    for db in (kt, ns):
        assert [r[0] for r in db.execute("select rank from traces order by rank").fetchall()] == [0, 1, 2, 3]
    ops = lambda db: {r[0] for r in db.execute("select distinct op from collectives").fetchall()}
    # nsys saw the whole run (a startup Broadcast too); Kineto steps 3-5 only.
    assert ops(kt) <= ops(ns) and "AllReduce" in ops(kt)
    assert {r[0] for r in ns.execute("select distinct op from collectives where step between 3 and 5").fetchall()} == ops(kt)
    # nsys writes `<unnamed>`, Kineto `(anonymous namespace)`: compare short names (nsys's own
    # shortName column; for Kineto the function name cut out of the demangled name, here in Python).
    q = "select rank, step, name, short_name, category from gpu_ops where kind = 'kernel' and step between 3 and 5"
    a = collections.Counter((r[0], r[1], short_name(r[2]), r[4]) for r in kt.execute(q).fetchall())
    b = collections.Counter((r[0], r[1], r[3], r[4]) for r in ns.execute(q).fetchall())
    for rank in range(4):
        for step in (3, 4, 5):
            ka = {k[2]: v for k, v in a.items() if k[:2] == (rank, step)}
            kb = {k[2]: v for k, v in b.items() if k[:2] == (rank, step)}
            assert ka == kb, (rank, step, set(ka.items()) ^ set(kb.items()))
            nccl = sum(v for k, v in a.items() if k[:2] == (rank, step) and k[3] == "communication")
            comp = sum(v for k, v in a.items() if k[:2] == (rank, step) and k[3] == "compute")
            assert (comp, nccl) == (912, 7), (rank, step)


@needs_shared
def test_param_dlrm8_eight_ranks_matched(ingested):
    db = connect(ingested("public/param-dlrm8"))
    assert db.execute("select list(rank order by rank), min(world_size), max(world_size) from traces").fetchone() == (list(range(8)), 8, 8)
    assert [r[0] for r in db.execute("select distinct step from steps").fetchall()] == [10]
    per_rank = db.execute("select rank, count(*) from gpu_ops where category = 'communication' group by rank").fetchall()
    assert {n for _, n in per_rank} == {8}
    assert {r[0] for r in db.execute("select distinct collective from gpu_ops where category = 'communication'").fetchall()} == {"AllReduce", "SendRecv"}
    groups = db.execute("select comm, step, seq, count(distinct rank), count(distinct op) from collectives group by all").fetchall()
    assert len(groups) == 8 and all(n == 8 and ops == 1 for *_, n, ops in groups)


@needs_shared
def test_hta_sample_two_ranks(ingested):
    db = connect(ingested("public/hta-2rank"))
    assert db.execute("select list(rank order by rank), max(world_size) from traces").fetchone() == ([0, 1], 128)
    assert db.execute("select count(distinct step) from steps").fetchone()[0] == 2


def test_bundled_fixture_rank_from_distributed_info(tmp_path):
    files = sorted(str(p) for p in (BUNDLED / "ddp4_sync_stall").glob("rank-*.json.gz"))
    r = run_cli("ingest", *files, "-o", tmp_path / "k.duckdb")
    assert r.returncode == 0, r.stderr
    db = connect(tmp_path / "k.duckdb")
    assert db.execute("select list(rank_source) from traces").fetchone()[0] == ["distributedInfo"] * 4


def test_trace_without_distributed_info_takes_rank_from_name(tmp_path):
    src = BUNDLED / "ddp4_sync_stall" / "rank-2.pt.trace.json.gz"
    d = json.load(gzip.open(src))
    d.pop("distributedInfo")
    out = tmp_path / "worker_r5.json"
    out.write_text(json.dumps(d))
    r = run_cli("ingest", out, "-o", tmp_path / "k.duckdb")
    assert r.returncode == 0, r.stderr
    db = connect(tmp_path / "k.duckdb")
    assert db.execute("select rank, rank_source from traces").fetchone() == (5, "file name")


def test_mixed_formats_in_one_ingest(tmp_path):
    pytest.importorskip("duckdb")
    # two recordings of the same job, 25 s apart: rank 0 from nsys, rank 1 from Kineto. As recorded they
    # are two runs (refused: their windows do not overlap); with the Kineto clock moved into the nsys
    # window (as one run recorded by both profilers would be), one job of two formats.
    import sqlite3
    nsys = fixture_files("h100/nsys/ddp4_sync_stall")[0]
    kt = str(BUNDLED / "ddp4_sync_stall" / "rank-1.pt.trace.json.gz")
    r = run_cli("ingest", nsys, kt, "-o", tmp_path / "m.duckdb")
    assert r.returncode == 3 and "different jobs or runs" in r.stderr, r.stderr
    c = sqlite3.connect(f"file:{nsys}?mode=ro", uri=True)
    mid = c.execute("select utcEpochNs from TARGET_INFO_SESSION_START_TIME").fetchone()[0] + \
        c.execute("select (min(start) + max(end)) / 2 from CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    k = json.loads(gzip.open(kt).read())
    k["baseTimeNanoseconds"] = mid - int(min(e["ts"] for e in k["traceEvents"] if "ts" in e) * 1000)
    kt = tmp_path / "rank-1.pt.trace.json"
    kt.write_text(json.dumps(k))
    r = run_cli("ingest", nsys, kt, "-o", tmp_path / "m.duckdb")
    assert r.returncode == 0, r.stderr
    db = connect(tmp_path / "m.duckdb")
    assert sorted(db.execute("select rank, source_format from traces").fetchall()) == [(0, "nsys-sqlite"), (1, "kineto-json")]


def test_small_batches_give_the_same_rows(tmp_path, monkeypatch):
    """Streaming: cutting the JSON into many batches must not change a single row."""
    import traceflow
    from traceflow.readers import kineto
    src = str(BUNDLED / "ddp4_sync_stall" / "rank-0.pt.trace.json.gz")
    traceflow.ingest([src], str(tmp_path / "a.duckdb"), jobs=1)
    monkeypatch.setattr(kineto, "BATCH_BYTES", 50_000)
    traceflow.ingest([src], str(tmp_path / "b.duckdb"), jobs=1)
    q = "select kind, name, start_ns, end_ns, correlation_id from gpu_ops order by all"
    a, b = connect(tmp_path / "a.duckdb"), connect(tmp_path / "b.duckdb")
    assert a.execute(q).fetchall() == b.execute(q).fetchall()
    q = "select count(*), sum(start_ns), sum(end_ns) from host_ops"
    assert a.execute(q).fetchall() == b.execute(q).fetchall()


@needs_shared
@pytest.mark.parametrize("rel", KINETO_FIXTURES)
def test_fast_and_loose_paths_agree_on_real_traces(tmp_path, monkeypatch, rel):
    """Real traces take the fast path (strict types, columns built by C loops) in every batch, Kineto's
    "Spans" / "Traces" pids included, and it gives the same tables, bit for bit, as the loose path."""
    from traceflow.readers import kineto
    monkeypatch.setattr(kineto, "BATCH_BYTES", 200_000)
    batches = collections.Counter()
    for name in ("_strict_columns", "_loose_columns"):
        monkeypatch.setattr(kineto, name, lambda evs, f=getattr(kineto, name), name=name: (batches.update([name]), f(evs))[1])
    for i, src in enumerate(fixture_files(rel)[:2]):
        batches.clear()
        fast = read_kineto(src, tmp_path / f"fast{i}")
        assert batches["_strict_columns"] >= 1 and batches["_loose_columns"] == 0, (src, batches)
        with loose_decoding():
            loose = read_kineto(src, tmp_path / f"loose{i}")
        assert batches["_loose_columns"] >= 1
        assert fast[0] == loose[0]
        assert fast[1].keys() == loose[1].keys() and fast[1]["gpu_ops.arrow"].num_rows > 0
        for name in fast[1]:
            assert fast[1][name].equals(loose[1][name]), (src, name)


def test_cpu_only_trace_warns(tmp_path):
    src = BUNDLED / "ddp4_sync_stall" / "rank-0.pt.trace.json.gz"
    d = json.load(gzip.open(src))
    d["traceEvents"] = [e for e in d["traceEvents"] if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset")]
    out = tmp_path / "rank0.json"
    out.write_text(json.dumps(d))
    r = run_cli("ingest", out, "-o", tmp_path / "c.duckdb")
    assert r.returncode == 0, r.stderr
    assert "CPU-only" in r.stderr


TORCH_SCRIPT = """
import sys, torch, traceflow.torch
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
with traceflow.torch.profile(sys.argv[1], wait=1, warmup=1, active=3) as prof:
    for step in range(6):
        with torch.profiler.record_function(f"step {step}"):
            loss = model(torch.randn(32, 64)).sum()
            loss.backward(); opt.step(); opt.zero_grad()
        prof.step()
"""


def test_record_real_trace_with_torch_and_ingest(tmp_path):
    pytest.importorskip("torch")
    r = subprocess.run([sys.executable, "-c", TORCH_SCRIPT, str(tmp_path / "traces")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    files = list((tmp_path / "traces").glob("rank-0.pt.trace.json.gz"))
    assert files
    r = run_cli("ingest", tmp_path / "traces", "-o", tmp_path / "t.duckdb")
    assert r.returncode == 0, r.stderr
    assert "CPU-only" in r.stderr  # the CPU build records no GPU events
    db = connect(tmp_path / "t.duckdb")
    n_ops = db.execute("select count(*) from host_ops where kind = 'cpu_op' and name = 'aten::linear'").fetchone()[0]
    assert n_ops == 3 * 2  # 3 active steps, 2 Linear layers
    steps = [r[0] for r in db.execute("select step from steps order by step").fetchall()]
    assert steps == [2, 3, 4]


@pytest.mark.parametrize("size", [1, 4093, 1 << 20, 8 << 20, -1])
def test_gzip_inflate_matches_stdlib_at_any_read_size(tmp_path, size):
    """The reader inflates gzip with zlib itself (large GIL-free calls); every read size gives
    exactly the bytes Python's gzip module gives, also for several members and zero padding."""
    import hashlib

    from traceflow.readers.compressed import BoundedReader
    from traceflow.readers.stream import HashedFile, content_hash
    fixture = sorted(BUNDLED.glob("*/rank-0.pt.trace.json.gz"))[0]
    joined = tmp_path / "members.json.gz"
    joined.write_bytes(fixture.read_bytes() + gzip.compress(b" tail") + b"\0" * 64 + gzip.compress(b""))
    for path in (fixture, joined):
        raw = HashedFile(str(path))
        r = BoundedReader(str(path), "gzip", raw)
        parts = []
        while b := r.read(size if len(parts) < 5000 else -1):  # size 1: a few thousand reads, then the rest
            assert size < 0 or len(parts) >= 5000 or len(b) <= size
            parts.append(b)
        assert b"".join(parts) == gzip.decompress(path.read_bytes())
        assert raw.hexdigest() == content_hash(str(path)) == hashlib.blake2b(path.read_bytes(), digest_size=16).hexdigest()
        r.close()


def test_source_hash_is_the_files_blake2b(tmp_path):
    """Kineto files are hashed while they are read (on the read-ahead thread), others in a pass of their own:
    either way it must be the digest of the file's bytes, or re-ingest would not be idempotent."""
    import hashlib
    gz = sorted(str(p) for p in BUNDLED.glob("ddp4_sync_stall/rank-*.pt.trace.json.gz"))[:2]
    plain = tmp_path / "rank-0.pt.trace.json"
    plain.write_bytes(gzip.decompress(open(gz[0], "rb").read()))
    nsys = fixture_files("h100/nsys/ddp4_sync_stall")[:1] if FIX.exists() else []
    for files in (gz, [str(plain)], nsys):
        if not files:
            continue
        db = str(tmp_path / "t.duckdb")
        r = run_cli("ingest", *files, "-o", db)
        assert r.returncode == 0, r.stderr
        with connect(db) as con:
            got = dict(con.execute("SELECT DISTINCT source_path, source_hash FROM traces").fetchall())
        assert got == {os.path.abspath(f): hashlib.blake2b(open(f, "rb").read(), digest_size=16).hexdigest() for f in files}
