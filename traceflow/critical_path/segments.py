"""Segments of the path: their kinds, the merging of a thread's host time, and the writer of
tf_internal.critical_path_raw (queries/critical_path.sql names and summarises them)."""
from __future__ import annotations

import numpy as np

from .. import sqlmodules

# Segment kinds by code: the walk keeps codes and ids, SQL names them.
KINDS = ("gpu_compute", "gpu_comm", "gpu_memory", "launch", "host_cpu", "host_sync", "peer_wait", "idle")
GPU_COMPUTE, GPU_COMM, GPU_MEMORY, LAUNCH, HOST_CPU, HOST_SYNC, PEER_WAIT, IDLE = range(len(KINDS))
HOST_KIND_BY_ROLE = np.array([HOST_CPU, HOST_SYNC, LAUNCH])  # by host call role code: other, sync, launch
RAW_COLUMNS = ("rank", "kind", "start_ns", "end_ns", "tid", "op_id")  # -1: none
FLUSH_ROWS = 1 << 20  # segments held before an insert (~50 MB)


def merge_host_runs(segs: np.ndarray) -> np.ndarray:
    """Adjacent host_cpu segments of one thread become one; it keeps the id of its longest call
    when calls fill most of it (so SQL names it after that call), else no id (SQL then names it
    by what the thread was doing at its midpoint). A polling loop is one segment, not millions."""
    if len(segs) < 2:
        return segs
    rank, kind, start, end, tid, op = segs.T
    cpu = kind == HOST_CPU
    joins = np.zeros(len(segs), dtype=bool)
    joins[1:] = cpu[1:] & cpu[:-1] & (rank[1:] == rank[:-1]) & (tid[1:] == tid[:-1]) & (start[1:] == end[:-1])
    if not joins.any():
        return segs
    run = np.cumsum(~joins) - 1
    heads = np.flatnonzero(~joins)
    dur = end - start
    call_dur = np.where(op >= 0, dur, 0)
    call_sum = np.bincount(run, weights=call_dur)
    total = np.bincount(run, weights=dur)
    # the longest call of each run: sort by (run, call duration), take each run's last
    order = np.lexsort((call_dur, run))
    last_of_run = np.append(np.flatnonzero(np.diff(run[order])), len(order) - 1)
    longest = op[order[last_of_run]]
    out = segs[heads].copy()
    out[:, 3] = np.maximum.reduceat(end, heads)
    cpu_runs = out[:, 1] == HOST_CPU
    out[cpu_runs, 5] = np.where(call_sum * 2 < total, -1, longest)[cpu_runs]
    return out


DECLARED = sqlmodules.declared("""
-- @table critical_path_raw: the walk's segments of each step's critical path, in order (queries/critical_path.sql
--     names and summarises them)
-- @column step INTEGER key the step
-- @column ordinal INTEGER key the segment's place on the step's path, from its start
-- @column rank INTEGER rank the rank the segment lies on
-- @column kind VARCHAR text what the path is doing: gpu_compute | gpu_comm | gpu_memory | launch | host_cpu |
--     host_sync | peer_wait | idle
-- @column start_ns BIGINT time the segment's start
-- @column end_ns BIGINT time the segment's end
-- @column tid BIGINT key the host thread (host segments)
-- @column op_id BIGINT key the op of gpu_ops or host_ops the segment lies in, by its kind (NULL: none)
""", __file__)


class Writer:
    """Segments into tf_internal.critical_path_raw in bounded batches."""

    def __init__(self, con):
        self.con, self.parts, self.n = con, [], 0
        con.execute(sqlmodules.create_table("critical_path_raw", DECLARED["critical_path_raw"], "tf_internal"))

    def add(self, step: int, segs: np.ndarray):
        self.parts.append((step, segs))
        self.n += len(segs)
        if self.n >= FLUSH_ROWS:
            self.flush()

    def flush(self):
        if not self.parts:
            return
        import pyarrow as pa
        segs = np.concatenate([s for _, s in self.parts])
        step = np.concatenate([np.full(len(s), st, dtype=np.int32) for st, s in self.parts])
        ordinal = np.concatenate([np.arange(len(s), dtype=np.int32) for _, s in self.parts])
        cols = {"step": step, "ordinal": ordinal}
        cols.update({c: segs[:, n] for n, c in enumerate(RAW_COLUMNS)})
        cp_rows = pa.table(cols)  # read by replacement scan, never con.register: see pipeline._load
        self.con.execute("""INSERT INTO critical_path_raw SELECT step, ordinal, rank, (?::VARCHAR[])[kind + 1],
                            start_ns, end_ns, nullif(tid, -1), nullif(op_id, -1) FROM cp_rows""", [list(KINDS)])
        del cp_rows
        self.parts, self.n = [], 0
