"""Issue 36: which processes of a file are ranks, and which rank each is, when the file does not say."""
from __future__ import annotations

import shutil
import sqlite3

from conftest import FIX, ROOT, connect, needs_shared, run_cli

NSYS_AI = FIX / "public" / "nsys-ai" / "mfu_2gpu_before.sqlite"


def _pids_and_devices(path) -> dict[int, set[int]]:
    """Straight from the export: the GPU each process's kernels ran on."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    out: dict[int, set[int]] = {}
    for pid, dev in con.execute("SELECT DISTINCT (globalPid >> 24) & 16777215, deviceId FROM CUPTI_ACTIVITY_KIND_KERNEL"):
        out.setdefault(pid, set()).add(dev)
    con.close()
    return out


@needs_shared
def test_two_processes_of_one_file_take_their_gpus_as_ranks(tmp_path):
    """Two processes in one nsys file stating no rank were ranked "from file order" with a warning
    that said nothing about processes; each runs on a GPU of its own, whose index is its local rank."""
    devices = _pids_and_devices(NSYS_AI)
    assert len(devices) == 2 and all(len(d) == 1 for d in devices.values())
    db = tmp_path / "job.duckdb"
    r = run_cli("ingest", NSYS_AI, "-o", db)
    assert r.returncode == 0, r.stderr
    rows = connect(db).execute("SELECT pid, rank, rank_source FROM traces ORDER BY rank").fetchall()
    assert [(pid, rank) for pid, rank, _ in rows] == sorted((pid, next(iter(d))) for pid, d in devices.items())
    assert {src for *_, src in rows} == {"device"}
    assert "ranks from their GPUs" in r.stderr and "file order" not in r.stderr


@needs_shared
def test_a_process_with_no_gpu_work_is_not_a_rank(tmp_path):
    """A helper process (CUDA calls, no kernel, memcpy or memset) became "rank 1": here the second
    process of a real two-process export loses its GPU work, as a launcher or a data-loader would have none."""
    src = tmp_path / "helper.sqlite"
    shutil.copy(NSYS_AI, src)
    src.chmod(0o644)
    helper = max(_pids_and_devices(NSYS_AI))
    con = sqlite3.connect(src)
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
        if con.execute("SELECT count(*) FROM sqlite_master WHERE name = ?", [table]).fetchone()[0]:
            con.execute(f"DELETE FROM {table} WHERE (globalPid >> 24) & 16777215 = ?", [helper])
    n_runtime = con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE (globalTid >> 24) & 16777215 = ?",
                            [helper]).fetchone()[0]
    con.commit()
    con.close()
    assert n_runtime > 0  # it still called CUDA: the reader sees the process
    db = tmp_path / "job.duckdb"
    r = run_cli("ingest", src, "-o", db)
    assert r.returncode == 0, r.stderr
    rows = connect(db).execute("SELECT rank, pid FROM traces").fetchall()
    assert rows == [(0, min(_pids_and_devices(NSYS_AI)))], rows
    assert f"1 of its 2 processes had no GPU work (pid {helper};" in r.stderr and "not ranks, left out" in r.stderr
    assert connect(db).execute("SELECT count(DISTINCT rank) FROM gpu_ops").fetchone()[0] == 1


def test_a_fused_file_with_no_host_process_keeps_every_rank(tmp_path):
    """TraceLens's TraceFuse writes every rank into one file (`args.rank`, pids + rank x 10^8); its
    NCCL-only output holds no CPU process, so every rank's trace had pid None, and the duplicate-input
    check (same bytes, same pid) read rank 0 alone: "same content as another input" three times for
    three different ranks. Derived at test time, as TraceFuse does, from the bundled job's NCCL kernels."""
    import gzip
    import json

    events, want = [], {}
    for r in range(4):
        d = json.loads(gzip.decompress((ROOT / "fixtures" / "ddp4_sync_stall" / f"rank-{r}.pt.trace.json.gz").read_bytes()))
        nccl = [e for e in d["traceEvents"] if e.get("cat") == "kernel" and e.get("name", "").startswith("nccl")]
        pid = r * 10**8 + 2
        events.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": f"RANK {r} - GPU"}})
        events += [{**e, "pid": pid, "args": {**e.get("args", {}), "rank": r}} for e in nccl]
        want[r] = (len(nccl), round(sum(e["dur"] for e in nccl) * 1000))
    fused = tmp_path / "merged_nccl_only.json.gz"
    fused.write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode()))
    db = tmp_path / "job.duckdb"
    r = run_cli("ingest", fused, "-o", db)
    assert r.returncode == 0, r.stderr
    assert "same content" not in r.stderr
    got = connect(db).execute("""SELECT t.rank, count(*), sum(g.end_ns - g.start_ns) FROM gpu_ops g JOIN traces t USING (trace_id)
                                 GROUP BY t.rank ORDER BY t.rank""").fetchall()
    assert {rank: n for rank, n, _ in got} == {r: n for r, (n, _) in want.items()}
    for rank, _, ns in got:
        assert abs(ns - want[rank][1]) <= want[rank][0]  # µs with 3 decimals: at most 1 ns a kernel
    # the same file twice is still read once per rank
    r = run_cli("ingest", fused, fused, "-o", tmp_path / "twice.duckdb")
    assert r.returncode == 0 and r.stderr.count("same content as another input") == 4, r.stderr
