"""Issue 45's hostile round: what a hostile tester reproduced on the landed code, each held to
docs/bad-input.md's promise (one line, the right exit code, nothing lost, nothing left behind).

Inputs are derived at test time from real files: a database written by a real ingest of a bundled
trace, then tampered with; real traces and pickles re-packed. Every case runs the real command in a
subprocess (test_files_and_processes.Run) with a timeout, so a hang fails the test instead of the run.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import test_files_and_processes
from test_files_and_processes import assert_clean, assert_refused, snapshot

one_rank_db = test_files_and_processes.one_rank_db
sandbox = test_files_and_processes.sandbox


def _tamper(db: Path, *statements: str) -> None:
    import duckdb
    con = duckdb.connect(str(db))
    for s in statements:
        con.execute(s)
    con.close()


# --- 1. a database someone sends you is untrusted -------------------------------------------------

def test_a_macro_named_current_setting_does_not_undo_the_lock(sandbox):
    """`CREATE MACRO current_setting(x) AS true` made lock_down believe it was already applied: the
    view over /etc/passwd was then shown by `query` and `sql`. Refused at open, before any view runs."""
    run, trace, db = sandbox
    _tamper(db, "CREATE MACRO current_setting(x) AS true", "DROP TABLE idle_gaps",
            "CREATE VIEW idle_gaps AS SELECT content AS next_op FROM read_text('/etc/passwd')")
    before = snapshot(run.root)
    for cmd in (["query", db, "idle-gaps"], ["sql", db, "select * from idle_gaps"],
                ["report", db, "-o", run.root / "r.html"]):
        r = run(*cmd, timeout=120)
        assert_refused(r, 3, db.name, "macro named current_setting")
        assert "root:" not in r.stdout
    assert_clean(run, before, run.root)


@pytest.mark.parametrize("macro", ["CREATE MACRO round(x, y) AS 0", "CREATE MACRO enable_logging() AS 1",
                                   "CREATE MACRO greatest(a, b) AS TABLE SELECT 1"])
def test_a_macro_shadowing_a_builtin_is_refused(sandbox, macro):
    """Macros named like DuckDB's own functions ran in place of them in traceflow's SQL: internal errors."""
    run, trace, db = sandbox
    _tamper(db, macro)
    before = snapshot(run.root)
    name = macro.split()[2].split("(")[0]
    for cmd in (["query", db, "steps"], ["sql", db, "select 1"], ["report", db, "-o", run.root / "r.html"]):
        assert_refused(run(*cmd, timeout=120), 3, db.name, f"macro named {name}")
    assert_clean(run, before, run.root)


def test_a_macro_of_the_users_own_is_kept(sandbox):
    """A macro with a name of its own (a user's helper) shadows nothing: the database still opens."""
    run, trace, db = sandbox
    _tamper(db, "CREATE MACRO my_ms(ns) AS ns / 1e6")
    r = run("sql", db, "SELECT my_ms(2000000) AS ms", "--format", "csv", timeout=120)
    assert (r.returncode, r.stdout.split()) == (0, ["ms", "2.0"]), r.stderr


@pytest.mark.parametrize("view", [
    "SELECT range AS next_op FROM range(1000000000000)",
    "WITH RECURSIVE t(next_op) AS (SELECT 1 UNION ALL SELECT next_op + 1 FROM t) SELECT * FROM t",
    "SELECT x AS next_op FROM (SELECT 1) s, LATERAL generate_series(1, 1000000000000) g(x)",
    "SELECT a.name AS next_op FROM gpu_ops a, gpu_ops b, gpu_ops c",  # the job's own tables: ~10^12 rows
])
def test_a_view_without_a_bound_on_its_cost_is_refused(sandbox, view):
    """Views over range() or a recursive CTE made `query`, `report` and `sql` run until killed; so did
    a cross product of the job's own tables."""
    run, trace, db = sandbox
    _tamper(db, "DROP TABLE idle_gaps", f"CREATE VIEW idle_gaps AS {view}")
    before = snapshot(run.root)
    for cmd in (["query", db, "idle-gaps"], ["sql", db, "select count(*) from idle_gaps"],
                ["report", db, "-o", run.root / "r.html"]):
        t0 = time.monotonic()
        r = run(*cmd, timeout=120)
        assert_refused(r, 3, db.name, "its view idle_gaps reads")
        assert time.monotonic() - t0 < 60
    assert_clean(run, before, run.root)


# --- 2. read-only `sql` stays read-only inside EXPLAIN and PREPARE --------------------------------

def test_explain_analyze_and_prepare_never_write(sandbox):
    """`EXPLAIN ANALYZE COPY ...` and `PREPARE p AS COPY ...; EXECUTE p` were taken for reads by their
    outer kind and wrote into the folder the lock allows (a cluster job's shards, beside the database)."""
    run, trace, db = sandbox
    parts = run.root / f"{db.name}.parts-0"  # the one folder beside the database its connection may write in
    parts.mkdir()
    (parts / "0.gpu_ops.parquet").write_bytes(b"a shard")
    before = snapshot(run.root)
    for text in (f"EXPLAIN ANALYZE COPY (SELECT 1) TO '{parts}/0.gpu_ops.parquet'",
                 f"EXPLAIN (FORMAT json) COPY (SELECT 1) TO '{parts}/new.csv'",
                 f"PREPARE p AS COPY (SELECT 1) TO '{parts}/0.gpu_ops.parquet'; EXECUTE p",
                 f"SELECT 1; PREPARE \"q r\" AS COPY (SELECT 2) TO '{parts}/x.csv'; EXECUTE \"q r\"",
                 f"EXPLAIN /* a comment */ ANALYZE COPY (SELECT 1) TO '{parts}/y.csv'"):
        r = run("sql", db, text, timeout=120)
        assert_refused(r, 2)
        assert sorted(p.name for p in parts.iterdir()) == ["0.gpu_ops.parquet"], text
    assert_clean(run, before, run.root)
    r = run("sql", db, "PREPARE p AS SELECT count(*) AS n FROM traces; EXECUTE p", "--format", "csv", timeout=120)
    assert (r.returncode, r.stdout.split()) == (0, ["n", "1"]), r.stderr
    r = run("sql", db, "EXPLAIN ANALYZE SELECT count(*) FROM traces", timeout=120)
    assert r.returncode == 0, r.stderr


# --- 3. a write-ahead log beside the database, a writer beside the append -------------------------

def _leave_a_wal(db: Path) -> Path:
    """A program that adds a table and ends without closing the file: its write-ahead log stays."""
    code = ("import duckdb, os, sys\ncon = duckdb.connect(sys.argv[1])\ncon.execute(\"SET checkpoint_threshold = '1TB'\")\n"
            "con.execute('CREATE TABLE precious AS SELECT range AS i FROM range(1000)')\nos._exit(0)\n")
    subprocess.run([sys.executable, "-c", code, str(db)], check=True, timeout=60)
    wal = Path(f"{db}.wal")
    assert wal.stat().st_size > 0
    return wal


def test_a_left_over_wal_is_never_lost(sandbox):
    """Re-ingest or --append beside a left-over `job.duckdb.wal` replaced the database, then exit 3
    "not a readable DuckDB database": the database no longer opened and the log's table was lost."""
    import duckdb
    run, trace, db = sandbox
    wal = _leave_a_wal(db)
    before = snapshot(run.root)
    assert_refused(run("ingest", trace, "-o", db, timeout=300), 3, db.name, "job.duckdb.wal beside it holds writes")
    assert_clean(run, before, run.root)
    from test_files_and_processes import KINETO
    r = run("ingest", KINETO[1], "-o", db, "--append", timeout=300)
    assert r.returncode == 0, r.stderr
    assert not wal.exists()
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT count(*), sum(i) FROM precious").fetchone() == (1000, sum(range(1000)))
    assert con.execute("SELECT count(*) FROM traces").fetchone()[0] == 2
    con.close()
    r = run("query", db, "steps", timeout=120)
    assert r.returncode == 0, r.stderr


def test_a_writer_beside_an_append_is_kept_out(sandbox):
    """A table another process added while --append ran was lost with the replace (or the run ended
    in exit 3 after it). The database is held from the copy to the replace: the writer is refused by
    DuckDB's own lock, the append completes, and the file opens."""
    import duckdb
    from test_files_and_processes import KINETO, wait_for_phase
    run, trace, db = sandbox
    p = run.popen("ingest", KINETO[1], "-o", db, "--append")
    try:
        assert wait_for_phase(p, "reading", run, db), p.communicate()
        code = ("import duckdb, sys\ntry:\n    duckdb.connect(sys.argv[1]).execute('CREATE TABLE mine AS SELECT 1')\n"
                "    print('wrote')\nexcept duckdb.Error as e:\n    print('refused', 'lock' in str(e).lower())\n")
        w = subprocess.run([sys.executable, "-c", code, str(db)], capture_output=True, text=True, timeout=60)
        out, err = p.communicate(timeout=300)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, err
    assert w.stdout.split() == ["refused", "True"], w.stdout + w.stderr
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT count(*) FROM traces").fetchone()[0] == 2
    con.close()


# --- 4. bombs: every expansion bounded by the input's size ---------------------------------------

def _real_frames(n: int) -> list[dict]:
    """Frames made of the real CPU op names of a bundled trace (a Flight Recorder frame's shape)."""
    import gzip
    import json

    from test_files_and_processes import KINETO
    events = json.loads(gzip.open(KINETO[0]).read())["traceEvents"]
    names = sorted({e["name"] for e in events if e.get("cat") == "cpu_op"})
    return [{"filename": "train.py", "line": i, "name": names[i % len(names)]} for i in range(n)]


def test_a_pickle_of_shared_references_is_refused_in_bounded_time(tmp_path):
    """205 KB of a Flight Recorder dump held 2,000 entries sharing one list of 100 k frame references:
    minutes of walking. An allocator snapshot of shared block lists: 25 M rows, out of memory."""
    import pickle

    from test_files_and_processes import Run
    run = Run(tmp_path)
    frame = _real_frames(1)[0]
    shared = [frame] * 100_000
    fr = {"version": "2.2", "pg_config": {}, "entries": [
        {"record_id": i, "seq_id": i, "profiling_name": "nccl:all_reduce", "frames": shared, "state": "completed"}
        for i in range(2_000)]}
    (tmp_path / "nccl_trace_rank_0").write_bytes(pickle.dumps(fr, protocol=4))
    blocks = [{"address": 1 << 20, "size": 512, "requested_size": 512, "state": "active_allocated", "frames": []}] * 5_000
    snap = {"segments": [{"device": 0, "address": 1 << 30, "total_size": 1 << 21, "blocks": blocks}] * 5_000,
            "device_traces": []}
    (tmp_path / "rank0_memory_snapshot.pickle").write_bytes(pickle.dumps(snap, protocol=4))
    for name in ("nccl_trace_rank_0", "rank0_memory_snapshot.pickle"):
        f = tmp_path / name
        assert f.stat().st_size < 300_000
        t0 = time.monotonic()
        r = run("ingest", f, "-o", tmp_path / "job.duckdb", timeout=120)
        assert_refused(r, 3, name, "refusing a likely bomb")
        assert time.monotonic() - t0 < 60
    assert not (tmp_path / "job.duckdb").exists()


def test_a_bytearray_of_a_count_is_refused():
    """An 84-byte pickle asked for bytearray(10**9): a gigabyte allocated by the restricted unpickler."""
    import pickle

    from traceflow.errors import InputError
    from traceflow.readers import safe_pickle

    class Big:
        def __reduce__(self):
            return bytearray, (10**9,)
    data = pickle.dumps(Big(), protocol=3)
    assert len(data) < 100
    with pytest.raises(InputError, match="a bytearray made from a count"):
        safe_pickle.loads(data, "big.pkl")
    assert safe_pickle.loads(pickle.dumps(bytearray(b"bytes"), protocol=3), "ok.pkl") == bytearray(b"bytes")


def test_a_gzip_with_a_sparse_zero_tail_stops_early(sandbox):
    """A .json.gz followed by 5 GB of (sparse) zero bytes was read to its end."""
    run, trace, db = sandbox
    bomb = run.root / "rank-0.json.gz"
    bomb.write_bytes(trace.read_bytes())
    with open(bomb, "r+b") as f:
        f.truncate(5 << 30)
    t0 = time.monotonic()
    r = run("ingest", bomb, "-o", run.root / "new.duckdb", timeout=120)
    assert_refused(r, 3, bomb.name, "zero bytes after the gzip data")
    assert time.monotonic() - t0 < 60
    assert not (run.root / "new.duckdb").exists()
    bomb.unlink()


@pytest.mark.parametrize("rowid", [2**33, 2**62])
def test_an_nsys_rowid_jump_reads_by_rows(sandbox, rowid):
    """A kernel's rowid set to 2**33 in a small export made 34,000 read ranges (52 s); 2**62 ran out
    of memory. The ranges follow the row count; every kernel is read once."""
    import shutil
    import sqlite3

    from test_files_and_processes import NSYS_SMALL
    if not NSYS_SMALL.exists():
        pytest.skip(f"nsys fixture not found at {NSYS_SMALL} (../shared is absent)")
    run, trace, db = sandbox
    sq = run.root / "rank0.sqlite"
    shutil.copyfile(NSYS_SMALL, sq)
    con = sqlite3.connect(sq)
    n = con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET rowid = ? WHERE rowid = (SELECT max(rowid) FROM "
                "CUPTI_ACTIVITY_KIND_KERNEL)", [rowid])
    con.commit()
    from traceflow.readers.nsys import ROWS_PER_TASK, _row_ranges
    assert len(_row_ranges(con.cursor(), "CUPTI_ACTIVITY_KIND_KERNEL")) <= 1 + n // ROWS_PER_TASK
    con.close()
    t0 = time.monotonic()
    r = run("ingest", sq, "-o", run.root / "n.duckdb", timeout=240)
    assert r.returncode == 0, r.stderr
    assert time.monotonic() - t0 < 120
    import duckdb
    con = duckdb.connect(str(run.root / "n.duckdb"), read_only=True)
    got = con.execute("SELECT count(*) FROM gpu_ops WHERE category IN ('compute', 'communication')").fetchone()[0]
    con.close()
    assert got == n


# --- 5. signals and remote ends --------------------------------------------------------------------

def _cpu_seconds(pid: int) -> float:
    import os
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_a_signal_stops_a_query_that_never_ends(sandbox, sig):
    """While DuckDB ran a recursive CTE, Ctrl-C and SIGTERM were lost in most tries: one core at
    100 % until kill -9. The signal now interrupts the query: one line, exit 130 / 143, nothing left.
    (A view in a database someone sent is refused at open; a temp view made and read in one `sql`
    text is not yet covered: there DuckDB's close() waits for the query, docs/bad-input.md.)"""
    import signal

    from test_files_and_processes import wait_for_phase
    run, trace, db = sandbox
    text = "WITH RECURSIVE t(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM t) SELECT count(*) FROM t"
    before = snapshot(run.root)
    p = run.popen("sql", db, text)
    try:
        assert wait_for_phase(p, "starting", run, run.root), p.communicate()
        end = time.monotonic() + 120
        while p.poll() is None and _cpu_seconds(p.pid) < 4 and time.monotonic() < end:
            time.sleep(0.05)  # in the query by then: start-up and the open take ~1.5 s of CPU
        assert p.poll() is None, p.communicate()
        p.send_signal(getattr(signal, sig))
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode == {"SIGINT": 130, "SIGTERM": 143}[sig], err
    assert err.strip() == {"SIGINT": "traceflow: interrupted", "SIGTERM": "traceflow: terminated"}[sig]
    assert_clean(run, before, run.root)


def _server(answer: bytes | None):
    """A TCP server on 127.0.0.1 that accepts and then says nothing (`answer` None) or sends
    `answer`; stopped by the test."""
    import socket
    import threading
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    srv.settimeout(0.2)
    stop = threading.Event()
    held = []

    def serve():
        while not stop.is_set():
            try:
                c, _ = srv.accept()
            except OSError:
                continue
            held.append(c)
            if answer is not None:
                c.sendall(answer)
    t = threading.Thread(target=serve, daemon=True)
    t.start()

    def close():
        stop.set()
        t.join(5)
        for c in held:
            c.close()
        srv.close()
    return f"tcp://127.0.0.1:{srv.getsockname()[1]}", close


@pytest.mark.parametrize("answer", [None, b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"])
def test_a_cluster_address_that_is_no_scheduler(sandbox, answer):
    """`--cluster tcp://HOST:PORT` to a port that accepts and says nothing waited forever with no
    output; one answering non-Dask bytes ended in "internal error (MemoryError: Unable to allocate
    3.07 EiB)". One line, exit 3, in bounded time, nothing left."""
    pytest.importorskip("distributed")
    run, trace, db = sandbox
    address, close = _server(answer)
    before = snapshot(run.root)
    try:
        t0 = time.monotonic()
        r = run("ingest", trace, "-o", run.root / "c.duckdb", "--cluster", address, timeout=120)
        took = time.monotonic() - t0
    finally:
        close()
    assert_refused(r, 3, address, "not a Dask scheduler")
    assert took < 60
    assert_clean(run, before, run.root)


SLOW_NSYS = """#!{py}
# A stand-in for `nsys export` that is slow: the first half of the real export it stands for is
# written to --output, then it waits (the test interrupts it there).
import pathlib, sys, time
args = sys.argv[1:]
out = pathlib.Path(args[args.index("--output") + 1])
data = pathlib.Path(pathlib.Path(args[-1]).read_text().splitlines()[1]).read_bytes()
out.write_bytes(data[: len(data) // 2])
time.sleep(300)
"""


def test_ctrl_c_during_an_nsys_export_leaves_nothing_in_the_cache(sandbox):
    """Ctrl-C during `nsys export` left the partial export in traceflow's cache for good (the next
    run then took it for the export). It is written in the run's scratch folder now."""
    import os
    import signal

    from test_files_and_processes import NSYS_SMALL
    if not NSYS_SMALL.exists():
        pytest.skip(f"nsys fixture not found at {NSYS_SMALL} (../shared is absent)")
    run, trace, db = sandbox
    exe = run.root / "bin" / "nsys"
    exe.parent.mkdir()
    exe.write_text(SLOW_NSYS.format(py=sys.executable))
    exe.chmod(0o755)
    rep = run.root / "rank0.nsys-rep"
    rep.write_text(f"NSYS-REP stand-in\n{NSYS_SMALL}\n")
    cache = run.root / "cache"
    before = snapshot(run.root)
    p = subprocess.Popen([*test_files_and_processes.TRACEFLOW, "ingest", str(rep), "-o", str(run.root / "n.duckdb"),
                          "--nsys", str(exe)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env={**os.environ, **run.env, "TRACEFLOW_CACHE": str(cache)}, start_new_session=True)
    try:
        end = time.monotonic() + 120
        while p.poll() is None and time.monotonic() < end and not any(
                f.stat().st_size > 0 for where in (cache, run.tmpdir) if where.exists()
                for f in where.rglob("*.sqlite") if f.is_file()):
            time.sleep(0.02)
        assert p.poll() is None, p.communicate()
        os.killpg(p.pid, signal.SIGINT)  # a terminal's Ctrl-C: the whole process group
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
    assert p.returncode == 130, err
    assert err.strip() == "traceflow: interrupted"
    assert [f.name for f in cache.rglob("*") if f.is_file()] == []
    assert_clean(run, before, run.root)


# --- 6. output injection ---------------------------------------------------------------------------

FORGED = "=cmd|' /C calc'!A0\ntraceflow: error: forged line"


def _forged_trace(folder: Path) -> Path:
    """The bundled rank 0 with its longest kernel renamed to FORGED (a formula and a newline)."""
    import gzip
    import json
    from collections import Counter

    from test_files_and_processes import KINETO
    d = json.loads(gzip.open(KINETO[0]).read())
    time_of: Counter = Counter()
    for e in d["traceEvents"]:
        if e.get("cat") == "kernel":
            time_of[e["name"]] += e.get("dur", 0)
    top = time_of.most_common(1)[0][0]
    for e in d["traceEvents"]:
        if e.get("cat") == "kernel" and e["name"] == top:
            e["name"] = FORGED
    out = folder / "rank-0.pt.trace.json.gz"
    with gzip.open(out, "wt") as f:
        json.dump(d, f)
    return out


def _forged_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if "forged" in line and line.startswith("traceflow: error")]


def test_a_newline_in_a_trace_string_forges_no_line(tmp_path):
    """A kernel name holding `\\ntraceflow: error: ...` printed a forged line of traceflow's shape in
    the verdict; a file name holding one did in the notes. Escaped as tables escape it: `\\x0a`."""
    from test_files_and_processes import Run
    run = Run(tmp_path)
    (tmp_path / "in").mkdir()
    trace = _forged_trace(tmp_path / "in")
    r = run("postmortem", trace, "-o", tmp_path / "pm", "--explain", timeout=300)
    assert r.returncode == 0, r.stderr
    assert _forged_lines(r.stdout + r.stderr) == []
    assert "\\x0atraceflow: error: forged line" in r.stdout  # the long verdict names the kernel, escaped
    twin = tmp_path / "in" / "a\ntraceflow: error: forged note.json.gz"
    twin.write_bytes(trace.read_bytes())
    r = run("ingest", trace, twin, "-o", tmp_path / "twice.duckdb", timeout=300)
    assert r.returncode == 0, r.stderr
    assert "same content" in r.stderr and _forged_lines(r.stderr) == [], r.stderr
    # CSV: a cell a spreadsheet would run as a formula gets a leading ', numbers stay numbers
    r = run("sql", tmp_path / "pm" / "job.duckdb", "SELECT DISTINCT name, -1 AS n FROM gpu_ops WHERE name LIKE '=%'",
            "--format", "csv", timeout=120)
    import csv
    import io
    rows = list(csv.reader(io.StringIO(r.stdout)))
    assert rows == [["name", "n"], ["'" + FORGED, "-1"]], r.stdout


# --- 7. numbers ------------------------------------------------------------------------------------

def _edited(folder: Path, edit) -> Path:
    import gzip
    import json

    from test_files_and_processes import KINETO
    d = json.loads(gzip.open(KINETO[0]).read())
    edit(d)
    out = folder / "rank-0.pt.trace.json.gz"
    with gzip.open(out, "wt") as f:
        json.dump(d, f)
    return out


@pytest.mark.parametrize("base", [2**63 - 1, 2**62, -1])
def test_a_time_base_past_what_int64_holds_is_refused(tmp_path, base):
    """baseTimeNanoseconds of 2^63-1 wrapped silently to the year 1677; 2^62 ended in an internal
    error (INT64 overflow adding two times). One line, exit 3."""
    from test_files_and_processes import Run
    run = Run(tmp_path)
    trace = _edited(tmp_path, lambda d: d.__setitem__("baseTimeNanoseconds", base))
    r = run("ingest", trace, "-o", tmp_path / "b.duckdb", timeout=300)
    assert_refused(r, 3, trace.name, f"baseTimeNanoseconds {base} is no time a profiler writes")
    assert not (tmp_path / "b.duckdb").exists()


def test_flop_counts_past_int64_are_dropped_and_counted(tmp_path):
    """A FLOP count of 2^62 on two matmuls (their sum past INT64) ended `ingest` / `query mfu` in an
    internal error. Such counts are NULL, counted in a warning; the MFU pack runs."""
    from test_files_and_processes import Run
    run = Run(tmp_path)
    marked = []

    def edit(d):
        for e in d["traceEvents"]:
            if e.get("cat") == "cpu_op" and e.get("name") in ("aten::mm", "aten::addmm") and len(marked) < 2:
                e.setdefault("args", {})["flops"] = 2**62
                marked.append(e["name"])
    trace = _edited(tmp_path, edit)
    assert len(marked) == 2
    r = run("ingest", trace, "-o", tmp_path / "f.duckdb", timeout=300)
    assert r.returncode == 0, r.stderr
    assert "2 ops with a FLOP count that is negative or past 2^50" in r.stderr, r.stderr
    r = run("query", tmp_path / "f.duckdb", "mfu", "--format", "csv", timeout=120)
    assert r.returncode == 0, r.stderr


# --- 8. limits of the machine ----------------------------------------------------------------------

def test_option_and_name_extremes_are_one_line(sandbox):
    """`sql DB ""`, `--peak-tflops 1e-300` and an output name of 232-236 characters were internal errors."""
    run, trace, db = sandbox
    before = snapshot(run.root)
    assert_refused(run("sql", db, "", timeout=120), 2, "no SQL statement given")
    assert_refused(run("sql", db, "/* only a comment */", timeout=120), 2, "no SQL statement given")
    r = run("ingest", trace, "-o", run.root / "p.duckdb", "--peak-tflops", "1e-300", timeout=120)
    assert_refused(r, 2, "--peak-tflops must be a number from 0.001")
    for n in (232, 236):
        out = run.root / ("a" * (n - len(".duckdb")) + ".duckdb")
        assert_refused(run("ingest", trace, "-o", out, timeout=120), 3, "bytes long", "name it in")
    assert_clean(run, before, run.root)


@pytest.mark.parametrize("inherited", ["default", "ignored"])
def test_sighup_cleans_up_as_sigterm_does(tmp_path, inherited):
    """SIGHUP (a terminal closed, an ssh session dropped) left the temp database, its WAL, the lock and
    the scratch folder behind: handled as SIGTERM now, exit 129. Under `nohup` (SIGHUP ignored, which
    a child inherits) the command keeps running, as the user asked: this test failed in a suite run
    under nohup until the child's disposition was set here, not inherited from the runner's."""
    import signal

    from test_files_and_processes import KINETO, Run, wait_for_phase
    run = Run(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    before = signal.signal(signal.SIGHUP, signal.SIG_DFL if inherited == "default" else signal.SIG_IGN)
    try:
        p = run.popen("ingest", *KINETO, "-o", out / "job.duckdb")
    finally:
        signal.signal(signal.SIGHUP, before)
    try:
        assert wait_for_phase(p, "loading", run, out), p.communicate()
        p.send_signal(signal.SIGHUP)
        _, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    if inherited == "ignored":
        assert p.returncode == 0 and (out / "job.duckdb").exists(), err
        return
    assert (p.returncode, err.strip()) == (129, "traceflow: hung up"), err
    assert list(out.iterdir()) == []
    assert_clean(run, {}, tmp_path)


def test_a_huge_kernel_name_is_cut(tmp_path):
    """A 200 MB kernel name became 2 GB of piped output and a 1 GB report (here 20 MB: an 88 MB
    report). Names past 64 KiB are cut at ingest, with a warning; the outputs stay bounded."""
    from test_files_and_processes import Run

    def edit(d):
        kernels = [e for e in d["traceEvents"] if e.get("cat") == "kernel"]
        max(kernels, key=lambda e: e.get("dur", 0))["name"] = "void k<" + "x" * (8 << 20) + ">()"
    run = Run(tmp_path)
    (tmp_path / "in").mkdir()
    trace = _edited(tmp_path / "in", edit)
    r = run("postmortem", trace, "-o", tmp_path / "pm", timeout=300)
    assert r.returncode == 0, r.stderr
    assert "1 gpu_ops.name values longer than 64 KiB cut" in r.stderr, r.stderr
    r = run("sql", tmp_path / "pm" / "job.duckdb", "SELECT max(strlen(name)) AS n FROM gpu_ops", "--format", "csv",
            timeout=120)
    assert r.stdout.split() == ["n", str((64 << 10) + len(" [cut]"))], r.stdout + r.stderr
    assert (tmp_path / "pm" / "report.html").stat().st_size < 8 << 20


# --- 8. the limits of the machine (the rest) -------------------------------------------------------

STALL = sorted(str(p) for p in (Path(__file__).resolve().parent.parent / "fixtures" / "ddp2_flops" / "stall").glob("rank-*.json.gz"))


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_postmortem_replaces_its_three_outputs_together(tmp_path, sig):
    """Ctrl-C or SIGTERM in `postmortem` after the database step left the new database beside the old
    report and Perfetto trace. The three wait in their temp files and are renamed at the end, together:
    a signal before then leaves the old three byte for byte, and no temp file."""
    import signal

    from test_files_and_processes import Run, wait_for_phase, wait_gone
    run = Run(tmp_path)
    pm = tmp_path / "pm"
    assert run("postmortem", *STALL, "-o", pm, timeout=300).returncode == 0
    old = {p.name: p.read_bytes() for p in pm.iterdir()}
    assert sorted(old) == ["job.duckdb", "job.perfetto-trace", "report.html"]
    p = run.popen("postmortem", *STALL, "-o", pm)
    try:
        assert wait_for_phase(p, "writing the report", run, pm), p.communicate()
        p.send_signal(getattr(signal, sig))
        _, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    word, code = ("interrupted", 130) if sig == "SIGINT" else ("terminated", 143)
    assert (p.returncode, err.strip().splitlines()[-1:]) == (code, [f"traceflow: {word}"]), err
    assert {q.name: q.read_bytes() for q in pm.iterdir()} == old
    assert wait_gone(run.tag) == []
    assert list(run.tmpdir.iterdir()) == []


def test_sql_on_a_timestamptz_prints_the_table_only(sandbox):
    """`sql DB "select now()"` printed a 2-line UserWarning before the table (pytz / Arrow converting
    to a named zone), and under TZ='' ended in an internal error (no zone database). TIMESTAMPTZ values
    come at the fixed offset +00:00, which needs no zone: the table only, through a pipe and on a
    terminal, in every format and zone."""
    import os
    import shutil
    run, trace, db = sandbox
    query = "select to_timestamp(0) as t, [to_timestamp(1)] as l, {'a': to_timestamp(2)} as s"
    for tz in ("", "Asia/Kolkata", "America/New_York"):
        for fmt in ("table", "json", "csv"):
            r = run("sql", db, query, "--format", fmt, env={"TZ": tz}, timeout=120)
            assert (r.returncode, r.stderr) == (0, ""), (tz, fmt, r.stderr)
            assert "1970-01-01 00:00:00+00:00" in r.stdout, r.stdout
            if fmt == "json":  # nested values too
                assert json.loads(r.stdout)[0]["s"] == {"a": "1970-01-01 00:00:02+00:00"}, r.stdout
        if shutil.which("script"):  # on a pseudo-terminal: stdout and stderr are one stream there
            cmd = " ".join(["TZ=" + tz, sys.executable, "-m", "traceflow", "sql", str(db), repr(query)])
            r = subprocess.run(["script", "-qc", cmd, "/dev/null"], capture_output=True, text=True, timeout=120,
                               env={**os.environ, **run.env})
            assert r.returncode == 0 and "Warning" not in r.stdout and "error" not in r.stdout, r.stdout
            assert "1970-01-01 00:00:00+00:00" in r.stdout, r.stdout


def _under_ulimit(run, flag: str, value: int, *args, timeout: float = 300):
    """A traceflow command under `ulimit FLAG VALUE`, as a user's shell (or a batch system) sets it."""
    import os
    import shlex

    from conftest import TRACEFLOW
    cmd = f"ulimit {flag} {value} && exec " + " ".join(shlex.quote(str(a)) for a in (*TRACEFLOW, *args))
    return subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **run.env})


def _one_line_or_done(r, *needles):
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr
    if r.returncode == 0:
        return
    assert r.returncode == 3, (r.returncode, r.stderr)
    lines = [x for x in r.stderr.strip().splitlines() if not x.startswith(("traceflow: warning:", "traceflow: note:"))]
    assert len(lines) == 1 and any(n in lines[0] for n in needles), r.stderr


def test_an_address_space_limit_is_one_line(tmp_path):
    """Under ulimit -v 1.2-2 GB an ingest ended in internal errors (DuckDB's OutOfMemoryException,
    exit 1; a glibc abort, exit 127, temps left). A limit too small to run at all is said up front;
    running out of memory later is one line, exit 3; nothing is left behind either way."""
    from test_files_and_processes import Run
    run = Run(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    r = _under_ulimit(run, "-v", 1_000_000, "ingest", *STALL, "-o", out / "job.duckdb")
    assert r.returncode == 3, (r.returncode, r.stderr)
    assert r.stderr.strip().splitlines() == ["traceflow: error: the address-space limit (ulimit -v) is 976 MiB, and "
                                             "traceflow needs at least 1024 MiB to run (Python, DuckDB and Arrow loaded "
                                             "take ~600): raise it"], r.stderr
    kineto = sorted(str(p) for p in (Path(__file__).resolve().parent.parent / "fixtures" / "ddp4_sync_stall").glob("rank-*.json.gz"))
    for limit in (1_500_000, 1_700_000, 2_000_000):  # each ran out somewhere (measured: reader, DuckDB, or done)
        r = _under_ulimit(run, "-v", limit, "ingest", *kineto, "-o", out / f"{limit}.duckdb")
        _one_line_or_done(r, "out of memory", "address-space limit")
        assert [p.name for p in out.iterdir() if not p.name.endswith(".duckdb")] == [], list(out.iterdir())
        assert list(run.tmpdir.iterdir()) == []


def test_too_few_open_files_for_a_local_cluster_is_said_up_front(tmp_path):
    """`ulimit -n` 16-32 with `--cluster local:2` hung with Dask's tracebacks (16) or ended in an internal
    error (32, 40: "Nanny failed to start"). The limit is checked before any work: one line with the
    number needed, exit 3, nothing written; at that number the cluster ingest runs."""
    from test_files_and_processes import Run, wait_gone
    run = Run(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    for limit in (16, 32):
        r = _under_ulimit(run, "-n", limit, "ingest", *STALL, "-o", out / "job.duckdb", "--cluster", "local:2", timeout=120)
        assert (r.returncode, r.stderr.strip().splitlines()) == (3, [
            f"traceflow: error: --cluster local:2 needs at least 56 open files, and the limit (ulimit -n) is {limit}: "
            "raise it (ulimit -n 56) or ask for fewer workers"]), r.stderr
        assert list(out.iterdir()) == [] and list(run.tmpdir.iterdir()) == []
    r = _under_ulimit(run, "-n", 56, "ingest", *STALL, "-o", out / "job.duckdb", "--cluster", "local:2", timeout=300)
    assert r.returncode == 0, r.stderr
    assert wait_gone(run.tag) == []
