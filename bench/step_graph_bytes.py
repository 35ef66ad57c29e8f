"""Bytes per op of one step's replay graph (whatif.StepGraph): the Python kept after it is built and
its peak while built (tracemalloc), the peak of a replay, the RSS rise, and a digest of the replays'
results (to compare two trees: the same digest, the same answers).

    python bench/step_graph_bytes.py bench/work/cluster/clean-r256-cluster.duckdb [--step N]
    python bench/step_graph_bytes.py DB --tree /tmp/old    # the graph of another source tree (git archive of a commit)

What docs/scale-out.md ("The claims' step graph in arrays") measured with it.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
import tracemalloc

import duckdb
import psutil

if __name__ == "__main__" and "--tree" in sys.argv:  # another source tree's traceflow (before a change)
    tree = sys.argv.pop(sys.argv.index("--tree") + 1)
    sys.argv.remove("--tree")
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
    sys.path.insert(0, tree)
from traceflow.whatif import Scenario, StepGraph

MIB = 2**20
SCENARIOS = [Scenario(), Scenario(no_launch_overhead=True), Scenario(no_host_syncs=True), Scenario(overlap_comm=True),
             Scenario(no_stragglers=True), Scenario(scale_kind={"compute": 0.5}), Scenario(scale_kernels=[("nccl", 0.5)]),
             Scenario(no_allocator_calls=True, no_launch_stall=True)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("database")
    ap.add_argument("--step", type=int, help="default: the step with the most GPU ops")
    args = ap.parse_args()
    con = duckdb.connect(args.database, read_only=True)
    step = args.step if args.step is not None else con.execute(
        "SELECT step FROM gpu_ops WHERE step IS NOT NULL GROUP BY step ORDER BY count(*) DESC, step LIMIT 1").fetchone()[0]
    StepGraph(con, step)  # once untraced: the modules it imports on first use are not the graph's
    proc = psutil.Process()
    rss0 = proc.memory_info().rss
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    t0 = time.perf_counter()
    g = StepGraph(con, step)
    build_s = time.perf_counter() - t0
    kept, peak = tracemalloc.get_traced_memory()
    n = len(g.op_id)
    tracemalloc.reset_peak()
    at = tracemalloc.get_traced_memory()[0]
    digest, t1 = hashlib.sha256(), time.perf_counter()
    for sc in SCENARIOS:
        digest.update(json.dumps([sc.describe(), g.replay(sc), g.predicted_path()], default=str).encode())
    replay_s = time.perf_counter() - t1
    replay_peak = tracemalloc.get_traced_memory()[1] - at
    tracemalloc.stop()
    import traceflow
    print(json.dumps({"tree": traceflow.__file__, "database": args.database, "step": step, "ops": n,
                      "kept_bytes_per_op": round((kept - base) / n, 1), "build_peak_bytes_per_op": round((peak - base) / n, 1),
                      "replay_peak_bytes_per_op": round(replay_peak / n, 1), "kept_mib": round((kept - base) / MIB, 1),
                      "build_peak_mib": round((peak - base) / MIB, 1), "rss_rise_mib": round((proc.memory_info().rss - rss0) / MIB),
                      "build_s": round(build_s, 2), "replays_s": round(replay_s, 2), "digest": digest.hexdigest()[:16]}))


if __name__ == "__main__":
    main()
