"""Issue 35: the verdict line for a rank within tf_memory_limit_pct [10 %] of its device's memory.

No real job at hand comes near its GPU's memory, so the input is derived at test time from real
recorded traces with GPU memory events (TraceLens's public H100 and MI300 Kineto traces, recorded with
profile_memory=True; the wild corpus, not committed: skipped without it). Only what the device's
capacity reads changes: deviceProperties' totalGlobalMem is set to just above the recorded peak
reserve (95 % of it then in use), so the headroom rule must fire. Every figure of the line, the
memory pack and the report is checked against the plain sweep of the raw events (test_memory.sweep).
(The other verdict line, a rank far above its peers, fires on a job recorded here:
test_memory.test_verdict_names_the_rank_far_above_its_peers.)"""
from __future__ import annotations

import gzip
import html
import json
from pathlib import Path

import pytest
from conftest import connect, run_cli
from test_memory import WILD_MEMORY, sweep

from traceflow.memory import mib


def _smallest_per_device() -> list[Path]:
    """The smallest of the traces for each GPU kind (cuda: H100, hip: MI300)."""
    out = {}
    for p in sorted(WILD_MEMORY, key=lambda p: p.stat().st_size):
        out.setdefault(p.parent.name, p)
    return sorted(out.values())


TRACES = _smallest_per_device()
COLS = ("step, device_type, device, peak_allocated_bytes, peak_reserved_bytes, peak_ns, allocated_bytes, freed_bytes, "
        "tracked_at_peak_bytes, reserved_at_peak_bytes")


def _ingest(path: Path, db: Path):
    r = run_cli("ingest", path, "-o", db)
    assert r.returncode == 0, r.stderr
    return connect(db)


@pytest.mark.skipif(not TRACES, reason="the public CUDA / ROCm traces with memory events are not in the wild corpus")
@pytest.mark.parametrize("path", TRACES, ids=lambda p: f"{p.parent.name}/{p.name[:30]}")
def test_a_rank_near_its_devices_memory_gets_the_verdict_line(path, tmp_path):
    con = _ingest(path, tmp_path / "recorded.duckdb")
    offset = con.execute("SELECT cpu_clock_offset_ns + clock_offset_ns FROM traces").fetchone()[0]
    steps = con.execute("SELECT step, start_ns, end_ns FROM steps ORDER BY step").fetchall()
    recorded = con.execute(f"SELECT {COLS} FROM memory ORDER BY ALL").fetchall()
    assert not con.execute("SELECT count(*) FROM memory WHERE near_device_limit").fetchone()[0]  # as recorded: far from it
    con.close()

    doc = json.loads(gzip.open(path).read())
    gpu = next(d["id"] for d in doc["deviceProperties"])
    want = {s: w for (s, dev), w in sweep(path, steps, offset).items() if dev == gpu}
    reserve = max(w["reserved"] for w in want.values())
    capacity = reserve * 100 // 95 + 1                      # the peak reserve: just under 95 % of the device
    for d in doc["deviceProperties"]:
        d["totalGlobalMem"] = capacity
    derived = tmp_path / path.name
    with gzip.open(derived, "wt") as f:
        json.dump(doc, f)
    db = tmp_path / "derived.duckdb"
    con = _ingest(derived, db)

    # nothing but the capacity changed: every other figure is the recorded trace's
    assert con.execute(f"SELECT {COLS} FROM memory ORDER BY ALL").fetchall() == recorded
    rows = con.execute("""SELECT step, peak_reserved_bytes, device_memory_bytes, headroom_bytes, headroom_pct, near_device_limit
                          FROM memory WHERE device_type <> 'cpu' ORDER BY step""").fetchall()
    assert [r[0] for r in rows] == sorted(want)
    for step, reserved, devmem, headroom, pct, near in rows:
        w = want[step]["reserved"]
        assert (reserved, devmem, headroom) == (w, capacity, capacity - w)
        assert pct == round(100 * (capacity - w) / capacity, 2) and near == (w >= 0.9 * capacity), step
    worst = min(s for s in want if want[s]["reserved"] == reserve)   # least headroom (the earlier step on a tie)
    dtype = con.execute("SELECT DISTINCT device_type FROM memory WHERE device_type <> 'cpu'").fetchone()[0]
    assert dtype in ("cuda", "hip")
    left = round(100 * (capacity - reserve) / capacity, 2)   # as the pack rounds headroom_pct
    assert left == 5.0
    line = (f"Rank 0 is close to running out of memory: its allocator reserved {mib(reserve)} of the {mib(capacity)} "
            f"of {dtype}:{gpu} in step {worst} ({left:.1f}% left)")
    top_op, top_bytes = con.execute("SELECT top_op, top_op_bytes FROM memory_ranks WHERE device_type = ?", [dtype]).fetchone()
    held = f"; {top_op} holds {mib(top_bytes)} of its peak" if top_op else ""
    con.close()

    import traceflow
    sentences = traceflow.open(str(db)).findings()["sentences"]
    mine = [s for s in sentences if "close to running out of memory" in s]
    assert mine == [line + held + "."], sentences
    page = tmp_path / "report.html"
    r = run_cli("report", db, "-o", page)
    assert r.returncode == 0, r.stderr
    text = page.read_text()
    assert html.escape(line + held + ".", quote=False) in text or (line + held + ".") in text
    sec = text[text.index('<section id="memory"'):]
    sec = sec[:sec.index("</section>")]
    assert f"{left:.1f}%" in sec and mib(capacity) in sec
