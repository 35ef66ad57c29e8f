"""Issue 19: `traceflow scaling` on runs derived at test time from the bundled 4-rank job: a 2-rank
copy (ranks 2-3 dropped) and an 8-rank copy (ranks replicated, every step 30 ms longer in
communication), checked against a hand computation of speedup, efficiency and Karp–Flatt."""
from __future__ import annotations

import json
import shutil
import statistics

import duckdb
import pytest
from conftest import BUNDLED, run_cli

import traceflow

ADDED_NS = 30_000_000


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("scaling")
    base = d / "r4.duckdb"
    traceflow.ingest(sorted(str(p) for p in (BUNDLED / "ddp4_sync_stall").glob("rank-*.json.gz")), str(base))
    r2, r8 = d / "r2.duckdb", d / "r8.duckdb"
    shutil.copy(base, r2)
    shutil.copy(base, r8)
    con = duckdb.connect(str(r2))
    for t in ("traces", "step_breakdown", "collective_waits", "tf_internal.step_windows"):
        con.execute(f"DELETE FROM {t} WHERE rank >= 2")
    con.close()
    con = duckdb.connect(str(r8))
    for t in ("traces", "step_breakdown", "collective_waits", "tf_internal.step_windows"):
        cols = [r[0] for r in con.execute(f"DESCRIBE {t}").fetchall()]
        sel = ", ".join("rank + 4" if c == "rank" else ("trace_id + 100" if c == "trace_id" else c) for c in cols)
        con.execute(f"INSERT INTO {t} SELECT {sel} FROM {t}")
    con.execute(f"UPDATE tf_internal.step_windows SET end_ns = end_ns + {ADDED_NS}")
    con.execute(f"UPDATE step_breakdown SET exposed_comm_ns = exposed_comm_ns + {ADDED_NS}, wall_ns = wall_ns + {ADDED_NS} "
                "WHERE part = 'step'")
    con.close()
    return [str(r2), str(base), str(r8)]


def _step_time(path: str) -> float:
    """The job's step time by hand: per step, the window across ranks; the median over steps."""
    con = duckdb.connect(path, read_only=True)
    rows = con.execute("SELECT step, start_ns, end_ns FROM tf_internal.step_windows").fetchall()
    con.close()
    per_step: dict = {}
    for step, a, b in rows:
        lo, hi = per_step.get(step, (a, b))
        per_step[step] = (min(lo, a), max(hi, b))
    return statistics.median(hi - lo for lo, hi in per_step.values())


@pytest.mark.parametrize("mode", ["strong", "weak"])
def test_speedup_efficiency_and_karp_flatt_by_hand(runs, mode):
    s = traceflow.scaling(runs, mode=mode)
    t = {r["ranks"]: r for r in s.table.iter_rows(named=True)}
    assert sorted(t) == [2, 4, 8]
    t0 = _step_time(runs[0])
    for path, p in zip(runs, (2, 4, 8)):
        T, n = _step_time(path), p / 2
        psi = t0 / T if mode == "strong" else n * t0 / T
        assert t[p]["step_ns"] == pytest.approx(T, abs=1)
        assert t[p]["speedup"] == pytest.approx(psi, abs=1e-4)
        assert t[p]["efficiency_pct"] == pytest.approx(100 * psi / n, abs=0.05)
        if p == 2:
            assert t[p]["karp_flatt"] is None
        else:
            assert t[p]["karp_flatt"] == pytest.approx((1 / psi - 1 / n) / (1 - 1 / n), abs=1e-4)
    assert _step_time(runs[2]) - _step_time(runs[1]) == ADDED_NS
    # the added time is communication: its share of the step grows by it
    assert t[8]["exposed_comm_ns"] - t[4]["exposed_comm_ns"] == pytest.approx(ADDED_NS, abs=1)
    assert t[8]["exposed_comm_pct"] > t[4]["exposed_comm_pct"]
    assert len(s.sentences) == 3
    assert ("grows" if mode == "weak" else "did not shorten the step") in s.sentences[-1]


def test_cli_json_and_page(runs, tmp_path):
    r = run_cli("scaling", *runs, "--mode", "weak", "--format", "json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["mode"] == "weak" and [x["ranks"] for x in out["runs"]] == [2, 4, 8]
    page = tmp_path / "scaling.html"
    r = run_cli("scaling", *runs, "-o", str(page))
    assert r.returncode == 0 and "Karp" in r.stdout and page.exists()
    r = run_cli("scaling", runs[0])
    assert r.returncode != 0 and "at least two runs" in r.stderr


def test_karp_flatt_outside_its_range_is_not_called_a_serial_fraction(runs):
    """Strong scaling where more ranks made the step slower (speedup < 1, by hand): Karp–Flatt is
    above 1, which no serial fraction can be; the sentence says so and never calls it one."""
    s = traceflow.scaling(runs, mode="strong")
    t = {r["ranks"]: r for r in s.table.iter_rows(named=True)}
    psi = _step_time(runs[0]) / _step_time(runs[2])
    assert psi < 1 and t[8]["karp_flatt"] > 1 and t[8]["karp_flatt_valid"] is False
    said = next(x for x in s.sentences if x.startswith("8 ranks"))
    assert "outside [0, 1]" in said and "serial fraction (Karp" not in said
    assert all(r["same_model"] for r in s.table.iter_rows(named=True)) and not s.warnings


def _kernels_per_rank_step(folder) -> float:
    """Plain Python over the raw Kineto files: per rank and profiled step, the compute kernels (not
    NCCL) whose launch call lies in the step's ProfilerStep range; the median."""
    import gzip
    counts = []
    for p in sorted(folder.glob("rank-*.json.gz")):
        ev = json.load(gzip.open(p))["traceEvents"]
        steps = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("ph") == "X" and e.get("name", "").startswith("ProfilerStep#")
                 and e.get("cat") != "gpu_user_annotation"]  # the host's step ranges, not their GPU-side copies
        launch = {e["args"]["correlation"]: e["ts"] for e in ev
                  if e.get("ph") == "X" and e.get("cat") == "cuda_runtime" and "correlation" in (e.get("args") or {})}
        ts = [launch.get(e["args"].get("correlation")) for e in ev
              if e.get("ph") == "X" and e.get("cat") == "kernel" and not e["name"].startswith("nccl")]
        counts += [sum(1 for t in ts if t is not None and a <= t < b) for a, b in steps]
    return statistics.median(counts)


def test_runs_of_different_models_are_warned_about_loudly(tmp_path):
    """A 2-rank run of a 2-layer GPT and a 4-rank run of a 6-layer GPT are no scaling study: the
    kernels each rank runs per step differ 5-fold (raw files), and scaling says so first."""
    small, big = BUNDLED / "ddp2_flops" / "clean", BUNDLED / "ddp4_sync_stall"
    dbs = []
    for f in (small, big):
        out = tmp_path / (f.name + ".duckdb")
        traceflow.ingest(sorted(str(p) for p in f.glob("rank-*.json.gz")), str(out))
        dbs.append(str(out))
    s = traceflow.scaling(dbs, mode="strong")
    row = s.table.row(1, named=True)
    raw = _kernels_per_rank_step(big) / _kernels_per_rank_step(small)
    assert raw > 3 and row["kernels_rel"] == pytest.approx(raw, rel=0.02)
    assert row["same_model"] is False
    assert s.warnings[0].startswith("NOT ONE MODEL: the 4-rank run") and "compute kernels per rank and step" in s.warnings[0]
    r = run_cli("scaling", *dbs)
    assert r.returncode == 0 and "NOT ONE MODEL" in r.stdout + r.stderr
