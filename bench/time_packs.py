"""Each analysis of a database timed on its own, with the process's peak RSS after it.

    python bench/time_packs.py bench/work/cluster/r256-cluster.duckdb

Runs queries/*.sql in `packs.run_order()` on a copy of the database (the original is untouched), in
one transaction as ingest does; the critical path's walk (Python) and, for a cluster database, the
analyses its workers ran (rank_tables.PER_RANK_PACKS, views here) are left out. How docs/scale-out.md
found which analyses grew faster than the ranks on the client.
"""
from __future__ import annotations

import resource
import sys
import time

from db_copy import writable_copy

from traceflow import packs
from traceflow.rank_tables import PER_RANK_PACKS
from traceflow.shard_views import folder_of


def main(database: str):
    with writable_copy(database) as con:
        done_on_workers = PER_RANK_PACKS if folder_of(con) else ()
        con.execute("BEGIN TRANSACTION")
        for name in packs.run_order():
            if name in packs.PYTHON_ANALYSES or name in done_on_workers:
                continue
            t0 = time.perf_counter()
            con.execute(packs.pack_sql(name))
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            print(f"{name:24s} {time.perf_counter() - t0:6.2f} s   peak RSS {rss:7.0f} MiB", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
