"""Issue 21: the per-rank map on a real Dask cluster (LocalCluster, worker processes): the same
database as a local ingest, a worker killed mid-map changes nothing, a bad rank file is the same
one-line error."""
from __future__ import annotations

import gzip
import os
import signal
import threading
import time
from pathlib import Path

import duckdb
import pytest
from conftest import BUNDLED, connect, fixture_files, needs_shared, run_cli, tagged_processes

import traceflow
from traceflow.rank_tables import SHARDED

distributed = pytest.importorskip("distributed", reason="Dask is the optional extra traceflow[cluster]")
KINETO = sorted(str(p) for p in (BUNDLED / "ddp4_sync_stall").glob("rank-*.json.gz"))


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                                  silence_logs=50) as lc, distributed.Client(lc) as c:
        yield c


def _tables(path) -> dict[str, list]:
    con = connect(path)
    names = [(s, t) for s, t in con.execute("SELECT schema_name, table_name FROM duckdb_tables()").fetchall()]
    return {f"{s}.{t}": con.execute(f'SELECT * FROM "{s}"."{t}"').fetchall() for s, t in names}


def _same(a, b):
    """Every table, row for row, as multisets (EXCEPT ALL both ways); the same comments."""
    con = duckdb.connect()
    con.execute(f"ATTACH '{a}' AS a (READ_ONLY)")
    con.execute(f"ATTACH '{b}' AS b (READ_ONLY)")
    comments = """SELECT schema_name, table_name, column_name, comment FROM duckdb_columns()
                  WHERE database_name = ? AND comment IS NOT NULL
                  UNION ALL SELECT schema_name, table_name, '', comment FROM duckdb_tables()
                  WHERE database_name = ? AND comment IS NOT NULL
                  UNION ALL SELECT schema_name, view_name, '', comment FROM duckdb_views()
                  WHERE database_name = ? AND comment IS NOT NULL ORDER BY ALL"""
    assert con.execute(comments, ["a"] * 3).fetchall() == con.execute(comments, ["b"] * 3).fetchall()
    tables = con.execute("SELECT schema_name, table_name FROM duckdb_tables() WHERE database_name = 'a'").fetchall()
    assert len(tables) > 20
    for s, t in tables:
        # the same columns with the same types: a view over Parquet must not widen or narrow one
        assert ([r[:2] for r in con.execute(f'DESCRIBE a."{s}"."{t}"').fetchall()]
                == [r[:2] for r in con.execute(f'DESCRIBE b."{s}"."{t}"').fetchall()]), (s, t)
        for x, y in (("a", "b"), ("b", "a")):
            n = con.execute(f'SELECT count(*) FROM (SELECT * FROM {x}."{s}"."{t}" EXCEPT ALL SELECT * FROM {y}."{s}"."{t}")').fetchone()[0]
            assert n == 0, (s, t, x, y, n)


PER_RANK = tuple(f"{schema}.{table}" for table, (schema, _) in SHARDED.items())


def _parts(folder) -> list[Path]:
    return sorted(Path(folder).glob("*.parts-*"))


def test_a_cluster_ingest_is_the_local_ingest(client, tmp_path):
    """Same rows in every table; the per-rank tables are views over the workers' Parquet shards,
    read in place from the parts folder beside the database (nothing of them copied into it)."""
    traceflow.ingest(KINETO, str(tmp_path / "local.duckdb"))
    traceflow.ingest(KINETO, str(tmp_path / "cluster.duckdb"), cluster=client)
    _same(tmp_path / "local.duckdb", tmp_path / "cluster.duckdb")
    parts, = _parts(tmp_path)
    assert sorted(p.name.split(".", 1)[1] for p in parts.iterdir()) == sorted(
        f"{t.split('.')[1]}.parquet" for t in PER_RANK for _ in KINETO)  # one shard per task (here 1 file each) and table
    con = connect(tmp_path / "cluster.duckdb")
    views = {f"{s}.{v}" for s, v in con.execute("SELECT schema_name, view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
    assert set(PER_RANK) <= views
    assert not {f"{s}.{t}" for s, t in con.execute("SELECT schema_name, table_name FROM duckdb_tables()").fetchall()} & set(PER_RANK)
    # the database holds the cross-rank tables only: far smaller than the local one
    assert os.path.getsize(tmp_path / "cluster.duckdb") < 0.9 * os.path.getsize(tmp_path / "local.duckdb")


def _rewritten(tmp_path, name, edit) -> list[str]:
    """The bundled job with `edit(trace_dict)` applied to each rank's JSON."""
    import json
    out = tmp_path / name
    out.mkdir()
    for f in KINETO:
        d = json.loads(gzip.decompress(Path(f).read_bytes()))
        edit(d)
        (out / Path(f).name.removesuffix(".gz")).write_text(json.dumps(d))
    return sorted(str(p) for p in out.iterdir())


def _rank3_late(d):
    """Rank 3's clock 20 ms late: clock alignment moves it back (the views add the offset)."""
    if d["distributedInfo"]["rank"] == 3:
        d["baseTimeNanoseconds"] += 20_000_000


def _cpu_clock_apart(d):
    """CPU ops and annotations 3 days back (a days-since-boot clock): the workers reconcile them."""
    for e in d["traceEvents"]:
        if e.get("cat") in ("cpu_op", "user_annotation", "python_function") and "ts" in e:
            e["ts"] -= 3 * 86400e6


@pytest.mark.parametrize("edit, column", [(_rank3_late, "clock_offset_ns"), (_cpu_clock_apart, "cpu_clock_offset_ns")])
def test_moved_clocks_give_the_local_rows(client, tmp_path, edit, column):
    """A rank whose clock alignment moves it, and CPU ops on another clock than the GPU's: the
    workers derive before the offsets are known, the views apply them; every row is the local one."""
    files = _rewritten(tmp_path, "in", edit)
    local = traceflow.ingest(files, str(tmp_path / "local.duckdb"))
    cluster = traceflow.ingest(files, str(tmp_path / "cluster.duckdb"), cluster=client)
    assert connect(tmp_path / "cluster.duckdb").execute(f"SELECT count(*) FROM traces WHERE {column} <> 0").fetchone()[0] >= 1
    _same(tmp_path / "local.duckdb", tmp_path / "cluster.duckdb")
    assert sorted(local.warnings) == sorted(cluster.warnings)


@pytest.mark.parametrize("per_worker, edit", [(1, None), (0, _rank3_late)])
def test_tasks_of_several_ranks_give_the_local_rows(client, tmp_path, monkeypatch, per_worker, edit):
    """Several rank files in one task (2 tasks of 2 files; one task of all 4, rank 3's clock late so
    that clock alignment moves it): one shard per table and task, every row the local one's."""
    from traceflow import cluster
    files = _rewritten(tmp_path, "in", edit) if edit else KINETO
    monkeypatch.setattr(cluster, "TASKS_PER_WORKER", per_worker)
    seen: list[str] = []
    local = traceflow.ingest(files, str(tmp_path / "local.duckdb"))
    cluster_run = traceflow.ingest(files, str(tmp_path / "cluster.duckdb"), cluster=client,
                                   progress=lambda path, *_: seen.append(path))
    _same(tmp_path / "local.duckdb", tmp_path / "cluster.duckdb")
    assert sorted(seen) == sorted(files)  # progress still counts files
    tasks = 2 if per_worker else 1
    parts, = _parts(tmp_path)
    names = sorted(p.name for p in parts.iterdir())
    assert len(names) == tasks * len(PER_RANK) and len({n.split(".")[0] for n in names}) == tasks
    con = connect(tmp_path / "cluster.duckdb")
    # every rank's rows come from its file, whichever task held it: its shard id is (file index, process 0)
    assert con.execute("SELECT count(DISTINCT shard), count(DISTINCT trace_id) FROM tf_internal.shards").fetchone() == (4, 4)
    if edit:
        assert con.execute("SELECT count(*) FROM traces WHERE clock_offset_ns <> 0").fetchone()[0] >= 1
    assert sorted(cluster_run.warnings) == sorted(local.warnings)


def test_tasks_are_sized_by_bytes_and_workers(tmp_path):
    """cluster.batches on real rank files: a .gz counted as inflated (its trailer, checked against
    gzip.decompress), no task past the byte target unless one file alone, enough tasks for the workers."""
    from traceflow.cluster import batches, input_bytes
    from traceflow.readers.detect import identify
    inputs = [identify(f) for f in KINETO]
    sizes = [len(gzip.decompress(Path(f).read_bytes())) for f in KINETO]
    assert [input_bytes(i) for i in inputs] == sizes and all(s > i.size for s, i in zip(sizes, inputs))
    assert batches(inputs, 2, target=10**12, per_worker=2) == [[0], [1], [2], [3]]
    assert batches(inputs, 1, target=10**12, per_worker=2) == [[0, 1], [2, 3]]
    assert batches(inputs, 1, target=10**12, per_worker=0) == [[0, 1, 2, 3]]
    assert batches(inputs, 1, target=max(sizes[0] + sizes[1], sizes[2] + sizes[3]), per_worker=0) == [[0, 1], [2, 3]]
    assert batches(inputs, 1, target=min(sizes) - 1, per_worker=0) == [[0], [1], [2], [3]]  # one big file alone


def test_op_work_with_given_peaks_is_the_local_one(client, tmp_path):
    """op_flops and op_work run on the workers: a job with shapes, and --peak-tflops / --peak-gbps
    given, gives the local rows (the peaks reach the workers), and some of them have FLOPs."""
    files = sorted(str(p) for p in (BUNDLED / "ddp2_flops" / "clean").glob("*.json.gz"))
    traceflow.ingest(files, str(tmp_path / "local.duckdb"), peak_tflops=123.0, peak_gbps=2000.0)
    traceflow.ingest(files, str(tmp_path / "cluster.duckdb"), cluster=client, peak_tflops=123.0, peak_gbps=2000.0)
    _same(tmp_path / "local.duckdb", tmp_path / "cluster.duckdb")
    n, peak = connect(tmp_path / "cluster.duckdb").execute(
        "SELECT count(flops), max(peak_tflops) FROM op_work").fetchone()
    assert n > 0 and peak == 123.0


def test_postmortem_on_a_cluster_says_what_the_local_one_says(tmp_path):
    """The report, the Perfetto trace and the verdict read the views as they read tables."""
    out = {}
    for mode, extra in (("local", []), ("cluster", ["--cluster", "local:2"])):
        r = run_cli("postmortem", *KINETO, "-o", str(tmp_path / mode), *extra)
        assert r.returncode == 0, r.stderr
        out[mode] = r.stdout.split("report:")[0]
        assert (tmp_path / mode / "report.html").stat().st_size > 10_000
        assert (tmp_path / mode / "job.perfetto-trace").stat().st_size > 10_000
    assert out["local"] == out["cluster"] and "step" in out["local"]
    assert len(_parts(tmp_path / "cluster")) == 1 and not _parts(tmp_path / "local")


def test_a_cluster_job_attached_to_another_reads_its_own_shards(client, tmp_path):
    """`diff` and `scaling` ATTACH databases side by side: each one's views must join its own
    `traces` and shards table, not those of the database the connection opened."""
    traceflow.ingest(KINETO, str(tmp_path / "a.duckdb"), cluster=client)
    flops = sorted(str(p) for p in (BUNDLED / "ddp2_flops" / "clean").glob("*.json.gz"))
    traceflow.ingest(flops, str(tmp_path / "b.duckdb"), cluster=client)
    q = "SELECT count(*), count(DISTINCT rank), sum(start_ns % 1000), sum(op_id % 1000) FROM {}gpu_ops"
    alone = {n: connect(tmp_path / f"{n}.duckdb").execute(q.format("")).fetchone() for n in "ab"}
    con = connect(tmp_path / "a.duckdb")
    con.execute(f"ATTACH '{tmp_path / 'b.duckdb'}' AS b (READ_ONLY)")
    assert alone["a"] != alone["b"]
    assert con.execute(q.format("")).fetchone() == alone["a"]
    assert con.execute(q.format("b.")).fetchone() == alone["b"]
    r = run_cli("diff", str(tmp_path / "a.duckdb"), str(tmp_path / "b.duckdb"))
    assert r.returncode == 0, r.stderr


def test_replacing_a_cluster_job_replaces_its_parts(client, tmp_path):
    """A new ingest to the same output removes the old database's parts folder once the new one is
    in place; a failed one leaves the old database and its folder as they were. --append cannot add
    to views, and says so."""
    out = tmp_path / "job.duckdb"
    traceflow.ingest(KINETO[:2], str(out), cluster=client)
    first, = _parts(tmp_path)
    bad = tmp_path / "rank-7.json"
    bad.write_text('{"traceEvents": [')
    r = run_cli("ingest", *KINETO[:2], str(bad), "-o", str(out), "--cluster", "local:1")
    assert r.returncode == 3 and len(r.stderr.strip().splitlines()) == 1 and "rank-7.json" in r.stderr
    assert _parts(tmp_path) == [first] and connect(out).execute("SELECT count(*) FROM traces").fetchone()[0] == 2
    r = run_cli("ingest", KINETO[2], "-o", str(out), "--append")
    assert r.returncode != 0 and "--append" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    traceflow.ingest(KINETO, str(out), cluster=client)
    second, = _parts(tmp_path)
    assert second != first and connect(out).execute("SELECT count(*) FROM traces").fetchone()[0] == 4
    traceflow.ingest(KINETO[:1], str(out))  # a local ingest over it: tables again, no parts folder
    assert _parts(tmp_path) == []


def test_a_job_whose_parts_folder_is_gone_says_so(client, tmp_path):
    out = tmp_path / "job.duckdb"
    traceflow.ingest(KINETO[:2], str(out), cluster=client)
    parts, = _parts(tmp_path)
    parts.rename(tmp_path / "elsewhere")
    r = run_cli("query", str(out), "idle-gaps")
    assert r.returncode == 3 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "job.duckdb" in r.stderr and "is gone" in r.stderr


@needs_shared
@pytest.mark.parametrize("rel", ["h100/nsys/ddp4_sync_stall", "public/nsys-ai"])  # nsys-ai: two ranks in one file
def test_a_cluster_ingest_of_nsys_exports_is_the_local_ingest(client, tmp_path, rel):
    files = fixture_files(rel)
    traceflow.ingest(files, str(tmp_path / "local.duckdb"))
    traceflow.ingest(files, str(tmp_path / "cluster.duckdb"), cluster=client)
    _same(tmp_path / "local.duckdb", tmp_path / "cluster.duckdb")


def test_a_worker_killed_during_the_map_changes_nothing(tmp_path, monkeypatch):
    """SIGKILL to the worker process running a task (2 rank files), while it runs: Dask runs the
    task again on the other worker (the nanny starts a new one), which writes its shards anew, and
    the database is the same."""
    from traceflow import cluster
    monkeypatch.setattr(cluster, "TASKS_PER_WORKER", 1)  # 4 files, 2 workers: 2 tasks of 2 files
    traceflow.ingest(KINETO, str(tmp_path / "local.duckdb"))
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                                  silence_logs=50) as lc, distributed.Client(lc) as c:
        pids = c.run(os.getpid)
        killed: list = []

        def killer():
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not killed:
                busy = [w for w, tasks in c.processing().items() if tasks]
                if busy:
                    time.sleep(0.05)  # inside the read
                    os.kill(pids[busy[0]], signal.SIGKILL)
                    killed.append(busy[0])
                time.sleep(0.005)
        t = threading.Thread(target=killer)
        t.start()
        traceflow.ingest(KINETO, str(tmp_path / "cluster.duckdb"), cluster=c)
        t.join()
    assert killed
    _same(tmp_path / "local.duckdb", tmp_path / "cluster.duckdb")


def test_a_bad_rank_file_is_one_line_and_leaves_nothing(tmp_path):
    bad = tmp_path / "rank-9.pt.trace.json.gz"
    raw = gzip.decompress(Path(KINETO[0]).read_bytes())
    bad.write_bytes(gzip.compress(raw[: len(raw) // 3]))
    out = tmp_path / "job.duckdb"
    r = run_cli("ingest", *KINETO[:2], str(bad), "-o", str(out), "--cluster", "local:2")
    assert r.returncode == 3, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "rank-9.pt.trace.json.gz" in r.stderr
    assert not out.exists()
    assert sorted(os.listdir(tmp_path)) == ["rank-9.pt.trace.json.gz"]


@needs_shared
def test_files_of_two_jobs_are_refused_as_locally(client, tmp_path):
    """The workers give each rank's time span, and the one-job check refuses two jobs' files with
    the local ingest's line, without scanning the shards."""
    files = [f for f in fixture_files("public/pipit-perlmutter") if not Path(f).name.startswith("rank")]
    with pytest.raises(traceflow.InputError) as local:
        traceflow.ingest(files, str(tmp_path / "local.duckdb"))
    with pytest.raises(traceflow.InputError) as cluster:
        traceflow.ingest(files, str(tmp_path / "cluster.duckdb"), cluster=client)
    assert str(cluster.value) == str(local.value) and "different jobs" in str(local.value)
    assert not list(tmp_path.iterdir())


def test_cluster_addresses_are_checked(tmp_path):
    r = run_cli("ingest", KINETO[0], "-o", str(tmp_path / "j.duckdb"), "--cluster", "local:zero")
    assert r.returncode != 0 and "local:N" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = run_cli("ingest", KINETO[0], "-o", str(tmp_path / "j.duckdb"), "--cluster", "tcp://127.0.0.1:9")
    assert r.returncode != 0 and "cannot reach the Dask scheduler" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_shards_a_killed_run_left_are_removed_by_the_next(client, tmp_path):
    """kill -9 leaves the parts folder beside the output, with its marker; the next cluster ingest
    of that output removes it (the marker's lock is free), and never one whose lock is held."""
    import fcntl
    stale = tmp_path / "job.duckdb.parts-dead1"
    stale.mkdir()
    (stale / ".traceflow-scratch").write_text("")
    (stale / "f0p0.host_ops.parquet").write_bytes(b"x")
    unmarked = tmp_path / "job.duckdb.shards-mine"  # another name: not traceflow's to remove
    unmarked.mkdir()
    live = tmp_path / "job.duckdb.parts-live1"  # a live run holds its marker's lock
    live.mkdir()
    fd = os.open(live / ".traceflow-scratch", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        traceflow.ingest(KINETO[:1], str(tmp_path / "job.duckdb"), cluster=client)
    finally:
        os.close(fd)
    assert not stale.exists() and unmarked.exists() and live.exists()


@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM", "SIGKILL"])
def test_ctrl_c_or_kill_during_a_cluster_ingest_leaves_no_process(tmp_path, signame):
    """Ctrl-C (to the process group, as a terminal sends it) or SIGTERM (to traceflow alone): one
    line, exit 130 / 143, no process, no shard folder and no Dask scratch space left. kill -9 of traceflow: no process left either (the Dask nannies and workers
    go with their scheduler); the shard folder stays until the next ingest of that output."""
    import subprocess
    import sys
    import uuid
    tag = uuid.uuid4().hex
    env = {**os.environ, "TRACEFLOW_TEST_TAG": tag, "TMPDIR": str(tmp_path)}
    out = tmp_path / "job.duckdb"
    p = subprocess.Popen([sys.executable, "-m", "traceflow.cli", "ingest", *KINETO, "-o", str(out), "--cluster", "local:2"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    # synchronised on the run, not on a sleep: its shard folder beside the output exists once the
    # cluster is being made
    while p.poll() is None and not [x for x in os.listdir(tmp_path) if ".parts-" in x]:
        time.sleep(0.005)
    if signame == "SIGINT":
        os.killpg(p.pid, signal.SIGINT)
    else:
        os.kill(p.pid, getattr(signal, signame))
    _, err = p.communicate(timeout=120)
    if signame != "SIGKILL":
        code, word = (130, "interrupted") if signame == "SIGINT" else (143, "terminated")
        assert p.returncode == code, (p.returncode, err)
        assert [x for x in err.strip().splitlines() if not x.startswith("traceflow: warning:")] == [f"traceflow: {word}"]
        assert not [x for x in os.listdir(tmp_path) if x.startswith(("dask-scratch-space", "traceflow-"))]
    assert "leaked" not in err and "Traceback" not in err
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and tagged_processes(tag):
        time.sleep(0.2)
    assert tagged_processes(tag) == []
    if signame != "SIGKILL":
        assert not [x for x in os.listdir(tmp_path) if ".parts-" in x]

