"""The client's memory, step by step: each job-scope step of the graph (graph.py) run again on a
copy of a database, with the process's RSS rise during it and its Python peak (tracemalloc).

    python bench/client_steps.py bench/work/cluster/clean-r64-cluster.duckdb [DB ...]
    python bench/client_steps.py DB --skip gpu_sharing clock_align --memory-limit 256MB

For a cluster's database (views over its parts folder) the steps are the client's
(`graph.run(con, options, scope="job")`); for a local one, every step. Each step runs alone, in the
runner's order, on a copy (bench/db_copy.py: ingest's settings, the original untouched), in one
transaction as ingest runs them. Per step: seconds, the RSS at its start, the peak RSS rise above
that (sampled every 5 ms), the Python peak above what was allocated at its start (tracemalloc, which
slows the Python steps: the seconds are not the ingest's; `--untraced` steps run without it), and DuckDB's own memory after it
(duckdb_memory()). `--skip` leaves steps out (gpu_sharing's detection is slow at 256+ ranks);
their tables are already in the copy. What docs/scale-out.md ("Client memory") found with it.
"""
from __future__ import annotations

import argparse
import os
import threading
import time
import tracemalloc

import psutil
from db_copy import writable_copy

from traceflow import graph, sqlmodules
from traceflow.options import Options
from traceflow.rank_tables import SHARDED
from traceflow.shard_views import folder_of

MIB = 2**20


class Peak:
    """The process's RSS, sampled every 5 ms in a thread: the highest since the last reset."""

    def __init__(self):
        self.proc, self.high, self.stop = psutil.Process(), 0, threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()

    def _sample(self):
        while not self.stop.is_set():
            self.high = max(self.high, self.proc.memory_info().rss)
            time.sleep(0.005)

    def reset(self) -> int:
        now = self.proc.memory_info().rss
        self.high = now
        return now


def run_steps(database: str, skip: set[str], memory_limit: str | None, untraced: set[str]) -> list[dict]:
    peak = Peak()
    rows = []
    with writable_copy(database) as con:
        if memory_limit:
            con.execute("SET memory_limit = ?", [memory_limit])
        scope = "job" if folder_of(con) else None
        r = graph.Run(con, Options())
        con.execute("SET asof_loop_join_threshold = 0")  # as graph.run
        con.execute("BEGIN TRANSACTION")
        for s in graph.for_scope(graph.order(), scope, frozenset(SHARDED) if scope else frozenset()):
            if s.name in skip:
                continue
            if s.name == "gpu_sharing" and "clock_align" in skip:
                r.sharing_recorded = True  # its table is the copy's: as graph.run, detected once
            trace = s.name not in untraced
            start = peak.reset()
            if trace:
                tracemalloc.start()
                py0 = tracemalloc.get_traced_memory()[0]
            t0 = time.perf_counter()
            if s.run is None:
                con.execute(sqlmodules.text(s.group, s.name))
            else:
                s.run(r)
            secs = time.perf_counter() - t0
            time.sleep(0.01)  # one more sample
            py = tracemalloc.get_traced_memory()[1] - py0 if trace else 0
            if trace:
                tracemalloc.stop()
            duck = con.execute("SELECT sum(memory_usage_bytes) FROM duckdb_memory()").fetchone()[0] or 0
            rows.append({"step": s.name, "s": secs, "rss0": start / MIB, "rise": (peak.high - start) / MIB,
                         "py": py / MIB, "duck": duck / MIB})
        con.execute("ROLLBACK")
    peak.stop.set()
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("databases", nargs="+")
    ap.add_argument("--skip", nargs="*", default=[], help="steps left out (their tables are the copy's)")
    ap.add_argument("--memory-limit", help="DuckDB's memory_limit on the copy (default: ingest's, machine.db_config)")
    ap.add_argument("--untraced", nargs="*", default=["claims"], help="steps run without tracemalloc (their seconds "
                    "as ingest's, no Python peak): the claims' replays took 650 s under it at 64 ranks, 4 s without")
    ap.add_argument("--min-mib", type=float, default=2.0, help="print the steps whose RSS rise or Python peak reach this")
    args = ap.parse_args()
    for db in args.databases:
        rows = run_steps(db, set(args.skip), args.memory_limit, set(args.untraced))
        print(f"{db}  (load average {os.getloadavg()[0]:.1f}; memory_limit {args.memory_limit or 'ingest default'})")
        print(f"  {'step':28s} {'s':>7s} {'RSS at start':>12s} {'RSS rise':>9s} {'Py peak':>8s} {'DuckDB after':>12s}  (MiB)")
        for x in rows:
            if x["rise"] >= args.min_mib or x["py"] >= args.min_mib:
                print(f"  {x['step']:28s} {x['s']:7.2f} {x['rss0']:12.0f} {x['rise']:9.1f} {x['py']:8.1f} {x['duck']:12.1f}")
        top = max(rows, key=lambda x: x["rss0"] + x["rise"])
        print(f"  highest RSS: {top['rss0'] + top['rise']:.0f} MiB in {top['step']}; "
              f"{sum(x['s'] for x in rows):.1f} s over {len(rows)} steps", flush=True)


if __name__ == "__main__":
    main()
