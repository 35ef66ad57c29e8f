"""The database documents itself: `COMMENT ON` every user-facing table and column, with the text
the modules declare (one source): the `-- @table` / `-- @column` lines of the `.sql` files that
create them (sqlmodules.module: the text a reader of the pack reads), and schema.py's declarations
for the tables ingest loads. `duckdb job.duckdb` then
`SELECT table_name, column_name, comment FROM duckdb_columns()` answers "what is this column".
tests/test_first_hour.py checks every column of the demo's database: a comment each, none shared
within a table, no SQL type, enumerated values the column's own.
"""
from __future__ import annotations

from .duck import sql_string
from .schema import GLOSSARY
from .sqlmodules import parse_header


def parse(sql_text: str) -> tuple[dict[str, str], dict[str, str]]:
    """({table: its doc}, {column: its doc}) from a file's declarations (the columns of all its
    tables; parse_tables gives each table its own)."""
    tables, by_table = parse_tables(sql_text)
    columns: dict[str, str] = {}
    for cols in by_table.values():
        for c, text in cols.items():
            columns.setdefault(c, text)
    return tables, columns


def parse_tables(sql_text: str) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """({table: its doc}, {table: {column: its doc}}), from the file's `-- @table` / `-- @column` lines."""
    decls = parse_header(sql_text)[2]
    return {t: d.doc for t, d in decls.items()}, {t: {c.name: c.doc for c in d.columns} for t, d in decls.items()}


def apply(con, sql_text: str, tables: list[str]):
    """COMMENT ON the tables (and their columns) that `sql_text` documents."""
    apply_docs(con, docs_for(sql_text, tables))


def docs_for(sql_text: str, tables: list[str]) -> dict[str, tuple[str | None, dict[str, str]]]:
    """What `sql_text` says about `tables`, to apply later with others in one batch (apply_docs)."""
    docs, by_table = parse_tables(sql_text)
    return {t: (docs.get(t), by_table.get(t, {})) for t in tables}


def comment_declared(con, declared: dict, tables) -> None:
    """COMMENT ON tables a Python step makes, from their declarations (sqlmodules.declared)."""
    apply_docs(con, {t: (declared[t].doc, {c.name: c.doc for c in declared[t].columns}) for t in tables})


def apply_docs(con, wanted: dict[str, tuple[str | None, dict[str, str]]]):
    """The COMMENT statements of many tables as one batch: a statement each cost 0.13 s of a small
    job's 1.5 s ingest; a batch costs ~4 ms whatever its size (a query of the catalog first), so
    callers gather a whole phase's tables into one (a batch per pack was 0.1 s)."""
    have: dict[str, set[str]] = {}
    for t, c in con.execute("""SELECT table_name, column_name FROM duckdb_columns()
                               WHERE schema_name = current_schema() AND list_contains(?, table_name)""",
                            [list(wanted)]).fetchall():
        have.setdefault(t, set()).add(c)
    views = {r[0] for r in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
    out = []
    for table, (text, columns) in wanted.items():
        if table not in have:
            continue
        if text:
            out.append(f"COMMENT ON {'VIEW' if table in views else 'TABLE'} {table} IS {sql_string(text)}")
        for col in sorted(have[table]):
            doc = columns.get(col) or GLOSSARY.get(col)
            if doc:
                out.append(f'COMMENT ON COLUMN {table}."{col}" IS {sql_string(doc)}')
    if out:
        con.execute(";\n".join(out))




def apply_core(con):
    """The tables ingest loads, documented in schema.py (schema.declared)."""
    from .schema import DOCS, docs
    apply_docs(con, docs(tuple(DOCS)))
