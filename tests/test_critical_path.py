"""Issue 8: critical path across ranks, clock alignment between hosts."""
from __future__ import annotations

import gzip
import json
import shutil
import sqlite3

import pytest
from conftest import connect, fixture_files, needs_shared, run_cli, truth


def recompute_critical_path(con, **walk_options) -> list[list[int]]:
    """The critical path's three modules (graph, walk, naming) run again, as ingest runs them;
    returns the walk's batches of steps."""
    from traceflow import graph
    return graph.run(con, names=graph.CRITICAL_PATH_MODULES, **walk_options).timings["walk_batches"]


PATH_ROWS = "select step, ordinal, rank, kind, start_ns, end_ns, tid, op_id, name from critical_path order by step, ordinal"


def computed_paths(source, tmp_path, **variants) -> tuple[list, list]:
    """The critical path computed again on a copy of `source` per variant (name -> options of
    critical_path.walk); returns the copies and each one's path rows."""
    import duckdb

    from traceflow.duck import use_internal_schema
    paths = []
    for name, options in variants.items():
        path = tmp_path / f"{name}.duckdb"
        shutil.copy(source, path)
        con = duckdb.connect(str(path))
        use_internal_schema(con)
        recompute_critical_path(con, **options)
        con.close()
        paths.append(path)
    return paths, [connect(p).execute(PATH_ROWS).fetchall() for p in paths]

pytestmark = needs_shared
MULTI = ["h100/nsys/ddp4_sync_stall", "h100/nsys/ddp4_straggler", "h100/kineto/ddp4_sync_stall",
         "h100/kineto/ddp4_straggler", "public/param-dlrm8", "public/hta-2rank", "public/nsys-ai"]
KINDS = {"gpu_compute", "gpu_comm", "gpu_memory", "peer_wait", "launch", "host_cpu", "host_sync", "idle"}


@pytest.mark.parametrize("rel", MULTI + ["h100/kineto/launch_bound", "h100/nsys/graphs"])
def test_segments_tile_each_step(ingested, rel):
    db = connect(ingested(rel))
    walls = dict(db.execute("select step, max(end_ns) - min(start_ns) from step_windows group by step").fetchall())
    assert walls
    for step, wall in walls.items():
        segs = db.execute("select start_ns, end_ns, kind from critical_path where step = ? order by ordinal", [step]).fetchall()
        assert segs, step
        assert all(k in KINDS for *_, k in segs)
        assert all(b > a for a, b, _ in segs)
        assert all(segs[i][1] == segs[i + 1][0] for i in range(len(segs) - 1)), "contiguous, no overlap"
        assert sum(b - a for a, b, _ in segs) == wall


@pytest.mark.parametrize("rel", ["h100/nsys/ddp4_sync_stall", "h100/kineto/ddp4_sync_stall"])
def test_sync_stall_on_the_path(ingested, rel):
    db = connect(ingested(rel))
    stall = next(t for t in truth(rel, 3) if t["step"] == 4)
    lo, hi = stall["start_unix_ns"], stall["start_unix_ns"] + stall["dur_ns"]
    segs = db.execute("select ordinal, rank, kind, start_ns, end_ns, op_id from critical_path where step = 4 order by ordinal").fetchall()
    host = [s for s in segs if s[1] == 3 and s[2] in ("host_cpu", "host_sync", "launch")]
    inside = sum(max(0, min(e, hi) - max(a, lo)) for _, _, _, a, e, _ in host)
    assert inside >= 35e6
    last_host = max(s[0] for s in host if min(s[4], hi) > max(s[3], lo))
    # after the stall, the path reaches the collective the other ranks waited in
    coll = db.execute("""select op_id from collectives where rank = 3 and start_ns > ? order by start_ns limit 1""", [hi]).fetchone()[0]
    later = [s for s in segs if s[0] > last_host and s[2] == "gpu_comm"]
    assert later and later[0][5] == coll and later[0][1] == 3
    waits = db.execute("""select sum(wait_ns) from collective_waits w join collectives c using (comm, step, seq)
                          where c.op_id = ? and w.rank <> 3""", [coll]).fetchone()[0]
    assert waits >= 60e6
    if "nsys" in rel:
        names = {db.execute("select name from critical_path where step = 4 and ordinal = ?", [s[0]]).fetchone()[0] for s in host
                 if min(s[4], hi) - max(s[3], lo) > 30e6}
        assert names == {"clock_nanosleep"}


@pytest.mark.parametrize("rel", ["h100/nsys/ddp4_straggler", "h100/kineto/ddp4_straggler"])
def test_hidden_stall_not_on_path(ingested, rel):
    db = connect(ingested(rel))
    longest = db.execute("""select max(dur_ns) from critical_path where step = 4 and rank = 3
                            and kind in ('host_cpu', 'host_sync', 'launch')""").fetchone()[0]
    assert (longest or 0) < 10e6


def test_single_rank_launch_bound_path(ingested):
    db = connect(ingested("h100/kineto/launch_bound"))
    for step in (3, 4, 5):
        by_kind = dict(db.execute("select kind, sum(dur_ns) from critical_path where step = ? group by kind", [step]).fetchall())
        # the 256 MiB pageable copy is on the path, the host blocked on it rather than launching ahead
        copy = db.execute("""select c.dur_ns, g.bytes from critical_path c join gpu_ops g using (op_id)
                             where c.step = ? and c.kind = 'gpu_memory' order by c.dur_ns desc limit 1""", [step]).fetchone()
        assert copy[1] == 268435456 and copy[0] > 10e6
        assert by_kind.get("host_sync", 0) > 0
        # the tiny-kernel loop: launch and host time dominate the short GPU compute segments
        loop = db.execute("""with l as (select min(g.start_ns) a, max(g.end_ns) b from gpu_ops g
                                        where g.step = ? and g.kind = 'kernel' and (g.name ilike '%Mul%' or g.name ilike '%add<%'))
                             select kind, sum(least(c.end_ns, l.b) - greatest(c.start_ns, l.a)), max(c.dur_ns)
                             from critical_path c, l where c.step = ? and c.end_ns > l.a and c.start_ns < l.b group by kind""",
                          [step, step]).fetchall()
        k = {r[0]: r[1] for r in loop}
        assert k["launch"] + k.get("host_cpu", 0) > 4 * k["gpu_compute"]
        assert k["launch"] > k["gpu_compute"]
        tiny = db.execute("""select max(c.dur_ns) from critical_path c join gpu_ops g using (op_id)
                             where c.step = ? and c.kind = 'gpu_compute' and (g.name ilike '%Mul%' or g.name ilike '%add<%')""",
                          [step]).fetchone()[0]
        assert tiny < 50_000


@pytest.mark.parametrize("rel", MULTI)
def test_peer_wait_on_path_equals_collective_waits(ingested, rel):
    """Cross-check: per step, peer_wait on the path = the waits collective-waits reports for the
    (collective, rank) the path charges. The walk follows the late peer, so it charges the
    collective to the rank that started it last."""
    db = connect(ingested(rel))
    rows = db.execute("""
        with p as (select step, sum(dur_ns) filter (where kind = 'peer_wait') pw from critical_path group by step),
             on_path as (select distinct step, rank, op_id from critical_path where kind in ('gpu_comm', 'peer_wait')),
             c as (select cp.step, sum(w.wait_ns) w from on_path cp
                   join collectives c on c.op_id = cp.op_id
                   join collective_waits w on w.comm = c.comm and w.step = c.step and w.seq = c.seq and w.rank = cp.rank
                   group by cp.step)
        select p.step, coalesce(p.pw, 0), coalesce(c.w, 0) from p left join c using (step)""").fetchall()
    assert rows
    for step, pw, w in rows:
        assert pw == w, step
    n_comm = db.execute("select count(*) from critical_path cp join collectives c using (op_id) where cp.kind = 'gpu_comm'").fetchone()[0]
    if rel.startswith("h100"):
        assert n_comm > 0


def test_cp_edges_table(ingested):
    db = connect(ingested("h100/nsys/ddp4_sync_stall"))
    kinds = dict(db.execute("select kind, count(*) from cp_edges group by kind").fetchall())
    assert {"stream", "launch", "program", "collective", "sync"} <= set(kinds)
    n_coll = db.execute("""select sum(n * (n - 1)) from (select count(*) n from collectives group by comm, step, seq)""").fetchone()[0]
    assert kinds["collective"] == n_coll


def test_cli_prints_summary(ingested):
    db = ingested("h100/nsys/ddp4_sync_stall")
    r = run_cli("query", db, "critical-path-summary", "--step", "4", "--format", "json")
    rows = json.loads(r.stdout)
    assert abs(sum(x["share_pct"] for x in rows) - 100) < 0.1
    from traceflow.terminal import critical_path_lines as summary_lines
    lines = summary_lines(connect(db), 4)
    assert lines[0].startswith("step 4:") and "rank 3" in lines[0]


# --- clock alignment -------------------------------------------------------------------------

SHIFT = 5_000_000


def shifted_nsys(tmp_path, rel, rank, shift=SHIFT):
    out = tmp_path / f"shifted{shift}"
    out.mkdir()
    for f in fixture_files(rel):
        dst = out / f.split("/")[-1]
        shutil.copyfile(f, dst)
        if dst.name == f"rank{rank}.sqlite":
            c = sqlite3.connect(dst)
            c.execute("update TARGET_INFO_SESSION_START_TIME set utcEpochNs = utcEpochNs + ?", [shift])
            c.execute("update TARGET_INFO_SYSTEM_ENV set value = 'otherhost' where name = 'Hostname'")
            c.commit()
            c.close()
    return sorted(str(p) for p in out.iterdir())


def shifted_kineto(tmp_path, rel, rank, shift=SHIFT):
    out = tmp_path / f"shifted{shift}"
    out.mkdir()
    for f in fixture_files(rel):
        d = json.load(gzip.open(f))
        if d["distributedInfo"]["rank"] == rank:
            d["baseTimeNanoseconds"] += shift
        d["hostname"] = f"host{d['distributedInfo']['rank'] == rank}"
        (out / f.split("/")[-1].replace(".gz", "")).write_text(json.dumps(d))
    return sorted(str(p) for p in out.iterdir())


@pytest.mark.parametrize("rel,make", [("h100/nsys/ddp4_straggler", shifted_nsys), ("h100/kineto/ddp4_straggler", shifted_kineto)])
def test_alignment_undoes_a_shift(tmp_path, rel, make):
    """Rank 2 marked as on another host, once as recorded and once 5 ms late: the estimated offset
    moves by -5 ms and the critical path stays the same."""
    import traceflow
    traceflow.ingest(make(tmp_path, rel, 2, shift=0), str(tmp_path / "b.duckdb"))
    base = connect(tmp_path / "b.duckdb")
    files = make(tmp_path, rel, 2)
    traceflow.ingest(files, str(tmp_path / "s.duckdb"))
    s = connect(tmp_path / "s.duckdb")
    off0 = dict(base.execute("select rank, clock_offset_ns from traces").fetchall())
    off1 = dict(s.execute("select rank, clock_offset_ns from traces").fetchall())
    others = [r for r in off1 if r != 2]
    # rank 2 vs the reference clock: the offset moved by -5 ms
    delta = (off1[2] - off1[0]) - (off0[2] - off0[0])
    assert abs(delta + SHIFT) <= 0.5e6, (off0, off1)
    assert all(abs(off1[r] - off0[r]) <= 0.5e6 for r in others)
    assert s.execute("select count(*) from traces where clock_spread_ns is not null").fetchone()[0] == 4
    q = "select step, ordinal, rank, kind, start_ns, end_ns from critical_path order by step, ordinal"
    a, b = base.execute(q).fetchall(), s.execute(q).fetchall()
    kinds = lambda rows: [(r[0], r[2], r[3]) for r in rows if r[5] - r[4] > 1e6]
    assert kinds(a) == kinds(b)
    ta = [(r[4], r[5]) for r in a if r[5] - r[4] > 1e6]
    tb = [(r[4], r[5]) for r in b if r[5] - r[4] > 1e6]
    ref = off1[0] - off0[0]
    assert all(abs((x[0] - ref) - y[0]) <= 0.5e6 and abs((x[1] - ref) - y[1]) <= 0.5e6 for x, y in zip(tb, ta))


@pytest.mark.parametrize("rel", ["h100/nsys/ddp4_sync_stall", "h100/kineto/ddp4_straggler", "h100/kineto/ddp4_sync_stall"])
def test_one_host_needs_no_offsets(ingested, rel):
    """Same host (nsys) or unknown hosts that collectives do not contradict (Kineto): no offsets."""
    db = connect(ingested(rel))
    assert db.execute("select count(*) from traces where clock_offset_ns <> 0").fetchone()[0] == 0


def test_align_off_keeps_the_shift(tmp_path):
    import traceflow
    files = shifted_nsys(tmp_path, "h100/nsys/ddp4_straggler", 2)
    traceflow.ingest(files, str(tmp_path / "s.duckdb"), align="off")
    s = connect(tmp_path / "s.duckdb")
    assert s.execute("select count(*) from traces where clock_offset_ns <> 0").fetchone()[0] == 0


@pytest.mark.parametrize("rel", ["h100/nsys/ddp4_sync_stall", "h100/kineto/launch_bound"])
def test_host_stretches_with_numpy_equal_call_by_call(ingested, rel, tmp_path):
    """The walk takes long host stretches at once with numpy; the call-by-call loop is the reference."""
    _, (a, b) = computed_paths(ingested(rel), tmp_path, numpy={"scalar_host_calls": 0}, loop={"scalar_host_calls": 10**9})
    assert len(a) > 100 and a == b


@pytest.mark.parametrize("rel", ["h100/nsys/ddp4_sync_stall", "h100/kineto/ddp4_straggler", "h100/nsys/graphs", "public/hta-2rank"])
def test_host_calls_loaded_per_step_equal_all_at_once(ingested, rel, tmp_path):
    """A big job loads the host calls a few steps at a time; with one step per batch the path is
    the same, row for row, as with every call loaded at once."""
    import duckdb

    from traceflow import critical_path
    from traceflow.duck import use_internal_schema
    source = ingested(rel)
    batches = []
    paths = []
    for name, budget in (("batched", 1), ("whole", 10**12)):
        path = tmp_path / f"{name}.duckdb"
        shutil.copy(source, path)
        con = duckdb.connect(str(path))
        use_internal_schema(con)
        # a thread silent from before a step's start well into it: the walk must still see its earlier calls
        con.execute("""DELETE FROM host_ops WHERE rank = 0 AND start_ns BETWEEN
                           (SELECT min(start_ns) - 50000000 FROM step_windows WHERE step = (SELECT min(step) + 1 FROM step_windows))
                           AND (SELECT (min(start_ns) + max(end_ns)) // 2 FROM step_windows WHERE step = (SELECT min(step) + 1 FROM step_windows))""")
        batches.append(recompute_critical_path(con, host_calls_per_batch=budget))
        con.close()
        paths.append(path)
    assert len(batches[0]) > 1 and len(batches[1]) == 1
    # a window's load still knows every thread, and which ones had calls before it
    con = duckdb.connect(str(paths[0]))
    use_internal_schema(con)
    job = critical_path.Graph.from_db(con)
    lo, hi = con.execute("SELECT min(start_ns), max(end_ns) FROM step_windows WHERE step = (SELECT min(step) + 1 FROM step_windows)").fetchone()
    job.window(lo, hi)
    for (rank,) in con.execute("SELECT DISTINCT rank FROM cp_host_nodes").fetchall():
        job.ensure(rank)
    expect = dict(con.execute(f"SELECT (rank, tid), bool_or(end_ns < {lo}) FROM cp_host_nodes GROUP BY rank, tid").fetchall())
    assert {k: job.has_earlier_calls(k) for k in job.threads} == {tuple(k): v for k, v in expect.items()}
    assert any(expect.values()) and len(job.h_start) < con.execute("SELECT count(*) FROM cp_host_nodes").fetchone()[0]
    con.close()
    q = "select step, ordinal, rank, kind, start_ns, end_ns, tid, op_id, name from critical_path order by step, ordinal"
    a, b = (connect(p).execute(q).fetchall() for p in paths)
    assert len(a) > 100 and a == b


@pytest.mark.parametrize("rel", ["h100/nsys/ddp4_sync_stall", "public/nsys-ai"])
def test_host_time_of_a_thread_is_one_segment(ingested, rel):
    """Adjacent host_cpu pieces of one thread are one segment (a polling loop is not millions of rows)."""
    db = connect(ingested(rel))
    adjacent = db.execute("""select count(*) from (
            select kind, rank, tid, start_ns, lag(kind) over w k0, lag(rank) over w r0, lag(tid) over w t0, lag(end_ns) over w e0
            from critical_path window w as (partition by step order by ordinal))
        where kind = 'host_cpu' and k0 = 'host_cpu' and r0 = rank and t0 = tid and e0 = start_ns""").fetchone()[0]
    assert adjacent == 0


@pytest.mark.parametrize("rel", ["public/param-dlrm8", "h100/kineto/ddp4_straggler"])
def test_the_walk_loads_only_the_ranks_it_stands_on(ingested, tmp_path, rel):
    """A rank's GPU ops and host calls load when the walk first stands on it: on these jobs a
    step's path visits fewer ranks than the job has. Loading ranks one by one, all together from
    the first, or past a threshold gives the same path, row for row."""
    import duckdb
    import numpy as np

    from traceflow import critical_path
    from traceflow.duck import use_internal_schema
    paths, rows = computed_paths(ingested(rel), tmp_path, default={}, together={"ranks_one_by_one": 0},
                                 then_all={"ranks_one_by_one": 1})
    assert len(rows[0]) > 10 and rows[0] == rows[1] == rows[2]

    con = duckdb.connect(str(paths[0]), read_only=True)
    use_internal_schema(con)
    n_ranks = con.execute("SELECT count(DISTINCT rank) FROM traces").fetchone()[0]
    for step, t0, last, rank in con.execute("""
            SELECT step, (SELECT min(start_ns) FROM step_windows w WHERE w.step = g.step),
                   arg_max(op_id, (end_ns, -op_id)), arg_max(rank, (end_ns, -op_id))
            FROM gpu_ops g WHERE step IS NOT NULL GROUP BY step ORDER BY step""").fetchall():
        graph = critical_path.Graph.from_db(con)
        graph.window()
        graph.ensure(rank)
        segs = critical_path.Walk(graph, t0).run(int(graph.position(np.array([last]))[0]))
        on_path = {int(r) for r in segs[:, 0]}
        assert on_path <= set(graph.loaded_ranks) and len(graph.loaded_ranks) < n_ranks, (step, graph.loaded_ranks)
        # a rank not loaded is known by its collectives only
        assert set(np.unique(graph.rank[graph.api >= 0]).tolist()) <= set(graph.loaded_ranks)
    con.close()
