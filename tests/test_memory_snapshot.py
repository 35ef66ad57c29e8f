"""Issue 35: CUDA caching-allocator snapshots (torch.cuda.memory._dump_snapshot pickles).

No snapshot can be recorded here (it needs CUDA). A real one, written by _dump_snapshot on a GPU
and committed to a public repository (MAGMA27/assignment2-systems, memory_snapshot.pickle), is used
when it sits in $TRACEFLOW_WILD/memory (or TRACEFLOW_WILD_MEMORY); it is not ours to commit, so these tests
skip without it. Every figure is checked against plain Python over the unpickled snapshot."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from conftest import BUNDLED, connect, run_cli
from conftest import WILD as WILD_ROOT

WILD = Path(os.environ.get("TRACEFLOW_WILD_MEMORY", WILD_ROOT / "memory"))
SNAPSHOTS = sorted(WILD.glob("*.pickle")) if WILD.is_dir() else []
needs_snapshot = pytest.mark.skipif(not SNAPSHOTS, reason=f"no real allocator snapshot in {WILD} (see the module's docstring)")


@pytest.fixture(scope="module")
def snapshot_job(tmp_path_factory):
    """The bundled 4-rank Kineto job with the real snapshot given as rank 2's."""
    d = tmp_path_factory.mktemp("snap")
    snap = d / "rank2_memory_snapshot.pickle"
    shutil.copy(SNAPSHOTS[0], snap)
    db = d / "job.duckdb"
    r = run_cli("ingest", *sorted((BUNDLED / "ddp4_sync_stall").glob("rank-*.json.gz")), snap, "-o", db)
    assert r.returncode == 0, r.stderr
    return {"db": db, "snap": snap}


def plain(path) -> dict:
    """The figures by hand from the unpickled snapshot (loaded through the restricted unpickler only)."""
    from traceflow.readers import safe_pickle
    s = safe_pickle.load(str(path))
    segs = s["segments"]
    blocks = [b for seg in segs for b in seg["blocks"]]
    free = sum(seg["total_size"] for seg in segs) - sum(seg["allocated_size"] for seg in segs)
    largest_free = max((b["size"] for b in blocks if b["state"] == "inactive"), default=0)
    allocs = [e["size"] for dev in s.get("device_traces", []) for e in dev if e["action"] == "alloc"]
    return {"n_segments": len(segs), "reserved": sum(seg["total_size"] for seg in segs),
            "allocated": sum(seg["allocated_size"] for seg in segs), "free": free, "largest_free": largest_free,
            "largest_alloc": max(b["size"] for b in blocks if b["state"] == "active_allocated"),
            "largest_request": max(allocs) if allocs else None, "n_blocks": len(blocks),
            "n_history": sum(len(dev) for dev in s.get("device_traces", [])),
            "ooms": sum(1 for dev in s.get("device_traces", []) for e in dev if e["action"] == "oom")}


@needs_snapshot
def test_snapshot_figures_equal_plain_python(snapshot_job):
    want = plain(snapshot_job["snap"])
    con = connect(snapshot_job["db"])
    row = con.execute("""SELECT rank, n_segments, reserved_bytes, allocated_bytes, free_bytes, largest_free_block_bytes,
                                largest_allocation_bytes, largest_request_bytes, largest_request_fits, n_ooms,
                                fragmentation_pct, device_memory_bytes FROM memory_snapshot""").fetchall()
    assert len(row) == 1
    (rank, n, reserved, allocated, free, lfree, lalloc, lreq, fits, ooms, frag, devmem) = row[0]
    assert rank == 2 and (n, reserved, allocated, free, lfree, lalloc, ooms) == \
        (want["n_segments"], want["reserved"], want["allocated"], want["free"], want["largest_free"], want["largest_alloc"], want["ooms"])
    assert lreq == (want["largest_request"] or want["largest_alloc"]) and fits == (lfree >= lreq)
    assert frag == round(100 * (1 - want["largest_free"] / want["free"]), 2)
    # the snapshot joins rank 2's trace: the H100 job's deviceProperties give the headroom
    assert devmem == con.execute("SELECT memory_bytes FROM devices WHERE rank = 2 AND device = 0").fetchone()[0] > 0
    assert con.execute("SELECT count(*) FROM memory_snapshot_blocks").fetchone()[0] == want["n_blocks"]
    assert con.execute("SELECT count(*) FROM memory_snapshot_history").fetchone()[0] == want["n_history"]
    # it is not a rank of its own: still four traces, one per rank
    assert con.execute("SELECT count(*), count(DISTINCT rank) FROM traces").fetchone() == (4, 4)


@needs_snapshot
def test_snapshot_again_with_append_is_skipped(snapshot_job, tmp_path):
    db = tmp_path / "job.duckdb"
    shutil.copy(snapshot_job["db"], db)
    r = run_cli("ingest", "--append", snapshot_job["snap"], "-o", db)
    assert r.returncode == 0, r.stderr
    assert connect(db).execute("SELECT count(DISTINCT source_hash), count(*) FROM memory_segments").fetchone() == \
        (1, plain(snapshot_job["snap"])["n_segments"])


@needs_snapshot
def test_bad_snapshots_get_one_line_and_exit_3(tmp_path):
    kineto = sorted((BUNDLED / "ddp4_sync_stall").glob("rank-*.json.gz"))
    data = SNAPSHOTS[0].read_bytes()
    cut = tmp_path / "rank0_cut.pickle"
    cut.write_bytes(data[: len(data) // 2])               # a snapshot cut short
    stray = tmp_path / "rank7_snapshot.pickle"             # a rank the job does not have
    stray.write_bytes(data)
    nameless = tmp_path / "snapshot.pickle"                # no rank in a 4-rank job
    nameless.write_bytes(data)
    for bad, why in ((cut, "not a complete pickle"), (stray, "no trace of rank 7"), (nameless, "names no rank")):
        out = tmp_path / "out.duckdb"
        r = run_cli("ingest", *kineto, bad, "-o", out)
        assert r.returncode == 3 and why in r.stderr and str(bad) in r.stderr, (bad, r.stderr)
        assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert not out.exists()


@needs_snapshot
def test_report_shows_the_snapshot(snapshot_job, tmp_path):
    page = tmp_path / "report.html"
    r = run_cli("report", snapshot_job["db"], "-o", page)
    assert r.returncode == 0, r.stderr
    html = page.read_text()
    sec = html[html.index('<section id="memory"'):]
    sec = sec[:sec.index("</section>")]
    want = plain(snapshot_job["snap"])
    assert "Allocator snapshots" in sec and f"{round(100 * (1 - want['largest_free'] / want['free']), 2):,}" in sec  # as the query rounded it
