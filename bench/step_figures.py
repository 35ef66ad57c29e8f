"""Per-fixture step figures of a traceflow source tree, to compare two trees (old vs new):

    python bench/step_figures.py ROOT [SHARED]     # ROOT: a checkout (git worktree add /tmp/old REV)

Prints, per fixture, the step rows summed over ranks and steps (wall, busy, compute, exposed comm,
idle in ms), the busy time of every row (steps and, in newer trees, before/after rows) and each
rank's step coverage.
"""
import glob
import os
import sys
import tempfile

FIXTURES = {"kineto/sync_stall": "h100/kineto/ddp4_sync_stall/rank-*.gz", "kineto/straggler": "h100/kineto/ddp4_straggler/rank-*.gz",
            "kineto/graphs": "h100/kineto/graphs/rank-*.gz", "nsys/sync_stall": "h100/nsys/ddp4_sync_stall/rank*.sqlite",
            "nsys/straggler": "h100/nsys/ddp4_straggler/rank*.sqlite", "nsys/graphs": "h100/nsys/graphs/rank*.sqlite",
            "nsys-ai": "public/nsys-ai/*.sqlite", "dlrm8": "public/param-dlrm8/*.gz"}

if __name__ == "__main__":
    sys.path.insert(0, sys.argv[1])
    import duckdb

    import traceflow
    shared = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), "..", "..", "shared")
    d = tempfile.mkdtemp()
    for name, pattern in FIXTURES.items():
        db = os.path.join(d, name.replace("/", "_") + ".duckdb")
        traceflow.ingest(sorted(glob.glob(os.path.join(shared, "fixtures", pattern))), db)
        c = duckdb.connect(db, read_only=True)
        new = "part" in [r[0] for r in c.execute("DESCRIBE step_breakdown").fetchall()]
        r = c.execute(f"""SELECT count(*), round(sum(wall_ns) / 1e6, 2), round(sum(busy_ns) / 1e6, 2), round(sum(compute_ns) / 1e6, 2),
                                 round(sum(exposed_comm_ns) / 1e6, 2), round(sum(idle_ns) / 1e6, 2)
                          FROM step_breakdown WHERE {"part = 'step'" if new else "true"}""").fetchone()
        every = c.execute("SELECT round(sum(busy_ns) / 1e6, 2) FROM step_breakdown").fetchone()[0]
        cov = c.execute("SELECT list(coverage_pct ORDER BY rank) FROM step_coverage").fetchone()[0] if new else None
        print(f"{name}: rows {r[0]} wall {r[1]} busy {r[2]} compute {r[3]} xcomm {r[4]} idle {r[5]} | all rows busy {every} | coverage {cov}")
