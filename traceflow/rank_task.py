"""A cluster's per-rank task: one rank file read, loaded and derived on a worker, written as Parquet.

The worker reads the file (readers/worker.py), loads its processes into an in-memory DuckDB, runs
the graph's rank steps there (graph.run(scope='rank'): the CPU-clock reconciliation, steps, GPU ops'
launches and steps, step windows, the per-rank analyses), and writes each process's tables as
Parquet shards into the job's parts folder, which the database reads in place (shard_views.py).
The client then runs the job steps (clock alignment, collectives, the analyses across ranks).

The worker does not know the job's ranks, trace ids or clock offsets: each process is trace
`j` and rank `j` of its file here; its rows carry `tf_shard` (file index << SHARD_BITS | j), by
which the views give them their trace, rank, ids and clock offset. Ids are stored from 1 within the
process (GPU ops in (start, end) order, host ops in the order read), which the views turn into the
ids a local ingest gives.

What a worker shards (tables, their time and id columns) is declared in rank_tables.py, which
shard_views.py and the tests read too; which steps are rank steps, in their modules' declarations
(why each analysis is one, measured: docs/scale-out.md).
"""
from __future__ import annotations

import os
from pathlib import Path

from .duck import connect as duck_connect
from .duck import sql_string
from .options import Options
from .rank_tables import HOST_OP_ID_BASE, HOST_OP_IDS_PER_TRACE, IDS, SHARD_BITS, SHARDED
from .text import as_text


def shard_id(index: int, j: int) -> int:
    return (index << SHARD_BITS) | j


def shard_path(folder, key: str, table: str) -> Path:
    return Path(folder) / f"{key}.{table}.parquet"


def run(inp, parts: str, index: int, options: Options | None = None) -> list:
    """The task: returns the file's ProcessTraces, each with `derived` filled; shards in `parts`.
    `options`: the ingest's, as the client checked them (the worker reads no setting of its own)."""
    options = options or Options()
    from .outputs import scratch_folder
    from .readers.worker import read_file
    with scratch_folder() as scratch:  # the worker's own disk: Arrow files and spill (a killed worker's: cleaned later)
        traces = read_file(inp, scratch, index, options)
        try:
            _derive_and_write(traces, scratch, parts, index, options)
        except Exception as e:
            from .errors import OutputError
            from .outputs import disk_problem
            if (problem := disk_problem(e)) is not None:  # the shared folder, not the input, is at fault
                raise OutputError(parts, f"{problem} while writing the shards of {getattr(inp, 'path', inp)}") from None
            raise
        return traces


def _derive_and_write(traces, scratch: str, parts: str, index: int, options: Options):
    from .load import TRACE_SPANS, create_tables, load_trace
    con = duck_connect(config={"temp_directory": os.path.join(scratch, "spill"), **_worker_threads()})
    try:
        con.execute("SET enable_progress_bar = false")
        create_tables(con)
        for j, t in enumerate(traces):
            con.execute("INSERT INTO traces (trace_id, rank, source_path, source_format, device_name) VALUES (?, ?, ?, ?, ?)",
                        [j, j, as_text(t.source_path), t.source_format, t.device_name])
            load_trace(con, scratch, t, j, j)
        spans = {tid: (lo, hi) for tid, lo, hi in con.execute(TRACE_SPANS).fetchall()}  # as recorded, as a local ingest's
        from .graph import run as run_graph
        done = run_graph(con, options, scope="rank")  # here each trace's rank is its id
        # (the peaks' warnings are the client's to give, once per job)
        notes = dict(done.cpu_notes)
        for tid, text in done.absurd:
            notes[tid] = f"{notes[tid]}; {text}" if tid in notes else text
        _write_shards(con, traces, parts, index, notes, spans)
    finally:
        con.close()


def _write_shards(con, traces, parts: str, index: int, notes: dict, spans: dict):
    """Each process's rows of each SHARDED table, ids from 1 within the process; fills trace.derived."""
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
