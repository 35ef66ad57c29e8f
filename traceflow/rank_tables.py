"""The per-rank tables and their keys, shared by the ingest's load, the runner (graph.py), a cluster's
per-rank task (rank_task.py) and the views over its shards (shard_views.py): which tables a worker
shards (which steps a worker runs is their scope, graph.py), their time columns (clock alignment moves them), their id columns (numbered per trace) and
the id ranges. It imports nothing at import time (the declarations are read on first use of
SHARDED / TIMES / IDS), so every layer may import it.
"""
from __future__ import annotations

from functools import cache

# host_ops ids: a range of their own per trace (gpu_ops ids stay below HOST_OP_ID_BASE)
HOST_OP_ID_BASE = 10**12
HOST_OP_IDS_PER_TRACE = 10**10
SHARD_BITS = 20  # processes per file, at most (nsys exports hold one per process of the run)
# The per-rank tables and their keys follow from the declarations (sqlmodules.module's `-- scope:`
# and column roles; schema.declared() for the loaded tables), computed on first use:
#   SHARDED  table -> (its schema, the column that says whose rows: 'rank', 'trace_id', or 'op_id'
#            where the table has neither, its rows the GPU ops' own)
#   TIMES    table -> its columns of role `time` (ns since the epoch on the rank's clock): the views add
#            the rank's clock offset (a column of role `time:unaligned`, a memory snapshot's history,
#            stays on its own clock on both roads: the views leave it as the local shift does)
#   IDS      table -> {column: "gpu_op_base" | "host_op_base"} for the columns of role id:gpu_ops /
#            id:host_ops (stored from 1 within the process; the views add the base of the trace's ops)


def __getattr__(name: str):
    if name in ("TIMES", "IDS", "SHARDED"):
        times, ids, sharded = _declared()
        return {"TIMES": times, "IDS": ids, "SHARDED": sharded}[name]
    raise AttributeError(name)


@cache
def _declared() -> tuple[dict, dict, dict]:
    """(TIMES, IDS, SHARDED) as the declarations give them (sqlmodules.module's `-- scope:` and column
    roles, schema.declared for the loaded tables): the per-rank tables are the loaded per-rank ones
    and the tables (not views) a scope-rank module creates whose rows say whose they are (a rank, a
    trace or, lacking both, a GPU op's id); their times are the columns of role `time`, their ids
    those of role `id:gpu_ops` / `id:host_ops`. tests/test_sql_modules.py holds them equal to the
    lists they replace (main at e07745c)."""
    from . import schema, sqlmodules
    tables: dict[str, tuple[str, sqlmodules.TableDecl]] = {t: ("main", d) for t, d in schema.declared().items()
                                                               if t in schema.PER_RANK}
    for group in ("derive", "queries"):
        for mod in sqlmodules.modules(group):
            if mod.scope != "rank":
                continue
            made = sqlmodules.created(sqlmodules.text(group, mod.name))
            for t, decl in mod.tables.items():
                sch, kind = made[t]
                if kind == "view":
                    continue  # a view is made again over the shards
                tables[t] = (sch, decl)
    times: dict[str, tuple[str, ...]] = {}
    ids: dict[str, dict[str, str]] = {}
    sharded: dict[str, tuple[str, str]] = {}
    for t, (sch, decl) in tables.items():
        cols = decl.columns
        loaded = t in schema.PER_RANK
        whose = [c.name for c in cols if c.role == ("trace" if loaded else "rank")] or \
                [c.name for c in cols if c.role == "trace"] or [c.name for c in cols if c.role.startswith("id:")]
        if not whose:
            continue  # a table of definitions (comm_kernels, op_classes): the client makes it too
        sharded[t] = (sch, whose[0])
        if tm := decl.roles("time"):
            times[t] = tm
        if idc := {c.name: c.role[3:-4] + "_op_base" for c in cols if c.role.startswith("id:")}:
            ids[t] = idc
    return times, ids, sharded
