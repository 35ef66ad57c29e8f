"""Issue 4: query packs, checked against plain-Python computations and the fixtures' truth."""
from __future__ import annotations

import collections
import gzip
import json
import sqlite3

import pytest
from conftest import connect, fixture_files, needs_shared, run_cli, truth
from intervals import clip, difference, gaps, intersect, measure, subtract, union

pytestmark = needs_shared
BOTH = ["h100/nsys/ddp4_sync_stall", "h100/kineto/ddp4_sync_stall"]
ALL_FIXTURES = ["h100/nsys/ddp4_sync_stall", "h100/nsys/ddp4_straggler", "h100/nsys/graphs",
                "h100/kineto/ddp4_sync_stall", "h100/kineto/ddp4_straggler", "h100/kineto/graphs",
                "h100/kineto/launch_bound", "public/pipit-perlmutter/saxpy-mpi-cuda_nsys_perlmutter0.sqlite", "public/pipit-perlmutter/perlmutter-cloverleaf-cuda.sqlite", "public/nsys-ai", "public/nvidia-fuser",
                "public/param-dlrm8", "public/hta-2rank"]


def ops_by_rank(db, own_only=False):
    """(step, category, start, end) per rank; own_only: the ops that set the windows (those whose
    step came from their launch, or from the host range on ranks without launches / whole-trace steps)."""
    out = collections.defaultdict(list)
    own = """ and (api_start_ns is not null or rank not in (select rank from gpu_ops where api_start_ns is not null)
                   or rank in (select rank from steps where source = 'whole trace'))""" if own_only else ""
    for r in db.execute(f"select rank, step, category, start_ns, end_ns from gpu_ops where true {own}").fetchall():
        out[r[0]].append(r[1:])
    return out


def windows(ops):
    """Step windows recomputed in Python (docs/step-attribution.md): steps in order of their first own op;
    a window runs from the previous window's end to the last end of the own ops so far, clipped at the
    next step's first op."""
    first, last = {}, {}
    for step, _, a, b in ops:
        if step is None:
            continue
        first[step] = min(first.get(step, a), a)
        last[step] = max(last.get(step, b), b)
    order = sorted(first, key=lambda s: (first[s], s))
    out, prev_end, run_end = {}, None, None
    for i, s in enumerate(order):
        run_end = last[s] if run_end is None else max(run_end, last[s])
        end = run_end if i + 1 == len(order) else min(run_end, first[order[i + 1]])
        out[s] = (first[s] if prev_end is None else prev_end, end)
        prev_end = end
    return out


# --- idle gaps, stragglers: the truth --------------------------------------------------------

@pytest.mark.parametrize("rel", BOTH)
def test_sync_stall_gap_on_rank3(ingested, rel):
    db = connect(ingested(rel))
    stall = next(t for t in truth(rel, 3) if t["step"] == 4)
    gap = db.execute("""select start_ns, dur_ns, cause, host_activity from idle_gaps
                        where rank = 3 and step = 4 order by dur_ns desc limit 1""").fetchone()
    assert 40e6 <= gap[1] <= 46e6
    assert abs(gap[0] - stall["start_unix_ns"]) <= 2e6
    assert gap[2] == "host_late"
    if "nsys" in rel:
        assert gap[3] == "clock_nanosleep"
    # Independently: the longest stretch with no GPU op of rank 3 around the stall.
    ivs = [(a, b) for a, b in db.execute("select start_ns, end_ns from gpu_ops where rank = 3").fetchall()]
    lo, hi = stall["start_unix_ns"] - 10**8, stall["start_unix_ns"] + 10**8
    longest = max(gaps(ivs, lo, hi), key=lambda g: g[1] - g[0])
    assert (longest[0], longest[1] - longest[0]) == (gap[0], gap[1])


@pytest.mark.parametrize("rel", BOTH)
def test_stall_makes_rank3_the_straggler(ingested, rel):
    db = connect(ingested(rel))
    stall = next(t for t in truth(rel, 3) if t["step"] == 4)
    end = stall["start_unix_ns"] + stall["dur_ns"]
    first = db.execute("""select comm, step, seq from collectives where rank = 3 and start_ns > ?
                          order by start_ns limit 1""", [end]).fetchone()
    rows = db.execute("""select rank, start_ns, end_ns, wait_ns from collective_waits
                         where comm = ? and step = ? and seq = ? order by rank""", first).fetchall()
    assert max(rows, key=lambda r: r[1])[0] == 3
    # wait recomputed from the raw starts
    last_start = max(r[1] for r in rows)
    waits = {r[0]: min(last_start - r[1], r[2] - r[1]) for r in rows}
    assert waits == {r[0]: r[3] for r in rows}
    assert sum(w for k, w in waits.items() if k != 3) >= 60e6
    s = db.execute("select last_rank, total_wait_ns from stragglers where comm = ? and step = ? and seq = ?", first).fetchone()
    assert s == (3, sum(waits.values()))
    by_rank = db.execute("""select last_rank, sum(total_wait_ns) w from stragglers where step = 4
                            group by 1 order by w desc""").fetchall()
    assert by_rank[0][0] == 3


def test_matching_survives_different_windows(ingested):
    db = connect(ingested("h100/kineto/ddp4_sync_stall"))
    raw = dict(db.execute("select rank, count(*) from gpu_ops where category = 'communication' group by rank").fetchall())
    assert raw == {0: 28, 1: 21, 2: 28, 3: 28}
    groups = db.execute("select count(distinct rank), count(distinct op) from collectives group by comm, step, seq").fetchall()
    assert len(groups) == 21 and set(groups) == {(4, 1)}


@pytest.mark.parametrize("rel", ["h100/nsys/ddp4_straggler", "h100/kineto/ddp4_straggler"])
def test_hidden_stall_invents_no_gap(ingested, rel):
    db = connect(ingested(rel))
    longest = db.execute("select max(dur_ns) from idle_gaps where rank = 3 and step = 4").fetchone()[0]
    assert longest < 10e6
    ivs = db.execute("select start_ns, end_ns from gpu_ops where rank = 3").fetchall()
    w = db.execute("select start_ns, end_ns from step_windows where rank = 3 and step = 4").fetchone()
    assert max(b - a for a, b in gaps(ivs, *w)) == longest


@pytest.mark.parametrize("rel", ALL_FIXTURES)
def test_host_activity_is_the_innermost_covering_span(ingested, rel):
    """host_activity recomputed with numpy: of the host calls on host_tid running at the gap's
    midpoint that fill at least half of the gap (issue 41: a call running at the midpoint of a 1,439 ms
    stretch took 0.92 ms of it), the shortest (calls nest, so the innermost); where none does, the
    shortest NVTX / annotation range there. Ties may name either."""
    import numpy as np
    db = connect(ingested(rel))
    pts = db.execute("""select rank, host_tid, start_ns + dur_ns // 2, host_activity, start_ns, end_ns from idle_gaps
                        where dur_ns >= 5000 and host_tid is not null""").fetchall()
    spans = {}
    for table, where in (("host_ops", "true"), ("ranges", "not on_gpu")):
        for rank, tid in {(p[0], p[1]) for p in pts}:
            rows = db.execute(f"select name, start_ns, end_ns from {table} where rank = ? and tid = ? and {where}",
                              [rank, tid]).fetchall()
            names = [r[0] for r in rows]
            a = np.array([r[1:] for r in rows], dtype=np.int64).reshape(-1, 2)
            spans[table, rank, tid] = names, a[:, 0], a[:, 1]
    for rank, tid, mid, got, g0, g1 in pts:
        want = None
        for table in ("host_ops", "ranges"):
            names, lo, hi = spans[table, rank, tid]
            fills = 2 * (np.minimum(hi, g1) - np.maximum(lo, g0)) >= g1 - g0 if table == "host_ops" else True
            hit = np.flatnonzero((lo <= mid) & (hi >= mid) & fills)
            if len(hit):
                dur = hi[hit] - lo[hit]
                want = {names[i] for i in hit[dur == dur.min()]}
                break
        assert (got in want) if want else got is None, (rank, mid, got, want)
    assert len(pts) > 0


# --- launch overhead ---------------------------------------------------------------------------

def test_launch_bound_loop(ingested):
    """The mul/add loop, from the JSON with plain Python: issue time of each kernel (the CPU op that
    launched it), GPU idle inside [issue, start]; exposed launch time is the largest share of the loop."""
    rel = "h100/kineto/launch_bound"
    path = fixture_files(rel)[0]
    ev = [e for e in json.load(gzip.open(path))["traceEvents"] if e.get("ph") == "X"]
    base = json.load(gzip.open(path))["baseTimeNanoseconds"]
    ns = lambda us: base + round(us * 1000)
    kernels = [e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    step4 = next(e for e in ev if e["name"] == "ProfilerStep#4" and e["cat"] == "user_annotation")
    s4a, s4b = ns(step4["ts"]), ns(step4["ts"] + step4["dur"])
    rt = {e["args"]["correlation"]: e for e in ev if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    cpu = {e["args"]["External id"]: e for e in ev if e.get("cat") == "cpu_op" and "External id" in e.get("args", {})}
    loop = [k for k in kernels if ("Mul" in k["name"] or "add<" in k["name"]) and s4a <= ns(rt[k["args"]["correlation"]]["ts"]) < s4b]
    loop = sorted(loop, key=lambda k: k["ts"])[:600]
    assert len(loop) == 600
    lo, hi = ns(loop[0]["ts"]), ns(loop[-1]["ts"] + loop[-1]["dur"])
    busy = union([(ns(k["ts"]), ns(k["ts"] + k["dur"])) for k in kernels])
    idle = gaps(busy, lo, hi)
    exposed = []
    for k in loop:
        call = rt[k["args"]["correlation"]]
        issuer = cpu.get(call["args"].get("External id"))
        issue = ns(issuer["ts"]) if issuer and issuer["ts"] <= call["ts"] else ns(call["ts"])
        exposed.append((issue, ns(k["ts"])))
    exposed_idle = measure(intersect(union(exposed), idle))
    compute = measure(clip(busy, lo, hi))
    other_idle = measure(idle) - exposed_idle
    assert exposed_idle > compute and exposed_idle > other_idle, (exposed_idle, compute, other_idle)
    db = connect(ingested(rel))
    got = db.execute("""select sum(exposed_ns) from launch_overhead where step = 4 and op_id in
                        (select op_id from gpu_ops where start_ns >= ? and end_ns <= ? and kind = 'kernel')""", [lo, hi]).fetchone()[0]
    assert abs(got - exposed_idle) < 0.1e6
    flags = db.execute("select name, launch_bound from launch_overhead_summary where name ilike '%Mul%' or name ilike '%add<%'").fetchall()
    assert flags and all(f for _, f in flags)


def test_pageable_copy_in_sync(ingested):
    db = connect(ingested("h100/kineto/launch_bound"))
    rows = db.execute("""select s.step, s.blocked_ns, s.reason, g.bytes from sync s join gpu_ops g on g.name = s.gpu_op
                         and g.correlation_id = (select correlation_id from host_ops h where h.op_id = s.op_id)
                         where s.reason = 'pageable memcpy'""").fetchall()
    assert {r[0] for r in rows} == {3, 4, 5}
    assert all(r[3] == 268435456 and r[1] > 10e6 for r in rows)


@pytest.mark.parametrize("rel", ["h100/kineto/graphs", "h100/nsys/graphs"])
def test_graph_kernels_counted_and_eager_loop_launch_bound(ingested, rel):
    db = connect(ingested(rel))
    if "nsys" in rel:
        c = sqlite3.connect(fixture_files(rel)[0])
        want = c.execute("select count(*) from CUPTI_ACTIVITY_KIND_KERNEL where graphNodeId is not null").fetchone()[0]
        assert want > 0
        assert db.execute("select count(*) from gpu_ops where graph_id is not null and kind = 'kernel'").fetchone()[0] == want
    replayed = db.execute("""select step, count(*) from gpu_ops where kind = 'kernel' and api_name ilike 'cudaGraphLaunch%'
                             group by step order by step""").fetchall()
    assert len(replayed) >= 3 and len({n for _, n in replayed}) == 1 and replayed[0][1] > 10
    lb = {r[0]: r[1:] for r in db.execute(
        "select step, launch_bound, launch_exposed_ns, stall_ns, wall_ns from launch_bound_steps").fetchall()}
    assert lb[3][0] is False and lb[5][0] is False
    # step 4's eager loop: launch-bound counting its first launch's one-time stall (a lazy module load,
    # launch_overhead.stall: 5.4 ms in one cudaLaunchKernel on nsys, 1,000x its median call), which no
    # longer makes a step launch-bound (issue 41): Kineto's recurring launch idle (the CPU ops' dispatch
    # counted) is 31 % of the window, still launch-bound; nsys's (launch calls alone) 17 %, not
    bound, exposed, stall, wall = lb[4]
    assert exposed + stall >= 0.3 * wall and stall > 5e6
    assert bound is ("kineto" in rel) and bound == (exposed >= 0.3 * wall)


# --- exposed communication and the step identity ----------------------------------------------

@pytest.mark.parametrize("rel", BOTH + ["public/param-dlrm8"])
def test_exposed_comm_matches_interval_math(ingested, rel):
    db = connect(ingested(rel))
    got = {(r[0], r[1]): r[2:] for r in db.execute("select rank, step, comm_ns, overlap_pct, exposed_ns, compute_ns from exposed_comm").fetchall()}
    assert got
    all_ops = ops_by_rank(db)
    for rank, own in ops_by_rank(db, own_only=True).items():
        ops = all_ops[rank]
        for step, (lo, hi) in windows(own).items():
            comm = clip([(a, b) for _, c, a, b in ops if c == "communication"], lo, hi)
            comp = clip([(a, b) for _, c, a, b in ops if c == "compute"], lo, hi)
            comm_ns, exposed = measure(comm), subtract(comm, comp)
            g = got[(rank, step)]
            assert (g[0], g[2], g[3]) == (comm_ns, exposed, measure(comp)), (rank, step)
            if comm_ns:
                assert 0 <= g[1] <= 100


@pytest.mark.parametrize("rel", BOTH + ["public/param-dlrm8"])
def test_exposed_comm_segments_match_interval_math(ingested, rel):
    """The stretches drawn in the Perfetto trace: each rank's communication minus its compute, exactly."""
    db = connect(ingested(rel))
    got = collections.defaultdict(list)
    for rank, a, b in db.execute("select rank, start_ns, end_ns from exposed_comm_segments order by rank, start_ns").fetchall():
        got[rank].append((a, b))
    assert got
    for rank, ops in ops_by_rank(db).items():
        comm = [(a, b) for _, c, a, b in ops if c == "communication"]
        comp = [(a, b) for _, c, a, b in ops if c == "compute"]
        assert got[rank] == difference(comm, comp), rank


@pytest.mark.parametrize("rel", ALL_FIXTURES)
def test_step_breakdown_adds_up(ingested, rel):
    db = connect(ingested(rel))
    rows = db.execute("select wall_ns, compute_ns, exposed_comm_ns, exposed_memory_ns, idle_ns, busy_ns from step_breakdown").fetchall()
    assert rows
    for wall, c, xc, xm, idle, busy in rows:
        assert c + xc + xm + idle == wall
        assert busy + idle == wall


def test_step_breakdown_matches_interval_math(ingested):
    db = connect(ingested("h100/nsys/ddp4_sync_stall"))
    got = {(r[0], r[1]): r[2:] for r in db.execute("select rank, step, wall_ns, busy_ns, compute_ns from step_breakdown").fetchall()}
    all_ops = ops_by_rank(db)
    for rank, own in ops_by_rank(db, own_only=True).items():
        ops = all_ops[rank]
        for step, (lo, hi) in windows(own).items():
            busy = measure(clip([(a, b) for _, _, a, b in ops], lo, hi))
            comp = measure(clip([(a, b) for _, c, a, b in ops if c == "compute"], lo, hi))
            assert got[(rank, step)] == (hi - lo, busy, comp)


# --- every pack on every fixture ---------------------------------------------------------------

PACKS = ["steps", "idle-gaps", "idle-gaps-summary", "launch-overhead", "launch-overhead-summary", "launch-bound",
         "exposed-comm", "collective-waits", "stragglers", "stragglers-by-rank", "kernels", "sync",
         "critical-path", "critical-path-summary"]
COLUMNS = {
    "steps": "rank step start_ns end_ns wall_ns busy_ns idle_ns compute_ns exposed_comm_ns exposed_memory_ns",
    "idle-gaps": "rank step start_ns end_ns dur_ns cause next_op host_activity",
    "launch-overhead": "rank step name api_start_ns api_ns queue_ns latency_ns exposed_ns",
    "exposed-comm": "rank step comm_ns overlap_pct exposed_ns",
    "collective-waits": "comm step seq op rank start_ns end_ns wait_ns transfer_ns",
    "stragglers": "comm step seq op last_rank last_by_ns total_wait_ns",
    "critical-path": "step ordinal rank kind name start_ns end_ns",
    "kernels": "rank name count total_ns mean_ns busy_share",
    "sync": "rank step name start_ns end_ns blocked_ns",
}


@pytest.mark.parametrize("rel", ALL_FIXTURES)
def test_every_pack_runs(ingested, rel):
    db = ingested(rel)
    for pack in PACKS:
        r = run_cli("query", db, pack, "--format", "json")
        assert r.returncode == 0, (pack, r.stderr)
        rows = json.loads(r.stdout)
        if pack in COLUMNS and rows:
            assert set(COLUMNS[pack].split()) <= set(rows[0]), pack


def test_query_filters_and_formats(ingested):
    db = ingested("h100/nsys/ddp4_sync_stall")
    r = run_cli("query", db, "idle-gaps", "--rank", "3", "--step", "4", "--format", "json")
    rows = json.loads(r.stdout)
    assert rows and {(x["rank"], x["step"]) for x in rows} == {(3, 4)}
    r = run_cli("query", db, "stragglers", "--format", "csv")
    assert r.returncode == 0 and r.stdout.startswith("comm,step,seq,op,last_rank")
    r = run_cli("query", db, "no-such-pack")
    assert r.returncode == 2 and "--list" in r.stderr


def test_pack_sql_runs_by_hand_in_duckdb(ingested, tmp_path):
    """A pack file pasted into a DuckDB session gives the same table."""

    from traceflow.packs import pack_sql
    con = connect(ingested("h100/kineto/ddp4_sync_stall"), copy_to=tmp_path / "copy.duckdb")
    before = con.execute("select * from exposed_comm order by all").fetchall()
    con.execute("drop table exposed_comm")
    con.execute(pack_sql("exposed_comm"))
    assert con.execute("select * from exposed_comm order by all").fetchall() == before


@pytest.mark.parametrize("rel", ["h100/kineto/ddp4_sync_stall", "h100/nsys/graphs", "h100/kineto/launch_bound"])
def test_exposed_launch_never_counted_twice(ingested, rel):
    """Each idle stretch is charged to the one op that ended it: per-op exposed times add up to the
    step's GPU idle spent launching, and never exceed the step's idle time."""
    db = connect(ingested(rel))
    rows = db.execute("""select l.rank, l.step, l.launch_exposed_ns + l.stall_ns, s.idle_ns,
                                (select coalesce(sum(exposed_ns), 0) from launch_overhead o where o.rank = l.rank and o.step = l.step)
                         from launch_bound_steps l join step_breakdown s using (rank, step)""").fetchall()
    for rank, step, per_step, idle, per_op in rows:
        assert per_step <= idle
        assert abs(per_op - per_step) <= 0.1e6, (rank, step)
