"""Issue 7: every bad input derived from the real fixtures gets exit 3 and one line naming the file,
or is read with a warning when still usable; never a traceback; an existing database is untouched."""
from __future__ import annotations

import gzip
import hashlib
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import BUNDLED, connect, fixture_files, needs_shared
from corpus import SHARED, cases

import traceflow
from traceflow.cli import main

CASES = cases()


@pytest.fixture(scope="module")
def existing_db(tmp_path_factory):
    d = tmp_path_factory.mktemp("existing")
    db = d / "job.duckdb"
    r = CliRunner().invoke(main, ["ingest", str(BUNDLED / "ddp4_sync_stall" / "rank-2.pt.trace.json.gz"), "-o", str(db)])
    assert r.exit_code == 0, r.output
    return db


def digest(p):
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.mark.parametrize("name,make,expected", CASES, ids=[c[0] for c in CASES])
def test_bad_input(name, make, expected, existing_db, tmp_path):
    db = tmp_path / "job.duckdb"
    shutil.copyfile(existing_db, db)
    before = digest(db)
    inputs = [str(p) for p in make(tmp_path)]
    r = CliRunner().invoke(main, ["ingest", *inputs, "-o", str(db)])
    assert r.exception is None or isinstance(r.exception, SystemExit), f"crashed: {r.exception!r}"
    assert "Traceback" not in r.output and "Traceback" not in r.stderr
    if expected == "error" or (expected == "either" and r.exit_code != 0):
        assert r.exit_code == 3, (r.exit_code, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("traceflow: error: "), r.stderr
        assert any(p in lines[0] for p in inputs), lines[0]
        assert digest(db) == before, "existing database changed"
    else:
        assert r.exit_code == 0, r.stderr
        assert digest(db) != before
    leftovers = [p.name for p in tmp_path.iterdir() if ".traceflow-tmp-" in p.name]
    assert leftovers == []


def test_corpus_size():
    """The fast subset still covers every kind of damage."""
    kinds = {"truncated", "flipped", "empty", "gzip", "backwards", "NaN", "nested", "bomb"}
    text = " ".join(c[0] for c in CASES)
    assert all(k in text for k in kinds), [k for k in kinds if k not in text]
    if not SHARED.is_dir():
        pytest.skip(f"nsys-derived cases need the real fixtures at {SHARED} (../shared is absent)")
    nsys_kinds = {"dropped", "renamed", "StringIds", "duplicate", "mixed"}
    assert all(k in text for k in nsys_kinds), [k for k in nsys_kinds if k not in text]
    assert len(CASES) >= 60


# --- issue 33: six figures that were wrong without a word, each on inputs derived from real traces -----

def _kineto(path) -> dict:
    return json.load(gzip.open(path))


def _write_gz(d: dict, dst: Path) -> str:
    with gzip.open(dst, "wt", compresslevel=1) as g:
        json.dump(d, g)
    return str(dst)


def _launches_inside(db) -> tuple[int, int]:
    """(GPU ops with a CPU op, of those the ones whose CPU op contains the launch call on its thread)."""
    return db.execute("""
        select count(*), count(*) filter (where h.tid = g.launch_tid and h.start_ns <= g.api_start_ns
                                          and h.end_ns >= g.api_end_ns)
        from gpu_ops g join host_ops h on h.op_id = g.cpu_op_id""").fetchone()


@needs_shared
def test_colliding_external_ids_are_not_used(tmp_path):
    """Every runtime call's External id replaced by its correlation id (what a public CNN benchmark and
    a replay tool's inputs hold): the ids then name unrelated CPU ops. The links are checked (the CPU
    op must contain the call, on its thread) and made by nesting instead: the same CPU op for every GPU
    op as on the untouched trace, and no warning of two clocks."""
    src = fixture_files("h100/kineto/launch_bound")[0]
    d = _kineto(src)
    for e in d["traceEvents"]:
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and isinstance(e.get("args"), dict) and "correlation" in e["args"]:
            e["args"]["External id"] = e["args"]["correlation"]
    bad = _write_gz(d, tmp_path / "rank0.json.gz")
    a, b = str(tmp_path / "a.duckdb"), str(tmp_path / "b.duckdb")
    traceflow.ingest([src], a)
    res = traceflow.ingest([bad], b)
    assert not any("no consistent offset" in w for w in res.warnings), res.warnings
    q = """select g.correlation_id, h.name, h.start_ns from gpu_ops g left join host_ops h on h.op_id = g.cpu_op_id
           order by g.correlation_id, g.start_ns"""
    ra, rb = connect(a).execute(q).fetchall(), connect(b).execute(q).fetchall()
    assert len(ra) == len(rb) and sum(r[1] is not None for r in ra) > 0.9 * len(ra)
    assert ra == rb
    n, inside = _launches_inside(connect(b))
    assert n == inside > 0


@needs_shared
def test_launches_without_external_ids_are_linked_by_nesting(tmp_path):
    """External ids removed from every event: GPU ops are linked to the innermost CPU op around their
    launch call on its thread (as HTA and TraceLens do), never to one that does not contain it."""
    src = fixture_files("h100/kineto/launch_bound")[0]
    d = _kineto(src)
    for e in d["traceEvents"]:
        if isinstance(e.get("args"), dict):
            e["args"].pop("External id", None)
    db_path = str(tmp_path / "n.duckdb")
    traceflow.ingest([_write_gz(d, tmp_path / "rank0.json.gz")], db_path)
    db = connect(db_path)
    total, = db.execute("select count(*) from gpu_ops where api_start_ns is not null").fetchone()
    n, inside = _launches_inside(db)
    assert n == inside and n > 0.9 * total, (n, inside, total)


def test_time_base_after_the_events(tmp_path):
    """baseTimeNanoseconds written after traceEvents (a trace re-serialised with its keys reordered,
    as public MI300 traces are) and a trace bigger than one read batch: every event gets the base, not
    only those of the last batch (half a public trace sat 56 years from the rest, and summing its
    launch latencies overflowed INT64)."""
    from traceflow.readers import kineto
    d = _kineto(BUNDLED / "ddp4_sync_stall" / "rank-0.pt.trace.json.gz")
    base = d.pop("baseTimeNanoseconds")
    events = d.pop("traceEvents")
    copies = max(2, 2 * kineto.BATCH_BYTES // len(json.dumps(events)) + 1)  # more than one batch
    span = max(e["ts"] + e.get("dur", 0) for e in events if "ts" in e) - min(e["ts"] for e in events if "ts" in e)
    grown = [dict(e, ts=e["ts"] + k * (span + 1000)) if "ts" in e else e for k in range(copies) for e in events]
    p = tmp_path / "rank0.json"
    p.write_text(json.dumps({**d, "traceEvents": grown, "baseTimeNanoseconds": base}))
    r = CliRunner().invoke(main, ["ingest", str(p), "-o", str(tmp_path / "t.duckdb")])
    assert r.exit_code == 0, r.stderr
    db = connect(tmp_path / "t.duckdb")
    lo, hi = db.execute("select min(start_ns), max(end_ns) from gpu_ops").fetchone()
    ts = [e["ts"] for e in grown if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    assert lo >= base + min(ts) * 1000 - 1 and hi - lo < copies * (span + 1000) * 1000 + 10**6
    assert db.execute("select max(start_ns - api_start_ns) from gpu_ops").fetchone()[0] < 10**10


@needs_shared
def test_short_capture_clock_skew(tmp_path):
    """One step of the 4-rank Kineto job (7 collectives: no sign test can reach p < 0.01), rank 3's clock
    moved by +20 ms: found from the magnitude against the spread and undone; the unshifted cut is left
    alone (bench/clock_short.py measures both rates over every window of the real jobs)."""
    files = fixture_files("h100/kineto/ddp4_sync_stall")
    out = {}
    for shift in (0, 20 * 10**6):
        paths = []
        for f in files:
            d = _kineto(f)
            cut = min(e["ts"] for e in d["traceEvents"] if e.get("name") == "ProfilerStep#4")
            kept = {e["args"]["correlation"] for e in d["traceEvents"] if e.get("cat") in ("cuda_runtime", "cuda_driver")
                    and e.get("ts", cut) < cut and "correlation" in e.get("args", {})}
            d["traceEvents"] = [e for e in d["traceEvents"] if e.get("ts") is None or (
                e["args"].get("correlation") in kept if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
                else e["ts"] < cut)]
            if d["distributedInfo"]["rank"] == 3:
                d["baseTimeNanoseconds"] += shift
            (tmp_path / str(shift)).mkdir(exist_ok=True)
            paths.append(_write_gz(d, tmp_path / str(shift) / Path(f).name))
        db = str(tmp_path / f"s{shift}.duckdb")
        traceflow.ingest(paths, db)
        c = connect(db)
        assert c.execute("select count(*) from collectives where rank = 0").fetchone()[0] < 8
        out[shift] = {r: (o, s) for r, o, s in c.execute("select rank, clock_offset_ns, clock_skew_ns from traces").fetchall()}
    assert all(o == 0 for o, _ in out[0].values()), out[0]
    moved = out[20 * 10**6]
    assert all(moved[r][0] == 0 for r in (0, 1, 2)), moved
    # the skew estimate moves by the shift (to within the ranks' natural offsets) and is undone
    assert abs((moved[3][1] - out[0][3][1]) - 20 * 10**6) < 10**6, out
    # applied: where its kernels take turns with the other ranks' again (gpu_sharing.fit_offset)
    assert abs(moved[3][0] + 20 * 10**6) <= 200_000, out


@needs_shared
def test_nsys_2021_gpu_table(tmp_path):
    """An nsys export whose TARGET_INFO_GPU names the device `deviceId` (2021) and lacks cuDevice: read,
    with its GPU's name, not refused as corrupt."""
    import sqlite3
    src = SHARED / "h100/nsys/graphs/rank0.sqlite"
    dst = tmp_path / "rank0.sqlite"
    shutil.copyfile(src, dst)
    c = sqlite3.connect(dst)
    c.executescript("ALTER TABLE TARGET_INFO_GPU DROP COLUMN cuDevice; ALTER TABLE TARGET_INFO_GPU RENAME COLUMN id TO deviceId;")
    c.close()
    r = CliRunner().invoke(main, ["ingest", str(dst), "-o", str(tmp_path / "n.duckdb")])
    assert r.exit_code == 0, r.stderr
    db = connect(tmp_path / "n.duckdb")
    raw = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
    assert db.execute("select count(*) from gpu_ops where kind = 'kernel'").fetchone()[0] == \
        raw.execute("select count(*) from CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    assert db.execute("select device_name from traces").fetchone()[0] == raw.execute("select name from TARGET_INFO_GPU").fetchone()[0]


@needs_shared
def test_nsys_kernel_table_without_process_ids(tmp_path):
    """GPU activity tables without globalPid (as a public tool's test exports have): one process, every op read."""
    import sqlite3
    src = SHARED / "h100/nsys/graphs/rank0.sqlite"
    dst = tmp_path / "rank0.sqlite"
    shutil.copyfile(src, dst)
    c = sqlite3.connect(dst)
    c.executescript("".join(f"ALTER TABLE {t} DROP COLUMN globalPid;" for t in
                            ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")))
    c.close()
    r = CliRunner().invoke(main, ["ingest", str(dst), "-o", str(tmp_path / "n.duckdb")])
    assert r.exit_code == 0, r.stderr
    raw = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
    n = sum(raw.execute(f"select count(*) from {t}").fetchone()[0] for t in
            ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"))
    db = connect(tmp_path / "n.duckdb")
    assert db.execute("select count(*) from gpu_ops").fetchone()[0] == n
    assert db.execute("select count(*) from gpu_ops where api_start_ns is not null").fetchone()[0] > 0.9 * n


def test_sql_timestamptz(tmp_path):
    """`traceflow sql DB "select to_timestamp(0)"`: DuckDB wants pytz (no dependency of ours) to build
    TIMESTAMPTZ values; they come through Arrow instead, in every format."""
    db = tmp_path / "t.duckdb"
    assert CliRunner().invoke(main, ["ingest", str(BUNDLED / "ddp4_sync_stall" / "rank-2.pt.trace.json.gz"), "-o", str(db)]).exit_code == 0
    for fmt in ("table", "json", "csv"):
        r = CliRunner().invoke(main, ["sql", str(db), "select to_timestamp(0) as t, [to_timestamp(1)] as l", "--format", fmt])
        assert r.exit_code == 0 and r.exception is None, (fmt, r.output, r.exception)
        assert "1970-01-01" in r.output
    r = CliRunner().invoke(main, ["sql", str(db), "select to_timestamp(0) as t", "--format", "json"])
    assert json.loads(r.output) == [{"t": "1970-01-01 00:00:00+00:00"}]


# a kernel name per row of derive/comm_kernels.sql (as the libraries name them), and ones that are not communication
COMM_NAMES = {
    "void dpsk::ep::internode::dispatch<false, 8, true, 8>(int4*, float*)": "AllToAll",
    "void deep_ep::intranode::combine<__nv_bfloat16, 8, 768>(int4*)": "AllToAll",
    "void deep_ep::internode_ll::dispatch<false, 3, 7168>(void*)": "AllToAll",
    "void nvshmemi_transfer_rma_kernel<(nvshmemi_op_t)0>(void*)": "",  # no collective in the name: NULL
    "void mscclpp::allreduce_allpair_kernel<float>(float*)": "AllReduce",
    "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*)": "AllReduce",
    "void quickreduce::allreduce_prototype_twoshot<quickreduce::CodecFP>(void*)": "AllReduce",
    "void tensorrt_llm::kernels::oneShotAllReduceKernel<__nv_bfloat16, 8>(tensorrt_llm::kernels::AllReduceParams)": "AllReduce",
    "void tensorrt_llm::kernels::moe_comm::moeA2ADispatchKernel<4>(void*)": "AllToAll",
    "void c10d::symmetric_memory::one_shot_all_reduce_kernel<float, 8>(float**)": "AllReduce",
    "rcclGenericKernel_AllGather": "AllGather",
}
NOT_COMM = ["void dpsk::ep::cuda::get_dispatch_layout<256, 32, 8>(long const*)", "moe_permute_kernel", "ampere_sgemm_128x64_nn"]


def test_communication_kernels_from_the_table(tmp_path):
    """Kernels of a real trace renamed as the communication libraries name theirs: each is
    communication, with its collective; DeepEP's layout kernel and others stay compute; the NCCL
    kernels are what they were; exposed communication grows by what the renamed kernels ran."""
    src = BUNDLED / "ddp4_sync_stall" / "rank-0.pt.trace.json.gz"
    d = _kineto(src)
    names = list(COMM_NAMES) + NOT_COMM
    renamed = {}
    ks = [e for e in d["traceEvents"] if e.get("cat") == "kernel" and not e["name"].lower().startswith("nccl")]
    for e, n in zip(ks[::max(1, len(ks) // (2 * len(names)))], names * 2):
        renamed.setdefault(n, []).append((e["ts"], e["dur"]))
        e["name"] = n
    a, b = str(tmp_path / "a.duckdb"), str(tmp_path / "b.duckdb")
    traceflow.ingest([str(src)], a)
    traceflow.ingest([_write_gz(d, tmp_path / "rank0.json.gz")], b)
    db = connect(b)
    got = dict(db.execute("select name, any_value(category || ':' || coalesce(collective, '')) from gpu_ops "
                          "where name in (select unnest(?)) group by name", [names]).fetchall())
    assert got == {**{n: f"communication:{op}" for n, op in COMM_NAMES.items()}, **{n: "compute:" for n in NOT_COMM}}
    q = "select count(*), sum(end_ns - start_ns) from gpu_ops where category = 'communication' and name ilike 'nccl%'"
    assert db.execute(q).fetchone() == connect(a).execute(q).fetchone()
    comm_b = db.execute("select sum(end_ns - start_ns) from gpu_ops where category = 'communication'").fetchone()[0]
    comm_a = connect(a).execute("select sum(end_ns - start_ns) from gpu_ops where category = 'communication'").fetchone()[0]
    added = sum(round(dur * 1000) for n in COMM_NAMES for _, dur in renamed.get(n, []))
    assert abs((comm_b - comm_a) - added) <= len(renamed) * 2


# --- issue 37: absurd input is dropped with a count, or refused; never a silent 53-day window -----

def _ingest_cli(paths, db):
    r = CliRunner().invoke(main, ["ingest", *map(str, paths), "-o", str(db)])
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert "Traceback" not in r.stderr
    return r


def _span_and_longest_window(db):
    c = connect(db)
    return c.execute("""select max(end_ns) - min(start_ns), (select max(end_ns - start_ns) from tf_internal.step_windows)
                        from gpu_ops""").fetchone()


@pytest.mark.parametrize("edit,dropped", [
    ("tiny ts", 2), ("a day late", 1), ("both", 3)])
def test_stray_kineto_kernels(tmp_path, edit, dropped):
    """Kernels with a tiny positive ts, or one a day late: dropped and counted; the rank spans its
    capture again and every figure is the one of the trace without them."""
    src = BUNDLED / "ddp4_sync_stall" / "rank-0.pt.trace.json.gz"
    d = _kineto(src)
    ks = [e for e in d["traceEvents"] if e.get("cat") == "kernel"]
    moved = []
    if edit in ("tiny ts", "both"):
        moved += ks[10:12]
        for e in ks[10:12]:
            e["ts"] = 1.5
    if edit in ("a day late", "both"):
        moved.append(ks[-1])
        ks[-1]["ts"] += 86400e6
    ref = _kineto(src)
    gone = {(e["args"].get("correlation"), e["name"]) for e in moved}
    ref["traceEvents"] = [e for e in ref["traceEvents"] if not (e.get("cat") == "kernel" and (e["args"].get("correlation"), e["name"]) in gone)]
    r = _ingest_cli([_write_gz(d, tmp_path / "rank0.json.gz")], tmp_path / "a.duckdb")
    assert r.exit_code == 0, r.stderr
    assert f"dropped {dropped} stray GPU ops" in r.stderr, r.stderr
    (tmp_path / "ref").mkdir()
    assert _ingest_cli([_write_gz(ref, tmp_path / "ref" / "rank0.json.gz")], tmp_path / "b.duckdb").exit_code == 0
    q = "select step, wall_ns, busy_ns, idle_ns, compute_ns, exposed_comm_ns from step_breakdown order by all"
    assert connect(tmp_path / "a.duckdb").execute(q).fetchall() == connect(tmp_path / "b.duckdb").execute(q).fetchall()
    span, longest = _span_and_longest_window(tmp_path / "a.duckdb")
    assert longest <= span < 60 * 10**9


def test_every_event_recorded_twice(tmp_path):
    """A trace whose events are all written twice (two flushes): the copies are dropped and counted;
    per-kernel counts and summed times are those of the trace itself."""
    src = BUNDLED / "ddp4_sync_stall" / "rank-0.pt.trace.json.gz"
    d = _kineto(src)
    n_gpu = sum(1 for e in d["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
    d["traceEvents"] = d["traceEvents"] + d["traceEvents"]
    r = _ingest_cli([_write_gz(d, tmp_path / "rank0.json.gz")], tmp_path / "a.duckdb")
    assert r.exit_code == 0 and f"dropped {n_gpu} gpu ops recorded twice" in r.stderr, r.stderr
    assert _ingest_cli([src], tmp_path / "b.duckdb").exit_code == 0
    for q in ("select name, count, total_ns from kernels order by all",
              "select step, wall_ns, busy_ns, compute_ns, exposed_comm_ns from step_breakdown order by all",
              "select count(*) from host_ops"):
        assert connect(tmp_path / "a.duckdb").execute(q).fetchall() == connect(tmp_path / "b.duckdb").execute(q).fetchall(), q


def test_wrong_values_in_kineto_fields_are_counted(tmp_path):
    """A kernel named by a number, a memcpy of -1 bytes, device -1, a non-numeric correlation and stream:
    each kept or made NULL as docs/bad-input.md says, with its count in the warnings."""
    d = _kineto(BUNDLED / "ddp4_sync_stall" / "rank-0.pt.trace.json.gz")
    ks = [e for e in d["traceEvents"] if e.get("cat") == "kernel"]
    ms = [e for e in d["traceEvents"] if e.get("cat") == "gpu_memcpy"]
    ks[0]["name"] = 42
    ks[1]["args"]["device"] = -1
    ks[2]["args"]["correlation"] = "abc"
    ks[3]["args"]["stream"] = "x"
    ks[4]["args"]["stream"] = "y"
    ms[0]["args"]["bytes"] = -1
    r = _ingest_cli([_write_gz(d, tmp_path / "rank0.json.gz")], tmp_path / "a.duckdb")
    assert r.exit_code == 0, r.stderr
    for text in ("1 GPU ops named by a non-string", "1 GPU ops with a negative device index (NULL)",
                 "1 GPU ops with a correlation id that is no whole number", "2 GPU ops with a stream that is no whole number",
                 "1 GPU ops with a negative byte count (NULL)"):
        assert text in r.stderr, (text, r.stderr)
    c = connect(tmp_path / "a.duckdb")
    assert c.execute("select count(*) from gpu_ops where name = '42'").fetchone()[0] == 1
    assert c.execute("select count(*) from gpu_ops where bytes < 0 or device < 0").fetchone()[0] == 0


@needs_shared
@pytest.mark.parametrize("edit,text", [
    ("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = start + 8640000000000000, \"end\" = \"end\" + 8640000000000000 "
     "WHERE rowid = 5", "dropped 1 stray GPU ops"),
    ("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET \"end\" = \"end\" + 8640000000000000 WHERE rowid = 5", "dropped 1 stray GPU ops"),
    ("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = start + 0.5 WHERE rowid % 100 = 0",
     "rows of CUPTI_ACTIVITY_KIND_KERNEL whose start or end is not a whole number"),
], ids=["100 days later", "lasting 100 days", "REAL in INTEGER"])
def test_absurd_nsys_times(tmp_path, edit, text):
    """nsys: a kernel 100 days after the others or lasting 100 days, REALs in the INTEGER start column:
    dropped and counted; the other kernels keep their exact ns."""
    import sqlite3
    src = SHARED / "h100/nsys/graphs/rank0.sqlite"
    dst = tmp_path / "rank0.sqlite"
    shutil.copyfile(src, dst)
    c = sqlite3.connect(dst)
    c.execute(edit)
    c.commit()
    c.close()
    r = _ingest_cli([dst], tmp_path / "a.duckdb")
    assert r.exit_code == 0 and text in r.stderr, r.stderr
    span, longest = _span_and_longest_window(tmp_path / "a.duckdb")
    assert longest <= span < 3600 * 10**9
    raw = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
    base = raw.execute("select utcEpochNs from TARGET_INFO_SESSION_START_TIME").fetchone()[0]
    kept = {r[0] for r in connect(tmp_path / "a.duckdb").execute("select start_ns from gpu_ops where kind = 'kernel'").fetchall()}
    orig = {base + r[0] for r in raw.execute("select start from CUPTI_ACTIVITY_KIND_KERNEL")}
    assert kept <= orig and len(orig - kept) >= 1


def test_invariant_violation_names_rank_and_invariant(tmp_path):
    """The checks run on a real database whose tables were then damaged (a step window made a day
    long, a row's identity broken): each raises the one-line InputError (exit 3) naming the rank's
    file, the rank and the invariant."""
    import duckdb

    from traceflow import invariants
    from traceflow.errors import InputError
    src = BUNDLED / "ddp4_sync_stall" / "rank-0.pt.trace.json.gz"
    db = tmp_path / "job.duckdb"
    assert _ingest_cli([src], db).exit_code == 0
    con = duckdb.connect(str(db))
    invariants.check(con)  # holds as written
    for damage, name in [
        ("UPDATE tf_internal.step_windows SET end_ns = end_ns + 86400 * 10::BIGINT ** 9 WHERE step = 4",
         "no step window longer than the capture"),
        ("UPDATE step_breakdown SET idle_ns = idle_ns + 1 WHERE step = 4", "busy + idle = wall")]:
        con.execute("BEGIN")
        con.execute(damage)
        with pytest.raises(InputError) as e:
            invariants.check(con)
        con.execute("ROLLBACK")
        assert e.value.exit_code == 3 and "\n" not in str(e.value)
        assert str(src) in str(e.value) and "rank 0" in str(e.value) and name in str(e.value), str(e.value)


@needs_shared
def test_cannot_answer(tmp_path):
    """CPU ops scattered so that no clock offset fits (derived from a real trace): launch dispatch is
    NULL for every launch, never 0, and cannot_answer says so for exactly those ops; a trace without
    step annotations says its per-step figures are for the whole trace."""
    src = fixture_files("h100/kineto/launch_bound")[0]
    d = _kineto(src)
    for i, e in enumerate(d["traceEvents"]):
        if e.get("cat") == "cpu_op" and "ts" in e:
            e["ts"] -= (i % 7) * 1e5
    db = str(tmp_path / "s.duckdb")
    traceflow.ingest([_write_gz(d, tmp_path / "rank0.json.gz")], db)
    c = connect(db)
    n, = c.execute("select count(*) from launch_overhead").fetchone()
    assert n > 0 and c.execute("select count(*) from launch_overhead where dispatch_ns is not null").fetchone()[0] == 0
    assert c.execute("select figure, reason, n_ops from cannot_answer where figure = 'launch dispatch'").fetchall() == \
        [("launch dispatch", "CPU ops on a clock the runtime calls do not share", n)]
    d = _kineto(src)
    d["traceEvents"] = [e for e in d["traceEvents"] if not str(e.get("name", "")).startswith("ProfilerStep")]
    (tmp_path / "nostep").mkdir()
    db2 = str(tmp_path / "n.duckdb")
    traceflow.ingest([_write_gz(d, tmp_path / "nostep" / "rank0.json.gz")], db2)
    assert connect(db2).execute("select count(*) from cannot_answer where figure = 'per-step figures'").fetchone()[0] == 1
    # and the untouched trace can answer everything
    full = str(tmp_path / "f.duckdb")
    traceflow.ingest([src], full)
    assert connect(full).execute("select count(*) from cannot_answer where figure <> 'launch latency'").fetchone()[0] == 0
