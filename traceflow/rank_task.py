"""A cluster's per-rank task: one rank file read, loaded and derived on a worker, written as Parquet.

The worker reads the file (readers/worker.py), loads its processes into an in-memory DuckDB, runs
the per-rank part of the derive step there (the CPU-clock reconciliation, steps, GPU ops' launches
and steps, step windows: derive.PER_RANK) and the per-rank analyses (PER_RANK_PACKS), and writes each process's tables as Parquet shards into
the job's parts folder, which the database reads in place (shard_views.py). The client then holds
only what needs every rank: clock alignment, collectives and the analyses.

The worker does not know the job's ranks, trace ids or clock offsets: each process is trace
`j` and rank `j` of its file here; its rows carry `tf_shard` (file index << SHARD_BITS | j), by
which the views give them their trace, rank, ids and clock offset. Ids are stored from 1 within the
process (GPU ops in (start, end) order, host ops in the order read), which the views turn into the
ids a local ingest gives.

Size: most of it is the declarations of what a worker shards (tables, their time and id columns,
and the measurement that moved each analysis here), which shard_views.py and the tests read too.
"""
from __future__ import annotations

import os
from pathlib import Path

from .duck import connect as duck_connect
from .duck import sql_string
from .text import as_text

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


def shard_id(index: int, j: int) -> int:
    return (index << SHARD_BITS) | j


def shard_path(folder, key: str, table: str) -> Path:
    return Path(folder) / f"{key}.{table}.parquet"


def run(inp, parts: str, index: int, nsys_exe: str | None, step_pattern: str | None, peaks: tuple = (None, None)) -> list:
    """The task: returns the file's ProcessTraces, each with `derived` filled; shards in `parts`."""
    from .outputs import scratch_folder
    from .readers.worker import read_file
    with scratch_folder() as scratch:  # the worker's own disk: Arrow files and spill (a killed worker's: cleaned later)
        traces = read_file(inp, scratch, index, nsys_exe)
        try:
            _derive_and_write(traces, scratch, parts, index, step_pattern, peaks)
        except Exception as e:
            from .errors import OutputError
            from .outputs import disk_problem
            if (problem := disk_problem(e)) is not None:  # the shared folder, not the input, is at fault
                raise OutputError(parts, f"{problem} while writing the shards of {getattr(inp, 'path', inp)}") from None
            raise
        return traces


def _derive_and_write(traces, scratch: str, parts: str, index: int, step_pattern: str | None, peaks: tuple):

    from . import schema
    from .derive import PER_RANK, derive_tables, host_clock
    from .pipeline import TRACE_SPANS, _load
    con = duck_connect(config={"temp_directory": os.path.join(scratch, "spill"), **_worker_threads()})
    try:
        con.execute("SET enable_progress_bar = false")
        con.execute(schema.TRACES_DDL)
        for t in schema.TABLES:
            con.execute(schema.ddl(t))
        for j, t in enumerate(traces):
            con.execute("INSERT INTO traces (trace_id, rank, source_path, source_format, device_name) VALUES (?, ?, ?, ?, ?)",
                        [j, j, as_text(t.source_path), t.source_format, t.device_name])
            _load(con, scratch, t, j, j)
        from .invariants import drop_absurd
        absurd = drop_absurd(con)  # here each trace's rank is its id
        spans = {tid: (lo, hi) for tid, lo, hi in con.execute(TRACE_SPANS).fetchall()}  # as recorded: before any clock moves
        notes = dict(host_clock.reconcile(con))
        for tid, text in absurd:
            notes[tid] = f"{notes[tid]}; {text}" if tid in notes else text
        derive_tables(con, step_pattern, PER_RANK)
        from .hardware import load_peaks
        load_peaks(con, *peaks)  # (its warnings are the client's to give, once per job)
        from .packs import pack_sql, run_order
        for name in run_order():
            if name in PER_RANK_PACKS or name in WORKER_HELPERS:
                con.execute(pack_sql(name))
        _write_shards(con, traces, parts, index, notes, spans)
    finally:
        con.close()


def _write_shards(con, traces, parts: str, index: int, notes: dict, spans: dict):
    """Each process's rows of each SHARDED table, ids from 1 within the process; fills trace.derived."""
    from .pipeline import HOST_OP_ID_BASE, HOST_OP_IDS_PER_TRACE
    clocks = {tid: (off, ok) for tid, off, ok in
              con.execute("SELECT trace_id, cpu_clock_offset_ns, cpu_clock_consistent FROM traces").fetchall()}
    numbered = {tid: (first, n) for tid, first, n in
                con.execute("SELECT trace_id, min(op_id) - 1, count(*) FROM gpu_ops GROUP BY ALL").fetchall()}
    columns = {table: _columns(con, sch, table) for table, (sch, _) in SHARDED.items()}
    for j, t in enumerate(traces):
        first, n_gpu = numbered.get(j, (0, 0))
        base = {"gpu_op_base": first, "host_op_base": HOST_OP_ID_BASE + j * HOST_OP_IDS_PER_TRACE}
        for table, (sch, whose) in SHARDED.items():
            ids = IDS.get(table, {})
            select = ", ".join(f"{c} - {base[ids[c]]} AS {c}" if c in ids else c for c in columns[table])
            mine = f"op_id IN (SELECT op_id FROM gpu_ops WHERE trace_id = {j})" if whose == "op_id" else f"{whose} = {j}"
            _write(con, f"SELECT {shard_id(index, j)}::BIGINT AS tf_shard, {select} FROM {sch}.{table} WHERE {mine}",
                   shard_path(parts, t.key, table))
        off, ok = clocks[j]
        t.derived = {"shard": shard_id(index, j), "gpu_ops": n_gpu, "cpu_clock_offset_ns": off,
                     "cpu_clock_consistent": ok, "notes": [notes[j]] if j in notes else [],
                     "span": spans.get(j, (None, None))}


def _columns(con, schema: str, table: str) -> list[str]:
    """A table's columns in order (trace_id and rank too, this file's: the views keep the order)."""
    described = con.execute(f"DESCRIBE {schema}.{table}").fetchall()
    if wide := [r[0] for r in described if r[1] in ("HUGEINT", "UHUGEINT")]:
        # Parquet has no 128-bit integers: DuckDB would write DOUBLE, inexact past 2^53
        raise RuntimeError(f"{table}.{', '.join(wide)}: HUGEINT cannot be sharded exactly; cast it to BIGINT")
    return [r[0] for r in described]


def _write(con, select: str, path: Path):
    """One shard, whole or not at all: a task run again after its worker died writes it anew."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    con.execute(f"COPY ({select}) TO {sql_string(tmp)} (FORMAT parquet)")
    os.replace(tmp, path)


def _worker_threads() -> dict:
    """As many DuckDB threads as the Dask worker has (LocalCluster: one per process), not one per core."""
    try:
        from distributed import get_worker
        return {"threads": max(1, int(get_worker().state.nthreads))}
    except (ImportError, ValueError, AttributeError):
        return {}
