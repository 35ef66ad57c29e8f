"""Issue 31: what-if checked against reality. Pairs of real runs, with and without an injected fault:
the prediction made from the faulty run (the fault's rank and step, its abnormal host time removed)
against the step time measured on the run without the fault (docs/whatif.md, "Validated against
fixed runs"). The table in docs/whatif.md is what `python tests/test_whatif_pairs.py` prints."""
from __future__ import annotations

import gzip
import json
import lzma
import shutil
import statistics
import sys
from pathlib import Path

import pytest
from conftest import BUNDLED, FIX, SHARED, connect

import traceflow
from traceflow.whatif import Scenario, StepGraph, best_fixes, whatif

BENCH = SHARED / "bench" / "long4"
# (name, profiler, faulty files, fixed files, truth folder)
PAIRS = [
    ("ddp2_flops stall / clean", "kineto", BUNDLED / "ddp2_flops/stall", BUNDLED / "ddp2_flops/clean", BUNDLED / "ddp2_flops/stall"),
    ("ddp4_sync_stall / long4", "kineto", FIX / "h100/kineto/ddp4_sync_stall", BENCH / "kineto", FIX / "h100/kineto/ddp4_sync_stall"),
    ("ddp4_sync_stall / long4", "nsys", FIX / "h100/nsys/ddp4_sync_stall", BENCH / "nsys", FIX / "h100/nsys/ddp4_sync_stall"),
    ("ddp4_straggler / long4", "kineto", FIX / "h100/kineto/ddp4_straggler", BENCH / "kineto", FIX / "h100/kineto/ddp4_straggler"),
    ("ddp4_straggler / long4", "nsys", FIX / "h100/nsys/ddp4_straggler", BENCH / "nsys", FIX / "h100/nsys/ddp4_straggler"),
]
TARGET_PCT = 5.0


def _traces(folder: Path, scratch: Path) -> list[str]:
    """The trace files of a folder; compressed nsys exports unpacked into `scratch` (never the tree)."""
    out = []
    for p in sorted(folder.iterdir()):
        if p.name.startswith("truth") or not p.name.endswith((".json.gz", ".json", ".sqlite", ".sqlite.gz", ".sqlite.xz")):
            continue
        if p.name.endswith((".sqlite.gz", ".sqlite.xz")):
            dest = scratch / p.name[:-3]
            if not dest.exists():
                scratch.mkdir(parents=True, exist_ok=True)
                with (gzip.open if p.suffix == ".gz" else lzma.open)(p) as src, open(dest, "wb") as dst:
                    shutil.copyfileobj(src, dst)
            out.append(str(dest))
        else:
            out.append(str(p))
    return out


def fault_of(truth_dir: Path) -> dict:
    """The injected fault the pair is about: the host stall of the truth files (rank, step, ns)."""
    for p in sorted(truth_dir.glob("truth-rank*.json")):
        for t in json.loads(p.read_text()):
            if str(t.get("kind", "")).startswith("host_stall"):
                return {"rank": t["rank"], "step": t["step"], "dur_ns": t["dur_ns"], "kind": t["kind"]}
    raise AssertionError(f"no host stall in {truth_dir}")


def step_times(con) -> dict[int, float]:
    """Each step's measured time, as the what-if measures it (the GPU windows of every rank)."""
    steps = [r[0] for r in con.execute("SELECT DISTINCT step FROM step_windows ORDER BY step").fetchall()]
    return {s: StepGraph(con, s).measured()[0] for s in steps}


def typical(times: dict[int, float], leave_out=()) -> float:
    """The median step, leaving out `leave_out` and warm-up steps (over 1.5x the median)."""
    med = statistics.median(times.values())
    return statistics.median(v for s, v in times.items() if s not in leave_out and v <= 1.5 * med)


def evaluate(faulty_db: str, fixed_db: str, truth_dir: Path) -> dict:
    fault = fault_of(truth_dir)
    con = connect(faulty_db)
    row = whatif(con, [fault["step"]], Scenario(remove_host_stall=[fault["rank"]]))[0]
    times = step_times(con)
    own = typical(times, leave_out={fault["step"]})
    first = min(times)  # the verdict's warm-up step: the first, when it is over 1.5x the median
    fixes = best_fixes(con, skip_step=first if len(times) >= 3 and times[first] > 1.5 * statistics.median(times.values()) else None)
    con.close()
    fixed_con = connect(fixed_db)
    measured = typical(step_times(fixed_con))
    fixed_con.close()
    pred = row["predicted_ns"]
    return {"fault": fault, "faulty_ns": row["measured_ns"], "predicted_ns": pred, "measured_ns": measured,
            "error_pct": 100.0 * (pred - measured) / measured, "own_ns": own,
            "own_error_pct": 100.0 * (pred - own) / own, "floor_pct": 100.0 * (own - measured) / measured,
            "fixes": fixes}


@pytest.fixture(scope="module")
def dbs(tmp_path_factory):
    made: dict[str, str] = {}
    root = tmp_path_factory.mktemp("pairs")

    def db(folder: Path) -> str:
        if not folder.is_dir():
            pytest.skip(f"{folder} not found (../shared is absent)")
        key = str(folder)
        if key not in made:
            out = root / f"{len(made)}.duckdb"
            traceflow.ingest(_traces(folder, root / f"unpacked{len(made)}"), str(out))
            made[key] = str(out)
        return made[key]
    return db


def test_ddp2_stall_removed_predicts_the_clean_run(dbs):
    """The bundled pair: rank 1 slept 40 ms in step 3 (after a synchronize). Removing its abnormal
    host time predicts the clean run's median step within 5 % (measured: 49.8 vs 48.3 ms, +3.3 %),
    and the fix ranked first is that fault: rank 1, step 3, time in no op."""
    name, _, faulty, fixed, truth = PAIRS[0]
    r = evaluate(dbs(faulty), dbs(fixed), truth)
    assert abs(r["error_pct"]) <= TARGET_PCT, r
    assert r["faulty_ns"] > 1.5 * r["measured_ns"]  # the fault was worth predicting: 89.6 vs 48.3 ms
    json.dumps(r["fixes"])  # plain data: the findings are written as JSON
    top = r["fixes"][0]
    assert top.get("fault", {}).get("rank") == r["fault"]["rank"] and top["fault"]["step"] == r["fault"]["step"], top
    assert top["fault"]["cause"] == "no_op"  # a time.sleep: no op at all
    assert top["fault"]["after_sync"] == ["cudaDeviceSynchronize"]  # the synchronize before it (truth's note)
    # what it removed is the sleep: its abnormal host time is the truth's duration within 2 %
    assert top["fault"]["host_ns"] == pytest.approx(r["fault"]["dur_ns"], rel=0.02)


@pytest.mark.parametrize("i", [1, 2, 3, 4], ids=lambda i: f"{PAIRS[i][0]} ({PAIRS[i][1]})")
def test_shared_pairs_against_long4(i, dbs):
    """The h100 faulty runs against long4 (the same job, no faults). Two runs of this job differ by
    themselves (NCCL over sockets on one shared GPU): their fault-free steps are 7-48 % apart, which
    no prediction from the faulty run can see. So: within the faulty run, the prediction matches its
    own fault-free steps within 5 %; against long4, its error is the two runs' own difference within
    5 %. A stall hidden behind queued work (ddp4_straggler) gains under 2 %, and is not ranked as a
    fix: the h100 README asks that an honest analysis not charge it 40 ms."""
    name, _, faulty, fixed, truth = PAIRS[i]
    if not BENCH.is_dir():
        pytest.skip(f"{BENCH} not found (../shared is absent)")
    r = evaluate(dbs(faulty), dbs(fixed), truth)
    assert abs(r["own_error_pct"]) <= TARGET_PCT, r
    assert abs(r["error_pct"] - r["floor_pct"]) <= TARGET_PCT, r
    if "straggler" in name:
        assert r["faulty_ns"] - r["predicted_ns"] <= 0.02 * r["faulty_ns"], r
    else:  # the fix ranked first is the fault: its rank and step, the sleep and the synchronize before it
        top = r["fixes"][0]
        assert "host stall" in top["scenario"], r["fixes"]
        assert (top["fault"]["rank"], top["fault"]["step"]) == (r["fault"]["rank"], r["fault"]["step"])
        assert top["fault"]["cause"] == "no_op"
        assert top["fault"]["host_ns"] == pytest.approx(r["fault"]["dur_ns"], rel=0.15)
        assert top["fault"]["after_sync"] == ["cudaDeviceSynchronize"]  # the truth's torch.cuda.synchronize()
        # "no host syncs" finds the same fault through its synchronize (13-15 ms of its 15-17 ms on
        # rank 3, step 4): it says so, and comes after the stall
        syncs = [f for f in r["fixes"] if f["scenario"].startswith("no host syncs")]
        for f in syncs:
            if (f.get("fault") or {}).get("rank") == r["fault"]["rank"]:
                assert f.get("same_fault") and "the stall above" in f["scenario"], f


def table(dbs_fn) -> list[str]:
    lines = ["| pair | profiler | faulty step (ms) | predicted, fault removed (ms) | measured, fixed run (ms) | error % | "
             "faulty run's own fault-free steps (ms) | error vs those % | top-ranked fix |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, prof, faulty, fixed, truth in PAIRS:
        if not faulty.is_dir() or not fixed.is_dir():
            continue
        r = evaluate(dbs_fn(faulty), dbs_fn(fixed), truth)
        top = r["fixes"][0]["scenario"] if r["fixes"] else "none"
        f = r["fault"]
        lines.append(f"| {name} (rank {f['rank']}, step {f['step']}) | {prof} | {r['faulty_ns'] / 1e6:.1f} | "
                     f"{r['predicted_ns'] / 1e6:.1f} | {r['measured_ns'] / 1e6:.1f} | {r['error_pct']:+.1f} | "
                     f"{r['own_ns'] / 1e6:.1f} | {r['own_error_pct']:+.1f} | {top} |")
    return lines


if __name__ == "__main__":  # prints the table of docs/whatif.md; argv[1]: a scratch folder for databases
    scratch = Path(sys.argv[1])
    scratch.mkdir(parents=True, exist_ok=True)
    cache: dict[str, str] = {}

    def db(folder: Path) -> str:
        if str(folder) not in cache:
            out = scratch / f"{len(cache)}.duckdb"
            if not out.exists():
                traceflow.ingest(_traces(folder, scratch / f"unpacked{len(cache)}"), str(out))
            cache[str(folder)] = str(out)
        return cache[str(folder)]
    print("\n".join(table(db)))
