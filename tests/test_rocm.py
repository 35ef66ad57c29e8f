"""ROCm's SQLite profiles (readers/rocm.py): rocprofv3's rocpd database, rocmProfileData's .rpd and
rocprof v1's results.db, on the real files of the wild corpus (tests/wild/manifest.json; skipped
where absent). What test_wild checks per file (counts, busy union, kernel and RCCL time against
sqlite3) is not repeated here; here: detection by content, what each table holds, and the bad-input
promise on damaged copies derived at test time (one line naming the file, exit 3, nothing written).
"""
from __future__ import annotations

import csv
import gzip
import re
import shutil
import sqlite3
from pathlib import Path

import pytest
from conftest import WILD_MANIFEST, connect, run_cli, wild_file

import traceflow
from traceflow.readers.detect import detect


def _entry(fmt: str, n: int = 0) -> dict:
    return [e for e in WILD_MANIFEST if e.get("shape", {}).get("format") == fmt][n]


def _plain(tmp_path: Path, e: dict, name: str) -> Path:
    """A writable, uncompressed copy of the manifest entry's file."""
    src = wild_file(e)
    dst = tmp_path / name
    if src.read_bytes()[:2] == b"\x1f\x8b":
        with gzip.open(src) as f, open(dst, "wb") as out:
            shutil.copyfileobj(f, out)
    else:
        shutil.copyfile(src, dst)
    return dst


FORMATS = ["rocpd-sqlite", "rpd-sqlite", "rocprof-sqlite"]  # the SQLite ones; rocprofv3 CSV below


@pytest.mark.parametrize("fmt", FORMATS)
def test_detected_by_tables_not_by_name(fmt, tmp_path):
    """The same bytes under a name that says nothing (and under an nsys-like .sqlite name) are read
    as the format their tables say."""
    f = _plain(tmp_path, _entry(fmt), "trace.sqlite")
    assert detect(str(f)) == fmt
    g = tmp_path / "noname"
    shutil.copyfile(f, g)
    assert detect(str(g)) == fmt


def test_rocprof_csv_detected_by_its_header(tmp_path):
    f = tmp_path / "whatever.txt"
    shutil.copyfile(wild_file(_entry("rocprof-csv")), f)
    assert detect(str(f)) == "rocprof-csv"


def test_rocpd_tables(tmp_path):
    """A rocpd database: kernels with their HIP launch call (by the shared stack id), the device
    as HIP numbers it, the GPU's product name; HIP calls as runtime calls; times as recorded."""
    e = _entry("rocpd-sqlite")
    path = wild_file(e)
    traceflow.ingest([str(path)], str(tmp_path / "j.duckdb"))
    db = connect(tmp_path / "j.duckdb")
    raw = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    n, lo = raw.execute("select count(*), min(start) from rocpd_kernel_dispatch").fetchone()
    launches = raw.execute("""select count(*) from rocpd_kernel_dispatch k join rocpd_event e on e.id = k.event_id
                              join rocpd_region r on r.event_id in (select id from rocpd_event where stack_id = e.stack_id)
                              join rocpd_string s on s.id = r.name_id where s.string like 'hip%Launch%'""").fetchone()[0]
    got = db.execute("""select count(*), min(start_ns), count(api_name) filter (where api_name like 'hip%Launch%')
                        from gpu_ops where kind = 'kernel'""").fetchone()
    assert got == (n, lo, launches) and launches > 0
    fmt, dev = db.execute("select source_format, device_name from traces").fetchone()
    product = raw.execute("select distinct product_name from rocpd_info_agent where type = 'GPU'").fetchall()
    assert fmt == "rocpd-sqlite" and dev in {p for p, in product}


def test_rpd_torch_ops_from_roctx(tmp_path):
    """rpd's roctx ranges that are PyTorch ops (aten::...) are CPU ops; every kernel charged to one
    was launched inside it, on its thread (the launch found in rocpd_api_ops)."""
    e = next(x for x in WILD_MANIFEST if x["file"].endswith("mytrace.rpd.gz"))
    path = wild_file(e)
    traceflow.ingest([str(path)], str(tmp_path / "j.duckdb"))
    db = connect(tmp_path / "j.duckdb")
    rows = db.execute("""select h.name, h.tid, h.start_ns, h.end_ns, g.api_start_ns, g.api_end_ns, g.launch_tid
                         from gpu_ops g join host_ops h on h.op_id = g.cpu_op_id""").fetchall()
    assert rows and all(re.fullmatch(r"[A-Za-z_]\w*::[\w.:]+", n) for n, *_ in rows)
    assert all(t == lt and a <= s and e2 <= b for _, t, a, b, s, e2, lt in rows)
    left = db.execute("select count(*) from ranges where name like '%::%'").fetchone()[0]
    raw = sqlite3.connect(_plain(tmp_path, e, "plain.rpd"))
    marked = raw.execute("""select count(*) from rocpd_api a join rocpd_string n on n.id = a.apiName_id
                            join rocpd_string s on s.id = a.args_id
                            where n.string = 'UserMarker' and s.string like '%::%'""").fetchone()[0]
    ops = db.execute("select count(*) from host_ops where kind = 'cpu_op'").fetchone()[0]
    assert left == 0 and ops == marked > 0


def _truncate(p: Path, table: str, col: str, required: str):
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 3])


def _edit(sql):
    """An edit of the file with sqlite3 (its views dropped first: they would name what is removed)."""
    def apply(p: Path, table: str, col: str, required: str):
        c = sqlite3.connect(p)
        for (v,) in c.execute("select name from sqlite_master where type = 'view'").fetchall():
            c.execute(f'drop view "{v}"')
        c.execute(sql.format(table=_table(c, table), col=col, required=_table(c, required)))
        c.commit()
        c.close()
    return apply


def _table(c, family: str) -> str:
    """The table holding `family` (a rocpd guid table, or the table itself)."""
    names = [r[0] for r in c.execute("select name from sqlite_master where type = 'table'")]
    return next(n for n in sorted(names) if n == family or n.startswith(family + "_0"))


# per format: the table of its GPU work, its time column, and a table it cannot do without
GPU_TABLE = {"rocpd-sqlite": ("rocpd_kernel_dispatch", "start", "rocpd_string"),
             "rpd-sqlite": ("rocpd_op", "start", "rocpd_string"),
             "rocprof-sqlite": ("KERN", "BeginNs", "KERN")}
# the file damaged: the format's first in the manifest; for rocprof v1 its second, a --timestamp one
# (the first, --hip-trace's, keeps its copies when its kernels go: a file that is still whole)
DAMAGED = {"rocpd-sqlite": 0, "rpd-sqlite": 0, "rocprof-sqlite": 1}
DAMAGE = {
    "truncated": (_truncate, ("not a readable SQLite file", "damaged")),
    "no table": (_edit('drop table "{required}"'), ("has no ",)),
    "no column": (_edit('alter table "{table}" drop column "{col}"'), ("lacks column", "has no timed")),
    "text time": (_edit("update \"{table}\" set \"{col}\" = 'soon'"), ("not an integer",)),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
@pytest.mark.parametrize("fmt", FORMATS)
def test_damaged_rocm_files_one_line_exit_3(fmt, damage, tmp_path):
    """A truncated file, a required table or column gone, text in a time column: one line naming the
    file, exit 3, no database written."""
    f = _plain(tmp_path, _entry(fmt, DAMAGED[fmt]), "rank0.db")
    edit, needles = DAMAGE[damage]
    edit(f, *GPU_TABLE[fmt])
    out = tmp_path / "j.duckdb"
    r = run_cli("ingest", f, "-o", out)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 3 and len(lines) == 1 and str(f) in lines[0], (r.returncode, r.stderr)
    assert any(n in lines[0] for n in needles), lines[0]
    assert "Traceback" not in r.stderr and not out.exists()


def test_truncated_gzip_rpd(tmp_path):
    """An .rpd.gz cut short: one line naming it, exit 3."""
    e = next(x for x in WILD_MANIFEST if x["file"].endswith(".rpd.gz"))
    f = tmp_path / "trace.rpd.gz"
    data = wild_file(e).read_bytes()
    f.write_bytes(data[: len(data) // 2])
    r = run_cli("ingest", f, "-o", tmp_path / "j.duckdb")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 3 and len(lines) == 1 and str(f) in lines[0], r.stderr
    assert not (tmp_path / "j.duckdb").exists()


# --- rocprofv3 CSV -------------------------------------------------------------------------------

def _csv_copy(tmp_path: Path, n: int = 1) -> Path:
    f = tmp_path / "4242_kernel_trace.csv"
    shutil.copyfile(wild_file(_entry("rocprof-csv", n)), f)
    return f


def _rewrite(f: Path, edit):
    rows = list(csv.reader(open(f, newline="")))
    rows = edit(rows)
    with open(f, "w", newline="") as out:
        csv.writer(out).writerows(rows)


def _drop_col(rows, name="Kernel_Name"):
    i = rows[0].index(name)
    return [r[:i] + r[i + 1:] for r in rows if r]


def _text_time(rows):
    i = rows[0].index("Start_Timestamp")
    return [rows[0]] + [r[:i] + ["soon"] + r[i + 1:] for r in rows[1:] if r]


CSV_DAMAGE = {
    "truncated": (lambda f: f.write_bytes(f.read_bytes()[: f.stat().st_size * 2 // 3]), ("truncated", "lacks column")),
    "no column": (lambda f: _rewrite(f, _drop_col), ("lacks column(s) Kernel_Name",)),
    "text time": (lambda f: _rewrite(f, _text_time), ("not an integer",)),
}


@pytest.mark.parametrize("damage", sorted(CSV_DAMAGE))
def test_damaged_rocprof_csv_one_line_exit_3(damage, tmp_path):
    """A kernel trace cut mid-row, without its Kernel_Name column, or with text for times: one line
    naming the file, exit 3, nothing written. (The header keeps its quotes when rewritten: csv writes
    them only where needed, so the file is still recognised by its columns, not by its quoting.)"""
    f = _csv_copy(tmp_path)
    edit, needles = CSV_DAMAGE[damage]
    edit(f)
    out = tmp_path / "j.duckdb"
    r = run_cli("ingest", f, "-o", out)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 3 and len(lines) == 1 and str(f) in lines[0], (r.returncode, r.stderr)
    assert any(n in lines[0] for n in needles), lines[0]
    assert not out.exists()


def test_csv_run_read_together_and_a_part_alone_refused(tmp_path):
    """A kernel trace takes the API trace beside it (same prefix): its rows are the run's host calls.
    Given alone while the kernel trace is beside it, the API trace is refused, naming the kernel trace.
    (The API file is rocprofiler-sdk's documented HIP runtime trace sample, put beside a kernel trace
    of another run: this checks what is read together, not the links.)"""
    kernels = _csv_copy(tmp_path)
    hip = tmp_path / "4242_hip_api_trace.csv"
    shutil.copyfile(wild_file(next(e for e in WILD_MANIFEST if e["file"].endswith("hip_runtime_trace.csv"))), hip)
    n_calls = sum(1 for r in csv.DictReader(open(hip)) if r["Domain"].startswith("HIP"))
    traceflow.ingest([str(kernels)], str(tmp_path / "j.duckdb"))
    db = connect(tmp_path / "j.duckdb")
    assert db.execute("select count(*), any_value(pid) from host_ops where kind = 'cuda_runtime'").fetchone() == (n_calls, 4242)
    r = run_cli("ingest", hip, "-o", tmp_path / "k.duckdb")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 3 and len(lines) == 1 and str(kernels) in lines[0], r.stderr


def test_merged_rocpd_database_gives_one_trace_per_process(tmp_path):
    """A merged rocpd database (the guid tables of several processes in one file, as `rocpd merge`
    writes them) is split into one trace per process, each with the rows of its own guid. Derived
    here from two real single-process databases."""
    from traceflow.readers.worker import read_file
    a, b = (wild_file(e) for e in [_entry("rocpd-sqlite", 0), _entry("rocpd-sqlite", 1)])
    merged = tmp_path / "merged.db"
    shutil.copyfile(a, merged)
    c = sqlite3.connect(merged)
    c.execute("attach database ? as other", (f"file:{b}?mode=ro",))
    for (name, sql) in c.execute("select name, sql from other.sqlite_master where type = 'table' and name like 'rocpd_%'").fetchall():
        c.execute(sql)
        c.execute(f'insert into main."{name}" select * from other."{name}"')
    c.commit()
    counts = []
    for f in (a, b):
        raw = sqlite3.connect(f"file:{f}?mode=ro", uri=True)
        counts.append(raw.execute("select count(*) from rocpd_kernel_dispatch").fetchone()[0])
    out = tmp_path / "sink"
    out.mkdir()
    traces = read_file(str(merged), str(out), 0)
    assert len(traces) == 2 and all(t.n_processes == 2 for t in traces)
    assert sorted(t.counts["gpu_ops"] for t in traces) == sorted(counts)
    assert len({t.pid for t in traces}) == 2 or len({t.hostname for t in traces}) == 2
    assert all((out / f"{t.key}.gpu_ops.arrow").exists() for t in traces)


@pytest.mark.parametrize("fmt", [*FORMATS, "rocprof-csv"])
def test_postmortem_on_each_rocm_format(fmt, tmp_path):
    """`traceflow postmortem` on a real file of each format: exit 0, its three outputs, a verdict that
    names what these traces cannot give (no CPU ops or no launch calls, no steps) and no traceback."""
    f = wild_file(_entry(fmt))
    out = tmp_path / "pm"
    r = run_cli("postmortem", f, "-o", out)
    assert r.returncode == 0, r.stderr
    assert {p.name for p in out.iterdir()} >= {"report.html", "job.perfetto-trace", "job.duckdb"}
    assert "Not computable" in r.stdout and "no step annotation" in r.stdout, r.stdout
    assert "Traceback" not in r.stderr and "monotonic clock" in r.stderr


def test_rocpd_rank_from_the_recorded_environment(tmp_path):
    """rocprofv3 records each process's environment: a launcher's RANK / WORLD_SIZE there is the
    trace's rank (the real file's environment, with torchrun's two variables added)."""
    f = _plain(tmp_path, _entry("rocpd-sqlite"), "trace.db")
    c = sqlite3.connect(f)
    t = _table(c, "rocpd_info_process")
    c.execute(f"""update "{t}" set environment = json_set(environment, '$.RANK', '3', '$.WORLD_SIZE', '8')""")
    c.commit()
    c.close()
    traceflow.ingest([str(f)], str(tmp_path / "j.duckdb"))
    db = connect(tmp_path / "j.duckdb")
    assert db.execute("select rank, world_size, rank_source from traces").fetchone() == (3, 8, "environment (RANK)")


def test_a_folder_gives_its_rocm_traces(tmp_path):
    """A folder stands for its ROCm traces: a rocpd .db (not another SQLite .db beside it), an .rpd
    and a CSV run's kernel trace (not the API trace read with it)."""
    from traceflow.pipeline import expand
    shutil.copyfile(wild_file(_entry("rocpd-sqlite")), tmp_path / "28_results.db")
    shutil.copyfile(wild_file(_entry("rpd-sqlite")), tmp_path / "run.rpd")
    shutil.copyfile(wild_file(_entry("rocprof-csv")), tmp_path / "7_kernel_trace.csv")
    shutil.copyfile(wild_file(next(e for e in WILD_MANIFEST if e["expect"] == "part")), tmp_path / "7_hip_api_trace.csv")
    other = sqlite3.connect(tmp_path / "notes.db")
    other.execute("create table notes (t text)")
    other.commit()
    other.close()
    assert [Path(p).name for p in expand([str(tmp_path)])] == ["28_results.db", "7_kernel_trace.csv", "run.rpd"]


@pytest.mark.parametrize("job", ["decode", "prefill"])
def test_real_csv_run_kernels_link_to_their_hip_calls(job, tmp_path):
    """A real rocprofv3 CSV run (llama.cpp on an AMD GPU, jimw567/rocprof-unified-viewer: the kernel
    trace and the run's HIP API trace, rows as rocprofv3 wrote them, the project keeping a subset): each
    kernel's launch call is the HIP call the raw files pair with it by Correlation_Id (name, start, end,
    thread); a kernel whose call was not kept has none."""
    entry = next(e for e in WILD_MANIFEST if e["file"] == f"rocprof-unified-viewer/{job}_kernel_trace.csv")
    kernels = wild_file(entry)
    hip_file = wild_file(next(e for e in WILD_MANIFEST if e["file"] == f"rocprof-unified-viewer/{job}_hip_api_trace.csv"))
    hip = {int(r["Correlation_Id"]): (r["Function"], int(r["Start_Timestamp"]), int(r["End_Timestamp"]), int(r["Thread_Id"]))
           for r in csv.DictReader(open(hip_file, newline=""))}
    want = sorted((int(r["Start_Timestamp"]), int(r["End_Timestamp"]), int(r["Correlation_Id"]),
                   *(hip.get(int(r["Correlation_Id"])) or (None,) * 4))
                  for r in csv.DictReader(open(kernels, newline="")))
    traceflow.ingest([str(kernels)], str(tmp_path / "j.duckdb"))
    got = connect(tmp_path / "j.duckdb").execute(
        "select start_ns, end_ns, correlation_id, api_name, api_start_ns, api_end_ns, launch_tid from gpu_ops "
        "where kind = 'kernel' order by all").fetchall()
    assert got == want
    assert sum(w[3] is not None for w in want) > 0


def test_csv_memory_copy_trace_read_beside_a_kernel_trace(tmp_path):
    """rocprofiler-sdk's documented memory copy trace (two copies), put beside a kernel trace of another
    run: each row is a memcpy GPU op with its times and its direction in CUPTI's words, from the raw
    CSV (the reading together is what is checked; the files are not of one run). Its header starts
    Kind,Direction: until this real file was tried, every copy trace was refused as not rocprofv3's."""
    kernels = _csv_copy(tmp_path)
    copies = tmp_path / "4242_memory_copy_trace.csv"
    shutil.copyfile(wild_file(next(e for e in WILD_MANIFEST if e["file"].endswith("/memory_copy_trace.csv"))), copies)
    words = {"HOST_TO_DEVICE": "HtoD", "DEVICE_TO_HOST": "DtoH", "DEVICE_TO_DEVICE": "DtoD", "HOST_TO_HOST": "HtoH"}
    want = sorted((int(r["Start_Timestamp"]), int(r["End_Timestamp"]), words[r["Direction"].removeprefix("MEMORY_COPY_")])
                  for r in csv.DictReader(open(copies, newline="")))
    assert detect(str(copies)) == "rocprof-csv"  # by its header (Kind,Direction,...), which was once refused
    traceflow.ingest([str(kernels)], str(tmp_path / "j.duckdb"))
    db = connect(tmp_path / "j.duckdb")
    got = db.execute("select start_ns, end_ns, copy_kind from gpu_ops where kind = 'memcpy' order by all").fetchall()
    assert got == want and len(want) == 2
    assert db.execute("select count(*) from gpu_ops where kind = 'kernel'").fetchone()[0] == \
        sum(1 for _ in csv.DictReader(open(kernels, newline="")))
