"""DuckDB 1.5 and 2.x from one code base.

Results as Arrow or polars come from a relation (`con.sql`): on DuckDB 2 a DB-API result
(`con.execute`) has no `.pl()` and copies every row for Arrow. But DuckDB 2 refuses `con.sql`
while an earlier `con.execute` result is unfinished (a `fetchone()` leaves it so), where 1.5
closed it silently; running one finished statement first closes it on both.
"""
from __future__ import annotations

from os import PathLike

INTERNAL = "tf_internal"  # helper tables (step windows, islands, the walk's graph): out of `.tables`' main list


def use_internal_schema(con, create: bool = False):
    """Make the helper tables' schema resolvable by bare name (and create it when writing). A
    database from before the schema existed has none: then nothing to add."""
    if create:
        con.execute(f"CREATE SCHEMA IF NOT EXISTS {INTERNAL}")
    if con.execute("SELECT count(*) FROM duckdb_schemas() WHERE schema_name = ?", [INTERNAL]).fetchone()[0]:
        con.execute(f"SET search_path = 'main,{INTERNAL}'")


def sql_string(text: str | PathLike) -> str:
    """`text` as an SQL string literal (a path, a comment): quotes doubled, in quotes."""
    return "'" + str(text).replace("'", "''") + "'"


def relation(con, sql: str, params=None):
    """`con.sql(sql, params)`, safe after any earlier `con.execute` on the same connection."""
    con.execute("SELECT 1").fetchall()
    return con.sql(sql, params=params) if params else con.sql(sql)


def arrow_table(con, sql: str, params=None):
    """The result as an Arrow table, by the fast path of the DuckDB at hand: DuckDB 1.5 runs a
    relation with parameters 10-17x slower than a prepared statement (1 M rows: 2.3 s against 0.14 s;
    it made `annotate` of long4 nsys take 16 s), and DuckDB 2 warns that a prepared statement's
    result copies every row for Arrow, where its relation with parameters is fast. (Not done inside
    `relation`: a prepared statement's result is replaced by the next query on its connection, and
    `traceflow query` runs one before it prints; tried, it printed only the header.)"""
    import duckdb
    if params and int(duckdb.__version__.split(".")[0]) < 2:
        return con.execute(sql, params).to_arrow_table()
    return relation(con, sql, params).to_arrow_table()

