"""DuckDB 1.5 and 2.x from one code base.

Results as Arrow or polars come from a relation (`con.sql`): on DuckDB 2 a DB-API result
(`con.execute`) has no `.pl()` and copies every row for Arrow. But DuckDB 2 refuses `con.sql`
while an earlier `con.execute` result is unfinished (a `fetchone()` leaves it so), where 1.5
closed it silently; running one finished statement first closes it on both.

Size: DuckDB's version differences and the read-only lock-down of an untrusted database, one leaf.
"""
from __future__ import annotations

import os
import re
import weakref
from os import PathLike

# Every connection traceflow opens (connect): a signal to the command interrupts their queries
# (interrupts._interrupter); weak, so a closed and dropped connection leaves the set.
WATCHED: weakref.WeakSet = weakref.WeakSet()

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


def arrow_batches(con, sql: str, params=None, rows: int = 1 << 16):
    """The result as Arrow record batches of up to `rows` rows, streamed (the whole result is never
    held at once), by arrow_table's fast path. Read it to the end before the next query on `con`."""
    import duckdb
    if params and int(duckdb.__version__.split(".")[0]) < 2:
        return con.execute(sql, params).to_arrow_reader(rows)
    return relation(con, sql, params).to_arrow_reader(rows)



# On every connection traceflow opens: no extension is ever downloaded or loaded behind the user's
# back (an nsys .sqlite given where a .duckdb is expected made DuckDB fetch its SQLite extension
# from the network), and no secret is written to ~/.duckdb.
NO_EXTENSIONS = {"autoinstall_known_extensions": False, "autoload_known_extensions": False,
                 "allow_community_extensions": False, "allow_persistent_secrets": False}


# DuckDB 2 refuses the `x -> ...` lambda that 1.5 only deprecated (an ingest failed for every user
# whose pip took 2.0.1: sync_extra.sql had one): refused on 1.5 too, so that the suite finds one.
SYNTAX = {"lambda_syntax": "DISABLE_SINGLE_ARROW"}


def connect(database: str | PathLike = ":memory:", read_only: bool = False, config: dict | None = None):
    """`duckdb.connect` with NO_EXTENSIONS (and `config`): the one way traceflow opens DuckDB; a signal
    interrupts its queries (interrupts.watch)."""
    import duckdb
    con = duckdb.connect(str(database), read_only=read_only, config={**NO_EXTENSIONS, **SYNTAX, **(config or {})})
    WATCHED.add(con)  # Ctrl-C and SIGTERM stop its queries at once (interrupts._interrupter)
    return con


def lock_down(con, allowed: list[str] | tuple = (), paths: list[str] | tuple = ()) -> None:
    """No file outside the folders `allowed` (a cluster job's shard folder, read by its views) and
    the files `paths` (the database to attach, its WAL) can be read or written through `con`, and no
    setting changed afterwards: COPY ... TO, EXPORT DATABASE, ATTACH of anything else, INSTALL /
    LOAD, read_csv('/etc/...') all fail. DuckDB allows writing in `allowed` too: statements that
    write are refused by kind (check_read_only).
    Called on a fresh in-memory connection, before the database is attached: a database someone sent
    may hold a macro named current_setting (always true), which made the check below believe the
    lock was already on, and its views then read /etc/passwd. Nothing of the database exists yet
    here, and the check names DuckDB's own function all the same."""
    if con.execute("SELECT system.main.current_setting('lock_configuration')").fetchone()[0]:
        return
    if paths:
        con.execute("SET allowed_paths = [" + ", ".join(sql_string(p) for p in paths) + "]")
    if allowed:
        con.execute("SET allowed_directories = [" + ", ".join(sql_string(os.path.join(d, "")) for d in allowed) + "]")
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")


def shadowing_macros(con, catalog: str) -> list[str]:
    """The functions and macros of the attached database `catalog` named like one of DuckDB's own
    (`round`, `current_setting`, `enable_logging`): once the database is in use, its macro is the
    one a bare name calls, in traceflow's SQL too. traceflow never writes one."""
    return [r[0] for r in con.execute(
        "SELECT DISTINCT function_name FROM system.main.duckdb_functions() WHERE database_name = ? AND NOT internal "
        "AND function_name IN (SELECT function_name FROM system.main.duckdb_functions() WHERE database_name = 'system') "
        "ORDER BY 1", [catalog]).fetchall()]


# A view's cost must stay bounded by the database it reads: a view over range(10^12) or a recursive
# CTE with no end made `query`, `report` and `sql` run until killed. traceflow's own views read its
# tables and, for a --cluster job, read_parquet over its shard folder. A table function that reads a
# file is bounded by that file (and lock_down refuses every file but the database's own, naming it);
# any other (range, generate_series, unnest, a function DuckDB adds later) is refused.
def _reads_a_file(name: str) -> bool:
    return name.startswith(("read_", "parquet_")) or name in ("glob", "sniff_csv")


_VIEW_HEAD = re.compile(r'^\s*CREATE\s+(?:OR\s+REPLACE\s+)?(?:TEMP(?:ORARY)?\s+)?VIEW\s+(?:"(?:[^"]|"")*"|[^\s("]+)'
                        r'(?:\.(?:"(?:[^"]|"")*"|[^\s("]+))*\s*(?:\((?:"(?:[^"]|"")*"|[^)"])*\))?\s*AS\s', re.I | re.S)


def unbounded_view(con, sql: str) -> str | None:
    """What makes the view `sql` (its CREATE VIEW text, as duckdb_views() gives it) unbounded in
    cost: a recursive CTE, or a table function that reads no file (range, generate_series, ...); None when it has neither. Read from DuckDB's own parse tree
    (json_serialize_sql), never from the text."""
    import json
    head = _VIEW_HEAD.match(sql or "")
    if head is None:
        return "a definition traceflow cannot read"
    tree = json.loads(con.execute("SELECT system.main.json_serialize_sql(?)", [sql[head.end():].rstrip().rstrip(";")]).fetchone()[0])
    if tree.get("error"):
        return "a definition traceflow cannot read"
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict):
            if node.get("type") == "RECURSIVE_CTE_NODE":
                return "a recursive CTE"
            if node.get("type") == "TABLE_FUNCTION":
                name = str((node.get("function") or {}).get("function_name", "")).lower()
                if not _reads_a_file(name):
                    return f"{name}()"
            stack.extend(node.values())
    return None


# A view of the job's own tables can still cost without bound in practice: a cross product of gpu_ops
# with itself three times is 10^12 rows from the bundled job's 10^4. traceflow's own views (a cluster
# job's, over its shards) make about the rows they read; a view whose plan DuckDB estimates to make
# more than VIEW_ROWS_FACTOR times the rows it scans, and over VIEW_ROWS_FLOOR rows, is refused.
VIEW_ROWS_FACTOR = 16
VIEW_ROWS_FLOOR = 10_000_000


def costly_view(con, qualified: str) -> str | None:
    """Why reading the view `qualified` ("db"."schema"."name") would cost far more than the rows it
    reads, or None. From DuckDB's own plan (EXPLAIN, estimated cardinalities): a cross product, which
    DuckDB leaves unestimated, makes the product of its inputs."""
    import json

    import duckdb
    try:
        plan = json.loads(con.execute(f"EXPLAIN (FORMAT json) SELECT * FROM {qualified}").fetchall()[0][1])
    except duckdb.Error:  # a view DuckDB cannot plan (a table it reads is gone) fails when read, with DuckDB's words
        return None
    scanned = 0.0

    def rows(node) -> float:
        nonlocal scanned
        below = [rows(c) for c in node.get("children", [])]
        est = (node.get("extra_info") or {}).get("Estimated Cardinality")
        if not below:
            n = float(est) if est not in (None, "") else 0.0
            scanned += n
            return n
        if "CROSS_PRODUCT" in node.get("name", "") or (est in (None, "") and "JOIN" in node.get("name", "")):
            out = 1.0
            for b in below:
                out *= max(b, 1.0)
            most[0] = max(most[0], out)
            return out
        out = float(est) if est not in (None, "") else max(below)
        most[0] = max(most[0], out)
        return out
    most = [0.0]
    for top in plan:
        rows(top)
    if most[0] > max(VIEW_ROWS_FLOOR, VIEW_ROWS_FACTOR * scanned):
        return f"about {most[0]:.2g} rows made from {scanned:,.0f} read (a cross product?)"
    return None


# What `traceflow sql` and Job.sql run: reads, and what lives only in the session (temp tables and
# macros, variables, prepared statements). COPY, EXPORT, ATTACH / DETACH, INSTALL / LOAD, VACUUM,
# INSERT / UPDATE / DELETE / MERGE, ALTER and any kind DuckDB adds later are refused.
READ_ONLY_KINDS = {"SELECT", "EXPLAIN", "PRAGMA", "CALL", "SET", "VARIABLE_SET", "CREATE", "CREATE_FUNC", "DROP",
                   "PREPARE", "EXECUTE", "TRANSACTION", "RELATION"}


# DuckDB's logging functions switch logging on for the whole instance, past lock_configuration:
# `CALL enable_logging(storage='file', storage_path=...)` on a locked connection (DuckDB 1.5.5)
# aborts the process (SIGABRT, exit 134, an uncaught PermissionException in C++) at the next
# statement that logs. Refused by name wherever they appear, in a statement or in a view.
LOGGING_FUNCTIONS = re.compile(r"\b(enable_logging|disable_logging|truncate_duckdb_logs)\b", re.IGNORECASE)


# EXPLAIN and PREPARE carry a statement of their own, which DuckDB's parser reports only as
# "EXPLAIN" / "PREPARE": `EXPLAIN ANALYZE COPY ... TO` and `PREPARE p AS COPY ...; EXECUTE p` ran the
# COPY (a cluster job's shard overwritten through its allowed parts folder). The inner statement is
# parsed again by DuckDB and held to the same rule; EXECUTE runs only what a checked PREPARE made.
_EXPLAIN = re.compile(r"^\s*EXPLAIN\b(?:\s*\((?:[^()']|'[^']*')*\))?(?:\s+ANALY[SZ]E\b)?", re.I)
_PREPARE = re.compile(r'^\s*PREPARE\s+(?:"(?:[^"]|"")*"|[^\s"]+)\s+AS\b', re.I)


def _inner(st) -> str | None:
    """The statement an EXPLAIN or PREPARE statement carries (its text), else None."""
    kind = getattr(st.type, "name", "")
    pattern = {"EXPLAIN": _EXPLAIN, "PREPARE": _PREPARE}.get(kind)
    if pattern is None:
        return None
    m = pattern.match(st.query)
    if m is None:
        raise ValueError(f"{kind} statements that traceflow cannot read are refused: traceflow sql reads the database "
                         "and never writes")
    return st.query[m.end():]


def check_read_only(con, text: str) -> None:
    """Raises ValueError naming the first statement of `text` that is not a read (see READ_ONLY_KINDS)
    or that calls a logging function (LOGGING_FUNCTIONS), also inside an EXPLAIN or a PREPARE. A
    statement DuckDB cannot parse raises duckdb.Error here."""
    statements = list(con.extract_statements(text))
    if not statements:  # "" or only comments: DuckDB ran nothing and returned no result (an internal error)
        raise ValueError("no SQL statement given")
    while statements:
        st = statements.pop(0)
        kind = getattr(st.type, "name", "")
        kind = kind if kind.isidentifier() else "unknown"
        if kind not in READ_ONLY_KINDS:
            raise ValueError(f"{kind.replace('_', ' ')} statements are refused: traceflow sql reads the database and never "
                             "writes (save a result with --format csv > FILE)")
        found = LOGGING_FUNCTIONS.search(st.query)
        if found:
            raise ValueError(f"{found.group(1).lower()} is refused: traceflow sql reads the database and never writes "
                             "(a log file included)")
        inner = _inner(st)
        if inner is not None:
            carried = list(con.extract_statements(inner))
            if len(carried) != 1:
                raise ValueError(f"{kind} of {len(carried)} statements is refused: traceflow sql reads the database")
            statements.insert(0, carried[0])
