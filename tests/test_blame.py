"""Cross-rank blame (issue #41 item 2): who caused a wait, time slicing of one GPU, clock alignment on
a shared GPU, point-to-point matches and partial captures. Every figure is recomputed here with plain
Python over the raw Kineto JSON and compared with the database's."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from conftest import FIX, ROOT, connect

BUNDLED = ROOT / "fixtures" / "ddp4_sync_stall"
DLRM = FIX / "public" / "param-dlrm8"
HTA = FIX / "public" / "hta-2rank"


def _files(d: Path) -> list[str]:
    if not d.is_dir():
        pytest.skip(f"{d} not found (../shared is absent)")
    return sorted(str(p) for p in d.iterdir() if p.name.endswith((".json.gz", ".json")) and not p.name.startswith("truth"))


def _raw(path: str) -> dict:
    with gzip.open(path, "rt") if path.endswith(".gz") else open(path) as f:
        return json.load(f)


def _rank(d: dict, path: str) -> int:
    return int(d.get("distributedInfo", {}).get("rank", Path(path).name.split("rank-")[-1].split(".")[0]))


def _kernels(d: dict) -> list[dict]:
    return [e for e in d["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "kernel"]


def _ns(d: dict, ts: float) -> int:
    return int(d.get("baseTimeNanoseconds", 0)) + round(ts * 1000)  # ns since the epoch, as traceflow keeps them


def _comm_by_order(files: list[str]) -> dict[int, list[tuple[int, int, str]]]:
    """Per rank, its NCCL kernels (start, end, name) in time order, aligned from the end of the
    capture (ranks start their profilers at different moments, all stop after the same collective)."""
    per = {}
    for p in files:
        d = _raw(p)
        ks = sorted((_ns(d, e["ts"]), _ns(d, e["ts"] + e["dur"]), e["name"]) for e in _kernels(d) if "nccl" in e["name"].lower())
        per[_rank(d, p)] = ks
    n = min(len(v) for v in per.values())
    return {r: v[len(v) - n:] for r, v in per.items()}


def _blame(group: dict[int, tuple[int, int]]) -> tuple[int, int, int]:
    """(last rank, all waits, waits after the second-last arrival) of one matched collective."""
    order = sorted(group, key=lambda r: (-group[r][0], r))
    last, second = order[0], order[1]
    L, S2 = group[last][0], group[second][0]
    total = sum(min(L - s, e - s) for r, (s, e) in group.items())
    after = sum(min(L - max(s, S2), e - s) for r, (s, e) in group.items() if r != last)
    return last, total, after


def _ingest(files, tmp_path, name, **opts) -> str:
    import traceflow
    out = tmp_path / f"{name}.duckdb"
    traceflow.ingest(files, str(out), **opts)
    return str(out)


def test_wait_charged_after_second_last_arrival_ddp4_sync_stall(tmp_path):
    """The 40 ms stall of rank 3 (step 4): its peers waited 139.4 ms in all, but only the time after the
    second-last rank arrived is rank 3's doing (today's code charged all of it)."""
    files = _files(BUNDLED)
    ks = _comm_by_order(files)
    n = len(next(iter(ks.values())))
    groups = [{r: ks[r][k][:2] for r in ks} for k in range(n)]
    # the matched ends agree (one collective) - what makes the alignment from the end right
    assert all(max(e for _, e in g.values()) - min(e for _, e in g.values()) < 20e6 for g in groups)
    worst = max((_blame(g) for g in groups if _blame(g)[0] == 3), key=lambda b: b[1])
    _, total, after = worst
    assert 130e6 < total < 150e6 and 40e6 < after < 50e6  # the 139.4 ms and 45.9 ms
    con = connect(_ingest(files, tmp_path, "d4"))
    row = con.execute("SELECT peer_wait_ns, peers FROM findings WHERE kind = 'step_outlier' AND rank = 3 AND step = 4").fetchone()
    assert row is not None
    assert abs(row[0] - after) < 10_000, (row[0], after)  # within the raw file's µs rounding
    assert row[1] == [0, 1, 2]
    s = con.execute("SELECT total_wait_ns, blamed_wait_ns FROM stragglers WHERE last_rank = 3 AND step = 4").fetchone()
    assert abs(s[0] - total) < 10_000 and abs(s[1] - after) < 10_000  # the existing figure stays exact


def test_wait_charged_after_second_last_arrival_dlrm8(tmp_path):
    """param-dlrm8 (the wild corpus's param/worker*_step_12*): rank 7 is last in 5 collectives; its
    peers waited 35.6 ms in all, 9.2 ms after the second-last arrival."""
    files = _files(DLRM)
    ks = _comm_by_order(files)
    n = len(next(iter(ks.values())))
    blamed = [_blame({r: ks[r][k][:2] for r in ks}) for k in range(n)]
    total = sum(t for last, t, _ in blamed if last == 7)
    after = sum(a for last, _, a in blamed if last == 7)
    assert 35e6 < total < 36.2e6 and 9.0e6 < after < 9.4e6
    con = connect(_ingest(files, tmp_path, "dlrm"))
    row = con.execute("SELECT peer_wait_ns FROM findings WHERE kind = 'straggler' AND rank = 7").fetchone()
    assert row is not None and abs(row[0] - after) < 50_000, (row, after)


def _overlap_pct(per_rank: dict[int, list[tuple[int, int]]], shift: dict[int, int]) -> float:
    """Share of kernel time overlapping another rank's kernel, spans holding a whole kernel of another
    rank (preempted at a turn's end) left out - written apart from traceflow/derive/gpu_sharing.py."""
    iv = sorted((s + shift.get(r, 0), e + shift.get(r, 0), r) for r, ks in per_rank.items() for s, e in ks)
    others = {r: (np.array([s for s, _, q in iv if q != r]), np.array([e for _, e, q in iv if q != r])) for r in per_rank}
    keep = []
    for s, e, r in iv:
        os_, oe = others[r]
        j = int(np.searchsorted(os_, s))
        if j < len(os_) and oe[j] <= e:  # the other rank's kernel starting first after it is held whole
            continue
        keep.append((s, e, r))
    def union(xs):
        tot, cur_s, cur_e = 0, None, None
        for s, e in sorted(xs):
            if cur_e is None or s > cur_e:
                tot += 0 if cur_e is None else cur_e - cur_s
                cur_s, cur_e = s, e
            else:
                cur_e = max(cur_e, e)
        return tot + (0 if cur_e is None else cur_e - cur_s)
    per = sum(union([(s, e) for s, e, q in keep if q == r]) for r in per_rank)
    return 100.0 * (per - union([(s, e) for s, e, _ in keep])) / per


def _compute_kernels(files) -> dict[int, list[tuple[int, int]]]:
    out = {}
    for p in files:
        d = _raw(p)
        out[_rank(d, p)] = [(_ns(d, e["ts"]), _ns(d, e["ts"] + e["dur"])) for e in _kernels(d)
                            if "nccl" not in e["name"].lower() and e["dur"] > 0]
    return out


@pytest.mark.parametrize("align", ["collectives", "auto"])
def test_clock_keeps_time_sliced_ranks_interleaved(tmp_path, align):
    """Ranks time-slicing one GPU are never shifted apart: on the raw files their kernels interleave
    without overlap at offset 0 only (today `--align collectives` moved rank 2 of the bundled job by
    +2.395 ms, one turn, which makes the shared GPU run two contexts at once)."""
    files = _files(BUNDLED)
    raw = _compute_kernels(files)
    assert _overlap_pct(raw, {}) < 0.5
    assert _overlap_pct(raw, {2: 2_395_000}) > 2  # a shift of one turn overlaps: the check can fail
    con = connect(_ingest(files, tmp_path, f"d4{align}", align=align))
    offsets = dict(con.execute("SELECT rank, clock_offset_ns FROM traces").fetchall())
    assert _overlap_pct(raw, offsets) < 0.5, offsets
    sl = con.execute("SELECT ranks, time_sliced, turn_ns FROM gpu_sharing").fetchall()
    assert sl and sl[0][0] == [0, 1, 2, 3] and sl[0][1] and 1.5e6 < sl[0][2] < 3e6  # ~2 ms slices


def test_independent_gpus_are_not_time_sliced(tmp_path):
    """param-dlrm8 (8 V100s): kernels of different ranks overlap; no rank is called time-sliced."""
    files = _files(DLRM)
    raw = _compute_kernels(files)
    con = connect(_ingest(files, tmp_path, "dlrm"))
    sliced = con.execute("SELECT count(*) FROM gpu_sharing WHERE time_sliced").fetchone()[0]
    devs = {}
    for p in files:
        d = _raw(p)
        devs.setdefault(next((e["args"].get("device") for e in _kernels(d)), None), []).append(_rank(d, p))
    shared_index = [rs for rs in devs.values() if len(rs) > 1]
    assert all(_overlap_pct({r: raw[r] for r in rs}, {}) > 0.5 for rs in shared_index)
    assert sliced == 0


def test_sharing_lateness_is_not_blamed(tmp_path):
    """Bundled ddp4_sync_stall: a collective started last by turns of the shared GPU (its host had
    issued it before the second-last rank started it) is no straggler's doing. The launch time comes
    from the raw runtime call of the kernel's correlation id."""
    files = _files(BUNDLED)
    launch = {}
    for p in files:
        d = _raw(p)
        r = _rank(d, p)
        calls = {e["args"]["correlation"]: _ns(d, e["ts"]) for e in d["traceEvents"]
                 if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
        for e in _kernels(d):
            if "nccl" in e["name"].lower():
                launch[(r, _ns(d, e["ts"]))] = calls.get(e["args"]["correlation"])
    con = connect(_ingest(files, tmp_path, "d4s"))
    rows = con.execute("""SELECT s.sharing, s.last_rank, w.start_ns,
                                 (SELECT max(start_ns) FROM collective_waits x WHERE (x.comm, x.step, x.seq) = (s.comm, s.step, s.seq)
                                  AND x.rank <> s.last_rank) AS second_start
                          FROM stragglers s JOIN collective_waits w USING (comm, step, seq)
                          WHERE w.rank = s.last_rank""").fetchall()
    assert sum(1 for r in rows if r[0]) >= 10
    for sharing, last, start, second in rows:
        # the raw launch of the last rank's kernel (raw µs vs the database's ns: nearest start)
        issued = min(((abs(k[1] - start), v) for k, v in launch.items() if k[0] == last), key=lambda x: x[0])[1]
        assert sharing == (issued is not None and issued < second), (last, start)
    strag = con.execute("SELECT rank, value_ns FROM findings WHERE kind = 'straggler'").fetchall()
    # rank 1 (loss.item() every micro-step) stays the straggler, by its own lateness only
    assert [r for r, _ in strag] == [1]
    own = con.execute("""SELECT median(d) FROM (SELECT st.step, coalesce(sum(last_by_ns) FILTER (WHERE NOT sharing AND last_rank = 1), 0) d
                         FROM tf_internal.findings_steps st LEFT JOIN stragglers x USING (step) WHERE NOT st.warmup GROUP BY st.step)""").fetchone()[0]
    assert strag[0][1] == round(own) and strag[0][1] < 17.0e6  # 17.2 ms per step before turns were left out
    caveat = con.execute("SELECT n, ranks FROM findings WHERE kind = 'sharing'").fetchone()
    assert caveat is not None and caveat[0] == sum(1 for r in rows if r[0]) and caveat[1] == [0, 1, 2, 3]


def test_partial_capture_and_point_to_point_hta(tmp_path):
    """HTA's trace_filter pair: 2 of 128 ranks, SendRecv kernels matched by order that never ran at
    one moment (6 of 10). No straggler is claimed; partial_capture says why."""
    files = _files(HTA)
    world = {_raw(p).get("distributedInfo", {}).get("world_size") for p in files}
    assert world == {128}
    con = connect(_ingest(files, tmp_path, "hta"))
    pc = dict(con.execute("SELECT reason, n FROM partial_capture").fetchall())
    assert pc["ranks missing"] == 128 - len(files)
    assert not con.execute("SELECT count(*) FROM findings WHERE kind = 'straggler' OR peer_wait_ns > 0").fetchone()[0]
    assert con.execute("SELECT count(*) FROM findings WHERE kind = 'partial_capture'").fetchone()[0] >= 1
    # every point-to-point match kept ran at one moment in the raw files
    raw = {}
    for p in files:
        d = _raw(p)
        raw[_rank(d, p)] = {_ns(d, e["ts"]): _ns(d, e["ts"] + e["dur"]) for e in _kernels(d) if "SendRecv" in e["name"]}
    kept = con.execute("""SELECT comm, step, seq, list(rank ORDER BY rank), list(start_ns ORDER BY rank) FROM collective_waits
                          WHERE op IN ('SendRecv', 'Send', 'Recv') GROUP BY ALL""").fetchall()
    for *_, ranks, starts in kept:
        spans = [(s, raw[r][s]) for r, s in zip(ranks, starts)]
        assert max(s for s, _ in spans) < min(e for _, e in spans)
    impossible = pc.get("unpaired point-to-point", 0)
    assert impossible == 6


def test_unnamed_communicators_get_no_cross_rank_wait(tmp_path):
    """No job of the fixtures or the wild corpus holds two kinds of unnamed communicator (no file's
    strings hold ncclCommSplit), so one is derived at test time from the real nsys ddp4_sync_stall:
    ranks 0 and 1 run every other NCCL kernel on a second stream, as a rank of a TP group and a DP
    group does. nsys records no communicator, so which ranks share which cannot be told: no peer
    wait and no straggler may be claimed, and partial_capture says why (today: stragglers by
    stream order)."""
    import shutil
    import sqlite3
    src = FIX / "h100" / "nsys" / "ddp4_sync_stall"
    if not src.is_dir():
        pytest.skip(f"{src} not found (../shared is absent)")
    files = []
    for r in range(4):
        dst = tmp_path / f"rank{r}.sqlite"
        shutil.copy(src / f"rank{r}.sqlite", dst)
        dst.chmod(0o644)
        if r in (0, 1):
            con = sqlite3.connect(dst)
            ids = [i for (i,) in con.execute(
                """SELECT k.rowid FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName
                   WHERE s.value LIKE 'nccl%' ORDER BY k.start""")]
            con.executemany("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET streamId = streamId + 1000 WHERE rowid = ?",
                            [(i,) for i in ids[1::2]])
            con.commit()
            con.close()
        files.append(str(dst))
    db = connect(_ingest(files, tmp_path, "split"))
    streams = dict(db.execute("""SELECT rank, count(DISTINCT comm) FROM collectives WHERE NOT comm_recorded
                                 GROUP BY rank""").fetchall())
    assert streams[0] >= 2 and streams[1] >= 2 and streams[2] == 1
    pc = db.execute("SELECT n, note FROM partial_capture WHERE reason = 'communicators unknown'").fetchone()
    assert pc is not None and pc[0] == 2 and "ranks 0, 1" in pc[1]
    assert not db.execute("SELECT count(*) FROM findings WHERE kind = 'straggler' OR peer_wait_ns > 0").fetchone()[0]
    assert not db.execute("SELECT count(*) FROM collective_waits WHERE rank IN (0, 1)").fetchone()[0]
