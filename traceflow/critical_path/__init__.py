"""Critical path per step across ranks: a backward walk over the graph of queries/cp_graph.sql.

The walk (walk.py) starts at the step's last GPU op end (across ranks) and goes back, always to
the predecessor that finished last, until the step's start; each move emits a segment, so the
segments tile [step start, step end] exactly. Kinds (segments.py):
  gpu_compute, gpu_comm, gpu_memory   a GPU op was running
  launch                              between a launch call's start and its op's start
  host_cpu                            the host thread was busy (or in an OS call, e.g. a sleep)
  host_sync                           the host was blocked in a synchronize / blocking copy
  peer_wait                           a rank waited inside a collective for a peer whose trace is missing
  idle                                nothing explains the time (a queued op that started late)

Layout: graph.py loads the graph into arrays, walk.py walks one step, segments.py merges and
writes the segments; this module runs them step by step in bounded memory. Python only walks;
the graph, the naming of host segments and the summaries are SQL.
"""
from __future__ import annotations

import numpy as np

from ..duck import relation
from .graph import RANKS_ONE_BY_ONE, Graph
from .segments import KINDS, Writer
from .walk import SCALAR_HOST_CALLS, Position, State, Walk

__all__ = ["KINDS", "Graph", "Position", "State", "Walk", "walk"]

HOST_CALLS_PER_BATCH = 4_000_000  # ~30 bytes each in arrays: more calls than this load a few steps at a time


def walk(con, *, host_calls_per_batch: int = HOST_CALLS_PER_BATCH, scalar_host_calls: int = SCALAR_HOST_CALLS,
         ranks_one_by_one: int = RANKS_ONE_BY_ONE) -> list[list[int]]:
    """Walk every step of the graph (queries/cp_graph.sql) into tf_internal.critical_path_raw;
    returns the batches of steps (indexes in step order) whose host calls were loaded together."""
    # per step: where it starts across ranks, and the op that ends last (the walk starts there)
    extents = con.execute("""
        SELECT w.step, w.t0, l.last[1], l.last[2], l.last[3] FROM
            (SELECT step, min(start_ns) AS t0 FROM step_windows GROUP BY step) w
        JOIN (SELECT step, arg_max([op_id, end_ns, rank], (end_ns, -op_id)) AS last FROM gpu_ops
              WHERE step IS NOT NULL GROUP BY step) l
        USING (step) ORDER BY w.step""").fetchall()
    writer = Writer(con)
    batches: list[list[int]] = []
    if extents:
        graph = Graph.from_db(con)
        graph.ranks_one_by_one = ranks_one_by_one
        windows = [(int(step), int(t0), int(end)) for step, t0, _, end, _ in extents]
        batches = step_batches(con, windows, host_calls_per_batch)
        for batch in batches:
            if len(batches) == 1:
                graph.window()
            else:
                graph.window(min(windows[i][1] for i in batch), max(windows[i][2] for i in batch))
            for i in batch:
                step, t0, last_op, _, rank = extents[i]
                graph.ensure(int(rank))
                last = int(graph.position(np.array([last_op], dtype=np.int64))[0])
                writer.add(int(step), Walk(graph, int(t0), scalar_host_calls).run(last))
        del graph
    writer.flush()
    return batches


def step_batches(con, windows, budget: int) -> list[list[int]]:
    """Consecutive steps grouped so that the host calls reaching into each group's time window
    number about `budget` (by a histogram of call starts over the windows' edges)."""
    total = con.execute("SELECT count(*) FROM cp_host_nodes").fetchone()[0]
    if total <= budget:
        return [list(range(len(windows)))]
    edges = np.unique(np.array([t for _, lo, hi in windows for t in (lo, hi)], dtype=np.int64))
    counts = np.zeros(len(edges) + 1, dtype=np.int64)
    for batch in relation(con, "SELECT start_ns FROM cp_host_nodes").to_arrow_reader(1 << 20):
        counts += np.bincount(np.searchsorted(edges, batch.column(0).to_numpy(), side="right"), minlength=len(edges) + 1)
    before = np.concatenate([[0], np.cumsum(counts)])  # before[k + 1]: calls starting before edges[k]

    def calls(lo, hi):  # starting in [lo, hi); the few that start earlier and reach in are not counted
        return int(before[np.searchsorted(edges, hi) + 1] - before[np.searchsorted(edges, lo) + 1])

    out: list = []
    lo = hi = None
    for i, (_, a, b) in enumerate(windows):
        if out and calls(min(lo, a), max(hi, b)) <= budget:
            out[-1].append(i)
            lo, hi = min(lo, a), max(hi, b)
        else:
            out.append([i])
            lo, hi = a, b
    return out
