"""The database documents itself: `COMMENT ON` every user-facing table and column, taken from the
header comments of the `.sql` files that create them (one source: the text a reader of the pack
reads), and from schema.py for the tables ingest loads. `duckdb job.duckdb` then
`SELECT table_name, column_name, comment FROM duckdb_columns()` answers "what is this column".

Header conventions (queries/*.sql, traceflow/derive/*.sql):
  -- <table> (pack `name`): what the table holds ...      a table's paragraph: its lines of one space
  -- <table>: what the table holds ...                    after `--`, until a blank `--`, a column line
                                                          or a section (`-- Inputs:`); the second form
                                                          only where a block of comments begins
  --   col  what the column means                         a column (two or more spaces before the text),
  --        continued on deeper-indented lines            its table the paragraph above it
  --   rank, step                                         listed bare: the GLOSSARY's text
One column a line, each with a text of its own (tests/test_first_hour.py checks every column of the
demo's database: a comment each, none shared within a table, no SQL type, enumerated values the
column's own). SQL types written beside a text (`BIGINT  ...`, `(ns, BIGINT)`) are left out of the
comment: DuckDB shows each column's type itself.
"""
from __future__ import annotations

import re

from .duck import sql_string

_TABLE = re.compile(r"^--\s([a-z_][a-z0-9_]*)(\s+\((?:pack [^)]*|view)\))?:\s+(.*)$")
_COLUMN = re.compile(r"^--(\s{2,})(\w+(?:,\s*\w+)*)(?:\s{2,}(\S.*))?$")
_MORE = re.compile(r"^--(\s+)(\S.*)$")
# The SQL types a header may name beside a column's meaning: DuckDB shows a column's type itself
# (duckdb_columns().data_type), so its comment leaves them out (a comment that ended "(INTEGER,
# INTEGER, VARCHAR)" read as part of the meaning).
_TYPES = r"(?:BIGINT|UBIGINT|INTEGER|SMALLINT|TINYINT|HUGEINT|VARCHAR|DOUBLE|FLOAT|REAL|BOOLEAN|TIMESTAMP)(?:\[\])?"


def _untyped(text: str) -> str:
    """A column's text without the SQL types it names: `BIGINT  the gap` -> `the gap`; `(ns, BIGINT)`
    -> `(ns)`; `(VARCHAR)` -> ``."""
    text = re.sub(rf"^{_TYPES}\s+", "", text)
    text = re.sub(rf"\s*\({_TYPES}(?:,\s*{_TYPES})*\)", "", text)
    text = re.sub(rf"\s*[;,]\s*{_TYPES}\b", "", text)
    return re.sub(rf"\b{_TYPES}[;,]\s*", "", text).strip()


def parse(sql_text: str) -> tuple[dict[str, str], dict[str, str]]:
    """({table: its paragraph}, {column: its text}) from a file's comment lines (the columns of all
    its tables; parse_tables gives each table its own)."""
    tables, by_table = parse_tables(sql_text)
    columns: dict[str, str] = {}
    for cols in by_table.values():
        for c, text in cols.items():
            columns.setdefault(c, text)
    return tables, columns


def parse_tables(sql_text: str) -> tuple[dict[str, str], dict[str | None, dict[str, str]]]:
    """({table: its paragraph}, {table: {column: its text}}): a column belongs to the table whose
    paragraph last came before it (None: before any). A line lists one column (or several that
    share the text); a column listed without text is the GLOSSARY's."""
    tables: dict[str, str] = {}
    by_table: dict[str | None, dict[str, str]] = {None: {}}
    current: str | None = None
    lines: list[str] = []
    fresh: set[int] = set()  # fresh: the comment lines that begin a block (after code or a blank `--`)
    for line in sql_text.splitlines():
        if not line.startswith("--"):
            fresh.add(len(lines))
            continue
        if not lines or lines[-1].strip() == "--":
            fresh.add(len(lines))
        lines.append(line.rstrip())
    i = 0
    while i < len(lines):
        line = lines[i]
        if (m := _TABLE.match(line)) and (m.group(2) or i in fresh):
            # a paragraph goes on over lines of one space after `--` (two or more begin a column)
            text, i = [m.group(3)], i + 1
            while i < len(lines) and re.match(r"^-- \S", lines[i]) and not _pack_header(lines[i]) \
                    and not _SECTION.match(lines[i]):
                text.append(lines[i][2:].strip())
                i += 1
            current = m.group(1)
            tables.setdefault(current, " ".join(text))
            by_table.setdefault(current, {})
            continue
        if m := _COLUMN.match(line):
            indent = len(m.group(1))
            text, i = [m.group(3) or ""], i + 1
            while m.group(3) and i < len(lines) and _continues(lines[i], indent):
                text.append(lines[i][2:].strip())
                i += 1
            doc = _untyped(" ".join(text))
            for col in re.split(r",\s*", m.group(2)):
                by_table[current].setdefault(col, doc)  # "": listed bare, the GLOSSARY's
            continue
        i += 1
    return tables, by_table


# a header's own sections end a table's paragraph: "-- Input: ...", "-- Output columns:"
_SECTION = re.compile(r"^-- (?:Inputs?|Outputs?|Output columns|Parameters?|Requires)\b.*:")


def _pack_header(line: str) -> bool:
    m = _TABLE.match(line)
    return m is not None and m.group(2) is not None


def _continues(line: str, indent: int) -> bool:
    m = _MORE.match(line)
    return m is not None and len(m.group(1)) > indent + 2 and not _COLUMN_WITH_TEXT.match(line) and not _TABLE.match(line)


_COLUMN_WITH_TEXT = re.compile(r"^--(\s{2,})(\w+(?:,\s*\w+)*)\s{2,}(\S.*)$")


def apply(con, sql_text: str, tables: list[str]):
    """COMMENT ON the tables (and their columns) that `sql_text` documents."""
    apply_docs(con, docs_for(sql_text, tables))


def docs_for(sql_text: str, tables: list[str]) -> dict[str, tuple[str | None, dict[str, str]]]:
    """What `sql_text` says about `tables`, to apply later with others in one batch (apply_docs)."""
    docs, by_table = parse_tables(sql_text)
    every: dict[str, str] = {}
    for cols in by_table.values():
        for c, text in cols.items():
            if text:
                every.setdefault(c, text)
    # a table's own columns first; a column its section does not list takes the file's text for it
    return {t: (docs.get(t), {**every, **by_table.get(t, {})}) for t in tables}


def comment_table(con, table: str, text: str, columns: dict[str, str]):
    """COMMENT ON a table Python makes (its docs kept beside its DDL)."""
    apply_docs(con, {table: (text, columns)})


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


# Columns many tables share, where a file lists them without words of their own.
GLOSSARY = {
    "rank": "the rank (process index in the job) the row belongs to",
    "step": "the training step (ProfilerStep#N, or the --step-pattern's number); NULL outside every step",
    "name": "the name of the op, kernel or call (kernels: the full demangled C++ name)",
    "kind": "what kind of op or segment this is",
    "stream": "the CUDA stream",
    "op_id": "the op's op_id in gpu_ops or host_ops",
    "tid": "the host thread id",
    "category": "what a GPU op does: compute | communication | memory",
    "comm": "the NCCL communicator (process group) of the collective",
    "seq": "the collective's sequence number within its communicator and step",
    "op": "the collective (allreduce, allgather, reduce_scatter, broadcast, ...)",
    "ordinal": "position in time order within the step (0, 1, ...)",
    "start_ns": "start, ns since the Unix epoch (after clock alignment)",
    "end_ns": "end, ns since the Unix epoch (after clock alignment)",
    "dur_ns": "end_ns - start_ns (ns)",
    "bytes": "bytes moved (copies, memsets, collectives' messages)",
    "trace_id": "the input file (traces.trace_id) the row came from",
}


def apply_core(con):
    """The tables ingest loads, documented in schema.py."""
    from .schema import DOCS
    apply_docs(con, DOCS)
