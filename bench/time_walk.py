"""The critical path's walk on a database, timed part by part, with the process's peak RSS after each.

    python bench/time_walk.py bench/work/cluster/r256-cluster.duckdb

On a copy of the database (the original is untouched): Graph.from_db (the collectives), one rank
loaded (`ensure`), the whole walk, then critical_path.sql (the naming). The walk's segments are
compared with the stored `critical_path_raw` (EXCEPT ALL both ways: 0 and 0 when the same). How
docs/scale-out.md measured the walk loading ranks on demand.
"""
from __future__ import annotations

import resource
import sys
import time

from db_copy import writable_copy

from traceflow import critical_path
from traceflow.packs import pack_sql


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(database: str):
    with writable_copy(database) as con:
        n = [con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("gpu_ops", "cp_host_nodes", "traces")]
        print(f"{n[0]:,} GPU ops, {n[1]:,} host nodes, {n[2]} traces")
        stored = con.execute("SELECT * FROM critical_path_raw").to_arrow_table()  # noqa: F841 - read by name below
        t = time.perf_counter()
        graph = critical_path.Graph.from_db(con)
        print(f"from_db      {time.perf_counter() - t:6.2f} s   peak RSS {rss_mib():5.0f} MiB   {len(graph.op_id):,} collectives")
        rank = con.execute("SELECT min(rank) FROM traces").fetchone()[0]
        t = time.perf_counter()
        graph.window()
        graph.ensure(rank)
        print(f"one rank     {time.perf_counter() - t:6.2f} s   peak RSS {rss_mib():5.0f} MiB   "
              f"{len(graph.op_id):,} ops, {len(graph.h_start):,} host calls")
        del graph
        t = time.perf_counter()
        critical_path.walk(con)
        print(f"walk         {time.perf_counter() - t:6.2f} s   peak RSS {rss_mib():5.0f} MiB")
        differ = []
        for q in ("SELECT count(*) FROM (SELECT * FROM stored EXCEPT ALL SELECT * FROM critical_path_raw)",
                  "SELECT count(*) FROM (SELECT * FROM critical_path_raw EXCEPT ALL SELECT * FROM stored)"):
            differ.append(con.execute(q).fetchone()[0])  # (a loop: `stored` is found in this frame's locals)
        visited = con.execute("SELECT avg(n) FROM (SELECT count(DISTINCT rank) AS n FROM critical_path_raw GROUP BY step)").fetchone()[0]
        print(f"segments not in the stored path / not in the new one: {differ[0]} / {differ[1]}; ranks per step: {visited:.1f}")
        t = time.perf_counter()
        con.execute(pack_sql("critical_path"))
        print(f"naming       {time.perf_counter() - t:6.2f} s   peak RSS {rss_mib():5.0f} MiB")


if __name__ == "__main__":
    main(sys.argv[1])
