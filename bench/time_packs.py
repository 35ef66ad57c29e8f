"""Each analysis of a database timed on its own, with the process's peak RSS after it.

    python bench/time_packs.py bench/work/cluster/r256-cluster.duckdb

Runs queries/*.sql in the runner's order (graph.py) on a copy of the database (the original is
untouched), in one transaction as ingest does; the Python steps and, for a cluster database, the
analyses its workers ran (rank scope, views here) are left out. How docs/scale-out.md
found which analyses grew faster than the ranks on the client.
"""
from __future__ import annotations

import resource
import sys
import time

from db_copy import writable_copy

from traceflow import graph, sqlmodules
from traceflow.rank_tables import SHARDED
from traceflow.shard_views import folder_of


def main(database: str):
    with writable_copy(database) as con:
        scope = "job" if folder_of(con) else None
        con.execute("BEGIN TRANSACTION")
        for step in graph.for_scope(graph.order(), scope, frozenset(SHARDED)):
            if step.group != "queries":
                continue
            t0 = time.perf_counter()
            con.execute(sqlmodules.text(step.group, step.name))
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            print(f"{step.name:24s} {time.perf_counter() - t0:6.2f} s   peak RSS {rss:7.0f} MiB", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
