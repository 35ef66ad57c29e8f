"""`traceflow scaling`: how one model's step time scales with its rank count, from runs at several.

    s = traceflow.scaling(["r4.duckdb", "r8.duckdb", "r16.duckdb"], mode="strong")
    s.table        # one row per run: step time, speedup, efficiency, Karp–Flatt serial fraction, comm share
    s.sentences

Each database is attached to an in-memory DuckDB; queries/scaling/run_summary.sql reduces each run to
one row, queries/scaling/scaling.sql computes the figures (definitions beside them there).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import db_format, sqlmodules
from .duck import connect as duck_connect
from .duck import relation, sql_string
from .errors import InputError, UsageError, one_line
from .views import ScalingView

if TYPE_CHECKING:
    import polars as pl


@dataclass
class Scaling(ScalingView):
    """Runs at several rank counts compared (the fields: views.ScalingView, what the page draws from) and its verbs."""

    def to_json(self) -> dict:
        return {"mode": self.mode, "warnings": self.warnings, "sentences": self.sentences, "runs": self.table.to_dicts()}

    def write_html(self, output: str = "scaling.html", force: bool = False) -> str:
        from .pages.scaling_page import write
        return write(self, output, force=force)


def scaling(paths: list[str], mode: str = "strong") -> Scaling:
    """Runs of one model at different rank counts (traceflow databases, or trace folders, ingested
    first). mode: 'strong' (the same global batch) or 'weak' (the same batch per rank)."""
    import duckdb
    import polars as pl

    from .compare import as_database
    from .outputs import scratch_folder
    if mode not in ("strong", "weak"):
        raise UsageError(f"--mode must be strong or weak, not {mode!r}")
    if len(paths) < 2:
        raise UsageError("scaling needs at least two runs")
    with scratch_folder() as scratch:
        dbs = [as_database(p, scratch, f"run{i}") for i, p in enumerate(paths)]
        con = duck_connect()
        try:
            con.execute("""CREATE TEMP TABLE runs (run INTEGER, path VARCHAR, ranks INTEGER, steps INTEGER, step_ns BIGINT,
                           compute_ns BIGINT, exposed_comm_ns BIGINT, idle_ns BIGINT, wait_ns BIGINT,
                           kernels_per_step DOUBLE, flops_per_rank DOUBLE)""")
            con.execute("CREATE TEMP TABLE mix (run INTEGER, kernel VARCHAR, share DOUBLE)")
            summary = sqlmodules.text("scaling", "run_summary")
            for i, (db, path) in enumerate(zip(dbs, paths)):
                try:
                    con.execute(f"ATTACH {sql_string(db)} AS r{i} (READ_ONLY)")
                except duckdb.Error as e:
                    raise InputError(db, f"not a readable DuckDB database ({one_line(e, 160)})") from None
                db_format.check(con, db, catalog=f"r{i}")
                con.execute(f"USE r{i}")
                con.execute("SET VARIABLE tf_run = ?", [i])
                con.execute("SET VARIABLE tf_path = ?", [str(path)])
                con.execute(summary)
            con.execute("USE memory")
            con.execute("SET VARIABLE tf_mode = ?", [mode])
            con.execute(sqlmodules.text("scaling", "scaling"))
            table = pl.from_arrow(relation(con, "SELECT * FROM scaling").to_arrow_table())
            devices = con.execute(" UNION ".join(f"SELECT DISTINCT device_name FROM r{i}.traces" for i in range(len(dbs)))).fetchall()
        finally:
            con.close()
    assert isinstance(table, pl.DataFrame)
    warnings = _different_models(table)
    if len({r[0] for r in devices}) > 1:
        warnings.append("the runs used different GPUs (" + ", ".join(sorted(str(r[0]) for r in devices)) + "): "
                        "their step times do not measure scaling alone")
    if table["ranks"].n_unique() < table.height:
        warnings.append("two runs have the same rank count: each is compared with the base run on its own")
    return Scaling(mode=mode, table=table, warnings=warnings, sentences=_sentences(table, mode))


def _different_models(t: pl.DataFrame) -> list[str]:
    """Loud warnings for runs that do not look like the base run's model: scaling figures compare
    one workload on more ranks, and a different model's step time says nothing about that."""
    base = t.row(0, named=True)
    out = []
    for r in t.iter_rows(named=True):
        if r["same_model"] is False:
            why = []
            if r["kernels_rel"] is not None and not 0.8 <= r["kernels_rel"] <= 1.25:
                why.append(f"{r['kernels_rel']:.2f}× the compute kernels per rank and step")
            if r["mix_overlap_pct"] is not None and r["mix_overlap_pct"] < 60:
                why.append(f"only {r['mix_overlap_pct']:.0f}% of its kernel time in the base run's kernel mix")
            if r["flops_rel"] is not None and not 0.8 <= r["flops_rel"] <= 1.25:
                why.append(f"{r['flops_rel']:.2f}× the FLOPs per step")
            out.append(f"NOT ONE MODEL: the {r['ranks']}-rank run ({r['path']}) has {' and '.join(why)} of the "
                       f"{base['ranks']}-rank base run ({base['path']}): its speedup, efficiency and serial fraction "
                       "compare different work, not scaling")
    return out


def _sentences(t: pl.DataFrame, mode: str) -> list[str]:
    base = t.row(0, named=True)
    out = []
    for r in t.iter_rows(named=True):
        if r["karp_flatt"] is None:
            continue
        serial = (f"serial fraction (Karp–Flatt) {r['karp_flatt']:.3f}" if r["karp_flatt_valid"] else
              f"Karp–Flatt {r['karp_flatt']:.3f}, outside [0, 1] where it is a serial fraction ("
              + ("the step got slower with more ranks" if r["karp_flatt"] > 1 else "superlinear speedup") + ")")
        out.append(f"{r['ranks']} ranks ({mode} scaling from {base['ranks']}): step {r['step_ns'] / 1e6:.1f} ms, "
                   f"parallel efficiency {r['efficiency_pct']:.0f}%, {serial}; "
                   f"exposed communication {r['exposed_comm_pct']:.0f}% of the step (base {base['exposed_comm_pct']:.0f}%), "
                   f"waits for peers {r['wait_pct']:.0f}% (base {base['wait_pct']:.0f}%).")
    rows = [r for r in t.iter_rows(named=True) if r["karp_flatt"] is not None]
    kfs = [r["karp_flatt"] for r in rows if r["karp_flatt_valid"]]
    if rows and mode == "strong" and all(r["speedup"] <= 1.05 for r in rows):
        out.append("More ranks did not shorten the step (speedup at most "
                   f"{max(r['speedup'] for r in rows):.2f}): if each rank kept its own batch, this is weak scaling "
                   "(--mode weak).")
    elif len(kfs) >= 2:
        trend = "grows" if kfs[-1] > kfs[0] * 1.1 else "shrinks" if kfs[-1] < kfs[0] * 0.9 else "stays flat"
        out.append(f"The serial fraction {trend} with the rank count ({kfs[0]:.3f} → {kfs[-1]:.3f}): "
                   + ("overhead that grows with ranks (communication, stragglers), not a fixed serial part."
                      if trend == "grows" else "a fixed serial part, as Amdahl's law assumes."
                      if trend == "stays flat" else "superlinear effects (caches, smaller per-rank work)."))
    return out
