"""What the outputs draw from: read-only views of a job, a diff and a scaling study.

The pages and traces (pages/, perfetto.py, gate.py) are written from these, never from the `Job`,
the `Diff` or the `Scaling` that make them: those objects call into the outputs (job.write_report,
diff.write_html), so an output that imported them back, even for a type hint, closed a circle of
imports (tests/test_layers.py counts type-only imports). A leaf: it imports nothing of traceflow.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import duckdb
    import polars as pl


@dataclass(frozen=True)
class JobView:
    """One job's database as an output reads it: the read-only, locked connection (job.connect), the
    database's path (named in the page and kept as an input the output may never replace), the job's
    name for titles, and its findings (computed on first call, once per Job: the report asks, the
    Perfetto trace draws its own)."""
    con: duckdb.DuckDBPyConnection
    path: str
    name: str
    findings: Callable[[], dict]


@dataclass
class DiffView:
    """Two runs compared (compare.diff builds it; compare.Diff adds the verbs)."""
    a: str
    b: str
    pairs: list[tuple[int, int]]
    comparability: list[dict]          # what, a, b, same
    warnings: list[str]
    sentences: list[str]
    tables: dict[str, pl.DataFrame] = field(default_factory=dict)
    names: tuple[str, str] = ("a", "b")  # the runs' job names, for titles (job_name.py)


@dataclass
class ScalingView:
    """Runs at several rank counts compared (scaling_study.scaling builds it; Scaling adds the verbs)."""
    mode: str
    table: pl.DataFrame
    warnings: list[str]
    sentences: list[str]
