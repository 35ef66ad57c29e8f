"""A cluster's per-rank task: a batch of rank files read, loaded and derived on a worker, written as Parquet.

The worker reads the task's files (readers/worker.py), loads their processes into one in-memory
DuckDB, runs the graph's rank steps there (graph.run(scope='rank'): the CPU-clock reconciliation,
steps, GPU ops' launches and steps, step windows, the per-rank analyses), and writes each table as
one Parquet shard per task into the job's parts folder, which the database reads in place
(shard_views.py). The client then runs the job steps (clock alignment, collectives, the analyses
across ranks). A task holds several small files (cluster.batches): its fixed cost (DuckDB, 15
analyses, 30 shards; ~1.2 s for a 2.4 MB rank with 14 and 28) is paid once for them all (docs/scale-out.md).

The worker does not know the job's ranks, trace ids or clock offsets: the task's k-th process is
trace `k` and rank `k` here; its rows carry `tf_shard` (file index << SHARD_BITS | j, process j of
its file), by which the views give them their trace, rank, ids and clock offset. Ids are stored
from 1 within the process (GPU ops in (start, end) order, host ops in the order read), which the
views turn into the ids a local ingest gives.

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


def task_name(batch) -> str:
    """The name of a task's shards: its files' indices, first and last (the batches are disjoint)."""
    return f"t{batch[0][0]}-{batch[-1][0]}"


def run(batch, parts: str, options: Options | None = None) -> list[list]:
    """The task: `batch` is (index, input) of one or more rank files (cluster.batches sizes it);
    returns each file's ProcessTraces, each with `derived` filled; one shard per table in `parts`.
    `options`: the ingest's, as the client checked them (the worker reads no setting of its own)."""
    options = options or Options()
    from .outputs import scratch_folder
    from .readers.worker import read_file
    with scratch_folder() as scratch:  # the worker's own disk: Arrow files and spill (a killed worker's: cleaned later)
        files = [(index, read_file(inp, scratch, index, options)) for index, inp in batch]
        try:
            _derive_and_write(files, scratch, parts, task_name(batch), options)
        except Exception as e:
            from .errors import OutputError
            from .outputs import disk_problem
            if (problem := disk_problem(e)) is not None:  # the shared folder, not the input, is at fault
                more = f" and {len(batch) - 1} more" if len(batch) > 1 else ""
                raise OutputError(parts, f"{problem} while writing the shards of "
                                  f"{getattr(batch[0][1], 'path', batch[0][1])}{more}") from None
            raise
        return [traces for _, traces in files]


def _derive_and_write(files, scratch: str, parts: str, name: str, options: Options):
    """Every process of every file of the task in one DuckDB, trace k (and rank k) the k-th of them:
    the rank steps are per rank by construction (a local ingest runs them over all ranks at once)."""
    from .load import TRACE_SPANS, create_tables, load_trace
    con = duck_connect(config={"temp_directory": os.path.join(scratch, "spill"), **_worker_threads()})
    try:
        con.execute("SET enable_progress_bar = false")
        create_tables(con)
        k = 0
        for _, traces in files:
            for t in traces:
                con.execute("INSERT INTO traces (trace_id, rank, source_path, source_format, device_name) VALUES (?, ?, ?, ?, ?)",
                            [k, k, as_text(t.source_path), t.source_format, t.device_name])
                load_trace(con, scratch, t, k, k)
                k += 1
        spans = {tid: (lo, hi) for tid, lo, hi in con.execute(TRACE_SPANS).fetchall()}  # as recorded, as a local ingest's
        from .graph import run as run_graph
        done = run_graph(con, options, scope="rank")  # here each trace's rank is its id
        # (the peaks' warnings are the client's to give, once per job)
        notes = dict(done.cpu_notes)
        for tid, text in done.absurd:
            notes[tid] = f"{notes[tid]}; {text}" if tid in notes else text
        _write_shards(con, files, parts, name, notes, spans)
    finally:
        con.close()


def _write_shards(con, files, parts: str, name: str, notes: dict, spans: dict):
    """Each SHARDED table's rows of every process of the task, in one shard `name`: each row with
    its process's shard id (file index << SHARD_BITS | j), ids from 1 within the process; fills
    trace.derived."""
    clocks = {tid: (off, ok) for tid, off, ok in
              con.execute("SELECT trace_id, cpu_clock_offset_ns, cpu_clock_consistent FROM traces").fetchall()}
    numbered = {tid: (first, n) for tid, first, n in
                con.execute("SELECT trace_id, min(op_id) - 1, count(*) FROM gpu_ops GROUP BY ALL").fetchall()}
    rows, k = [], 0
    for index, traces in files:
        for j, t in enumerate(traces):
            first, n_gpu = numbered.get(k, (0, 0))
            rows.append([k, shard_id(index, j), first, HOST_OP_ID_BASE + k * HOST_OP_IDS_PER_TRACE])
            off, ok = clocks[k]
            t.derived = {"shard": shard_id(index, j), "part": name, "gpu_ops": n_gpu, "cpu_clock_offset_ns": off,
                         "cpu_clock_consistent": ok, "notes": [notes[k]] if k in notes else [],
                         "span": spans.get(k, (None, None))}
            k += 1
    con.execute("CREATE TEMP TABLE tf_task_shards (trace_id INTEGER, shard BIGINT, gpu_op_base BIGINT, host_op_base BIGINT)")
    con.executemany("INSERT INTO tf_task_shards VALUES (?, ?, ?, ?)", rows)
    for table, (sch, whose) in SHARDED.items():
        ids = IDS.get(table, {})
        select = ", ".join(f"s.{c} - m.{ids[c]} AS {c}" if c in ids else f"s.{c}" for c in _columns(con, sch, table))
        if whose == "op_id":  # rows of GPU ops: whose they are follows from the op
            src = f"{sch}.{table} s JOIN gpu_ops g ON g.op_id = s.op_id JOIN tf_task_shards m ON m.trace_id = g.trace_id"
        else:
            src = f"{sch}.{table} s JOIN tf_task_shards m ON m.trace_id = s.{whose}"
        _write(con, f"SELECT m.shard::BIGINT AS tf_shard, {select} FROM {src}", shard_path(parts, name, table))


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
