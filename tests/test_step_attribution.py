"""Every GPU nanosecond accounted once (docs/step-attribution.md), on the traces people really have.

Each derived input is made from a real fixture at test time (cut, shifted, rewritten, a table
dropped). The independent side is plain Python: the union of a rank's GPU intervals computed from
the raw file (json with exact decimals, sqlite3), or from gpu_ops with tests/intervals.py.
"""
from __future__ import annotations

import collections
import gzip
import json
import re
import shutil
import sqlite3
from decimal import Decimal
from pathlib import Path

import pytest
from conftest import connect, fixture_files, needs_shared
from intervals import measure

import traceflow

ALL_FIXTURES = ["h100/nsys/ddp4_sync_stall", "h100/nsys/ddp4_straggler", "h100/nsys/graphs",
                "h100/kineto/ddp4_sync_stall", "h100/kineto/ddp4_straggler", "h100/kineto/launch_bound",
                "h100/kineto/graphs", "public/hta-2rank", "public/param-dlrm8", "public/nsys-ai",
                "public/nvidia-fuser", "public/pipit-perlmutter/perlmutter-cloverleaf-cuda.sqlite",
                "public/pipit-perlmutter/saxpy-mpi-cuda_nsys_perlmutter0.sqlite"]
GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"}
HOST_CATS = {"cpu_op", "cuda_runtime", "cuda_driver", "user_annotation", "python_function", "Operator", "Runtime"}


# --- the independent side ---------------------------------------------------------------------

def _us_to_ns(v) -> int:
    """µs as written (an exact decimal) -> the nearest ns."""
    return int((Decimal(v) * 1000).to_integral_value())


def kineto_union(path) -> int:
    """Union (ns) of the GPU ops of one Kineto file, from the raw JSON (timestamps as exact decimals)."""
    d = json.loads(gzip.open(path).read() if str(path).endswith(".gz") else Path(path).read_bytes(), parse_float=Decimal)
    base = int(d.get("baseTimeNanoseconds") or 0)
    iv = [(base + _us_to_ns(e["ts"]), base + _us_to_ns(e["ts"]) + _us_to_ns(e.get("dur", 0)))
          for e in d["traceEvents"] if e.get("ph") == "X" and e.get("cat") in GPU_CATS]
    return measure(iv)


def nsys_union(path) -> int:
    """Union (ns) of the GPU ops of a one-process nsys export, with sqlite3."""
    c = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    tables = {r[0] for r in c.execute("select name from sqlite_master where type = 'table'")}
    iv = []
    for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
        if t in tables:
            iv += c.execute(f'select start, "end" from {t} where "end" >= start').fetchall()
    return measure(iv)


def check_conservation(db) -> dict[int, int]:
    """Every rank: rows tile the GPU timeline, busy adds up to the union of its ops, every op in one row,
    the identity per row. Returns each rank's busy total."""
    rows = db.execute("""select rank, step, part, start_ns, end_ns, n_ops, wall_ns, busy_ns, idle_ns, compute_ns,
                                exposed_comm_ns, exposed_memory_ns from step_breakdown order by rank, start_ns""").fetchall()
    assert rows
    by_rank = collections.defaultdict(list)
    for r in rows:
        by_rank[r[0]].append(r)
    ops = collections.defaultdict(list)
    for rank, step, a, b in db.execute("select rank, step, start_ns, end_ns from gpu_ops").fetchall():
        ops[rank].append((step, a, b))
    totals = {}
    for rank, rs in by_rank.items():
        for prev, nxt in zip(rs, rs[1:]):
            assert prev[4] <= nxt[3], f"rank {rank}: rows overlap: {prev[:5]} / {nxt[:5]}"
        for r in rs:
            assert r[9] + r[10] + r[11] + r[8] == r[6], f"identity broken on {r[:5]}"
            assert r[7] + r[8] == r[6]
        union = measure([(a, b) for _, a, b in ops[rank]])
        totals[rank] = sum(r[7] for r in rs)
        assert totals[rank] == union, f"rank {rank}: rows hold {totals[rank]} ns of GPU time, the ops {union}"
        assert sum(r[5] for r in rs) == len(ops[rank]), f"rank {rank}: not every op is in exactly one row"
        assert sum(r[5] for r in rs if r[2] != "step") == sum(1 for s, _, _ in ops[rank] if s is None)
    cov = dict(db.execute("select rank, in_steps_ns from step_coverage").fetchall())
    for rank, rs in by_rank.items():
        assert cov[rank] == sum(r[7] for r in rs if r[2] == "step")
    return totals


def assert_rows_hold_the_raw_files(db, files):
    """Each Kineto rank file's GPU union (from the raw JSON) equals its rows' busy total."""
    totals = check_conservation(db)
    for f in files:
        rank = json.load(gzip.open(f))["distributedInfo"]["rank"]
        assert totals[rank] == kineto_union(f), (f, totals[rank])


def step_figures(db, steps=None) -> dict:
    q = """select rank, step, wall_ns, busy_ns, compute_ns, exposed_comm_ns, exposed_memory_ns, idle_ns
           from step_breakdown where part = 'step'"""
    return {(r[0], r[1]): r[2:] for r in db.execute(q).fetchall() if steps is None or r[1] in steps}


# --- the property, on every fixture ------------------------------------------------------------

@needs_shared
@pytest.mark.parametrize("rel", ALL_FIXTURES)
def test_conservation_on_every_fixture(ingested, rel):
    db = connect(ingested(rel))
    check_conservation(db)
    # windows of one rank never overlap
    w = db.execute("""select rank, start_ns, end_ns, lead(start_ns) over (partition by rank order by start_ns) as nxt
                      from step_windows""").fetchall()
    assert all(n is None or e <= n for _, _, e, n in w)


@needs_shared
@pytest.mark.parametrize("rel", ["h100/kineto/launch_bound", "h100/nsys/graphs"])
def test_rows_add_up_to_the_raw_file(ingested, rel):
    """One-rank files: the rows' busy time is the union of the GPU ops read straight from the file."""
    f = fixture_files(rel)[0]
    raw = kineto_union(f) if f.endswith(".json.gz") else nsys_union(f)
    assert check_conservation(connect(ingested(rel)))[0] == raw


# --- derived inputs ----------------------------------------------------------------------------

def _kineto_rewrite(src_rel, out: Path, edit) -> list[str]:
    """Each rank file of a Kineto fixture through edit(trace dict, rank), written to out/."""
    out.mkdir(parents=True, exist_ok=True)
    files = []
    for i, f in enumerate(fixture_files(src_rel)):
        d = json.load(gzip.open(f))
        edit(d, i)
        dst = out / Path(f).name
        with gzip.open(dst, "wt", compresslevel=1) as g:
            json.dump(d, g)
        files.append(str(dst))
    return files


def _step_spans(d) -> dict[int, tuple[float, float]]:
    return {int(e["name"].split("#")[1]): (e["ts"], e["ts"] + e["dur"]) for e in d["traceEvents"]
            if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("ph") == "X"}


@needs_shared
def test_kineto_capture_cut_mid_step(tmp_path, ingested):
    """The host side of the first step cut away (its launches outside the capture): GPU work still counts
    once, and the steps after the next one keep their figures."""
    rel = "h100/kineto/ddp4_sync_stall"

    def cut(d, rank):
        lo, hi = min(_step_spans(d).values())
        mid = (lo + hi) / 2
        d["traceEvents"] = [e for e in d["traceEvents"] if not (e.get("cat") in HOST_CATS and e.get("ts", 0) < mid)]

    files = _kineto_rewrite(rel, tmp_path / "cut", cut)
    traceflow.ingest(files, str(tmp_path / "cut.duckdb"))
    db = connect(tmp_path / "cut.duckdb")
    assert_rows_hold_the_raw_files(db, files)
    full = connect(ingested(rel))
    steps = sorted({s for (_, s) in step_figures(full)})
    assert steps[0] not in {s for (_, s) in step_figures(db)}, "the cut step should be gone"
    untouched = steps[2:]
    assert untouched and step_figures(db, untouched) == step_figures(full, untouched)
    # ops whose launch was cut away are kept, in the row of the window that holds them
    unlaunched = db.execute("select count(*) from gpu_ops where api_start_ns is null").fetchone()[0]
    assert unlaunched > 0
    assert db.execute("select sum(n_ops) from step_breakdown where part = 'before'").fetchone()[0] >= unlaunched


def edited_copies(rel: str, folder: Path, edit) -> list[str]:
    """Copies of a fixture's nsys exports in `folder`, each changed by edit(sqlite connection)."""
    folder.mkdir()
    for f in fixture_files(rel):
        dst = folder / Path(f).name
        shutil.copyfile(f, dst)
        c = sqlite3.connect(dst)
        edit(c)
        c.commit()
        c.close()
    return sorted(str(p) for p in folder.iterdir())


@needs_shared
def test_nsys_capture_cut_mid_step(tmp_path, ingested):
    """nsys: runtime calls, NVTX and OS calls before the middle of the first step removed, GPU tables kept."""
    rel = "h100/nsys/ddp4_sync_stall"

    def cut(c):
        lo, hi = c.execute("""select n.start, n."end" from NVTX_EVENTS n left join StringIds s on s.id = n.textId
                              where coalesce(n.text, s.value) = 'step 0'""").fetchone()
        for t in ("CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS", "OSRT_API"):
            c.execute(f"delete from {t} where start < ?", [(lo + hi) // 2])
    out = tmp_path / "cut"
    traceflow.ingest(edited_copies(rel, out, cut), str(tmp_path / "cut.duckdb"))
    db = connect(tmp_path / "cut.duckdb")
    totals = check_conservation(db)
    for f in sorted(out.iterdir()):
        rank = int(re.search(r"(\d+)", f.name).group(1))
        assert totals[rank] == nsys_union(f)
    full = connect(ingested(rel))
    untouched = sorted({s for (_, s) in step_figures(full)})[2:]
    assert untouched and step_figures(db, untouched) == step_figures(full, untouched)


@needs_shared
def test_gpu_running_behind_the_host(tmp_path, ingested):
    """GPU events moved later than the host's by 1.5 steps: windows of neighbouring steps would overlap by
    a step; they do not, no GPU time counts twice, and each step keeps its figures (its own ops moved
    together)."""
    rel = "h100/kineto/ddp4_sync_stall"

    def behind(d, rank):
        spans = sorted(_step_spans(d).values())
        lag = int(1.5 * (spans[1][0] - spans[0][0]))  # whole µs: the shifted times keep their 3 decimals
        for e in d["traceEvents"]:
            if e.get("cat") in GPU_CATS | {"gpu_user_annotation"} and "ts" in e:
                e["ts"] += lag

    files = _kineto_rewrite(rel, tmp_path / "behind", behind)
    traceflow.ingest(files, str(tmp_path / "behind.duckdb"))
    db = connect(tmp_path / "behind.duckdb")
    assert_rows_hold_the_raw_files(db, files)
    # steps overlap on the host side of the GPU work: a step's ops run during the next step's host range
    late = db.execute("""select count(*) from gpu_ops g join steps s on s.rank = g.rank and s.step = g.step + 1
                         where g.start_ns > s.start_ns""").fetchone()[0]
    assert late > 0
    assert step_figures(db) == step_figures(connect(ingested(rel)))


@needs_shared
def test_profiler_step_recorded_as_cpu_op(tmp_path, ingested):
    """Older torch.profiler writes ProfilerStep#N as a CPU op: the same steps are found, same figures."""
    rel = "h100/kineto/ddp4_sync_stall"

    def as_cpu_op(d, rank):
        for e in d["traceEvents"]:
            if str(e.get("name", "")).startswith("ProfilerStep#"):
                e["cat"] = "cpu_op"

    files = _kineto_rewrite(rel, tmp_path / "op", as_cpu_op)
    traceflow.ingest(files, str(tmp_path / "op.duckdb"))
    db = connect(tmp_path / "op.duckdb")
    assert db.execute("select count(*) from ranges where name like 'ProfilerStep#%'").fetchone()[0] == 0
    assert db.execute("select count(*) from steps where source = 'whole trace'").fetchone()[0] == 0
    full = connect(ingested(rel))
    assert db.execute("select rank, step from steps order by all").fetchall() == \
        full.execute("select rank, step from steps order by all").fetchall()
    assert step_figures(db) == step_figures(full)


@needs_shared
def test_nsys_without_metadata_table(tmp_path, ingested):
    """An export without META_DATA_EXPORT (nsys 2021 era) is read by its tables, with the same rows."""
    rel = "h100/nsys/ddp4_straggler"
    files = edited_copies(rel, tmp_path / "nometa", lambda c: c.execute("drop table META_DATA_EXPORT"))
    traceflow.ingest(files, str(tmp_path / "n.duckdb"))
    db, full = connect(tmp_path / "n.duckdb"), connect(ingested(rel))
    q = "select rank, kind, count(*), sum(end_ns - start_ns) from gpu_ops group by all order by all"
    assert db.execute(q).fetchall() == full.execute(q).fetchall()
    assert step_figures(db) == step_figures(full)


@needs_shared
def test_nsys_without_session_start(tmp_path):
    """No TARGET_INFO_SESSION_START_TIME: read with a warning, times relative to the session start."""
    f = fixture_files("h100/nsys/graphs")[0]
    dst = tmp_path / "rank0.sqlite"
    shutil.copyfile(f, dst)
    c = sqlite3.connect(dst)
    c.execute("drop table TARGET_INFO_SESSION_START_TIME")
    c.commit()
    c.close()
    res = traceflow.ingest([str(dst)], str(tmp_path / "j.duckdb"))
    assert any("no session start time" in w for w in res.warnings)
    db = connect(tmp_path / "j.duckdb")
    check_conservation(db)
    first = db.execute("select min(start_ns) from gpu_ops").fetchone()[0]
    raw = sqlite3.connect(f"file:{f}?mode=ro", uri=True).execute("select min(start) from CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    assert first <= raw


@needs_shared
def test_cpu_ops_on_another_clock(tmp_path, ingested):
    """CPU ops and ProfilerStep ranges moved 3 days back (a days-since-boot clock), runtime calls and kernels
    left on the epoch: the offset is found from the External id links and the step figures come back."""
    rel = "h100/kineto/launch_bound"
    cpu = {"cpu_op", "user_annotation", "python_function", "Operator"}

    def other_clock(d, rank):
        for e in d["traceEvents"]:
            if e.get("cat") in cpu and "ts" in e:
                e["ts"] -= 3 * 86400e6

    files = _kineto_rewrite(rel, tmp_path / "clk", other_clock)
    res = traceflow.ingest(files, str(tmp_path / "clk.duckdb"))
    assert any("CPU ops are on another clock" in w for w in res.warnings), res.warnings
    db, full = connect(tmp_path / "clk.duckdb"), connect(ingested(rel))
    off, = db.execute("select cpu_clock_offset_ns from traces").fetchone()
    assert abs(off - 3 * 86400 * 10**9) < 20_000  # within the slack of a CPU op around its runtime calls
    assert step_figures(db) == step_figures(full)
    check_conservation(db)
    # launch figures agree within the offset's uncertainty per launch
    a = db.execute("select count(*), sum(dispatch_ns) from launch_overhead").fetchone()
    b = full.execute("select count(*), sum(dispatch_ns) from launch_overhead").fetchone()
    assert a[0] == b[0] and abs(a[1] - b[1]) <= a[0] * 20_000


@needs_shared
def test_cpu_ops_on_an_unrelated_clock_are_refused(tmp_path):
    """CPU ops scattered so that no single offset fits: launch figures from CPU ops are NULL, with a warning."""
    rel = "h100/kineto/launch_bound"

    def scatter(d, rank):
        for i, e in enumerate(d["traceEvents"]):
            if e.get("cat") == "cpu_op" and "ts" in e:
                e["ts"] -= (i % 7) * 1e5

    files = _kineto_rewrite(rel, tmp_path / "scatter", scatter)
    res = traceflow.ingest(files, str(tmp_path / "s.duckdb"))
    assert any("no consistent offset" in w for w in res.warnings), res.warnings
    db = connect(tmp_path / "s.duckdb")
    assert db.execute("select count(*) from launch_overhead where dispatch_ns <> 0").fetchone()[0] == 0


# --- clock skew between ranks ---------------------------------------------------------------------

def _shift_rank(tmp_path, rel, rank, shift_ns) -> list[str]:
    def edit(d, i):
        if d["distributedInfo"]["rank"] == rank:
            d["baseTimeNanoseconds"] += shift_ns
    return _kineto_rewrite(rel, tmp_path / f"shift{shift_ns}", edit)


@needs_shared
@pytest.mark.parametrize("rel", ["h100/kineto/ddp4_sync_stall", "h100/kineto/ddp4_straggler"])
@pytest.mark.parametrize("shift_ms", [20, -20, 5, -5])
def test_clock_skew_found_from_collectives(tmp_path, ingested, rel, shift_ms):
    """Rank 3 moved by a few ms: its estimated skew moves by exactly that; a 20 ms shift stands out of
    the ranks' natural ordering on the shared GPU and is undone to where the kernels take turns again;
    the unshifted job gets no offset."""
    base = connect(ingested(rel))
    assert base.execute("select count(*) from traces where clock_offset_ns <> 0").fetchone()[0] == 0
    assert base.execute("select count(*) from traces where clock_note like 'not shifted%'").fetchone()[0] == 4
    skew0 = dict(base.execute("select rank, clock_skew_ns from traces").fetchall())
    shift = shift_ms * 10**6
    res = traceflow.ingest(_shift_rank(tmp_path, rel, 3, shift), str(tmp_path / "s.duckdb"))
    db = connect(tmp_path / "s.duckdb")
    t = {r[0]: r[1:] for r in db.execute("select rank, clock_offset_ns, clock_skew_ns, clock_note from traces").fetchall()}
    assert all(t[r][1] is not None and t[r][2] for r in t), "estimate and reason stored for every rank"
    assert abs((t[3][1] - skew0[3]) - shift) <= 300_000, (t[3], skew0[3])
    if abs(shift_ms) == 20:
        # undone where the kernels take turns again (gpu_sharing.fit_offset): the collective estimate
        # alone was off by the ranks' natural offset (ddp4_sync_stall: -18.56 / +21.44 ms applied)
        assert abs(t[3][0] + shift) <= 200_000, t[3]
        assert all(t[r][0] == 0 for r in (0, 1, 2))
        assert any(w.startswith("rank 3: clock shifted") for w in res.warnings), res.warnings
        # the cross-rank figures come back to within the ranks' natural offset
        q = "select comm, step, seq, rank, wait_ns from collective_waits order by all"
        back = {k[:4]: k[4] for k in db.execute(q).fetchall()}
        orig = {k[:4]: k[4] for k in base.execute(q).fetchall()}
        common = set(back) & set(orig)
        assert len(common) > 0.9 * len(orig)
        assert sum(abs(back[k] - orig[k]) for k in common) / len(common) <= abs(skew0[3]) + 1e6


@needs_shared
def test_clock_skew_estimate_stored_when_not_applied(ingested):
    db = connect(ingested("h100/kineto/ddp4_sync_stall"))
    rows = db.execute("select clock_offset_ns, clock_skew_ns, clock_spread_ns, clock_note from traces").fetchall()
    assert all(o == 0 and s is not None and sp is not None and "sign test" in n for o, s, sp, n in rows)


# --- the peers ------------------------------------------------------------------------------------

# HTA parses the ranks in a fork pool by default; in one CI run of ~20 its pool hung past the 300 s
# timeout (alone the script takes 1 s): its documented serial path (use_multiprocessing=False) instead
HTA_SCRIPT = """
import json, sys
from hta.common import trace
from hta.trace_analysis import TraceAnalysis
serial = trace.Trace.parse_traces
trace.Trace.parse_traces = lambda self, max_ranks=-1, use_multiprocessing=True, use_memory_profiling=True: \\
    serial(self, max_ranks, False, use_memory_profiling)
df = TraceAnalysis(trace_dir=sys.argv[1]).get_temporal_breakdown(visualize=False)
print(json.dumps(df[["rank", "idle_time(us)", "compute_time(us)", "non_compute_time(us)", "kernel_time(us)"]]
                 .to_dict(orient="records")))
"""


@needs_shared
def test_hta_temporal_breakdown_agrees(ingested, tmp_path):
    """Holistic Trace Analysis, run for real on public/hta-2rank: its temporal breakdown (of the first
    iteration) equals our first step's row to the microsecond: kernel time = wall, idle, compute, and
    non-compute = exposed comm + exposed memory."""
    import os
    import subprocess
    py = os.environ.get("TRACEFLOW_HTA_PYTHON")
    if not py or not Path(py).exists() or subprocess.run([py, "-c", "import hta"], capture_output=True).returncode:
        pytest.skip("Holistic Trace Analysis not installed (make peers; TRACEFLOW_HTA_PYTHON names its python)")
    for f in fixture_files("public/hta-2rank"):
        shutil.copyfile(f, tmp_path / Path(f).name)
    r = subprocess.run([py, "-c", HTA_SCRIPT, str(tmp_path)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    hta = {row["rank"]: row for row in json.loads(r.stdout.strip().splitlines()[-1])}
    db = connect(ingested("public/hta-2rank"))
    for rank, h in hta.items():
        wall, idle, comp, noncomp = db.execute(
            """select wall_ns, idle_ns, compute_ns, exposed_comm_ns + exposed_memory_ns from step_breakdown
               where rank = ? and part = 'step' order by step limit 1""", [rank]).fetchone()
        ours = [round(v / 1000) for v in (wall, idle, comp, noncomp)]
        assert ours == [h["kernel_time(us)"], h["idle_time(us)"], h["compute_time(us)"], h["non_compute_time(us)"]], (rank, ours, h)


# --- the bundled job recorded with and without a fault (runs without ../shared) --------------------

@pytest.mark.parametrize("variant", ["clean", "stall"])
def test_bundled_ddp2_conservation_and_fault(tmp_path, variant):
    from conftest import BUNDLED
    folder = BUNDLED / "ddp2_flops" / variant
    files = sorted(str(p) for p in folder.glob("rank-*.pt.trace.json.gz"))
    traceflow.ingest(files, str(tmp_path / "j.duckdb"))
    db = connect(tmp_path / "j.duckdb")
    assert_rows_hold_the_raw_files(db, files)
    gaps = db.execute("select rank, step, dur_ns, cause from idle_gaps where dur_ns > 20e6").fetchall()
    if variant == "clean":
        assert gaps == []
    else:
        stall = next(t for t in json.loads((folder / "truth-rank1.json").read_text()) if t["kind"] == "host_stall")
        assert [(r, s, c) for r, s, _, c in gaps] == [(1, stall["step"], "host_late")]
        assert abs(gaps[0][2] - stall["dur_ns"]) < 5e6
