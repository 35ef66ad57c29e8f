"""The regression gate's false alarms and detections (docs/compare-runs.md), on real runs:

- no change: each job against itself (every step paired with itself); each job's first half of
  steps against its second half; every ordered pair of two different steps of one job (steps
  without an injected fault, by the truth files);
- a known change: ddp2_flops clean against stall, step by step (the stall's step is the change,
  the others are not); the long clean 4-rank run (bench long4) against the h100 jobs of the same
  model with faults in every step (rank 1's `loss.item()` after every micro-step).

    .venv/bin/python bench/regression_gate.py --shared ../shared [--pct 5] [--json out.json]

Databases go to a scratch folder removed at the end. Each decision is traceflow.gate.decide on a
traceflow.compare.diff, as `traceflow diff A B --fail-on-regression PCT` makes it.
"""
from __future__ import annotations

import argparse
import itertools
import json
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def faulted_steps(folder: Path) -> set[int]:
    """Steps a truth file names a fault in (an injected stall); rank-wide faults of every step are
    the run's character, not a step's."""
    steps = set()
    for t in folder.glob("truth-rank*.json"):
        data = json.loads(t.read_text())
        for e in data if isinstance(data, list) else data.get("faults", []):
            if isinstance(e, dict) and isinstance(e.get("step"), int) and "stall" in str(e.get("kind", "")):
                steps.add(e["step"])
    return steps


def traces(folder: Path) -> list[str]:
    return sorted(str(p) for p in folder.iterdir() if p.name.endswith((".json.gz", ".json", ".sqlite"))
                  and not p.name.startswith("truth"))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", default=str(ROOT.parent / "shared"))
    ap.add_argument("--pct", type=float, default=5.0)
    ap.add_argument("--json")
    ap.add_argument("--no-long4", action="store_true", help="skip the long clean run (the largest ingest)")
    args = ap.parse_args()
    import duckdb

    import traceflow
    from traceflow.compare import diff
    from traceflow.gate import decide
    shared = Path(args.shared)
    jobs = {"bundled ddp4_sync_stall": ROOT / "fixtures/ddp4_sync_stall",
            "ddp2_flops clean": ROOT / "fixtures/ddp2_flops/clean", "ddp2_flops stall": ROOT / "fixtures/ddp2_flops/stall"}
    for fmt in ("kineto", "nsys"):
        for name in ("ddp4_sync_stall", "ddp4_straggler"):
            if (shared / "fixtures/h100" / fmt / name).is_dir():
                jobs[f"h100 {fmt} {name}"] = shared / "fixtures/h100" / fmt / name
    scratch = Path(tempfile.mkdtemp(prefix="tf-gate-"))
    try:
        long4 = shared / "bench/long4/kineto"
        if long4.is_dir() and not args.no_long4:
            jobs["long4 kineto (clean)"] = long4
        dbs, steps, faults = {}, {}, {}
        for name, folder in jobs.items():
            out = scratch / (name.replace(" ", "_").replace("(", "").replace(")", "") + ".duckdb")
            traceflow.ingest(traces(folder), str(out)).close()
            dbs[name] = str(out)
            con = duckdb.connect(str(out), read_only=True)
            steps[name] = [r[0] for r in con.execute("SELECT DISTINCT step FROM tf_internal.step_windows ORDER BY step").fetchall()]
            con.close()
            faults[name] = faulted_steps(folder)
            print(f"{name}: steps {steps[name]}, faulted {sorted(faults[name]) or 'none'}", file=sys.stderr)

        def gate(a, b, pairs=None, **kw):
            return decide(diff(dbs[a], dbs[b], pairs=pairs, **kw), args.pct)

        trials: list[dict] = []

        def record(kind, a, b, what, g, change):
            trials.append({"kind": kind, "a": a, "b": b, "what": what, "change": change, "alarm": g.regressed,
                           "delta_pct": None if g.delta_pct is None else round(g.delta_pct, 2),
                           "noise_ms": None if g.noise_ns is None else round(g.noise_ns / 1e6, 2), "line": g.sentence()})

        for name in jobs:
            record("self", name, name, "every step with itself", gate(name, name), False)
            clean = [s for s in steps[name] if s not in faults[name]]
            if len(clean) >= 4:
                h = len(clean) // 2
                pairs = list(zip(clean[:h], clean[h:2 * h]))
                record("halves", name, name, f"steps {clean[:h]} against {clean[h:2 * h]}", gate(name, name, pairs), False)
            for sa, sb in itertools.permutations(clean, 2):
                record("step pair", name, name, f"step {sa} against step {sb}", gate(name, name, [(sa, sb)]), False)
        # known changes
        if "ddp2_flops clean" in dbs:
            for s in steps["ddp2_flops clean"]:
                if s in steps["ddp2_flops stall"]:
                    change = s in faults["ddp2_flops stall"]
                    record("clean vs stall", "ddp2_flops clean", "ddp2_flops stall", f"step {s}",
                           gate("ddp2_flops clean", "ddp2_flops stall", [(s, s)]), change)
        if "long4 kineto (clean)" in dbs:
            base = "long4 kineto (clean)"
            for name in jobs:
                if name.startswith("h100 kineto"):
                    record("long clean vs faulted", base, name, "the runs' steps, each run's median",
                           gate(base, name), True)
                    for s in steps[name]:
                        mid = sorted(steps[base])[len(steps[base]) // 2]
                        record("long clean vs faulted", base, name, f"long4 step {mid} against step {s}",
                               gate(base, name, [(mid, s)]), True)
        none = [t for t in trials if not t["change"]]
        some = [t for t in trials if t["change"]]
        summary = {"pct": args.pct, "no_change": len(none), "false_alarms": sum(t["alarm"] for t in none),
                   "changes": len(some), "detected": sum(t["alarm"] for t in some)}
        for t in trials:
            print(f"{'ALARM' if t['alarm'] else 'pass '}  {'change' if t['change'] else 'none  '}  {t['kind']:<22} "
                  f"{t['a']} → {t['b']}: {t['what']}: {t['delta_pct']}% (noise ±{t['noise_ms']} ms)")
        print(json.dumps(summary))
        if args.json:
            Path(args.json).write_text(json.dumps({"summary": summary, "trials": trials}, indent=1))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
