"""Load: the readers' Arrow files -> the database's tables (the layer between readers and derive).

A reader (readers/) writes each table of a trace as an Arrow IPC stream; these functions append
them to the tables schema.py declares, giving each row its trace and rank, and host ops their ids.
A local ingest (pipeline.py) and a cluster's per-rank task (rank_task.py) load the same way.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc

from . import schema
from .rank_tables import HOST_OP_ID_BASE, HOST_OP_IDS_PER_TRACE
from .readers.model import ProcessTrace, reader_schema

# each trace's first start and last end (ns), as recorded: a cluster's workers compute it per rank file
TRACE_SPANS = """SELECT trace_id, min(start_ns) AS lo, max(end_ns) AS hi FROM (
                     SELECT trace_id, start_ns, end_ns FROM gpu_ops UNION ALL SELECT trace_id, start_ns, end_ns FROM host_ops)
                 GROUP BY trace_id"""


def create_tables(con):
    """The loaded tables, empty (schema.py)."""
    con.execute(schema.TRACES_DDL)
    for t in schema.TABLES:
        con.execute(schema.ddl(t))


def load_all(con, sink_folder: str, loads, jobs: int):
    """Loads the traces' Arrow files ((trace, trace_id, rank) each), `jobs` at once: DuckDB appends to
    one table from several connections without conflict, and one append of a stream runs on one thread."""
    if jobs == 1:
        for load in loads:
            load_trace(con, sink_folder, *load)
        return

    def one(load):
        cur = con.cursor()
        try:
            load_trace(cur, sink_folder, *load)
        finally:
            cur.close()
    with ThreadPoolExecutor(jobs) as pool:
        for _ in pool.map(one, loads):
            pass


def load_trace(con, sink_folder: str, trace: ProcessTrace, trace_id: int, rank: int):
    """One trace's Arrow files (a reader wrote them into `sink_folder`) appended to the tables."""
    for table in schema.TABLES:
        path = Path(sink_folder) / f"{trace.key}.{table}.arrow"
        if not path.exists():
            continue
        with pa.memory_map(str(path)) as source:
            # Read by DuckDB's replacement scan of this local (`FROM incoming`), never con.register:
            # a registered object is a view in the catalog, dropped at some later commit on whichever
            # DuckDB thread runs it. After a Ctrl-C that was a pool thread during interpreter exit,
            # which needs the GIL to free the object: "terminate called without an active
            # exception" (exit -6), or a hang (4 of 50 interrupted runs on a loaded machine).
            incoming = ipc.open_stream(source)
            cols = ", ".join(f.name for f in reader_schema(table))
            if table == "host_ops":
                # ids as they stream in, in a range of their own per trace (gpu_ops ids stay below 1e12):
                # numbering them later would rewrite the biggest table of the job
                con.execute(f"""INSERT INTO host_ops ({cols}, trace_id, rank, op_id)
                                SELECT {cols}, ?, ?, ? + row_number() OVER () FROM incoming""",
                            [trace_id, rank, HOST_OP_ID_BASE + trace_id * HOST_OP_IDS_PER_TRACE])
            else:
                con.execute(f"INSERT INTO {table} ({cols}, trace_id, rank) SELECT {cols}, ?, ? FROM incoming",
                            [trace_id, rank])
            del incoming


# A name longer than this is no kernel's, op's or range's (the longest C++ kernel names in the wild
# corpus are a few KiB): a 200 MB kernel name became 2 GB of piped `query` output and a 1 GB report.
NAME_LIMIT = 64 << 10
NAMED = (("gpu_ops", "name"), ("gpu_ops", "short_name"), ("host_ops", "name"), ("ranges", "name"))


def cut_long_names(con) -> list[str]:
    """Names past NAME_LIMIT cut to it (marked with a trailing ' [cut]'), one warning per table."""
    warnings = []
    for table, col in NAMED:
        n = con.execute(f"UPDATE {table} SET {col} = left({col}, {NAME_LIMIT}) || ' [cut]' "
                        f"WHERE strlen({col}) > {NAME_LIMIT}").fetchone()[0]
        if n:
            warnings.append(f"{n} {table}.{col} values longer than {NAME_LIMIT >> 10} KiB cut to their first "
                            f"{NAME_LIMIT >> 10} KiB (no real name is that long; outputs stay bounded)")
    return warnings
