"""Issue 35 on Nsight Systems: `nsys profile --cuda-memory-usage=true` exports read into the memory
tables. Real public exports (A100, nsys 2024.2, CUDA_GPU_MEMORY_USAGE_EVENTS with rows; in the wild
corpus, tests/wild/manifest.json, not committed) ingested through the real CLI; every figure of the
`memory` packs checked against a plain-Python sweep of the raw SQLite file: the running sum of the
allocations minus the frees. Skipped without the corpus ($TRACEFLOW_WILD)."""
from __future__ import annotations

import sqlite3
from collections import defaultdict
from pathlib import Path

import pytest
from conftest import WILD_MANIFEST, connect, run_cli, wild_file

MANIFEST = WILD_MANIFEST
EXPORTS = [e for e in MANIFEST if e["source"] == "gemm-spmm-a100"]
GPU_KINDS, HOST_KINDS = {"Device", "Array", "Device Static"}, {"Pageable", "Pinned"}


_file = wild_file


def raw_events(path: Path) -> tuple[dict, dict, dict, int]:
    """The raw file, with sqlite3: per (device type, device) the events in time order (at one ns an
    allocation first, then by address) as (ns since epoch, signed bytes, address, correlation id);
    the thread of each API call by correlation id; each GPU's memory; how many rows are not an
    allocation or free of GPU or host memory with a size (Managed memory, a damaged row)."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as src:
        base = src.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()[0]
        kinds = dict(src.execute("SELECT id, label FROM ENUM_CUDA_MEM_KIND"))
        rows = src.execute("""SELECT start, deviceId, address, bytes, memKind, memoryOperationType, correlationId
                              FROM CUDA_GPU_MEMORY_USAGE_EVENTS""").fetchall()
        threads = {c: t & 0xFFFFFF for c, t in src.execute("SELECT correlationId, globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME")}
        gpus = dict(src.execute("SELECT cuDevice, totalMemory FROM TARGET_INFO_GPU"))
    series: dict = defaultdict(list)
    usable = [r for r in rows if isinstance(r[3], int) and r[3] > 0 and r[5] in (0, 1)
              and kinds.get(r[4]) in GPU_KINDS | HOST_KINDS]
    for start, dev, addr, n, kind, op, corr in sorted(usable, key=lambda r: (r[0], r[5], r[2])):
        key = ("cuda", dev) if kinds[kind] in GPU_KINDS else ("cpu", -1)
        series[key].append((base + start, n if op == 0 else -n, addr, corr))
    return series, threads, gpus, len(rows) - len(usable)


def sweep(events: list, lo: int, hi: int) -> dict:
    """One step [lo, hi] of one device: the peak of the running sum (carried in from before the step
    when higher), when it was first reached, the sums allocated and freed, what was live at the peak."""
    total, before, inside = 0, None, []
    for t, n, addr, corr in events:
        total += n
        if t < lo:
            before = total
        elif t <= hi:
            inside.append((t, total))
    top = max((v for _, v in inside), default=None)
    if top is None or (before is not None and before > top):
        peak, peak_t = before, lo
    else:
        peak, peak_t = top, min(t for t, v in inside if v == top)
    live: dict = {}
    for t, n, addr, corr in events:
        if t > peak_t:
            break
        if n > 0:
            live[addr] = (n, corr)
        else:
            live.pop(addr, None)
    return {"peak": peak, "peak_ns": peak_t, "start": before, "live": live,
            "allocated": sum(n for t, n, *_ in events if lo <= t <= hi and n > 0),
            "freed": -sum(n for t, n, *_ in events if lo <= t <= hi and n < 0)}


@pytest.mark.skipif(not EXPORTS, reason="no nsys export with CUDA memory usage in tests/wild/manifest.json")
@pytest.mark.parametrize("e", EXPORTS, ids=lambda e: Path(e["file"]).name)
def test_nsys_cuda_memory_usage_peaks_equal_the_sweep(e, tmp_path):
    path = _file(e)
    db = tmp_path / "job.duckdb"
    r = run_cli("ingest", path, "-o", db)
    assert r.returncode == 0, r.stderr
    series, threads, gpus, left_out = raw_events(path)
    assert left_out == 0  # these exports hold no Managed memory
    check(connect(db), series, threads, gpus)


def check(con, series, threads, gpus):
    """Every memory table against the sweep of the raw events."""
    # every event read, with its running total, and the allocating thread of its API call
    got = con.execute("""SELECT device_type, device, ts_ns, bytes, addr, tid, total_allocated, total_reserved
                         FROM memory_events ORDER BY device_type, device, ts_ns, bytes < 0, addr""").fetchall()
    want = []
    for (dtype, dev), evs in sorted(series.items()):
        total = 0
        for t, n, addr, corr in evs:
            total += n
            want.append((dtype, dev, t, n, addr, threads.get(corr), total, total if dtype == "cuda" else 0))
    assert got == want and len(want) > 10
    steps = con.execute("SELECT step, start_ns, end_ns FROM steps WHERE rank = 0").fetchall()
    rows = con.execute("""SELECT step, device_type, device, peak_allocated_bytes, peak_ns, peak_reserved_bytes,
                                 start_allocated_bytes, allocated_bytes, freed_bytes, tracked_at_peak_bytes,
                                 device_memory_bytes, headroom_bytes, near_device_limit FROM memory""").fetchall()
    assert sorted((r[0], r[1], r[2]) for r in rows) == sorted((s, *k) for s, _, _ in steps for k in series)
    for step, dtype, dev, peak, peak_ns, reserved, start, alloc, freed, tracked, devmem, headroom, near in rows:
        lo, hi = next((a, b) for s, a, b in steps if s == step)
        w = sweep(series[(dtype, dev)], lo, hi)
        assert (peak, peak_ns, start, alloc, freed, tracked) == \
            (w["peak"], w["peak_ns"], w["start"], w["allocated"], w["freed"], sum(n for n, _ in w["live"].values()))
        if dtype == "cuda":  # what the process holds from the GPU: reserved = allocated, against the GPU's memory
            assert reserved == peak and devmem == gpus[dev] and headroom == devmem - peak
            assert near == (peak >= 0.9 * devmem)
        else:  # host memory (pinned): reserves nothing, no device to hold it against
            assert reserved is None and devmem is None and headroom is None
        live = con.execute("""SELECT addr, bytes, tid FROM memory_peak_allocations WHERE step = ? AND device_type = ?
                              AND device = ? ORDER BY pos""", [step, dtype, dev]).fetchall()
        assert sorted(live) == sorted((a, n, threads.get(c)) for a, (n, c) in w["live"].items())
        assert [b for _, b, _ in live] == sorted((n for n, _ in w["live"].values()), reverse=True)
    # the whole capture's peak on the GPU: the highest running sum of the raw file
    top = max(sum(n for _, n, *_ in series[("cuda", 0)][:i + 1]) for i in range(len(series[("cuda", 0)])))
    assert con.execute("SELECT peak_allocated_bytes FROM memory_ranks WHERE device_type = 'cuda'").fetchone()[0] == top


@pytest.mark.skipif(not EXPORTS, reason="no nsys export with CUDA memory usage in tests/wild/manifest.json")
def test_nsys_memory_in_the_report_and_perfetto(tmp_path):
    """The report draws the nsys memory timeline; the Perfetto trace gets its counter tracks."""
    path = _file(EXPORTS[0])
    db = tmp_path / "job.duckdb"
    assert run_cli("ingest", path, "-o", db).returncode == 0
    page = tmp_path / "report.html"
    r = run_cli("report", db, "-o", page)
    assert r.returncode == 0, r.stderr
    html = page.read_text()
    assert 'id="memory"' in html and "Rank 0, cuda:0, step 0: memory over the step" in html
    from test_report import parse_trace
    out = tmp_path / "job.perfetto-trace"
    assert run_cli("annotate", db, "-o", out).returncode == 0
    tracks, events, _ = parse_trace(out)
    names = sorted(d.name for d in tracks.values() if d.name.startswith("memory "))
    assert names == ["memory allocated (cpu:-1)", "memory allocated (cuda:0)", "memory reserved (cuda:0)"], names


@pytest.mark.skipif(not EXPORTS, reason="no nsys export with CUDA memory usage in tests/wild/manifest.json")
def test_managed_and_damaged_memory_rows_are_left_out_and_counted(tmp_path):
    """Derived from a real export: one row made Managed memory, one given a text size, one an
    operation that is neither allocation nor free. Each is left out and counted in the trace's
    warnings, the file is read (exit 0), and every figure is the sweep's over the other rows."""
    src = _file(EXPORTS[0])
    path = tmp_path / src.name
    path.write_bytes(src.read_bytes())
    with sqlite3.connect(path) as c:
        rows = [r[0] for r in c.execute("SELECT rowid FROM CUDA_GPU_MEMORY_USAGE_EVENTS ORDER BY start")]
        c.execute("UPDATE CUDA_GPU_MEMORY_USAGE_EVENTS SET memKind = 4 WHERE rowid = ?", [rows[-1]])
        c.execute("UPDATE CUDA_GPU_MEMORY_USAGE_EVENTS SET bytes = 'many' WHERE rowid = ?", [rows[-2]])
        c.execute("UPDATE CUDA_GPU_MEMORY_USAGE_EVENTS SET memoryOperationType = 5 WHERE rowid = ?", [rows[-3]])
    db = tmp_path / "job.duckdb"
    r = run_cli("ingest", path, "-o", db)
    assert r.returncode == 0, r.stderr
    series, threads, gpus, left_out = raw_events(path)
    assert left_out == 3
    con = connect(db)
    warnings = con.execute("SELECT warnings FROM traces").fetchone()[0]
    assert "left out 1 CUDA memory usage events of Managed or unknown memory (on no one device)" in warnings
    assert any(w.startswith("left out 2 CUDA memory usage events with no size") for w in warnings), warnings
    check(con, series, threads, gpus)


def test_an_nsys_export_without_memory_usage_says_how_to_record_it(ingested):
    """The H100 fixture's exports were recorded without --cuda-memory-usage: no memory rows, and the
    empty pack says how to record them with either profiler."""
    import sqlite3 as sq

    from conftest import fixture_files
    files = fixture_files("h100/nsys/ddp4_sync_stall")
    for f in files:  # the raw files: no such table
        with sq.connect(f"file:{f}?mode=ro", uri=True) as c:
            assert not c.execute("SELECT count(*) FROM sqlite_master WHERE name = 'CUDA_GPU_MEMORY_USAGE_EVENTS'").fetchone()[0]
    db = ingested("h100/nsys/ddp4_sync_stall")
    con = connect(db)
    assert con.execute("SELECT count(*) FROM memory_events").fetchone()[0] == 0
    assert con.execute("SELECT count(*) FROM devices").fetchone()[0] >= 4
    con.close()
    r = run_cli("query", db, "memory")
    assert r.returncode == 0, r.stderr
    assert "nsys profile --cuda-memory-usage=true" in r.stdout + r.stderr and "profile_memory=True" in r.stdout + r.stderr


@pytest.mark.skipif(not EXPORTS, reason="no nsys export with CUDA memory usage in tests/wild/manifest.json")
def test_a_cluster_ingest_gives_the_local_nsys_memory_rows(tmp_path):
    """--cluster: the nsys memory events are per-rank shards like the rest; every memory table equals
    the local ingest's, row for row."""
    pytest.importorskip("distributed")
    files = [_file(EXPORTS[0])]  # the exports are separate jobs: one job, one file
    local, cluster = tmp_path / "local.duckdb", tmp_path / "cluster.duckdb"
    assert run_cli("ingest", *files, "-o", local).returncode == 0
    r = run_cli("ingest", *files, "-o", cluster, "--cluster", "local:2")
    assert r.returncode == 0, r.stderr
    tables = ["memory_events", "devices", "memory", "memory_peak_allocations", "memory_ranks", "memory_findings"]
    got = {}
    for db in (local, cluster):
        con = connect(db)
        got[db] = {t: sorted(map(repr, con.execute(f"SELECT * FROM {t}").fetchall())) for t in tables}
        con.close()
    assert len(got[local]["memory_events"]) > 50
    for t in tables:
        assert got[cluster][t] == got[local][t], t
