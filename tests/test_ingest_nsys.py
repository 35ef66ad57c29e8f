"""Issue 2: Nsight Systems SQLite exports into one DuckDB database."""
from __future__ import annotations

import os
import re
import sqlite3
import stat
import sys
from pathlib import Path

import pytest
from conftest import connect, fixture_files, needs_shared, run_cli, truth

NSYS_FIXTURES = ["h100/nsys/ddp4_sync_stall", "h100/nsys/ddp4_straggler", "h100/nsys/graphs",
                 "public/pipit-perlmutter/saxpy-mpi-cuda_nsys_perlmutter0.sqlite", "public/pipit-perlmutter/perlmutter-cloverleaf-cuda.sqlite", "public/nsys-ai", "public/nvidia-fuser"]

pytestmark = needs_shared


def source_counts(path: str) -> dict:
    """Counts per process taken straight from the SQLite file with Python's sqlite3."""
    c = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    tables = {r[0] for r in c.execute("select name from sqlite_master where type='table'")}

    def per_pid(sql):
        return dict(c.execute(sql).fetchall())
    out = {"kernel": per_pid("select globalPid, count(*) from CUPTI_ACTIVITY_KIND_KERNEL group by 1")}
    out["memcpy"] = per_pid("select globalPid, count(*) from CUPTI_ACTIVITY_KIND_MEMCPY group by 1") if "CUPTI_ACTIVITY_KIND_MEMCPY" in tables else {}
    out["memset"] = per_pid("select globalPid, count(*) from CUPTI_ACTIVITY_KIND_MEMSET group by 1") if "CUPTI_ACTIVITY_KIND_MEMSET" in tables else {}
    host = {}
    if "CUPTI_ACTIVITY_KIND_RUNTIME" in tables:
        # a call per thread and correlation id and name (less its `_vNNNN` suffix): nsys 2022.2 writes some
        # calls twice, `cudaMalloc` inside `cudaMalloc_v3020` (pipit saxpy: 95 rows, 57 calls)
        names = dict(c.execute("select id, value from StringIds")) if "StringIds" in tables else {}
        seen = set()
        for gtid, k, n in c.execute("select globalTid, correlationId, nameId from CUPTI_ACTIVITY_KIND_RUNTIME"):
            key = (gtid, k, re.sub(r"_v\d+$", "", str(names.get(n, n))))
            if k and key in seen:
                continue
            seen.add(key)
            gpid = (gtid >> 24) << 24
            host[gpid] = host.get(gpid, 0) + 1
    if "OSRT_API" in tables:
        for gtid, n in c.execute("select globalTid, count(*) from OSRT_API group by 1"):
            gpid = (gtid >> 24) << 24
            host[gpid] = host.get(gpid, 0) + n
    out["host"] = host
    rng = {}
    if "NVTX_EVENTS" in tables:
        # PyTorch's emit_nvtx op ranges ("aten::mm, seq = 3, op_id = 7") are CPU ops: host_ops, not ranges
        names = dict(c.execute("select id, value from StringIds"))
        text_id = "textId" if "textId" in {r[1] for r in c.execute("pragma table_info(NVTX_EVENTS)")} else "NULL"
        op = re.compile(r"^[^,]+, (seq|op_id|sizes) = ")
        for gtid, text, tid in c.execute(f"select globalTid, text, {text_id} from NVTX_EVENTS "
                                         "where eventType in (59, 60) and end is not null"):
            gpid = (gtid >> 24) << 24
            into = host if op.match(text if text is not None else names.get(tid) or "") else rng
            into[gpid] = into.get(gpid, 0) + 1
    out["ranges"] = rng
    return out


@pytest.mark.parametrize("rel", NSYS_FIXTURES)
def test_row_counts_match_source(ingested, rel):
    db = connect(ingested(rel))
    for path in fixture_files(rel):
        src = source_counts(path)
        traces = db.execute("select trace_id, pid from traces where source_path = ?", [os.path.abspath(path)]).fetchall()
        assert traces, f"{path} produced no trace"
        for trace_id, pid in traces:
            gpid = next(g for g in set(src["kernel"]) | set(src["host"]) if (g >> 24) & 0xFFFFFF == pid)
            for kind in ("kernel", "memcpy", "memset"):
                got = db.execute("select count(*) from gpu_ops where trace_id = ? and kind = ?", [trace_id, kind]).fetchone()[0]
                assert got == src[kind].get(gpid, 0), (path, kind)
            got = db.execute("select count(*) from host_ops where trace_id = ?", [trace_id]).fetchone()[0]
            assert got == src["host"].get(gpid, 0), (path, "host_ops")
            got = db.execute("select count(*) from ranges where trace_id = ?", [trace_id]).fetchone()[0]
            assert got == src["ranges"].get(gpid, 0), (path, "ranges")


def test_compressed_exports_read_like_the_plain_file(tmp_path):
    """rank*.sqlite.gz and .sqlite.xz are inflated (bounded) to a scratch file: the same rows as the plain
    export, and the trace is hashed and named by the compressed file the user gave."""
    import gzip
    import lzma
    src = fixture_files("h100/nsys/graphs")[0]
    raw = Path(src).read_bytes()
    counts = {}
    for name, data in (("rank0.sqlite", raw), ("rank0.sqlite.gz", gzip.compress(raw)), ("rank0.sqlite.xz", lzma.compress(raw))):
        path = tmp_path / name
        path.write_bytes(data)
        db = tmp_path / f"{name}.duckdb"
        r = run_cli("ingest", str(path), "-o", str(db))
        assert r.returncode == 0, r.stderr
        with connect(db) as con:
            counts[name] = con.execute("""select (select count(*) from gpu_ops), (select count(*) from host_ops),
                                          (select count(*) from ranges), (select list(source_path) from traces)""").fetchone()
        assert counts[name][3] == [str(path)]
        assert counts[name][:3] == counts["rank0.sqlite"][:3] and counts[name][0] > 0


def test_files_of_different_jobs_are_refused(tmp_path):
    r = run_cli("ingest", *fixture_files("public/pipit-perlmutter"), "-o", tmp_path / "x.duckdb")
    assert r.returncode == 3 and "different jobs" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "x.duckdb").exists()


def _raw_windows_ns(kineto: str, nsys: str) -> tuple[tuple[int, int], tuple[int, int]]:
    """Each file's GPU window in Unix ns, read with json/sqlite3: Kineto base + ts, nsys epoch + start."""
    import gzip
    import json
    k = json.loads(gzip.open(kineto).read())
    base = int(k.get("baseTimeNanoseconds", 0))
    ev = [e for e in k["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    kw = (base + int(min(e["ts"] for e in ev) * 1000), base + int(max((e["ts"] + e["dur"]) for e in ev) * 1000))
    c = sqlite3.connect(f"file:{nsys}?mode=ro", uri=True)
    epoch = c.execute("select utcEpochNs from TARGET_INFO_SESSION_START_TIME").fetchone()[0]
    lo, hi = c.execute("select min(start), max(end) from CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
    return kw, (epoch + lo, epoch + hi)


def test_kineto_of_one_run_and_nsys_of_another_are_refused(tmp_path):
    """Issue 41 item 5: the shared ddp4_sync_stall job was recorded twice, once per profiler: Kineto
    files of one run and nsys files of the next have the same world size and start seconds apart, and
    were read as one job (median step 12,902.6 ms). Their GPU windows do not overlap: one line, exit 3."""
    kineto = fixture_files("h100/kineto/ddp4_sync_stall")[:2]
    nsys = fixture_files("h100/nsys/ddp4_sync_stall")[2:]
    kw, nw = _raw_windows_ns(kineto[0], nsys[0])
    assert kw[1] < nw[0] and nw[0] - kw[1] < 60 * 10**9  # disjoint, yet under the old 60 s rule
    out = tmp_path / "x.duckdb"
    out.write_bytes(b"mine")
    r = run_cli("ingest", *kineto, *nsys, "-o", out, "--force")
    assert r.returncode == 3 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "different jobs or runs" in r.stderr and "do not overlap" in r.stderr and any(n in r.stderr for n in nsys)
    assert out.read_bytes() == b"mine" and "Traceback" not in r.stderr
    # the files of one run stay one job
    r = run_cli("ingest", *kineto, "-o", tmp_path / "one.duckdb")
    assert r.returncode == 0, r.stderr


def test_every_schema_version_is_read(ingested):
    versions = set()
    for rel in NSYS_FIXTURES:
        db = connect(ingested(rel))
        versions |= {r[0] for r in db.execute("select profiler_version from traces").fetchall()}
    joined = " ".join(versions)
    for v in ("2022.2", "2024.5", "2024.6", "2025.3", "2026.2"):
        assert f"nsys {v}" in joined, (v, versions)


def test_two_processes_in_one_file_are_two_ranks(ingested):
    db = connect(ingested("public/nsys-ai"))
    rows = db.execute("select rank, pid, rank_source from traces order by rank").fetchall()
    assert [r[0] for r in rows] == [0, 1]
    assert len({r[1] for r in rows}) == 2
    assert {r[2] for r in rows} == {"device"}  # each on a GPU of its own (tests/test_ranks.py)
    devices = db.execute("select rank, list(distinct device) from gpu_ops group by rank order by rank").fetchall()
    assert devices[0][1] != devices[1][1]
    assert db.execute("select count(*) from gpu_ops where collective = 'SendRecv' and category = 'communication'").fetchone()[0] > 0


def test_ddp4_straggler_ranks_nccl_steps_collectives(ingested):
    db = connect(ingested("h100/nsys/ddp4_straggler"))
    assert [r[0] for r in db.execute("select rank from traces order by rank").fetchall()] == [0, 1, 2, 3]
    nccl = db.execute("select distinct category, collective from gpu_ops where name ilike 'nccl%'").fetchall()
    assert {c for c, _ in nccl} == {"communication"}
    assert {k for _, k in nccl} <= {"AllReduce", "Broadcast", "AllGather"} and "AllReduce" in {k for _, k in nccl}
    for rank in range(4):
        steps = [r[0] for r in db.execute("select step from steps where rank = ? order by step", [rank]).fetchall()]
        assert steps == [0, 1, 2, 3, 4, 5]
    # Every (comm, step, seq) of steps 1-5 exists on all four ranks with one op and one size.
    bad = db.execute("""
        select comm, step, seq, count(distinct rank) n, count(distinct op) ops, count(distinct bytes) sizes
        from collectives where step between 1 and 5 group by all
        having n <> 4 or ops <> 1 or sizes > 1""").fetchall()
    assert bad == []
    assert db.execute("select count(*) from collectives where step between 1 and 5").fetchone()[0] >= 4 * 5


def test_truth_stall_lies_in_rank3_step4(ingested):
    rel = "h100/nsys/ddp4_sync_stall"
    db = connect(ingested(rel))
    stall = next(t for t in truth(rel, 3) if t["step"] == 4)
    start, end = db.execute("select start_ns, end_ns from steps where rank = 3 and step = 4").fetchone()
    assert start - 1_000_000 <= stall["start_unix_ns"] <= end + 1_000_000
    assert stall["start_unix_ns"] + stall["dur_ns"] <= end + 1_000_000
    # and the OS-runtime sleep that made it is on the ingested timeline at the same moment
    sleep = db.execute("""select start_ns, end_ns - start_ns from host_ops where rank = 3 and name = 'clock_nanosleep'
                          and end_ns - start_ns > 30e6 order by abs(start_ns - ?) limit 1""", [stall["start_unix_ns"]]).fetchone()
    assert abs(sleep[0] - stall["start_unix_ns"]) < 1_000_000 and abs(sleep[1] - stall["dur_ns"]) < 2_000_000


def test_names_are_resolved_and_memcpy_labelled(ingested):
    db = connect(ingested("h100/nsys/graphs"))
    assert db.execute("select count(*) from gpu_ops where name is null").fetchone()[0] == 0
    kinds = {r[0] for r in db.execute("select distinct copy_kind from gpu_ops where kind = 'memcpy'").fetchall()}
    assert kinds and kinds <= {"HtoD", "DtoH", "DtoD", "HtoH", "PtoP", "Unknown"}
    assert db.execute("select count(*) from host_ops where name like '%\\_v____' escape '\\'").fetchone()[0] == 0
    assert db.execute("select count(*) from gpu_ops where graph_id is not null").fetchone()[0] > 0


def test_cli_sql_and_query_list(ingested, tmp_path):
    db = ingested("h100/nsys/graphs")
    r = run_cli("sql", db, "select rank, kind, count(*) n from gpu_ops group by all order by all", "--format", "csv")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == "rank,kind,n" and len(r.stdout.splitlines()) >= 3
    r = run_cli("query", db, "--list")
    assert r.returncode == 0 and "idle-gaps" in r.stdout and "critical-path" in r.stdout
    for cmd in ("ingest", "query", "sql", "report", "annotate", "postmortem", "recipe"):
        h = run_cli(cmd, "--help")
        assert h.returncode == 0 and "Example" in h.stdout, cmd


def test_python_api(ingested):
    import polars as pl

    import traceflow
    db = ingested("h100/nsys/graphs")
    df = traceflow.query(db, "kernels", rank=0)
    assert isinstance(df, pl.DataFrame) and df.height > 0 and set(df["rank"].to_list()) == {0}
    con = traceflow.connect(db)
    assert con.execute("select count(*) from traces").fetchone()[0] == 1


def test_duckdb_shell_sees_the_tables(ingested):
    import subprocess
    shell = Path(sys.executable).parent / "duckdb"
    if not shell.exists():
        pytest.skip("duckdb shell (duckdb-cli) not installed in this environment")
    r = subprocess.run([str(shell), "-readonly", ingested("h100/nsys/graphs"), "-csv", "-c",
                        "select count(*) from gpu_ops; select count(*) from launches"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert int(r.stdout.split()[1]) > 0


# --- rank assignment -----------------------------------------------------------------------

def test_rank_from_file_order_warns_and_pattern_overrides(tmp_path):
    src = fixture_files("h100/nsys/ddp4_straggler")[:2]
    plain = []
    for name, s in zip(("b.sqlite", "a.sqlite"), src):
        os.symlink(s, tmp_path / name)
        plain.append(tmp_path / name)
    r = run_cli("ingest", *plain, "-o", tmp_path / "a.duckdb")
    assert r.returncode == 0, r.stderr
    assert "file order" in r.stderr
    db = connect(tmp_path / "a.duckdb")
    assert db.execute("select list(rank order by source_path) from traces").fetchone()[0] == [1, 0]
    links = []
    for i, s in enumerate(src):
        p = tmp_path / f"node{7 - i}-gpu.sqlite"
        os.symlink(s, p)
        links.append(p)
    r = run_cli("ingest", *links, "-o", tmp_path / "b.duckdb", "--rank-pattern", r"node(\d+)")
    assert r.returncode == 0, r.stderr
    db = connect(tmp_path / "b.duckdb")
    assert sorted(x[0] for x in db.execute("select rank from traces").fetchall()) == [6, 7]


def test_two_files_claiming_one_rank_is_an_error(tmp_path):
    a = fixture_files("h100/nsys/ddp4_straggler")[0]
    b = tmp_path / "copy" / "rank0.sqlite"
    b.parent.mkdir()
    b.write_bytes(Path(fixture_files("h100/nsys/ddp4_straggler")[1]).read_bytes())
    r = run_cli("ingest", a, b, "-o", tmp_path / "x.duckdb")
    assert r.returncode == 3
    assert "rank 0" in r.stderr and "rank0.sqlite" in r.stderr and len(r.stderr.strip().splitlines()) == 1


# --- .nsys-rep and recipes through a subprocess ------------------------------------------------

STAND_IN = """#!{py}
# A stand-in for `nsys`: follows its command-line contract on real files.
import shutil, sys, pathlib, sqlite3
args = sys.argv[1:]
if args[:1] == ["export"]:
    out = pathlib.Path(args[args.index("--output") + 1])
    # the stand-in .nsys-rep holds the path of the SQLite export it stands for
    shutil.copyfile(pathlib.Path(args[-1]).read_text().splitlines()[1], out)
elif args[:1] == ["recipe"]:
    import pyarrow as pa, pyarrow.parquet as pq
    out = pathlib.Path(args[args.index("--output") + 1]); out.mkdir(parents=True)
    inputs = args[args.index("--input") + 1:]
    names, totals = [], []
    for f in inputs:
        c = sqlite3.connect(f)
        for n, t in c.execute("select s.value, sum(k.end - k.start) from CUPTI_ACTIVITY_KIND_KERNEL k join StringIds s on s.id = k.shortName group by 1"):
            names.append(n); totals.append(t)
    pq.write_table(pa.table({{"Name": names, "Total Time (ns)": totals}}), out / "{name}.parquet")
else:
    sys.exit(2)
"""


def _stand_in(tmp_path, recipe="cuda_gpu_kern_sum"):
    exe = tmp_path / "bin" / "nsys"
    exe.parent.mkdir(exist_ok=True)
    exe.write_text(STAND_IN.format(py=sys.executable, name=recipe))
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return exe


def test_nsys_rep_without_nsys_exits_3(tmp_path):
    rep = tmp_path / "rank0.nsys-rep"
    rep.write_bytes(b"\x00not really a report")
    r = run_cli("ingest", rep, "-o", tmp_path / "x.duckdb", env={"PATH": "/usr/bin:/bin"})
    assert r.returncode == 3
    assert "rank0.nsys-rep" in r.stderr and "nsys export --type sqlite" in r.stderr
    assert "Traceback" not in r.stderr


def test_nsys_rep_exported_through_nsys(tmp_path):
    exe = _stand_in(tmp_path)
    rep = tmp_path / "rank0.nsys-rep"
    rep.write_text("NSYS-REP stand-in\n" + fixture_files("h100/nsys/graphs")[0])
    r = run_cli("ingest", rep, "-o", tmp_path / "x.duckdb", "--nsys", exe, env={"TRACEFLOW_CACHE": str(tmp_path / "cache")})
    assert r.returncode == 0, r.stderr
    db = connect(tmp_path / "x.duckdb")
    assert db.execute("select count(*) from gpu_ops").fetchone()[0] == source_total(fixture_files("h100/nsys/graphs")[0])
    assert list((tmp_path / "cache").glob("rank0-*.sqlite"))


def source_total(path):
    c = sqlite3.connect(path)
    return sum(c.execute(f"select count(*) from {t}").fetchone()[0] for t in
               ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"))


def test_recipe_loads_parquet_outputs(tmp_path):
    exe = _stand_in(tmp_path)
    files = fixture_files("h100/nsys/graphs")
    r = run_cli("recipe", "cuda_gpu_kern_sum", *files, "-o", tmp_path / "j.duckdb", "--nsys", exe,
                env={"TRACEFLOW_CACHE": str(tmp_path / "cache")})
    assert r.returncode == 0, r.stderr
    db = connect(tmp_path / "j.duckdb")
    n, total = db.execute('select count(*), sum("Total Time (ns)") from recipe_cuda_gpu_kern_sum_cuda_gpu_kern_sum').fetchone()
    c = sqlite3.connect(files[0])
    assert total == c.execute("select sum(end - start) from CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]


def test_recipe_without_nsys_exits_3(tmp_path):
    r = run_cli("recipe", "cuda_gpu_kern_sum", fixture_files("h100/nsys/graphs")[0], "-o", tmp_path / "j.duckdb",
                env={"PATH": "/usr/bin:/bin"})
    assert r.returncode == 3 and "nsys" in r.stderr and "Traceback" not in r.stderr


def test_unified_memory_migrations_are_not_copies(tmp_path):
    """Issue 41: unified-memory page migrations read as copies (copy-bound, "pin the buffer"). nsys
    labels them CUDA_MEMCPY_KIND_UVM_* in copyKind. Derived from pipit's real saxpy export (which holds
    pageable HtoD and DtoH copies): its DtoH rows relabelled UVM DtoH, as a managed-memory run's
    migrations are recorded. They load as kind um_migration (as many as sqlite3 counts), the HtoD copies
    stay memcpy, and no copy cause, sync row or pageable advice comes from the migrations."""
    import shutil
    src = fixture_files("public/pipit-perlmutter/saxpy-mpi-cuda_nsys_perlmutter0.sqlite")[0]
    f = tmp_path / "rank0.sqlite"
    shutil.copy(src, f)
    c = sqlite3.connect(f)
    has_enum = c.execute("SELECT count(*) FROM sqlite_master WHERE name = 'ENUM_CUDA_MEMCPY_OPER'").fetchone()[0]
    uvm = c.execute("SELECT id FROM ENUM_CUDA_MEMCPY_OPER WHERE name = 'CUDA_MEMCPY_KIND_UVM_DTOH'").fetchone()[0] if has_enum else 12
    n = c.execute("UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET copyKind = ? WHERE copyKind = 2", [uvm]).rowcount
    htod = c.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind = 1").fetchone()[0]
    c.commit()
    c.close()
    assert n > 0 and htod > 0
    r = run_cli("ingest", f, "-o", tmp_path / "x.duckdb")
    assert r.returncode == 0, r.stderr
    db = connect(tmp_path / "x.duckdb")
    kinds = dict(db.execute("SELECT kind, count(*) FROM gpu_ops WHERE kind IN ('memcpy', 'um_migration') GROUP BY kind").fetchall())
    assert kinds == {"memcpy": htod, "um_migration": n}
    assert db.execute("SELECT count(*) FROM gpu_ops WHERE kind = 'memcpy' AND copy_kind = 'DtoH'").fetchone()[0] == 0
    assert db.execute("SELECT count(*) FROM step_causes WHERE cause LIKE 'DtoH%'").fetchone()[0] == 0
    assert db.execute("SELECT count(*) FROM sync WHERE gpu_op LIKE '%migration%'").fetchone()[0] == 0
    causes = {c for (c,) in db.execute("SELECT DISTINCT cause FROM step_causes WHERE class = 'memory copies'").fetchall()}
    assert causes <= {"HtoD pageable", "um_migration", "memset"}, causes
