"""`traceflow diff`: what changed between two runs of a job, and why, along the critical path.

    d = traceflow.diff("before.duckdb", "after.duckdb")     # also trace files or folders: ingested first
    d.sentences; d.tables["kernels"]; d.write_html("diff.html")

The two databases are attached side by side (`a`, `b`) to an in-memory DuckDB; each comparison is
one file in queries/diff/ over `pairs`, the matched steps. Before any figure, `comparability` says
what differs between the runs, and `warnings` say when they should not be compared at all.

Size: the comparability checks (rank counts, GPUs, profilers, one model, shared GPUs) are most of
it; each comparison's figures are SQL in queries/diff/.
"""
from __future__ import annotations

import os
import statistics
from dataclasses import dataclass
from pathlib import Path

from . import db_format, sqlmodules
from .duck import connect as duck_connect
from .duck import relation, sql_string
from .errors import InputError, UsageError, one_line
from .views import DiffView

COMPARISONS = ("steps", "critical_path", "kernels", "op_classes", "collectives", "idle")  # in run order


@dataclass
class Diff(DiffView):
    """Two runs compared (the fields: views.DiffView, what the pages draw from) and its verbs."""

    def to_json(self) -> dict:
        return {"a": self.a, "b": self.b, "pairs": [{"step_a": x, "step_b": y} for x, y in self.pairs],
                "comparability": self.comparability, "warnings": self.warnings, "sentences": self.sentences,
                **{name: df.to_dicts() for name, df in self.tables.items()}}

    def gate(self, threshold_pct: float, summary: tuple[str, str] | None = None, force: bool = False):
        """The regression gate's decision (traceflow/gate.py); `summary`: (junit|markdown, FILE) to write it."""
        from .gate import decide, write_summary
        g = decide(self, threshold_pct)
        if summary:
            write_summary(g, self, summary[0], summary[1], force=force)
        return g

    def write_html(self, output: str = "diff.html", force: bool = False) -> str:
        from .pages.diff_page import write
        return write(self, output, force=force)


def diff(a: str, b: str, step_a: int | None = None, step_b: int | None = None,
         pairs: list[tuple[int, int]] | None = None) -> Diff:
    """Compare run `a` with run `b` (databases, or trace files / folders, which are ingested first
    into a scratch folder). `step_a` / `step_b` choose the steps to compare; by default the step
    numbers both runs have, else each run's median step."""
    import duckdb
    import polars as pl

    from .outputs import scratch_folder
    with scratch_folder() as scratch:
        paths = [as_database(p, scratch, name) for p, name in ((a, "a"), (b, "b"))]
        con = duck_connect()
        try:
            for path, name in zip(paths, ("a", "b")):
                try:
                    con.execute(f"ATTACH {sql_string(path)} AS {name} (READ_ONLY)")
                except duckdb.Error as e:
                    raise InputError(path, f"not a readable DuckDB database ({one_line(e, 160)})") from None
                db_format.check(con, path, catalog=name)
            pairs = list(pairs) if pairs else _pairs(con, step_a, step_b)  # `pairs`: the matched steps, chosen
            con.execute("CREATE TEMP TABLE pairs (step_a INTEGER, step_b INTEGER)")
            con.executemany("INSERT INTO pairs VALUES (?, ?)", pairs)
            comparability, warnings = _comparability(con)
            from .job_name import read as job_name
            names = (job_name(con, "a"), job_name(con, "b"))
            tables = {}
            for name in COMPARISONS:
                con.execute(sqlmodules.text("diff", name))
                tables[name] = pl.from_arrow(relation(con, f"SELECT * FROM diff_{name}").to_arrow_table())
        finally:
            con.close()
    assert isinstance(tables["steps"], pl.DataFrame)
    if names[0] == names[1]:  # two runs read from folders of one name: the paths as given tell them apart
        names = (str(a), str(b))
    d = Diff(a=str(a), b=str(b), pairs=pairs, comparability=comparability, warnings=warnings, sentences=[],
             tables=tables, names=names)  # type: ignore[arg-type]
    d.sentences = _sentences(d)
    return d


def as_database(path: str, scratch: Path, name: str) -> str:
    """A database as it is; trace files (a file, or a folder of them) ingested into `scratch`."""
    if not os.path.exists(path):
        raise InputError(path, "no such file or folder")
    from .outputs import is_duckdb_file
    if os.path.isfile(path) and is_duckdb_file(path):
        return path
    from .pipeline import ingest  # the database only: no Job needed
    out = str(Path(scratch) / f"{name}.duckdb")
    ingest([path], out)
    return out


def _steps(con, run: str) -> list[int]:
    return [r[0] for r in con.execute(f"SELECT DISTINCT step FROM {run}.tf_internal.step_windows ORDER BY step").fetchall()]


def _pairs(con, step_a: int | None, step_b: int | None) -> list[tuple[int, int]]:
    sa, sb = _steps(con, "a"), _steps(con, "b")
    if not sa or not sb:
        raise UsageError("nothing to compare: " + ("run a" if not sa else "run b") + " has no steps")
    for step, steps, flag in ((step_a, sa, "--step-a"), (step_b, sb, "--step-b")):
        if step is not None and step not in steps:
            raise UsageError(f"{flag} {step}: that run has steps {', '.join(map(str, steps))}")
    if step_a is not None or step_b is not None:
        return [(step_a if step_a is not None else statistics.median_low(sa),
                 step_b if step_b is not None else statistics.median_low(sb))]
    common = sorted(set(sa) & set(sb))
    if common:
        return [(s, s) for s in common]
    return [(statistics.median_low(sa), statistics.median_low(sb))]


def _comparability(con) -> tuple[list[dict], list[str]]:
    """What differs between the runs, before any figure; warnings where they should not be compared."""
    def both(sql: str) -> tuple:
        return tuple(con.execute(sql.format(run=run)).fetchone()[0] for run in ("a", "b"))
    rows = {
        "ranks": both("SELECT count(DISTINCT rank) FROM {run}.traces"),
        "devices": both("SELECT string_agg(DISTINCT coalesce(device_name, '?'), ', ' ORDER BY coalesce(device_name, '?')) FROM {run}.traces"),
        "profiler": both("SELECT string_agg(DISTINCT source_format || coalesce(' ' || profiler_version, ''), ', ') FROM {run}.traces"),
        "steps": both("SELECT string_agg(DISTINCT step::VARCHAR, ', ' ORDER BY step::VARCHAR) FROM {run}.tf_internal.step_windows"),
        "critical path": both("SELECT count(*) > 0 FROM {run}.critical_path"),
        "collectives": both("SELECT count(*) > 0 FROM {run}.collective_waits"),
        "launch calls": both("SELECT count(*) > 0 FROM {run}.launch_overhead"),
        # the model's structure: compute kernels a rank runs per step (median over rank and step)
        "kernels per rank and step": both("""SELECT median(n) FROM (SELECT count(*) AS n FROM {run}.gpu_ops
                                             WHERE kind = 'kernel' AND collective IS NULL AND step IS NOT NULL
                                             GROUP BY rank, step)"""),
        "shared GPU": both("""SELECT count(*) > 0 FROM (SELECT coalesce(gpu_uuid, hostname || ':' || device, ':' || device)
                              FROM {run}.gpu_devices GROUP BY 1 HAVING count(DISTINCT rank) > 1)"""),
    }
    out = [{"what": k, "a": _text(v[0]), "b": _text(v[1]), "same": v[0] == v[1]} for k, v in rows.items()]
    warnings = []
    if rows["ranks"][0] != rows["ranks"][1]:
        warnings.append(f"not comparable as one job: run a has {rows['ranks'][0]} ranks, run b {rows['ranks'][1]}: "
                        "per-rank rows cover the ranks both have; job rows compare different jobs "
                        "(`traceflow scaling` is for runs at different rank counts)")
    if rows["devices"][0] != rows["devices"][1]:
        warnings.append(f"the runs used different GPUs ({rows['devices'][0]} vs {rows['devices'][1]}): "
                        "kernel times are not comparable one for one")
    if rows["profiler"][0] != rows["profiler"][1]:
        warnings.append(f"the runs were recorded by different profilers ({rows['profiler'][0]} vs {rows['profiler'][1]}): "
                        "their overheads and what they record differ")
    ka, kb = rows["kernels per rank and step"]
    if ka and kb and not 0.8 <= kb / ka <= 1.25:
        warnings.append(f"NOT ONE MODEL: each rank runs {ka:.0f} compute kernels per step in run a and {kb:.0f} in run b: "
                        "the runs do different work, and their difference is not a regression of one job")
    if rows["shared GPU"][0] != rows["shared GPU"][1]:
        warnings.append(f"ranks share a GPU in run {'a' if rows['shared GPU'][0] else 'b'} only: its kernels are "
                        "time-sliced, so kernel times and exposed communication are not comparable one for one")
    for what in ("critical path", "collectives", "launch calls"):
        if rows[what][0] != rows[what][1]:
            warnings.append(f"only run {'a' if rows[what][0] else 'b'} has data for the {what}: its comparison is one-sided")
    return out, warnings


def _text(v) -> str:
    """A comparability figure as a person reads it: `yes` / `no`, not Python's `True`; a count that
    DuckDB's median made a double, `168`, not `168.0`."""
    from .text import decimal_text
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{int(v):,}" if v.is_integer() else decimal_text(v)
    return "none" if v is None else str(v)


def _ms(ns: float) -> str:
    return f"{ns / 1e6:+.1f} ms"


def _sentences(d: Diff) -> list[str]:
    """Per matched step pair: the change in step time and the critical path's kinds that made it."""
    steps, path = d.tables["steps"], d.tables["critical_path"]
    out = []
    for step_a, step_b in d.pairs:
        wall = steps.filter((steps["step_a"] == step_a) & (steps["rank"].is_null()) & (steps["metric"] == "wall"))
        if wall.is_empty():
            continue
        w = wall.row(0, named=True)
        label = f"step {step_a}" if step_a == step_b else f"step {step_a} → {step_b}"
        if w["noise"]:
            out.append(f"{label}: {w['a_ns'] / 1e6:.1f} → {w['b_ns'] / 1e6:.1f} ms, no change beyond the runs' own "
                       f"step-to-step variation (±{w['noise_ns'] / 1e6:.1f} ms).")
            continue
        p = path.filter((path["step_a"] == step_a) & (path["step_b"] == step_b) & (path["delta_ns"] != 0))
        top = p.head(3).iter_rows(named=True)
        parts = [f"{_ms(r['delta_ns'])} of {r['kind'].replace('_', ' ')} on rank {r['rank']}" for r in top]
        out.append(f"{label}: step time {w['a_ns'] / 1e6:.1f} → {w['b_ns'] / 1e6:.1f} ms ({_ms(w['delta_ns'])}, "
                   f"noise ±{w['noise_ns'] / 1e6:.1f} ms)" + (": " + ", ".join(parts) if parts else "") + ".")
    return out
