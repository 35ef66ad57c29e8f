"""The derive step: derived tables (derive/*.sql), CPU-clock reconciliation and clock alignment, device peaks.

The analyses (packs.py, queries/) run after it and read what it makes; it never calls them."""
from __future__ import annotations

import time

from .. import sqlmodules

ORDER = ["comm_kernels", "steps", "gpu_ops", "step_windows", "launches", "collectives"]  # host_ops get their ids while loading
# Each of these looks at one rank at a time (its rows, partitioned by rank or trace): a cluster's
# workers run them per rank file (traceflow/rank_task.py); the rest needs every rank.
PER_RANK = ("comm_kernels", "steps", "gpu_ops", "step_windows")
REFERENCE = ("comm_kernels",)  # tables of definitions, not of a rank's rows: the job's database holds them too
PUBLIC_TABLES = ("steps", "collectives", "launches")  # the others are helpers, or add columns to gpu_ops


def sql(name: str) -> str:
    return sqlmodules.text("derive", name)


def derived_tables() -> set[str]:
    """What the derive step makes (from its files' CREATE statements, and gpu_sharing.py's table)."""
    return set().union(*(sqlmodules.creates(sql(name)) for name in ORDER)) | {"gpu_sharing"}


def derive_tables(con, step_pattern: str | None = None, names=ORDER):
    con.execute("SET asof_loop_join_threshold = 0")  # DuckDB's ASOF join, never its nested-loop plan
    if step_pattern:
        con.execute("SET VARIABLE tf_step_pattern = ?", [step_pattern])
    from .. import comments
    docs: dict = {}
    for name in names:
        text = sql(name)
        con.execute(text)
        if name in PUBLIC_TABLES:
            docs.update(comments.docs_for(text, [name]))
    comments.apply_docs(con, docs)


def derive_all(con, align: str = "auto", step_pattern: str | None = None, timings=None, phase=None,
               peak_tflops: float | None = None, peak_gbps: float | None = None, per_rank_done: bool = False) -> list[str]:
    """Everything between loading and the analyses: returns warnings for the user. `phase(name)` is told as each part starts.
    `per_rank_done`: the tables are views over a cluster's shards (traceflow/shard_views.py), whose
    workers reconciled the CPU clocks and derived the PER_RANK tables; clock offsets then go into
    `traces` only, and the views add them."""
    from . import clock, host_clock
    timings = {} if timings is None else timings
    phase = phase or (lambda _: None)
    phase("deriving tables, aligning clocks")
    warnings: list[str] = []
    t0 = time.perf_counter()
    names = [n for n in ORDER if n not in PER_RANK or n in REFERENCE] if per_rank_done else ORDER
    from .. import invariants
    if not per_rank_done:
        warnings.extend(f"rank {r}: {text}" for r, text in invariants.drop_absurd(con))
        warnings.extend(host_clock.with_ranks(con, host_clock.reconcile(con)))
    derive_tables(con, step_pattern, names)
    if per_rank_done:  # the workers' tables are views here, documented all the same
        from .. import comments
        comments.apply_docs(con, {t: d for n in PER_RANK if n in PUBLIC_TABLES
                                  for t, d in comments.docs_for(sql(n), [n]).items()})
    from . import gpu_sharing
    gpu_sharing.detect(con)  # on the recorded times: ranks taking turns on one GPU share one clock
    if align != "off":
        notes, moved = clock.align(con, mode=align, shift_tables=not per_rank_done)
        warnings.extend(notes)
        if moved:
            derive_tables(con, step_pattern, names)
            gpu_sharing.detect(con)
    from .. import hardware
    warnings.extend(hardware.load_peaks(con, peak_tflops, peak_gbps))
    timings["derive"] = time.perf_counter() - t0
    return warnings
