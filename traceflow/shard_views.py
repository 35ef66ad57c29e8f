"""A cluster job's database: views over the Parquet shards its workers wrote (rank_task.py).

The tables a worker derives per rank (rank_tables.SHARDED) are not copied into the database: each is
a view that reads the shards in place, in the parts folder beside the database, and gives every
row the trace, rank, ids and clock offset a local ingest stores (so the same SQL, packs, report and
Perfetto writer run on it unchanged, and `duckdb job.duckdb` opens it). Clock alignment then writes
only `traces.clock_offset_ns`, which the views add to every time. The folder must stay beside the
database: the views name it by its absolute path.
"""
from __future__ import annotations

from pathlib import Path

from .duck import sql_string
from .rank_tables import HOST_OP_ID_BASE, HOST_OP_IDS_PER_TRACE, IDS, SHARDED, TIMES

SHARDS = "tf_internal.shards"


def create(con, parts: str, loads) -> list[tuple[int, str]]:
    """The shards table and the views, for `loads` ((trace, trace_id, rank) in trace_id order, with
    trace.derived filled by the workers). Returns the workers' notes on the CPU clocks, (trace_id,
    note) each, as derive.host_clock.reconcile gives them."""
    con.execute(f"""CREATE TABLE {SHARDS} (shard BIGINT PRIMARY KEY, trace_id INTEGER, rank INTEGER,
                    gpu_op_base BIGINT, host_op_base BIGINT)""")
    rows, gpu_base = [], 0
    notes: list[tuple[int, str]] = []
    for trace, tid, rank in sorted(loads, key=lambda x: x[1]):
        d = trace.derived
        rows.append([d["shard"], tid, rank, gpu_base, HOST_OP_ID_BASE + tid * HOST_OP_IDS_PER_TRACE])
        gpu_base += d["gpu_ops"]  # a local ingest numbers GPU ops in (trace_id, start, end) order
        con.execute("UPDATE traces SET cpu_clock_offset_ns = ?, cpu_clock_consistent = ? WHERE trace_id = ?",
                    [d["cpu_clock_offset_ns"], d["cpu_clock_consistent"], tid])
        notes.extend((tid, n) for n in d["notes"])
    con.executemany(f"INSERT INTO {SHARDS} VALUES (?, ?, ?, ?, ?)", rows)
    for table in SHARDED:
        con.execute(f'DROP TABLE IF EXISTS {SHARDED[table][0]}."{table}"')
        con.execute(view_sql(con, parts, table))
    return notes


def view_sql(con, parts: str, table: str) -> str:
    schema = SHARDED[table][0]
    src = f"read_parquet({sql_string(Path(parts).resolve() / f'*.{table}.parquet')})"
    stored = [r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {src}").fetchall() if r[0] != "tf_shard"]
    cols = []
    for c in stored:  # in the table's order, each replaced by what a local ingest stores
        if c in ("trace_id", "rank"):
            cols.append(f"m.{c}::INTEGER AS {c}")
        elif c in TIMES.get(table, ()):
            cols.append(f"s.{c} + m.tf_offset AS {c}")
        elif c in IDS.get(table, {}):
            cols.append(f"s.{c} + m.{IDS[table][c]} AS {c}")
        else:
            cols.append(f"s.{c}")
    return (f"CREATE OR REPLACE VIEW {schema}.{table} AS SELECT {', '.join(cols)} FROM {src} s "
            f"JOIN (SELECT h.*, t.clock_offset_ns AS tf_offset FROM {SHARDS} h JOIN main.traces t USING (trace_id)) m "
            f"ON s.tf_shard = m.shard")


def spans(loads) -> list[tuple[str, int, int]]:
    """(file, first start, last end) of each trace with rows, as its worker read them: the one-job
    check's input without a scan of every shard (1.07 s of the 2.1 s load at 256 ranks)."""
    import os
    return [(os.path.abspath(t.source_path), *t.derived["span"]) for t, _, _ in loads if t.derived["span"][0] is not None]


def folder_of(con) -> str | None:
    """The parts folder a database's views read, or None for a database of tables."""
    row = con.execute("""SELECT sql FROM duckdb_views() WHERE view_name = 'gpu_ops' AND schema_name = 'main'""").fetchone()
    if not row:
        return None
    import re
    m = re.search(r"read_parquet\('((?:[^']|'')*)'\)", row[0])
    return str(Path(m.group(1).replace("''", "'")).parent) if m else None
