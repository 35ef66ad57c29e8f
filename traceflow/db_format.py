"""The database's format version: the row `format` of tf_internal.metadata (the table that also keeps
the job's name, job_name.py), written by every ingest and checked once where a database is opened
(a Job's connection, `ingest --append`, the runs of `diff` and `scaling`).

A database of another format (or from before the version existed) gets one line naming it and
saying to ingest again, instead of a fallback in each reader of the tables. Bump FORMAT when a
change makes the code read a table or column that databases written before it lack, or read one
differently; additions nothing reads yet need no bump.
"""
from __future__ import annotations

from . import sqlmodules
from .duck import INTERNAL, sql_string
from .errors import InputError

FORMAT = 7  # 1: the first versioned format; 2: sync_extra (the stall what-if reads it); 3: host_time's
# jit_compile cause and range_name, sync.cause (pageable copies), sync_extra_peers; 4: findings carry the claim columns
# (claims.py); 5: gpu_sharing, partial_capture, collective_waits.blamed_ns / sharing (issue 41);
# 6: traces.unread_device_work (the verdict read it from a warning's text), launch_overhead.stall (the
# --no-launch-stall what-if reads it), launch_bound_steps.stall_ns; 7: host_ops.event_id (an append
# dedupes on it), sync.startup_ns (start-up blocking, once)
METADATA = f"{INTERNAL}.metadata"
DECLARED = sqlmodules.declared("""
-- @table metadata: facts about the database: its format, the job's name, the steps done
-- @column key VARCHAR key format | name | claims
-- @column value VARCHAR text the fact
""", __file__)


def ensure_metadata(con) -> None:
    """The metadata table (its one definition: the load's job name and the format stamp both write it)."""
    con.execute(f"CREATE SCHEMA IF NOT EXISTS {INTERNAL}")
    con.execute(f"CREATE TABLE IF NOT EXISTS {METADATA} (key VARCHAR PRIMARY KEY, value VARCHAR)")


def stamp(con) -> None:
    """Records the format on a database being written (at the end of an ingest)."""
    ensure_metadata(con)
    con.execute(f"INSERT OR REPLACE INTO {METADATA} VALUES ('format', '{FORMAT}')")


def check(con, path: str, catalog: str | None = None) -> None:
    """InputError (exit 3) unless the database (`catalog`: as attached under that name) has this format."""
    where = f"database_name = {sql_string(catalog)}" if catalog else "database_name = current_database()"
    found = con.execute(f"""SELECT count(*) FROM duckdb_tables() WHERE {where}
                            AND schema_name = '{INTERNAL}' AND table_name = 'metadata'""").fetchone()[0]
    row = con.execute(f"SELECT value FROM {catalog + '.' if catalog else ''}{METADATA} WHERE key = 'format'").fetchone() \
        if found else None
    if row is None:
        if not con.execute(f"SELECT count(*) FROM duckdb_tables() WHERE {where} AND table_name = 'traces'").fetchone()[0]:
            raise InputError(path, "not a traceflow database (no traces table): give one that `traceflow ingest` wrote")
        raise InputError(path, f"was written by an older traceflow (before database format {FORMAT}): "
                               "ingest its rank files again")
    version = int(row[0]) if str(row[0]).isdigit() else None
    if version != FORMAT:
        newer = version is not None and version > FORMAT
        raise InputError(path, f"has database format {row[0]}; this traceflow reads format {FORMAT}: "
                               + ("upgrade traceflow" if newer else "ingest its rank files again"))
