"""Issue 7: atomic, idempotent, safe to interrupt, one writer at a time; hostile names; fuzzing."""
from __future__ import annotations

import fcntl
import gzip
import json
import os
import random
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from conftest import BUNDLED, TRACEFLOW, connect, fixture_files, loose_decoding, needs_shared, read_kineto, run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from traceflow.outputs import LOCK_SUFFIX

KINETO = sorted(str(p) for p in (BUNDLED / "ddp4_sync_stall").glob("rank-*.json.gz"))
FULL = os.environ.get("TRACEFLOW_FUZZ") == "full"


def counts(db):
    c = connect(db)
    try:
        return c.execute("select (select count(*) from traces), (select count(*) from gpu_ops), (select count(*) from host_ops),"
                         " (select count(*) from collectives)").fetchone()
    finally:
        c.close()


def test_kill_9_leaves_old_or_new_database(tmp_path):
    db = tmp_path / "job.duckdb"
    assert run_cli("ingest", KINETO[0], "-o", db).returncode == 0
    old = db.read_bytes()
    full = tmp_path / "full.duckdb"
    assert run_cli("ingest", *KINETO, "-o", full).returncode == 0
    want_new = counts(full)
    rnd = random.Random(7)
    outcomes = set()
    for i in range(6 if not FULL else 20):
        p = subprocess.Popen([*TRACEFLOW, "ingest", *KINETO, "-o", str(db)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
        time.sleep(rnd.uniform(0.2, 3.5))
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        if db.read_bytes() == old:
            outcomes.add("old")
        else:
            assert counts(db) == want_new  # the new database, complete
            outcomes.add("new")
            assert run_cli("ingest", KINETO[0], "-o", db).returncode == 0
            old = db.read_bytes()
    # the next run cleans what the killed ones left behind
    assert run_cli("ingest", KINETO[0], "-o", db).returncode == 0
    assert [p.name for p in tmp_path.iterdir() if ".traceflow-tmp-" in p.name] == []
    stray = [p for p in Path(tempfile.gettempdir()).glob("traceflow-*-*") if p.is_dir() and not _alive(p)]
    assert stray == []
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(LOCK_SUFFIX)] == []
    assert "old" in outcomes


def _alive(p: Path) -> bool:
    try:
        os.kill(int(p.name.split("-")[1]), 0)
        return True
    except (ProcessLookupError, ValueError, IndexError):
        return False
    except PermissionError:
        return True


def test_second_writer_refused_and_readers_see_whole_databases(tmp_path):
    db = tmp_path / "job.duckdb"
    assert run_cli("ingest", KINETO[0], "-o", db).returncode == 0
    old = counts(db)
    lock = tmp_path / f".job.duckdb{LOCK_SUFFIX}"
    a = subprocess.Popen([*TRACEFLOW, "ingest", *KINETO, "-o", str(db)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # wait until A holds the lock: however long A takes to start (4 s were not enough on a loaded machine)
    held = False
    while not held and a.poll() is None:
        time.sleep(0.01)
        with open(lock, "a+") as f:
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)
            except BlockingIOError:
                held = True
    assert held, "A finished before it was seen holding the lock"
    b = run_cli("ingest", KINETO[1], "-o", db)
    assert b.returncode == 3 and "another traceflow process is writing" in b.stderr
    seen = set()
    while a.poll() is None:
        seen.add(counts(db))  # a read-only reader during the write
        time.sleep(0.05)
    assert a.returncode == 0, a.stderr
    seen.add(counts(db))
    assert seen <= {old, counts(db)} and counts(db)[0] == 4


def test_same_files_twice_and_append(tmp_path):
    db = tmp_path / "job.duckdb"
    assert run_cli("ingest", *KINETO, "-o", db).returncode == 0
    once = counts(db)
    assert run_cli("ingest", *KINETO, "-o", db).returncode == 0
    assert counts(db) == once
    r = run_cli("ingest", KINETO[0], KINETO[0], "-o", tmp_path / "dup.duckdb")
    assert r.returncode == 0 and "read once" in r.stderr
    # append: ranks 0-1, then 2-3, equals all four at once; appending a rank again adds nothing
    part = tmp_path / "part.duckdb"
    assert run_cli("ingest", *KINETO[:2], "-o", part).returncode == 0
    assert run_cli("ingest", *KINETO[2:], "-o", part, "--append").returncode == 0
    assert counts(part) == once
    r = run_cli("ingest", KINETO[3], "-o", part, "--append")
    assert r.returncode == 0 and "already in the database" in r.stderr
    assert counts(part) == once
    q = "select comm, step, seq, rank, wait_ns from collective_waits order by all"
    assert connect(part).execute(q).fetchall() == connect(db).execute(q).fetchall()


def test_hostile_file_names_never_reach_sql(tmp_path):
    name = tmp_path / "rank0'; DROP TABLE gpu_ops; --.json.gz"
    shutil.copyfile(KINETO[0], name)
    db = tmp_path / "o'k.duckdb"
    r = run_cli("ingest", name, "-o", db)
    assert r.returncode == 0, r.stderr
    c = connect(db)
    assert c.execute("select count(*) from gpu_ops").fetchone()[0] > 0
    assert c.execute("select source_path from traces").fetchone()[0].endswith("--.json.gz")


@needs_shared
def test_hostile_sqlite_path(tmp_path):
    src = fixture_files("h100/nsys/graphs")[0]
    name = tmp_path / "ra'nk0 \" ; select 1.sqlite"
    shutil.copyfile(src, name)
    r = run_cli("ingest", name, "-o", tmp_path / "x.duckdb")
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("bad_at", [0, 1, 2])
def test_bad_file_among_good_ones_read_in_parallel(tmp_path, bad_at):
    """Readers share the files (this process and a worker process, --jobs 2): whichever reads the bad
    file, the error is one line naming it, exit 3, and the database is left as it was."""
    files = [shutil.copyfile(k, tmp_path / f"rank-{i}.pt.trace.json.gz") for i, k in enumerate(KINETO[:3])]
    data = Path(files[bad_at]).read_bytes()
    Path(files[bad_at]).write_bytes(data[: len(data) // 2])
    db = tmp_path / "job.duckdb"
    assert run_cli("ingest", KINETO[3], "-o", db).returncode == 0
    before = db.read_bytes()
    r = run_cli("ingest", *files, "-o", db, "--jobs", "2")
    assert r.returncode == 3, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and str(files[bad_at]) in lines[0] and "truncated" in lines[0], r.stderr
    assert db.read_bytes() == before


# --- property-based: the JSON reader on mutated real events ----------------------------------

_EVENTS = [e for e in json.load(gzip.open(KINETO[0]))["traceEvents"] if e.get("ph") == "X"][:400]
_VALUES = st.one_of(st.none(), st.booleans(), st.integers(min_value=-2**63, max_value=2**64), st.floats(allow_nan=False),
                    st.text(max_size=20), st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=5), st.integers(), max_size=3))
_FIELDS = st.sampled_from(["ph", "cat", "name", "pid", "tid", "ts", "dur", "args", "id"])
_ARG_FIELDS = st.sampled_from(["correlation", "External id", "device", "stream", "bytes", "Collective name",
                               "Process Group Name", "In msg nelems", "dtype"])


@settings(max_examples=300 if FULL else 25, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(edits=st.lists(st.tuples(st.integers(0, len(_EVENTS) - 1), st.one_of(_FIELDS, _ARG_FIELDS), _VALUES,
                                st.booleans()), min_size=1, max_size=12),
       batch=st.sampled_from([300, 5_000, 1 << 20]))
def test_json_reader_on_mutated_events(tmp_path_factory, edits, batch):
    """Odd types anywhere: a one-line error or rows, never a traceback; and the fast path (strict types,
    columns built by C loops) gives exactly what the loose path (each value converted on its own) gives."""
    from traceflow.errors import InputError
    from traceflow.readers import kineto
    events = json.loads(json.dumps(_EVENTS))
    for i, field, value, delete in edits:
        target = events[i]
        if field in ("correlation", "External id", "device", "stream", "bytes", "Collective name", "Process Group Name",
                     "In msg nelems", "dtype"):
            target = target.setdefault("args", {}) if isinstance(target.get("args"), dict) else target
        if delete:
            target.pop(field, None)
        else:
            target[field] = value
    d = tmp_path_factory.mktemp("fz")
    src = d / "rank0.json"
    src.write_text(json.dumps({"baseTimeNanoseconds": 1790857026000000000, "traceEvents": events}))
    old = kineto.BATCH_BYTES
    kineto.BATCH_BYTES = batch
    try:
        fast = read_kineto(src, d / "fast")
        with loose_decoding():
            loose = read_kineto(src, d / "loose")
    finally:
        kineto.BATCH_BYTES = old
    if isinstance(fast, InputError):
        assert str(src) in str(fast) and "\n" not in str(fast)
    assert str(fast) == str(loose) if isinstance(fast, Exception) else fast == loose


# Values the fast path takes without falling back: each must come out as the loose path has it.
_FAST_PATH_EDITS = [("name", None), ("name", "DELETE"), ("args", None), ("args", "DELETE"), ("pid", "Spans"),
                    ("pid", "123"), ("pid", "DELETE"), ("tid", "-7"), ("tid", None), ("ts", "DELETE"), ("dur", "DELETE"),
                    ("dur", -5), ("ts", 1e300), ("ph", None), ("cat", None), ("device", None), ("stream", "DELETE"),
                    ("Collective name", ""), ("Collective name", "ALL_REDUCE"), ("Process Group Name", 7),
                    ("Process Group Name", 0.5), ("In msg nelems", "12"), ("In msg nelems", 3), ("dtype", "Float"),
                    ("bytes", 0), ("correlation", None)]


@pytest.mark.parametrize("field,value", _FAST_PATH_EDITS)
def test_fast_path_edge_values_match_loose(tmp_path, field, value):
    events = json.loads(json.dumps(_EVENTS[:60]))
    for e in events[::3]:
        target = e.setdefault("args", {}) if field[0].isupper() or field in ("correlation", "device", "stream", "bytes", "dtype") else e
        if field == "dtype":
            target["In msg nelems"] = 10
        if value == "DELETE":
            target.pop(field, None)
        else:
            target[field] = value
    src = tmp_path / "rank0.json"
    src.write_text(json.dumps({"baseTimeNanoseconds": 1790857026000000000, "traceEvents": events}))
    from traceflow.readers import kineto
    kineto._strict_meta_decoder.decode(src.read_bytes())  # the fast path takes it: no fallback
    fast = read_kineto(src, tmp_path / "fast")
    with loose_decoding():
        loose = read_kineto(src, tmp_path / "loose")
    assert not isinstance(fast, Exception)
    assert fast == loose
