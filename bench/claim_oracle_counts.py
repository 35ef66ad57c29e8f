"""How many claims of each kind the claim oracle (tests/claim_oracle.py) finds correct, wrong or not
checkable, over the multi-rank jobs of the wild corpus and the shared H100 fault jobs.

    TRACEFLOW_WILD=/work/wild-all python bench/claim_oracle_counts.py [--single] [substring ...]

--single adds the wild corpus's single-file jobs (every one, or those the substrings name: the
items of issue 41 were seen on some: `--single mi250 jax_conv_minimal_08 resnet50_num_workers_4`).

Ingests each job (several files of one job together), runs the oracle on every row the verdict
renders from `findings`, and prints per job its counts, then per claim kind the totals.
Also counts, per job, the claims whose repro_sql reproduces the row's figure. ORACLE_VERBOSE=1 prints
each correct claim's figure beside the oracle's too (wrong ones are always printed).
"""
from __future__ import annotations

import collections
import json
import os
import sys
import tempfile
from pathlib import Path

import duckdb

import traceflow

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
import claim_oracle  # noqa: E402

WILD = Path(os.environ.get("TRACEFLOW_WILD", ROOT.parent / "shared" / "wild"))
SHARED = Path(os.environ.get("TRACEFLOW_SHARED", ROOT.parent / "shared")) / "fixtures" / "h100"


def jobs(single: bool = False) -> dict[str, list[Path]]:
    out: dict[str, list[Path]] = {}
    manifest = json.loads((ROOT / "tests" / "wild" / "manifest.json").read_text())
    by: dict[str, list] = collections.defaultdict(list)
    for e in manifest:
        by[e["job"]].append(e)
    for job, es in sorted(by.items()):
        if (len(es) > 1 or single) and all(e.get("expect", "ok") == "ok" for e in es):
            out[f"wild:{job}"] = [WILD / e["file"] for e in es]
    for folder in sorted(p for p in SHARED.glob("*/*") if p.is_dir()):
        files = sorted(p for p in folder.iterdir() if p.name.startswith("rank")
                       and (p.suffix == ".sqlite" or p.name.endswith(".json.gz")))
        if files:
            out[f"shared:{folder.relative_to(SHARED)}"] = files
    return out


def main():
    single = "--single" in sys.argv[1:]
    want = [a for a in sys.argv[1:] if a != "--single"]
    totals: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for name, files in jobs(single).items():
        if want and not any(w in name for w in want):
            continue
        if not all(p.exists() for p in files):
            print(f"{name}: skipped (not all files at {WILD})")
            continue
        with tempfile.TemporaryDirectory() as tmp:
            db = str(Path(tmp) / "job.duckdb")
            traceflow.ingest([str(p) for p in files], db)
            with traceflow.open(db) as job:
                found = job.findings()
                rows = [r for r in found["findings"] if "claim" in r]
                repro = sum(1 for r in rows if r.get("repro_sql") and abs(
                    (job.sql(r["repro_sql"])["figure"][0] or 0) - (r["figure"] or 0)) <= max(1.0, 1e-6 * abs(r["figure"] or 0)))
            con = duckdb.connect(db, read_only=True)
            con.execute("SET search_path = 'main,tf_internal'")
            try:
                checked = claim_oracle.check(con, rows)
            finally:
                con.close()
        per = collections.Counter(v for _, v, _ in checked)
        for r, v, _ in checked:
            totals[r["kind"]][v] += 1
        print(f"{name}: {len(rows)} claims, {per['correct']} correct, {per['wrong']} wrong, "
              f"{per['not checkable']} not checkable; repro_sql reproduces {repro} of "
              f"{sum(1 for r in rows if r.get('repro_sql'))}")
        print(f"    headline: {found['headline']}")
        for r, v, why in checked:
            if v == "wrong" or (os.environ.get("ORACLE_VERBOSE") and v == "correct"):
                print(f"    {v.upper()} {r['kind']} rank {r['rank']} figure {r['figure']} share {r.get('share_pct')} baseline {r['baseline']}: {why}")
    print("\nkind              correct  wrong  not checkable")
    for kind, c in sorted(totals.items()):
        print(f"{kind:<18}{c['correct']:>7}{c['wrong']:>7}{c['not checkable']:>15}")
    all_ = sum(totals.values(), collections.Counter())
    print(f"{'all':<18}{all_['correct']:>7}{all_['wrong']:>7}{all_['not checkable']:>15}")


if __name__ == "__main__":
    main()
