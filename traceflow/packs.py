"""Query packs: one analysis per queries/*.sql file, results kept as tables in the database.

A pack file opens with a comment (what it computes, inputs, output columns and units) and
then `CREATE OR REPLACE TABLE <name> AS ...`; pasting it into the DuckDB shell gives the same
table. Thresholds are DuckDB variables with defaults (`SET VARIABLE tf_... = ...`).
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

# Tables that exist before any pack runs: loaded by ingest, or made by traceflow/derive/.
LOADED = {"traces", "gpu_ops", "host_ops", "ranges", "device_peaks"}  # device_peaks: hardware.py
# Run by critical_path.compute, after the analyses (its walk runs between the two files).
CRITICAL_PATH_FILES = ("cp_graph", "critical_path")
# A pack is a public table of queries/: its name on the command line is the table's, with dashes
# (step-breakdown); a file creates only tables whose names start with the file's (tests/test_sql_modules.py).
# Older names kept working:
ALIASES = {"steps": "step_breakdown", "launch-bound": "launch_bound_steps"}


@functools.cache
def public_tables() -> tuple[str, ...]:
    """The public tables the analyses create (helpers live in schema tf_internal), in run order."""
    from .sqlmodules import creates_public
    return tuple(t for f in run_order() + ["critical_path"] for t in creates_public(pack_sql(f)))


def table_of(pack: str) -> str | None:
    """The table a pack name (as typed: `idle-gaps`, `idle_gaps` or an alias) fills, or None."""
    table = ALIASES.get(pack) or pack.replace("-", "_")
    return table if table in public_tables() else None


# How `traceflow query` sorts a pack's rows: a 40 ms gap must not hide under 2,500 gaps of 1 µs.
DEFAULT_ORDER = {"idle_gaps": "dur_ns DESC, rank, start_ns", "launch_overhead": "exposed_ns DESC NULLS LAST, rank"}


def queries_dir() -> Path:
    """The pack files: the source tree's queries/ in a checkout, else the installed package's
    (a regular package, so importlib gives a real folder, not a MultiplexedPath)."""
    here = Path(__file__).resolve().parent.parent / "queries"
    if here.is_dir():
        return here
    return Path(str(resources.files("traceflow.queries").joinpath("__init__.py"))).parent


def pack_sql(name: str) -> str:
    return (queries_dir() / f"{name}.sql").read_text()


def run_order() -> list[str]:
    """The analyses in an order computed from their `-- requires:` headers (sqlmodules)."""
    from .derive import derived_tables
    from .sqlmodules import run_order as order
    modules = {f.stem: f.read_text() for f in sorted(queries_dir().glob("*.sql")) if f.stem not in CRITICAL_PATH_FILES}
    return order(modules, LOADED | derived_tables())



@dataclass
class PackInfo:
    name: str
    table: str
    description: str


def describe(sql_text: str) -> str:
    """First sentence of a pack's header comment."""
    lines = []
    for line in sql_text.splitlines():
        if not line.startswith("--"):
            break
        lines.append(line[2:].strip())
    text = " ".join(lines)
    text = re.sub(r"^[\w-]+:\s*", "", text)
    return text.split(". ")[0].rstrip(".")


def listing() -> list[PackInfo]:
    out = []
    table_to_file = {}
    for f in run_order() + ["critical_path"]:
        sql = pack_sql(f) if (queries_dir() / f"{f}.sql").exists() else ""
        for t in re.findall(r"CREATE OR REPLACE TABLE (\w+)", sql):
            table_to_file[t] = sql
    for table in public_tables():
        name = table.replace("_", "-")
        sql = table_to_file.get(table, "")
        m = re.search(rf"-- {re.escape(table)}(?: \(pack [^)]*\))?:\s*(.+?)(?:\n--\s*\n|\n--   |\n[^-])", sql, re.S)
        desc = " ".join(line.strip("- ").strip() for line in m.group(1).splitlines()) if m else describe(sql)
        out.append(PackInfo(name, table, desc.split(". ")[0].rstrip(".")))
    return out


def compute_all(con):
    from . import comments
    public = set(public_tables())
    for name in run_order():
        sql = pack_sql(name)
        con.execute(sql)
        comments.apply(con, sql, [t for t in re.findall(r"CREATE OR REPLACE TABLE (\w+)", sql) if t in public])
