"""The Python API: the same verbs as the command line."""
from __future__ import annotations

import os

import duckdb

from . import packs
from .duck import relation, use_internal_schema
from .errors import InputError, UsageError, one_line


def connect(database: str, read_only: bool = True) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection to a traceflow database (read-only unless asked)."""
    if not os.path.exists(database):
        raise InputError(database, "no such database (run `traceflow ingest` first)")
    try:
        con = duckdb.connect(database, read_only=read_only)
        use_internal_schema(con)
    except duckdb.Error as e:
        raise InputError(database, f"not a readable DuckDB database ({one_line(e)})") from None
    _check_parts(con, database)
    return con


def _check_parts(con, database: str):
    """A cluster job's tables read the Parquet shards in its parts folder: say so when it is gone."""
    from .shard_views import folder_of
    folder = folder_of(con)
    if folder is not None and not os.path.isdir(folder):
        con.close()
        raise InputError(database, f"its tables are views over the Parquet shards in {folder}, which is gone "
                         "(moved or deleted): keep that folder where it was, or ingest the rank files again")


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
        rel = relation(con, text)
        return None if rel is None else rel.pl()
    finally:
        con.close()
