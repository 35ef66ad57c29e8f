"""The Python API: the same verbs as the command line."""
from __future__ import annotations

import os

import duckdb

from . import packs
from .duck import LOGGING_FUNCTIONS, check_read_only, lock_down, relation, sql_string, use_internal_schema
from .duck import connect as duck_connect
from .errors import InputError, UsageError, one_line
from .outputs import is_duckdb_file, is_utf8_name, os_problem, parts_folders


def connect(database: str) -> duckdb.DuckDBPyConnection:
    """A read-only DuckDB connection to a traceflow database, locked down (duck.lock_down): it reads
    the database and its own shard folder, nothing else, and writes nothing."""
    if not os.path.exists(database):
        raise InputError(database, "no such database (run `traceflow ingest` first)")
    if os.path.isdir(database):
        raise InputError(database, "is a folder, not a traceflow database")
    if not is_utf8_name(os.path.abspath(database)):
        raise InputError(database, "its name is not valid UTF-8, which DuckDB cannot open: rename it")
    try:
        os.close(os.open(database, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC))
    except OSError as e:
        raise InputError(database, f"cannot read it ({os_problem(e)})") from None
    if not is_duckdb_file(database):  # an nsys .sqlite, a trace, a FIFO: never handed to DuckDB
        raise InputError(database, "not a DuckDB database (run `traceflow ingest` on trace files first)")
    # Attached to a connection of its own rather than opened by duckdb.connect(path): DuckDB shares
    # one instance per file among a process's connect() calls and refuses a second one with other
    # settings (a user's own duckdb.connect(path), open beside a Job, made traceflow.open fail), and
    # the locked settings would have reached that user's connection. DuckDB spills where it would
    # for the file itself, beside it (<db>.tmp), never into the current folder.
    real = os.path.realpath(database)
    con = duck_connect(config={"temp_directory": f"{real}.tmp"})
    try:
        con.execute(f"ATTACH {sql_string(real)} AS {_alias(real)} (READ_ONLY)")
        con.execute(f"USE {_alias(real)}")
    except duckdb.Error as e:
        con.close()
        raise InputError(database, f"not a readable DuckDB database ({one_line(e)})") from None
    try:
        lock_down(con, [str(p) for p in parts_folders(database)])
        _check_views(con, database)
        use_internal_schema(con)
        _check_parts(con, database)
    except duckdb.Error as e:
        con.close()
        raise InputError(database, f"not a readable DuckDB database ({one_line(e)})") from None
    except BaseException:
        con.close()
        raise
    return con


def _alias(path: str) -> str:
    """The database's name in SQL: its file's stem, as `duckdb job.duckdb` names it, where that is
    a plain name DuckDB does not keep for itself; else `job`."""
    stem = os.path.basename(path).split(".")[0]
    ok = stem.isidentifier() and stem.isascii() and stem.lower() not in ("memory", "system", "temp", "main")
    return f'"{stem}"' if ok else "job"


def _check_views(con, database: str):
    """A database whose views call DuckDB's logging functions (duck.LOGGING_FUNCTIONS) is refused
    before any is read: reading one on the locked connection aborts the process."""
    for name, text in con.execute("SELECT view_name, sql FROM duckdb_views() WHERE NOT internal").fetchall():
        found = LOGGING_FUNCTIONS.search(text or "")
        if found:
            raise InputError(database, f"its view {name} calls {found.group(1).lower()}, which traceflow never runs: "
                             "not a database traceflow wrote")


def _check_parts(con, database: str):
    """A cluster job's tables read the Parquet shards in its parts folder: say so when it is gone,
    or not where it was made, beside the database (the only folder its connection may read)."""
    from .shard_views import folder_of
    folder = folder_of(con)
    if folder is None:
        return
    if not os.path.isdir(folder):
        raise InputError(database, f"its tables are views over the Parquet shards in {folder}, which is gone "
                         "(moved or deleted): keep that folder where it was, or ingest the rank files again")
    if os.path.realpath(folder) not in {str(p) for p in parts_folders(database)}:
        raise InputError(database, f"its tables are views over the Parquet shards in {folder}, which is not beside "
                         "it: traceflow reads only a database's own shard folder; ingest the rank files again")


def check_sql(con, text: str) -> None:
    """UsageError unless every statement of `text` only reads (duck.check_read_only)."""
    try:
        check_read_only(con, text)
    except ValueError as e:
        raise UsageError(str(e)) from None
    except duckdb.Error as e:
        raise UsageError(f"SQL error: {one_line(e)}") from None


def _filters(rank, step, columns):
    """The WHERE clause for --rank / --step, with the numbers written in (int() checks them): DuckDB
    1.5 runs a relation with parameters several times slower (launch-overhead --rank 3 of the nsys
    x16 bench: 1.57 s against 0.30 s)."""
    where = []
    if rank is not None:
        if "rank" not in columns:
            raise UsageError("this pack has no rank column; drop --rank")
        where.append(f"rank = {int(rank)}")
    if step is not None:
        if "step" not in columns:
            raise UsageError("this pack has no step column; drop --step")
        where.append(f"step = {int(step)}")
    return (" WHERE " + " AND ".join(where)) if where else ""


def query_relation(con, name: str, rank=None, step=None):
    table = packs.table_of(name)
    if table is None:
        raise UsageError(f"no query pack named {name!r}; `traceflow query DB --list` lists them")
    exists = con.execute("""SELECT count(*) FROM (SELECT table_name FROM duckdb_tables() UNION ALL
                            SELECT view_name FROM duckdb_views()) WHERE table_name = ?""", [table]).fetchone()[0]
    if not exists:
        raise UsageError(f"the database has no {table} table: it was made by an older traceflow, ingest again")
    cols = [r[0] for r in con.execute(f"DESCRIBE {table}").fetchall()]
    where = _filters(rank, step, cols)
    order = packs.DEFAULT_ORDER.get(table)
    return relation(con, f"SELECT * FROM {table}{where}" + (f" ORDER BY {order}" if order else ""))


def query(database: str, name: str, rank=None, step=None):
    """Rows of a query pack as a polars DataFrame."""
    con = connect(database)
    try:
        return query_relation(con, name, rank, step).pl()
    finally:
        con.close()


def sql(database: str, text: str):
    """Any SQL against the database, as a polars DataFrame."""
    con = connect(database)
    try:
        check_sql(con, text)
        rel = relation(con, text)
        return None if rel is None else rel.pl()
    finally:
        con.close()
