"""The per-rank tables and their keys, shared by the ingest's load, the derive step, a cluster's
per-rank task (rank_task.py) and the views over its shards (shard_views.py): which tables a worker
shards, their time columns (clock alignment moves them), their id columns (numbered per trace) and
the id ranges. Constants only: it imports nothing, so every layer may import it.
"""
from __future__ import annotations

# host_ops ids: a range of their own per trace (gpu_ops ids stay below HOST_OP_ID_BASE)
HOST_OP_ID_BASE = 10**12
HOST_OP_IDS_PER_TRACE = 10**10
SHARD_BITS = 20  # processes per file, at most (nsys exports hold one per process of the run)
# Analyses (queries/) a worker runs on its rank: each reads only per-rank tables and gives each rank
# the rows it gives alone. On the client they grew faster than the ranks, and held its memory: at
# 64 -> 256 ranks gpu_state (a sort of every op's start and end) took 2.7 -> 13.4 s and 1.0 -> 3.0
# GiB, idle_gaps 1.3 -> 5.9 s and 3.1 GiB, launch_overhead 0.7 -> 2.3 s, gpu_islands 0.7 -> 2.3 s;
# then op_flops, 5.6 s and 1.6 GiB at 256 ranks; then op_work, 4.6 s and 0.6 GiB (with the device
# peaks on the worker); then step_breakdown (2.2 s, 1.0 GiB) and sync (1.6 s); then the critical
# path's graph, cp_graph (3.1 s, 1.2 GiB), whose walk still runs on the client; then exposed_comm
# (0.84 s, and the client's peak RSS 119 -> 390 MiB); then kernels, launch_bound_steps and mfu
# (0.43, 0.45, 0.23 s; together +71 MiB of the client's peak at 256 ranks, +25 MiB at 64); then
# roofline, whose median per rank and op held every op of the job (+39 MiB at 256 ranks, +16 at 64).
PER_RANK_PACKS = ("gpu_state", "gpu_islands", "idle_gaps", "launch_overhead", "op_flops", "op_work", "step_breakdown",
                  "sync", "cp_graph", "exposed_comm", "kernels", "launch_bound_steps", "mfu", "roofline")
# what those read and the client makes too (op_classes for op_work's names, the view for critical_path.sql)
WORKER_HELPERS = ("op_classes", "op_work_kernels")
# the per-rank tables a worker writes: table -> (its schema, the column that says whose rows; 'op_id':
# the table has neither rank nor trace, its rows are the GPU ops' own)
SHARDED = {"gpu_ops": ("main", "trace_id"), "host_ops": ("main", "trace_id"), "ranges": ("main", "trace_id"),
           "steps": ("main", "rank"), "step_windows": ("tf_internal", "rank"),
           "gpu_state": ("tf_internal", "rank"), "gpu_islands": ("tf_internal", "rank"),
           "idle_gaps": ("main", "rank"), "idle_gaps_summary": ("main", "rank"),
           "launch_overhead": ("main", "rank"), "launch_overhead_summary": ("main", "rank"), "op_flops": ("main", "rank"),
           "op_work": ("main", "rank"), "step_breakdown": ("main", "rank"), "sync": ("main", "rank"),
           "cp_host_nodes": ("tf_internal", "rank"), "cp_gpu_preds": ("tf_internal", "op_id"),
           "exposed_comm": ("main", "rank"), "exposed_comm_segments": ("tf_internal", "rank"),
           "kernels": ("main", "rank"), "launch_bound_steps": ("main", "rank"), "mfu": ("main", "rank"),
           "roofline": ("main", "rank"), "memory_events": ("main", "trace_id"), "devices": ("main", "trace_id")}
SHARDED.update({t: ("main", "trace_id") for t in ("memory_segments", "memory_snapshot_blocks", "memory_snapshot_history")})
# times (ns since the epoch): the views add the rank's clock offset
TIMES = {"gpu_ops": ("start_ns", "end_ns", "api_start_ns", "api_end_ns", "issue_start_ns"),
         "host_ops": ("start_ns", "end_ns"), "ranges": ("start_ns", "end_ns"), "steps": ("start_ns", "end_ns"),
         "step_windows": ("start_ns", "end_ns", "first_op_ns", "last_op_end_ns"), "gpu_state": ("start_ns", "end_ns"),
         "gpu_islands": ("start_ns", "end_ns"),
         "idle_gaps": ("start_ns", "end_ns", "next_api_start_ns", "next_issue_start_ns"),
         "launch_overhead": ("api_start_ns", "issue_start_ns"),
         "step_breakdown": ("start_ns", "end_ns", "host_start_ns", "host_end_ns"), "sync": ("start_ns", "end_ns"),
         "cp_host_nodes": ("start_ns", "end_ns"), "exposed_comm_segments": ("start_ns", "end_ns"), "memory_events": ("ts_ns",)}
# ids: stored from 1 within the process; the views add the base of the trace's GPU ops or host ops
IDS = {"gpu_ops": {"op_id": "gpu_op_base", "cpu_op_id": "host_op_base", "launch_op_id": "host_op_base"},
       "host_ops": {"op_id": "host_op_base"}, "gpu_islands": {"first_op_id": "gpu_op_base"},
       "idle_gaps": {"next_op_id": "gpu_op_base"}, "launch_overhead": {"op_id": "gpu_op_base"},
       "op_flops": {"op_id": "host_op_base"}, "op_work": {"op_id": "host_op_base"},
       "sync": {"op_id": "host_op_base"}, "cp_host_nodes": {"node_op_id": "host_op_base", "waited_op_id": "gpu_op_base"},
       "cp_gpu_preds": {"op_id": "gpu_op_base", "stream_prev": "gpu_op_base", "dep_op_id": "gpu_op_base"}}


def from_declarations() -> tuple[dict, dict, dict]:
    """(TIMES, IDS, SHARDED) as the declarations give them (sqlmodules.module's `-- scope:` and column
    roles, schema.declared for the loaded tables): the per-rank tables are the loaded per-rank ones
    and the tables (not views) a scope-rank module creates whose rows say whose they are (a rank, a
    trace or, lacking both, a GPU op's id); their times are the columns of role `time`, their ids
    those of role `id:gpu_ops` / `id:host_ops`. tests/test_sql_modules.py holds them equal to the
    lists above."""
    import re

    from . import schema, sqlmodules
    tables: dict[str, tuple[str, sqlmodules.TableDecl]] = {t: ("main", d) for t, d in schema.declared().items()}
    for group in ("derive", "queries"):
        for mod in sqlmodules.modules(group):
            if mod.scope != "rank":
                continue
            sql = sqlmodules.text(group, mod.name)
            for t, decl in mod.tables.items():
                if re.search(rf"CREATE\s+(?:OR\s+REPLACE\s+)?VIEW\s+(?:\w+\.)?{t}\b", sql, re.I):
                    continue  # a view is made again over the shards
                internal = re.search(rf"CREATE\s+(?:OR\s+REPLACE\s+)?TABLE\s+tf_internal\.{t}\b", sql, re.I)
                tables[t] = ("tf_internal" if internal else "main", decl)
    times: dict[str, tuple[str, ...]] = {}
    ids: dict[str, dict[str, str]] = {}
    sharded: dict[str, tuple[str, str]] = {}
    for t, (sch, decl) in tables.items():
        cols = decl.columns
        loaded = t in schema.PER_RANK
        whose = [c.name for c in cols if c.role == ("trace" if loaded else "rank")] or \
                [c.name for c in cols if c.role == "trace"] or [c.name for c in cols if c.role.startswith("id:")]
        if not whose:
            continue  # a table of definitions (comm_kernels, op_classes): the client makes it too
        sharded[t] = (sch, whose[0])
        if tm := tuple(c.name for c in cols if c.role == "time"):
            times[t] = tm
        if idc := {c.name: c.role[3:-4] + "_op_base" for c in cols if c.role.startswith("id:")}:
            ids[t] = idc
    return times, ids, sharded
