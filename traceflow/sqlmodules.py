"""The SQL files as modules: where they are, what each creates, and what it requires.

Every `.sql` file is a module of one of four groups, loaded by `text(group, name)` and by nothing
else: the derived tables (traceflow/derive/), the analyses (queries/), the comparisons of two runs
(queries/diff/) and of several (queries/scaling/). Each declares the tables and views it reads from
other modules (or that Python makes for it) in one header line, `-- requires: a, b`;
tests/test_sql_modules.py checks each declaration against the file's FROM / JOIN clauses, both
ways, and the run order of the analyses is computed from these declarations (a topological order),
not kept by hand. Tables and columns are documented in the same header (comments.py reads it).
"""
from __future__ import annotations

import re
from graphlib import TopologicalSorter
from importlib import resources
from pathlib import Path

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

_REQUIRES = re.compile(r"^-- requires:(.*)$", re.M)
# `-- idle_gaps shows first: rank, step, dur_ns, ...`: the columns a narrow terminal keeps, in order,
# declared beside the columns' docs (the rest follow in table order).
_SHOWS_FIRST = re.compile(r"^-- (\w+) shows first:(.*)$", re.M)
_CREATES = re.compile(r"\bCREATE\s+(?:OR\s+REPLACE\s+)?(?:TEMP\s+|TEMPORARY\s+)?(?:TABLE|VIEW)\s+(?:tf_internal\.|main\.)?(\w+)", re.I)
# a table read, by its last name: `x`, `tf_internal.x`, `a.x` (a run attached as `a`), `a.tf_internal.x`
_USES = re.compile(r"\b(?:(?<!DISTINCT )FROM|JOIN)\s+(?:[A-Za-z_]\w*\.)*([A-Za-z_]\w*)\b(?!\s*[(.])", re.I)
_CTE = re.compile(r"(?:\bWITH|,)\s*(\w+)\s+AS\s*(?:MATERIALIZED\s*)?\(", re.I)
_NOT_TABLES = {"select", "lateral", "unnest", "range", "generate_series", "values"}


def _code(sql: str) -> str:
    return "\n".join(line.split("--")[0] for line in sql.splitlines())


def creates(sql: str) -> set[str]:
    return set(_CREATES.findall(_code(sql)))


def creates_public(sql: str) -> list[str]:
    """Tables and views the file creates outside schema tf_internal, in file order."""
    return re.findall(r"\bCREATE\s+(?:OR\s+REPLACE\s+)?(?:TABLE|VIEW)\s+(?:main\.)?(\w+)\b(?!\.)", _code(sql), re.I)


def requires(sql: str) -> set[str] | None:
    """The declared requirements, or None when the file has no `-- requires:` line."""
    m = _REQUIRES.search(sql)
    if m is None:
        return None
    return {t.strip() for t in m.group(1).split(",") if t.strip() and t.strip() != "(nothing)"}


def shows_first(sql: str) -> dict[str, list[str]]:
    """{table: its columns by priority}, from the file's `-- <table> shows first:` lines."""
    return {t: [c.strip() for c in cols.split(",") if c.strip()] for t, cols in _SHOWS_FIRST.findall(sql)}


def referenced(sql: str) -> set[str]:
    """Tables and views the file's statements read that it does not make itself (CTEs excluded)."""
    code = _code(sql)
    used = {u for u in _USES.findall(code) if u.lower() not in _NOT_TABLES}
    return used - set(_CTE.findall(code)) - creates(sql)


def run_order(modules: dict[str, str], available: set[str],
              python: dict[str, tuple[set[str], set[str]]] | None = None, late: frozenset[str] | set[str] = frozenset()) -> list[str]:
    """Module names (name -> SQL text) in an order where each runs after the modules making what it
    requires; `available` are tables made before any of them (loaded, derived); `python` are
    analyses written in Python, name -> (tables it creates, tables it requires). Modules in `late`
    wait while any other module can run (so that they run together, as one phase)."""
    decl = {name: (creates(sql), requires(sql) or set()) for name, sql in modules.items()}
    decl.update(python or {})
    maker = {t: name for name, (made, _) in decl.items() for t in made}
    graph = {}
    for name, (_, needs) in sorted(decl.items()):
        missing = needs - available - set(maker)
        if missing:
            raise ValueError(f"{name} requires {', '.join(sorted(missing))}, which nothing makes")
        graph[name] = {maker[t] for t in needs if t in maker and maker[t] != name}
    ts = TopologicalSorter(graph)
    ts.prepare()
    out: list[str] = []
    ready: list[str] = []
    while ts.is_active():
        ready += ts.get_ready()
        ready.sort(key=lambda n: (n in late, n))
        name = ready.pop(0)
        out.append(name)
        ts.done(name)
    return out
