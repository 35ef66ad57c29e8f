"""What each job of the wild corpus cannot give (queries/cannot_answer.sql), and what the verdict says.

    TRACEFLOW_WILD=/work/wild python bench/wild_cannot_answer.py [substring ...]

Ingests every job of tests/wild/manifest.json that is not refused (several files of one job
together), prints per job its cannot_answer rows (figure, ranks, GPU ops concerned of the job's GPU
ops) and the verdict's sentence about them, then per figure and reason how many jobs have it.
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
WILD = Path(os.environ.get("TRACEFLOW_WILD", ROOT.parent / "shared" / "wild"))


def main():
    manifest = json.loads((ROOT / "tests" / "wild" / "manifest.json").read_text())
    jobs: dict[str, list] = collections.defaultdict(list)
    for e in manifest:
        jobs[e["job"]].append(e)
    only = sys.argv[1:]
    per_reason: collections.Counter = collections.Counter()
    n_jobs = n_said = 0
    for job, es in sorted(jobs.items()):
        files = [WILD / e["file"] for e in es]
        if es[0]["expect"] == "refused" or not all(f.exists() for f in files) or (only and not any(x in job for x in only)):
            continue
        with tempfile.TemporaryDirectory() as t:
            db = str(Path(t) / "w.duckdb")
            traceflow.ingest([str(f) for f in files], db)
            con = duckdb.connect(db, read_only=True)
            rows = con.execute("""select figure, reason, count(*), sum(n_ops) from cannot_answer
                                  group by figure, reason order by figure""").fetchall()
            n_gpu = con.execute("select count(*) from gpu_ops").fetchone()[0]
            con.close()
            with traceflow.open(db) as j:
                try:
                    said = [s for s in j.findings()["sentences"] if s.startswith("Not computable")]
                except Exception as e:  # noqa: BLE001 - a line per job, whatever happens
                    said = [f"ERROR in the verdict: {type(e).__name__}: {e}"]
        n_jobs += 1
        n_said += bool(said) and not said[0].startswith("ERROR")
        for figure, reason, _, _ in rows:
            per_reason[figure, reason] += 1
        figs = "; ".join(f"{f} ({r} rank{'s' if r > 1 else ''}{'' if n is None else f', {n} of {n_gpu} GPU ops'})"
                         for f, _, r, n in rows)
        print(f"{job}: {figs or '-'}\n    verdict: {said[0] if said else '(nothing to say)'}", flush=True)
    print(f"\n{n_jobs} jobs; the verdict says what cannot be given on {n_said}")
    for (figure, reason), n in sorted(per_reason.items()):
        print(f"{n:4d} jobs  {figure}: {reason}")


if __name__ == "__main__":
    main()
