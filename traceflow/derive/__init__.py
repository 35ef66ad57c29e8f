"""The derive step: derived tables (derive/*.sql), CPU-clock reconciliation and clock alignment.

The runner (traceflow/graph.py) runs these modules, in the order their declarations give, with the
analyses (queries/) after them; nothing here calls the analyses."""
from __future__ import annotations

from .. import sqlmodules

# The order tests/test_sql_modules.py checks the declarations in; the runner (graph.py) computes its own.
ORDER = ["comm_kernels", "steps", "gpu_ops", "step_windows", "launches", "collectives"]  # host_ops get their ids while loading


def sql(name: str) -> str:
    return sqlmodules.text("derive", name)


def derived_tables() -> set[str]:
    """What the derive step makes (from its files' CREATE statements, and gpu_sharing.py's table)."""
    return set().union(*(sqlmodules.creates(sql(name)) for name in sqlmodules.names("derive"))) | {"gpu_sharing"}
