"""Issue 37: read-only means read-only, and what a hostile user's folder or a malicious trace holds.

Every case runs the real command in a subprocess (test_files_and_processes.Run: a private $TMPDIR,
a tag to find its processes) on inputs derived from the real fixtures, and checks the exit code,
exactly one line on stderr, no traceback, every pre-existing file byte-identical, no temp file,
folder or process left.
"""
from __future__ import annotations

import fcntl
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import test_files_and_processes
from conftest import FIX, TRACEFLOW, on_a_terminal
from test_files_and_processes import KINETO, NSYS_SMALL, Run, assert_clean, assert_refused, snapshot, wait_for_phase

needs_nsys = pytest.mark.skipif(not NSYS_SMALL.exists(), reason=f"nsys fixture not found at {NSYS_SMALL} (../shared is absent)")
needs_unshare = pytest.mark.skipif(shutil.which("unshare") is None or subprocess.run(
    ["unshare", "-U", "true"], capture_output=True).returncode != 0, reason="no user namespaces (unshare -U)")


def assert_one_line(r, code: int, *needles: str):
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "Traceback" not in r.stdout + r.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])


# the file-safety suite's fixtures: a database of rank 0 made once, and a sandbox with copies of it
one_rank_db = test_files_and_processes.one_rank_db
sandbox = test_files_and_processes.sandbox


# --- traceflow sql writes nothing, reads nothing but the database --------------------------------

def _writes(tmp: Path, trace: Path, db: Path) -> dict[str, str]:
    return {
        "COPY over the database": f"COPY (SELECT 1) TO '{db}'",
        "COPY over an input trace": f"COPY traces TO '{trace}' (FORMAT csv)",
        "COPY to a new file": f"COPY (SELECT 1) TO '{tmp}/new.csv'",
        "COPY into the database's temp folder": f"COPY (SELECT 1) TO '{db}.tmp/x.csv'",
        "COPY FROM a file": f"COPY traces FROM '{tmp}/new.csv'",
        "EXPORT DATABASE": f"EXPORT DATABASE '{tmp}/export'",
        "ATTACH a new database": f"ATTACH '{tmp}/other.duckdb' AS o",
        "COPY FROM DATABASE": "COPY FROM DATABASE memory TO memory",
        "INSTALL": "INSTALL sqlite",
        "LOAD": "LOAD sqlite",
        "FORCE INSTALL": "FORCE INSTALL httpfs",
        "a persistent secret": "CREATE PERSISTENT SECRET s (TYPE http, BEARER_TOKEN 'x')",
        "external access back on": "SET enable_external_access = true",
        "the lock undone": "RESET lock_configuration",
        "profiling into a file": f"SET profiling_output = '{tmp}/profile.json'",
        "spill into a chosen folder": f"SET temp_directory = '{tmp}/spill'",
        "a file outside": "SELECT * FROM read_text('/etc/hostname')",
        "a glob outside": "SELECT * FROM glob('/etc/*')",
        "INSERT": "INSERT INTO traces SELECT * FROM traces",
        "a table in the database": "CREATE TABLE t AS SELECT 1",
        "VACUUM": "VACUUM",
        "a write after a read": f"SELECT 1; COPY (SELECT 1) TO '{tmp}/late.csv'",
        # DuckDB 1.5.5 aborted the process (SIGABRT, exit 134) at the next statement after these
        "logging into a file": f"CALL enable_logging(storage='file', storage_path='{tmp}/log'); SELECT 1",
        "logging as a table function": f"SELECT * FROM \"Enable_Logging\"(storage='file', storage_path='{db}.tmp/log'); SELECT 1",
    }


def test_sql_never_writes_a_file_nor_reads_one_outside(sandbox):
    """Issue 37: `COPY (...) TO 'job.duckdb'` replaced the database with a CSV, `COPY ... TO
    'rank0.json.gz'` overwrote an input, exit 0. Every statement kind that can write or reach a file."""
    run, trace, db = sandbox
    before = snapshot(run.root)
    names_before = sorted(p.name for p in run.root.rglob("*"))
    for what, text in _writes(run.root, trace, db).items():
        r = run("sql", db, text, env={"HOME": str(run.root / "home")})
        assert r.returncode == 2, (what, r.returncode, r.stderr)
        assert_one_line(r, 2)
        assert r.stderr.startswith("traceflow: error: "), (what, r.stderr)
        assert snapshot(run.root) == before, what
    assert sorted(p.name for p in run.root.rglob("*")) == names_before  # no file made (nor ~/.duckdb)
    assert_clean(run, before, run.root)
    # what stays allowed: reads, and what lives only in the session
    r = run("sql", db, "CREATE TEMP TABLE t AS SELECT rank FROM traces; SET VARIABLE x = 2; "
            "SELECT count(*) * getvariable('x') AS n FROM t", "--format", "csv")
    assert (r.returncode, r.stdout.split()) == (0, ["n", "2"]), r.stderr
    assert snapshot(run.root) == before


def test_the_python_surface_is_read_only_too(sandbox):
    """Job.sql refuses what `traceflow sql` refuses; job.con itself reaches no file."""
    run, trace, db = sandbox
    before = snapshot(run.root)
    code = f"""
import duckdb, traceflow
job = traceflow.open({str(db)!r})
try:
    job.sql("COPY (SELECT 1) TO {str(trace)!r}")
    print("wrote")
except traceflow.UsageError as e:
    print("refused:", e)
for text in ("COPY (SELECT 1) TO {str(trace)!r}", "ATTACH '{run.root}/x.duckdb'", "SET enable_external_access = true"):
    try:
        job.con.execute(text)
        print("ran", text)
    except duckdb.Error as e:
        print("refused:", type(e).__name__)
print(job.sql("SELECT count(*) AS n FROM traces")["n"][0])
again = traceflow.open({str(db)!r})  # a second Job on the same file in the same process
print(again.sql("SELECT count(*) AS n FROM gpu_ops")["n"][0] > 0)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env={**os.environ, **run.env})
    lines = r.stdout.splitlines()
    assert r.returncode == 0, r.stderr
    assert lines[0].startswith("refused: COPY statements are refused")
    assert lines[1:4] == ["refused: PermissionException"] * 2 + ["refused: InvalidInputException"], lines
    assert lines[4:] == ["1", "True"]
    assert snapshot(run.root) == before


def test_a_database_whose_views_read_other_files_is_refused(sandbox):
    """A malicious database (a view of a pack's table over /etc/hostname, or over another job's
    shard folder): the locked connection never follows it; one line, exit 3."""
    import duckdb
    run, trace, db = sandbox
    other = run.root / "other.duckdb.parts-x"
    other.mkdir()
    con = duckdb.connect(str(db))
    con.execute(f"COPY (SELECT * FROM gpu_ops) TO '{other}/0.gpu_ops.parquet'")
    con.execute("DROP TABLE idle_gaps")
    con.execute("CREATE VIEW idle_gaps AS SELECT content AS next_op FROM read_text('/etc/hostname')")
    con.execute("DROP TABLE step_breakdown")  # the steps pack's table
    con.execute(f"CREATE VIEW step_breakdown AS SELECT * FROM read_parquet('{other}/*.gpu_ops.parquet')")
    con.close()
    before = snapshot(run.root)
    for cmd, needle in ((["query", db, "idle-gaps"], "/etc/hostname"), (["query", db, "steps"], "other.duckdb.parts-x"),
                        (["report", db, "-o", run.root / "r.html"], "a view over another file")):  # either view first
        assert_refused(run(*cmd), 3, needle, "outside itself")
    r = run("sql", db, "select * from idle_gaps")
    assert_refused(r, 2, "Permission Error")
    assert_clean(run, before, run.root)


def test_a_database_whose_view_switches_logging_on_is_refused(sandbox):
    """A view calling enable_logging(storage='file', ...): reading it on the locked connection aborted
    the process (SIGABRT, exit 134, a C++ terminate message) at the next statement. Refused at open."""
    import duckdb
    run, trace, db = sandbox
    con = duckdb.connect(str(db))
    con.execute("DROP TABLE idle_gaps")
    con.execute(f"CREATE VIEW idle_gaps AS SELECT * FROM enable_logging(storage='file', storage_path='{run.root}/log')")
    con.close()
    before = snapshot(run.root)
    for cmd in (["sql", db, "select * from idle_gaps; select 1"], ["query", db, "idle-gaps"],
                ["report", db, "-o", run.root / "r.html"]):
        assert_one_line(run(*cmd), 3, db.name, "its view idle_gaps calls enable_logging")
    assert_clean(run, before, run.root)


@needs_nsys
def test_an_nsys_export_given_as_a_database_never_reaches_for_the_network(sandbox):
    """DuckDB opened an SQLite file by fetching its SQLite extension over the network: traceflow
    promises to work offline. No extension is installed or loaded, on any connection."""
    run, trace, db = sandbox
    sq = run.root / "rank0.sqlite"
    shutil.copyfile(NSYS_SMALL, sq)
    home = run.root / "home"
    home.mkdir()
    before = snapshot(run.root)
    for cmd in (["query", sq, "steps"], ["sql", sq, "select 1"], ["report", sq, "-o", run.root / "r.html"]):
        r = run(*cmd, env={"HOME": str(home)})
        assert_one_line(r, 3, "rank0.sqlite", "not a DuckDB database")
    assert list(home.iterdir()) == []  # no ~/.duckdb/extensions
    assert_clean(run, before, run.root)
    # and a connection traceflow opens itself refuses the autoload
    code = f"""
from traceflow.duck import connect
try:
    connect({str(sq)!r}, read_only=True)
    print("opened")
except Exception as e:
    print(type(e).__name__, "install" in str(e).lower() and "autoinstall" not in str(e).lower())
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "HOME": str(home)})
    assert r.stdout.split()[0] != "opened" and list(home.iterdir()) == [], r.stdout + r.stderr


# --- a database traceflow did not write ------------------------------------------------------------

def _users_database(path: Path, extra_from: Path | None = None) -> Path:
    import duckdb
    if extra_from is not None:
        shutil.copyfile(extra_from, path)
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE precious AS SELECT range AS i FROM range(1000)")
    con.close()
    return path


def test_a_users_own_database_is_never_replaced_nor_appended_to(sandbox):
    run, trace, db = sandbox
    mine = _users_database(run.root / "mine.duckdb")
    before = snapshot(run.root)
    for extra in ([], ["--append"]):
        r = run("ingest", trace, "-o", mine, *extra)
        assert_refused(r, 3, "mine.duckdb", "traceflow DuckDB database")
    assert_clean(run, before, run.root)


def test_append_keeps_a_users_tables_in_a_traceflow_database(sandbox, tmp_path):
    run, trace, db = sandbox
    ours = _users_database(run.root / "ours.duckdb", extra_from=db)
    r = run("ingest", KINETO[1], "-o", ours, "--append")
    assert r.returncode == 0, r.stderr
    import duckdb
    con = duckdb.connect(str(ours), read_only=True)
    assert con.execute("SELECT count(*), sum(i) FROM precious").fetchone() == (1000, sum(range(1000)))
    assert con.execute("SELECT count(*) FROM traces").fetchone()[0] == 2
    con.close()


# --- signals and leftovers ------------------------------------------------------------------------

def test_sigterm_on_a_local_cluster_leaves_nothing(tmp_path):
    """SIGTERM while a --cluster local:2 ingest runs: one line, exit 143, no dask-scratch-space/ in
    $TMPDIR, no 'leaked semaphore' warning, no process, and no parts folder beside the output."""
    pytest.importorskip("distributed")
    run = Run(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    p = run.popen("ingest", *KINETO, "-o", out / "job.duckdb", "--cluster", "local:2")
    assert wait_for_phase(p, "reading", run, out), p.communicate()
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=120)
    assert (p.returncode, err.strip()) == (143, "traceflow: terminated"), (p.returncode, err)
    assert_clean(run, {}, out)
    assert list(out.iterdir()) == []


def test_a_local_cluster_run_leaves_no_dask_scratch_space(tmp_path):
    pytest.importorskip("distributed")
    run = Run(tmp_path)
    r = run("ingest", KINETO[0], "-o", tmp_path / "job.duckdb", "--cluster", "local:1")
    assert r.returncode == 0, r.stderr
    assert list(run.tmpdir.iterdir()) == []
    r = run("ingest", KINETO[0], "-o", tmp_path / "job.duckdb", "--cluster", "local:100000")
    assert_one_line(r, 2, "local:100000", "at most local:")


# --- inputs that block, names that break lines, unreadable files -----------------------------------

def test_a_pipe_among_the_inputs_never_blocks(sandbox):
    run, trace, db = sandbox
    pipe = run.root / "rank-9.json"
    os.mkfifo(pipe)
    before = snapshot(run.root)
    r = run("ingest", trace, pipe, "-o", run.root / "new.duckdb", timeout=120)
    assert_refused(r, 3, "rank-9.json", "not a regular file")
    for cmd in (["query", pipe, "steps"], ["sql", pipe, "select 1"], ["diff", pipe, db]):
        assert_refused(run(*cmd, timeout=120), 3, "rank-9.json")
    # in a folder, a pipe (or a link to a device, a broken or looping link, a folder named like a
    # trace) is passed over
    folder = run.root / "traces"
    folder.mkdir()
    shutil.copyfile(KINETO[0], folder / "rank-0.pt.trace.json.gz")
    os.mkfifo(folder / "rank-1.pt.trace.json")
    os.symlink("/dev/zero", folder / "rank-2.json")
    os.symlink(folder / "loop-b.json", folder / "loop-a.json")
    os.symlink(folder / "loop-a.json", folder / "loop-b.json")
    (folder / "rank-3.json.gz").mkdir()
    before = snapshot(run.root)
    r = run("ingest", folder, "-o", run.root / "new.duckdb", timeout=120)
    assert r.returncode == 0 and "1 rank" in r.stdout, r.stderr
    assert all(snapshot(run.root).get(k) == v for k, v in before.items())
    for bad, needle in ((folder / "rank-2.json", "not a regular file"), (folder / "loop-a.json", "symbolic links")):
        assert_refused(run("ingest", bad, "-o", run.root / "x.duckdb", timeout=120), 3, needle)


def test_file_names_that_are_not_utf8(sandbox):
    """Any byte string Linux allows: an input is read and named as \\xNN; a database DuckDB
    cannot open by such a name is refused, one line."""
    run, trace, db = sandbox
    raw = os.fsencode(run.root) + b"/rank-0-\xff\xfe.json.gz"
    shutil.copyfile(trace, raw)
    r = run("ingest", os.fsdecode(raw), "-o", run.root / "new.duckdb")
    assert r.returncode == 0, r.stderr
    r = run("sql", run.root / "new.duckdb", "select source_path from traces", "--format", "csv")
    assert r.stdout.splitlines()[1].endswith("rank-0-\\xff\\xfe.json.gz"), r.stdout
    before = snapshot(run.root)
    r = run("ingest", trace, "-o", os.fsdecode(os.fsencode(run.root) + b"/\xff.duckdb"))
    assert_refused(r, 3, "\\xff.duckdb", "not valid UTF-8")
    shutil.copyfile(db, os.fsencode(run.root) + b"/\xfe.duckdb")
    before = snapshot(run.root)
    assert_refused(run("query", os.fsdecode(os.fsencode(run.root) + b"/\xfe.duckdb"), "steps"), 3, "\\xfe.duckdb")
    assert_clean(run, before, run.root)


def test_a_newline_in_a_file_name_does_not_cut_the_error_line(sandbox):
    run, trace, db = sandbox
    bad = run.root / "bad\nname\x1b[2J.json"
    bad.write_text('{"traceEvents": [')
    r = run("ingest", bad, "-o", run.root / "new.duckdb")
    assert_refused(r, 3, "bad\\x0aname\\x1b[2J.json")


def test_a_truncated_database_and_option_extremes(sandbox):
    run, trace, db = sandbox
    cut = run.root / "cut.duckdb"
    cut.write_bytes(db.read_bytes()[: db.stat().st_size // 3])
    before = snapshot(run.root)
    for cmd in (["query", cut, "steps"], ["report", cut, "-o", run.root / "r.html"], ["sql", cut, "select 1"]):
        assert_refused(run(*cmd), 3, "cut.duckdb")
    for cmd, code in ((["query", db, "steps", "--limit", "-1"], 2), (["sql", db, "select 1", "--limit", "-5"], 2),
                      (["ingest", trace, "-o", run.root / "n.duckdb", "--peak-tflops", "inf"], 2),
                      (["ingest", trace, "-o", run.root / "n.duckdb", "-j", "0"], 2),
                      (["ingest", trace, "-o", run.root / "n.duckdb", "--cluster", "local:-1"], 2)):
        r = run(*cmd)
        assert r.returncode == code and "Traceback" not in r.stderr, (cmd, r.returncode, r.stderr)
    for var in ("TRACEFLOW_MEMORY_LIMIT", "TRACEFLOW_MAX_INFLATE"):
        assert_one_line(run("ingest", trace, "-o", run.root / "n.duckdb", env={var: "garbage"}), 2, var)
    r = run("query", db, "steps", "--rank", str(2**70), "--step", str(-2**70))
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert_clean(run, before, run.root)


@needs_unshare
def test_an_unreadable_input_is_one_line_exit_3(sandbox):
    """Run in a user namespace, where this process is nobody: root reads any file."""
    run, trace, db = sandbox
    locked = run.root / "locked"
    locked.mkdir()
    shutil.copyfile(trace, locked / "rank-0.json.gz")
    shutil.copyfile(db, locked / "job.duckdb")
    for p in (locked / "rank-0.json.gz", locked / "job.duckdb"):
        p.chmod(0)
    os.chmod(run.root, 0o777)  # nobody may write the outputs' temp files here
    before = snapshot(run.root)

    def as_nobody(*args):
        return subprocess.run(["unshare", "-U", *TRACEFLOW, *map(str, args)], capture_output=True, text=True,
                              timeout=120, env={**os.environ, **run.env})
    assert_refused(as_nobody("ingest", locked / "rank-0.json.gz", "-o", run.root / "n.duckdb"), 3, "rank-0.json.gz")
    assert_refused(as_nobody("query", locked / "job.duckdb", "steps"), 3, "job.duckdb", "permission denied")
    locked.chmod(0)
    assert_refused(as_nobody("ingest", locked, "-o", run.root / "n.duckdb"), 3, "locked", "permission denied")
    locked.chmod(0o755)
    assert snapshot(run.root) == before


@needs_nsys
@needs_unshare
def test_a_wal_mode_export_in_a_read_only_folder(sandbox):
    """An nsys export in WAL mode: read immutable, no -wal / -shm written beside it, and readable
    from a folder this process cannot write (SQLite refused it: 'attempt to write a readonly database')."""
    run, trace, db = sandbox
    ro = run.root / "ro"
    ro.mkdir()
    sq = ro / "rank0.sqlite"
    shutil.copyfile(NSYS_SMALL, sq)
    con = sqlite3.connect(sq)
    assert con.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
    con.close()
    assert sorted(p.name for p in ro.iterdir()) == ["rank0.sqlite"]
    ro.chmod(0o555)
    os.chmod(run.root, 0o777)
    before = snapshot(run.root)
    r = subprocess.run(["unshare", "-U", *TRACEFLOW, "ingest", str(sq), "-o", str(run.root / "n.duckdb")],
                       capture_output=True, text=True, timeout=300, env={**os.environ, **run.env})
    assert r.returncode == 0 and "1 rank" in r.stdout, r.stderr
    assert sorted(p.name for p in ro.iterdir()) == ["rank0.sqlite"]
    ro.chmod(0o755)
    r = run("ingest", sq, "-o", run.root / "m.duckdb")  # and as the owner, who could write beside it
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in ro.iterdir()) == ["rank0.sqlite"]
    assert all(snapshot(run.root).get(k) == v for k, v in before.items())


# --- terminal, outputs held by another process -------------------------------------------------------

def test_csv_to_a_terminal_escapes_the_header(sandbox):
    run, trace, db = sandbox
    out = on_a_terminal("sql", db, "SELECT 1 AS \"a\x1b]0;pwned\x07b\", 'x\x1b[2Jy' AS c", "--format", "csv")
    assert "\x1b" not in out and "\x07" not in out, repr(out)
    assert "a\\x1b]0;pwned\\x07b" in out and "x\\x1b[2Jy" in out


def test_an_output_another_process_is_writing_is_refused(sandbox):
    """`-o` onto a report (or database) whose writer holds its lock: one line, exit 3, the file kept."""
    run, trace, db = sandbox
    report = run.root / "report.html"
    assert run("report", db, "-o", report).returncode == 0
    before = snapshot(run.root)
    for target, cmd in ((report, ["report", db, "-o", report]), (db, ["ingest", trace, "-o", db])):
        lock = target.with_name(f".{target.name}.traceflow-lock")
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            assert_refused(run(*cmd), 3, target.name, "another traceflow process is writing")
        finally:
            os.close(fd)
            lock.unlink()
    assert snapshot(run.root) == before


def test_an_output_inside_the_input_folder_and_one_file_by_two_paths(sandbox):
    run, trace, db = sandbox
    folder = run.root / "traces"
    folder.mkdir()
    shutil.copyfile(KINETO[0], folder / "rank-0.pt.trace.json.gz")
    before = snapshot(run.root)
    for _ in range(2):  # the second run finds its own database in the folder: not a trace, replaced
        r = run("ingest", folder, folder / "rank-0.pt.trace.json.gz", f"{folder}/../traces/rank-0.pt.trace.json.gz",
                "-o", folder / "job.duckdb")
        assert r.returncode == 0 and "1 rank" in r.stdout, r.stderr
        assert r.stderr.count("same content as another input, read once") == 2, r.stderr
    assert_refused(run("ingest", folder, "-o", folder / "rank-0.pt.trace.json.gz"), 3, "is one of the inputs")
    assert all(snapshot(run.root).get(k) == v for k, v in before.items())


@pytest.mark.skipif(not FIX.is_dir(), reason="../shared is absent")
def test_fixtures_are_untouched_by_every_hostile_run():
    """The shared fixtures are read by every test here: none may have a -wal/-shm/journal beside it."""
    assert [p for p in FIX.rglob("*") if p.name.endswith(("-wal", "-shm", "-journal"))] == []


def test_a_users_own_connection_beside_a_job(sandbox):
    """A user's duckdb.connect(path) open in the same process: traceflow.open and ingest onto that
    database still work (DuckDB shares one instance per file and refused one with other settings),
    and the user's connection is not locked down by traceflow's."""
    run, trace, db = sandbox
    code = f"""
import duckdb, traceflow
mine = duckdb.connect({str(db)!r}, read_only=True)
with traceflow.open({str(db)!r}) as job:
    print(job.sql("SELECT count(*) AS n FROM traces")["n"][0])
print(mine.execute("SELECT current_setting('enable_external_access'), current_setting('lock_configuration')").fetchone())
job = traceflow.ingest([{KINETO[1]!r}], {str(db)!r}, append=True)
print(len(job.rank_summary()))
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env={**os.environ, **run.env})
    lines = r.stdout.split("\n")
    assert lines[:3] == ["1", "(True, False)", "2"], r.stdout + r.stderr
    # a writer in another program (a DuckDB shell): the command waits its turn, even with --force
    holder = subprocess.Popen([sys.executable, "-c", f"import duckdb, sys; c = duckdb.connect({str(db)!r}); print('held', flush=True); sys.stdin.read()"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        before = snapshot(run.root)
        assert_refused(run("ingest", trace, "-o", db, "--force"), 3, "job.duckdb", "open for writing in another program")
        assert snapshot(run.root) == before
    finally:
        holder.communicate("", timeout=60)
