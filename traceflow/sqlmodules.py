"""The SQL files as modules: where they are, what each creates and reads, and the types, roles and
docs of the columns of each table it makes.

Every `.sql` file is a module of one of four groups, loaded by `text(group, name)` and by nothing
else: the derived tables (traceflow/derive/), the analyses (queries/), the comparisons of two runs
(queries/diff/) and of several (queries/scaling/). Each declares itself in its header comment, read
by one parser (`module(group, name)`; the format: docs/architecture.md, "SQL modules"):

    -- @table idle_gaps: every stretch inside a step's GPU window where the rank's GPU ran nothing
    -- @column rank      INTEGER  rank       the rank (process index in the job) the row belongs to
    -- @column start_ns  BIGINT   time       when the gap began (ns since epoch)
    -- @column cause     VARCHAR  text       why the GPU sat idle:
    --     'host_late' | 'launch_latency' | 'dependency'   (deeper lines: the doc goes on)
    -- idle_gaps shows first: rank, step, dur_ns, cause
    -- idle_gaps sorts by: dur_ns DESC, rank, start_ns
    -- scope: rank
    -- requires: gpu_islands, gpu_ops, host_ops, ranges, step_windows

A module that UPDATEs or DELETEs from a table another module made says so: `-- rewrites: gpu_ops`.
tests/test_sql_modules.py checks each `requires` against the file's FROM / JOIN clauses, both
ways, and each table's columns, types and order against the database the demo's ingest writes; the
runner (graph.py) orders every step from these declarations (a topological order), COMMENT ON
takes its text from them (comments.py) and the per-rank tables' time and id columns follow from
their roles (rank_tables.py).

Size: the module system in one place: finding the files, the header parser and its declaration
types, and the SQL reading that checks the declarations (creates, referenced).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import NamedTuple

GROUPS = ("derive", "queries", "diff", "scaling")


def queries_dir() -> Path:
    """The analyses' files: the source tree's queries/ in a checkout, else the installed package's
    (a regular package, so importlib gives a real folder, not a MultiplexedPath)."""
    here = Path(__file__).resolve().parent.parent / "queries"
    if here.is_dir():
        return here
    return Path(str(resources.files("traceflow.queries").joinpath("__init__.py"))).parent


def folder(group: str) -> Path:
    if group == "derive":
        return Path(__file__).resolve().parent / "derive"
    if group == "queries":
        return queries_dir()
    if group in GROUPS:
        return queries_dir() / group
    raise ValueError(f"no SQL module group {group!r}")


def path(group: str, name: str) -> Path:
    return folder(group) / f"{name}.sql"


def text(group: str, name: str) -> str:
    """The module's SQL, as a reader pastes it into the DuckDB shell."""
    return path(group, name).read_text()


def names(group: str) -> list[str]:
    """The group's modules, by name (the file's stem), sorted."""
    return sorted(p.stem for p in folder(group).glob("*.sql"))

# The roles a column may have (docs/architecture.md): `time` is ns since the epoch on the rank's
# clock (clock alignment shifts it; a cluster's shard views add the rank's offset); `time:unaligned`
# ns since the epoch left on the clock that recorded it (a memory snapshot's history, a Flight
# Recorder dump's calls): neither road shifts it; `id:<table>` an op id of gpu_ops / host_ops (a
# cluster's shard views add the trace's base); `key` any other identifier (step, seq, stream, pg, a
# list of ranks); `figure:<unit>` a measured number.
ROLES = ("rank", "trace", "time", "time:unaligned", "id:gpu_ops", "id:host_ops", "key", "text", "flag")
UNITS = ("ns", "us", "ms", "s", "bytes", "count", "percent", "fraction", "flop", "tflops", "gbps", "ratio",
         "mixed")  # mixed: the unit another column of the row names (findings.figure, in `unit`)
SCOPES = ("rank", "job")


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # DuckDB's name for it, as duckdb_columns().data_type gives it
    role: str  # one of ROLES, or figure:<one of UNITS>
    doc: str   # one line: the COMMENT ON text


@dataclass(frozen=True)
class TableDecl:
    doc: str
    columns: tuple[Column, ...]
    shows_first: tuple[str, ...] = ()  # the columns a narrow terminal keeps, in order (the rest follow)
    sorts_by: str = ""  # the ORDER BY a pack's rows come in (`traceflow query`), '' for none

    def roles(self, role: str) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns if c.role == role)


@dataclass(frozen=True)
class Module:
    group: str                    # derive | queries | diff | scaling (| python: steps written in Python)
    name: str                     # the file's stem
    scope: str                    # rank: a rank's rows come from that rank's rows alone; job: needs every rank
    reads: frozenset[str]         # the `-- requires:` line: tables it reads that other modules (or the load) make
    creates: tuple[str, ...]      # tables and views it creates, in file order (tf_internal's and TEMP ones too)
    tables: dict[str, TableDecl]  # the declared tables (every one it creates, its TEMP outputs in diff/scaling)
    rewrites: tuple[str, ...] = ()  # the `-- rewrites:` line: tables others made that it UPDATEs or DELETEs from


class Header(NamedTuple):
    """What a header declares: (scope, requires, {table: its declaration}, rewrites)."""
    scope: str | None
    reads: set[str] | None
    tables: dict[str, TableDecl]
    rewrites: tuple[str, ...]


# The one parser of a header: each line a declaration (`-- @table`, `-- @column`, `-- scope:`,
# `-- requires:`, `-- rewrites:`, `-- <table> shows first:`, `-- <table> sorts by:`), or a
# deeper-indented line going on with the declaration above.
_DECL = re.compile(r"^-- (?:@(?P<kw>table|column) +(?P<name>\w+)(?P<rest>.*)|(?P<key>scope|requires|rewrites): *(?P<value>.*)"
                   r"|(?P<shows>\w+) shows first: *(?P<cols>.*)|(?P<sorts>\w+) sorts by: *(?P<order>.*))$|^-- {2,}(?P<more>\S.*)$")


def valid_role(role: str) -> bool:
    return role in ROLES or (role.startswith("figure:") and role[7:] in UNITS)


def _names(value: str) -> list[str]:
    return [t.strip() for t in value.split(",") if t.strip() and t.strip() != "(nothing)"]


def parse_header(sql: str, where: str = "<sql>") -> Header:
    """(scope, requires, {table: its declaration}, rewrites) from a file's comment lines; a malformed
    declaration is a ValueError naming the file and line."""
    scope: str | None = None
    reads: set[str] | None = None
    rewrites: tuple[str, ...] = ()
    tables: dict[str, list] = {}  # table -> [[[name, type, role, doc], ...], its doc]
    shows: dict[str, tuple[str, ...]] = {}
    sorts: dict[str, list[str]] = {}  # table -> [its ORDER BY] (a deeper line goes on with it)
    last: list | None = None  # the declaration ([..., doc]) a deeper line continues
    for no, line in enumerate(sql.splitlines(), 1):
        m = _DECL.match(line.rstrip())
        if m is not None and m["more"] is not None:
            if last is not None:
                last[-1] = f"{last[-1]} {m['more'].strip()}"
            continue
        last = None
        if m is None:
            continue
        if m["kw"] == "table":
            if not m["rest"].startswith(":") or m["name"] in tables:
                raise ValueError(f"{where}:{no}: `-- @table name: doc`, once per table")
            last = tables[m["name"]] = [[], m["rest"][1:].strip()]
        elif m["kw"] == "column":
            fields = m["rest"].split(None, 2)
            if not tables or len(fields) < 3 or not valid_role(fields[1]):
                raise ValueError(f"{where}:{no}: `-- @column name TYPE role doc` under a `-- @table` "
                                 f"(role one of {', '.join(ROLES)}, figure:<{'|'.join(UNITS)}>)")
            last = [m["name"], fields[0], fields[1], fields[2].strip()]
            tables[list(tables)[-1]][0].append(last)
        elif m["key"] == "scope":
            if m["value"].strip() not in SCOPES:
                raise ValueError(f"{where}:{no}: `-- scope: rank` or `-- scope: job`")
            scope = m["value"].strip()
        elif m["key"] == "requires":
            reads = set(_names(m["value"]))
        elif m["key"] == "rewrites":
            rewrites = tuple(_names(m["value"]))
        elif m["sorts"]:
            last = sorts[m["sorts"]] = [m["order"].strip()]
        else:
            shows[m["shows"]] = tuple(_names(m["cols"]))
    decls = {t: TableDecl(doc=doc, columns=tuple(Column(*c) for c in cols), shows_first=shows.get(t, ()),
                          sorts_by=sorts.get(t, [""])[0]) for t, (cols, doc) in tables.items()}
    return Header(scope, reads, decls, rewrites)


@cache
def module(group: str, name: str) -> Module:
    """The module's declaration, from its file's header (cached: the files are the package's)."""
    sql = text(group, name)
    where = str(path(group, name))
    scope, reads, tables, rewrites = parse_header(sql, where)
    if scope is None or reads is None:
        raise ValueError(f"{where}: no `-- scope:` or `-- requires:` line")
    return Module(group=group, name=name, scope=scope, reads=frozenset(reads),
                  creates=tuple(dict.fromkeys(_CREATES.findall(_code(sql)))), tables=tables, rewrites=rewrites)


def declared(header: str, where: str) -> dict[str, TableDecl]:
    """The tables a step written in Python declares, in the SQL modules' header syntax (`-- @table`,
    `-- @column name TYPE role doc`): one parser and one kind of declaration for every step."""
    return parse_header(header, where)[2]


def create_table(table: str, decl: TableDecl, schema: str | None = None) -> str:
    """CREATE OR REPLACE TABLE of a declared table, its columns in order: the DDL follows from the declaration."""
    cols = ", ".join(f"{c.name} {c.type}" for c in decl.columns)
    return f"CREATE OR REPLACE TABLE {schema + '.' if schema else ''}{table} ({cols})"


def modules(group: str) -> list[Module]:
    return [module(group, n) for n in names(group)]


_CREATES = re.compile(r"\bCREATE\s+(?:OR\s+REPLACE\s+)?(?:TEMP\s+|TEMPORARY\s+)?(?:TABLE|VIEW)\s+(?:tf_internal\.|main\.)?(\w+)", re.I)
# a table read, by its last name: `x`, `tf_internal.x`, `a.x` (a run attached as `a`), `a.tf_internal.x`
_USES = re.compile(r"\b(?:(?<!DISTINCT )FROM|JOIN)\s+(?:[A-Za-z_]\w*\.)*([A-Za-z_]\w*)\b(?!\s*[(.])", re.I)
_CTE = re.compile(r"(?:\bWITH|,)\s*(\w+)\s+AS\s*(?:MATERIALIZED\s*)?\(", re.I)
_NOT_TABLES = {"select", "lateral", "unnest", "range", "generate_series", "values"}


def _code(sql: str) -> str:
    return "\n".join(line.split("--")[0] for line in sql.splitlines())


def creates(sql: str) -> set[str]:
    return set(_CREATES.findall(_code(sql)))


_CREATED = re.compile(r"\bCREATE\s+(?:OR\s+REPLACE\s+)?(TEMP\s+|TEMPORARY\s+)?(TABLE|VIEW)\s+(?:(tf_internal|main)\.)?(\w+)\b(?!\.)",
                      re.I)


def created(sql: str) -> dict[str, tuple[str, str]]:
    """{name: (schema, kind)} of each table and view the file's statements create, in file order:
    schema `main`, `tf_internal` or `temp`, kind `table` or `view` (a name created twice: its first)."""
    out: dict[str, tuple[str, str]] = {}
    for temp, kind, schema, name in _CREATED.findall(_code(sql)):
        out.setdefault(name, ("temp" if temp else (schema or "main").lower(), kind.lower()))
    return out


def creates_public(sql: str, views: bool = True) -> list[str]:
    """Tables (and views, unless `views` is False) the file creates in schema main, in file order."""
    return [t for t, (schema, kind) in created(sql).items() if schema == "main" and (views or kind == "table")]


def requires(sql: str) -> set[str] | None:
    """The declared requirements, or None when the file has no `-- requires:` line."""
    return parse_header(sql)[1]


def shows_first(sql: str) -> dict[str, list[str]]:
    """{table: its columns by priority}, from the file's `-- <table> shows first:` lines."""
    return {t: list(d.shows_first) for t, d in parse_header(sql)[2].items() if d.shows_first}


def referenced(sql: str) -> set[str]:
    """Tables and views the file's statements read that it does not make itself (CTEs excluded)."""
    code = _code(sql)
    used = {u for u in _USES.findall(code) if u.lower() not in _NOT_TABLES}
    return used - set(_CTE.findall(code)) - creates(sql)

