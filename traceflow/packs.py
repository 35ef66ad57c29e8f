"""Query packs: one analysis per queries/*.sql file, results kept as tables in the database (the
runner, graph.py, runs them with every other step after the load).

A pack file opens with a comment (what it computes, inputs, output columns and units) and
then `CREATE OR REPLACE TABLE <name> AS ...`; pasting it into the DuckDB shell gives the same
table. Thresholds are DuckDB variables with defaults (`SET VARIABLE tf_... = ...`).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from . import sqlmodules

# A pack is a public table of queries/: its name on the command line is the table's, with dashes
# (step-breakdown); a file creates only tables whose names start with the file's (tests/test_sql_modules.py).
# Older names kept working:
ALIASES = {"steps": "step_breakdown", "launch-bound": "launch_bound_steps"}


@functools.cache
def public_tables() -> tuple[str, ...]:
    """The public tables the analyses create (helpers live in schema tf_internal), in run order."""
    from .sqlmodules import creates_public
    return tuple(t for f in run_order() for t in creates_public(pack_sql(f)))


def shows_first(pack: str) -> list[str]:
    """The columns of a pack's table a narrow terminal keeps first (its file's `-- <table> shows first:`
    line, sqlmodules.shows_first), or [] for a pack that declares none."""
    from .sqlmodules import shows_first as declared
    table = table_of(pack)
    if table is None:
        return []
    for f in run_order():
        if table in (d := declared(pack_sql(f))):
            return d[table]
    return []


def table_of(pack: str) -> str | None:
    """The table a pack name (as typed: `idle-gaps`, `idle_gaps` or an alias) fills, or None."""
    table = ALIASES.get(pack) or pack.replace("-", "_")
    return table if table in public_tables() else None


def default_order(table: str) -> str | None:
    """How `traceflow query` sorts a pack's rows (its file's `-- <table> sorts by:` line), or None:
    a 40 ms gap must not hide under 2,500 gaps of 1 us (a cluster job's per-rank packs are views
    over Parquet shards, whose rows come in no set order)."""
    for f in run_order():
        if (d := sqlmodules.module("queries", f).tables.get(table)) is not None:
            return d.sorts_by or None
    return None


def pack_sql(name: str) -> str:
    return sqlmodules.text("queries", name)


def run_order() -> list[str]:
    """The packs (queries/*.sql) in the order the runner runs them (graph.order: the one order)."""
    from . import graph
    return [s.name for s in graph.order() if s.group == "queries"]


@dataclass
class PackInfo:
    name: str
    table: str
    description: str


def listing() -> list[PackInfo]:
    """Each pack with the first sentence of its table's paragraph in the file's header (comments.parse,
    which gives the same text to COMMENT ON)."""
    from .comments import parse
    described: dict[str, str] = {}
    for f in run_order():
        described.update(parse(pack_sql(f))[0])
    return [PackInfo(table.replace("_", "-"), table, described.get(table, "").split(". ")[0].rstrip("."))
            for table in public_tables()]
