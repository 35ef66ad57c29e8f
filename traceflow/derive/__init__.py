"""The cross-rank phase: derived tables, clock alignment, query packs, critical path."""
from __future__ import annotations

import time
from importlib import resources

ORDER = ["steps", "gpu_ops", "step_windows", "launches", "collectives"]  # host_ops get their ids while loading
PUBLIC_TABLES = ("steps", "collectives", "launches")  # the others are helpers, or add columns to gpu_ops


def sql(name: str) -> str:
    return resources.files(__package__).joinpath(f"{name}.sql").read_text()


def derived_tables() -> set[str]:
    """What the derive step makes (from its files' CREATE statements)."""
    from ..sqlmodules import creates
    return set().union(*(creates(sql(name)) for name in ORDER))


def derive_tables(con, step_pattern: str | None = None):
    con.execute("SET asof_loop_join_threshold = 0")  # DuckDB's ASOF join, never its nested-loop plan
    if step_pattern:
        con.execute("SET VARIABLE tf_step_pattern = ?", [step_pattern])
    from .. import comments
    docs: dict = {}
    for name in ORDER:
        text = sql(name)
        con.execute(text)
        if name in PUBLIC_TABLES:
            docs.update(comments.docs_for(text, [name]))
    comments.apply_docs(con, docs)


def derive_all(con, align: str = "auto", step_pattern: str | None = None, timings=None, phase=None,
               peak_tflops: float | None = None, peak_gbps: float | None = None) -> list[str]:
    """Everything after loading: returns warnings for the user. `phase(name)` is told as each part starts."""
    from . import clock, host_clock
    timings = {} if timings is None else timings
    phase = phase or (lambda _: None)
    phase("deriving tables, aligning clocks")
    warnings = []
    t0 = time.perf_counter()
    warnings.extend(host_clock.reconcile(con))
    derive_tables(con, step_pattern)
    if align != "off":
        notes, moved = clock.align(con, mode=align)
        warnings.extend(notes)
        if moved:
            derive_tables(con, step_pattern)
    from .. import hardware
    warnings.extend(hardware.load_peaks(con, peak_tflops, peak_gbps))
    timings["derive"] = time.perf_counter() - t0
    from .. import packs
    packs.compute_all(con, timings, phase)
    timings.pop("walk_batches", None)
    return warnings
