"""The step graph as arrays, indexed by position (not op_id): GPU ops with their predecessors
(queries/cp_graph.sql) and the outermost host calls of each thread.

Built from a database (`Graph.from_db`, `load_host_calls`) or from plain arrays (`Graph(...)`,
`set_host_calls`), which is how the unit tests build small graphs by hand."""
from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from ..duck import relation

# cp_host_nodes.role as a code: 0 other, 1 sync, 2 launch
ROLE_CODES = {"other": 0, "sync": 1, "launch": 2}
# the columns of a batch of host calls, in the order (rank, tid, start_ns, end_ns DESC, node_op_id)
HOST_COLUMNS = ("rank", "tid", "start_ns", "end_ns", "node_op_id", "role", "waited")
NONE = -1  # no op, no thread, no launch call

Thread = tuple[int, int]  # (rank, tid)


def i64(column) -> np.ndarray:
    return np.asarray(column, dtype=np.int64)


def run_bounds(*keys) -> np.ndarray:
    """Bounds of the runs of equal keys in arrays sorted by them: [0, ..., len]."""
    n = len(keys[0])
    if not n:
        return np.zeros(1, dtype=np.int64)
    change = np.zeros(n - 1, dtype=bool)
    for key in keys:
        change |= np.diff(key) != 0
    return np.concatenate([[0], np.flatnonzero(change) + 1, [n]])


class Graph:
    """GPU ops (sorted by op_id) and host calls (sorted by thread, then time).

    GPU op arrays, by position: op_id, rank, start, end; category (0 compute, 1 comm, 2 memory);
    api / ltid: the start and thread of the launch call, -1 when the trace has none;
    stream_prev / dep: positions of the op before it on its stream and of a cross-stream
    dependency (-1: none); grp: the matched collective it belongs to across ranks (-1: none).
    """

    def __init__(self, op_id, rank, start, end, category, api, ltid, stream_prev_id, dep_id, grp):
        self.op_id = i64(op_id)
        if len(self.op_id) > 1 and not (np.diff(self.op_id) > 0).all():
            raise ValueError("GPU ops must be sorted by op_id, each once")
        self.rank, self.start, self.end = i64(rank), i64(start), i64(end)
        self.category = i64(category)
        self.api, self.ltid = i64(api), i64(ltid)
        self.stream_prev, self.dep = self.position(i64(stream_prev_id)), self.position(i64(dep_id))
        self.grp = grp = i64(grp)
        order = np.argsort(grp, kind="stable")
        bounds = run_bounds(grp[order])
        # per collective group: its members' positions
        self.group_members = {int(grp[order[a]]): order[a:b] for a, b in zip(bounds[:-1], bounds[1:])
                              if grp[order[a]] >= 0}
        self.loaded_from = np.iinfo(np.int64).min
        self.first_end: dict[Thread, int] = {}
        self.set_host_calls({c: np.empty(0, dtype=np.int64) for c in HOST_COLUMNS})

    @classmethod
    def from_db(cls, con) -> Graph:
        g = con.execute("""
            SELECT g.op_id, g.rank, g.start_ns, g.end_ns,
                   CASE g.category WHEN 'communication' THEN 1 WHEN 'memory' THEN 2 ELSE 0 END AS category,
                   coalesce(g.api_start_ns, -1) AS api, coalesce(g.launch_tid, -1) AS ltid,
                   coalesce(p.stream_prev, -1) AS stream_prev, coalesce(p.dep_op_id, -1) AS dep, coalesce(c.grp, -1) AS grp
            FROM gpu_ops g JOIN cp_gpu_preds p USING (op_id)
            LEFT JOIN (SELECT op_id, dense_rank() OVER (ORDER BY comm, step, seq) AS grp FROM collectives
                       WHERE (comm, step, seq) IN (SELECT (comm, step, seq) FROM collectives GROUP BY ALL
                                                   HAVING count(DISTINCT rank) >= 2)) c USING (op_id)
            ORDER BY g.op_id""").fetchnumpy()
        return cls(g["op_id"], g["rank"], g["start_ns"], g["end_ns"], g["category"], g["api"], g["ltid"],
                   g["stream_prev"], g["dep"], g["grp"])

    def load_host_calls(self, con, lo: int | None = None, hi: int | None = None) -> None:
        """The host calls of cp_host_nodes, streamed in batches; with [lo, hi], only the calls that
        reach into it: enough for the steps inside it, since a walk never leaves its step. A call
        left out before lo cannot enclose one kept, so the running max keeps the same calls."""
        where = "" if lo is None or hi is None else f"WHERE end_ns >= {int(lo)} AND start_ns <= {int(hi)}"
        if lo is not None and not self.first_end:
            # whether a thread had calls before the window decides how a walk ends there
            self.first_end = {(int(r), int(t)): int(e) for r, t, e in con.execute(
                "SELECT rank, tid, min(end_ns) FROM cp_host_nodes GROUP BY ALL").fetchall()}
        self.loaded_from = np.iinfo(np.int64).min if lo is None else int(lo)
        self._free_host_calls()
        n = con.execute(f"SELECT count(*) FROM cp_host_nodes {where}").fetchone()[0]
        reader = relation(con, f"""
            SELECT rank::BIGINT AS rank, tid, start_ns, end_ns, node_op_id,
                   CASE role WHEN 'sync' THEN 1 WHEN 'launch' THEN 2 ELSE 0 END::TINYINT AS role,
                   coalesce(waited_op_id, -1) AS waited
            FROM cp_host_nodes {where} ORDER BY rank, tid, start_ns, end_ns DESC, node_op_id""").to_arrow_reader(1 << 20)
        self._take_host_calls(n, ({c: b.column(c).to_numpy() for c in HOST_COLUMNS} for b in reader))

    def set_host_calls(self, calls: Mapping[str, Iterable[int]]) -> None:
        """Host calls from arrays (columns HOST_COLUMNS, `waited` an op_id or -1), in any order."""
        cols = {c: i64(calls[c]) for c in HOST_COLUMNS}
        order = np.lexsort((cols["node_op_id"], -cols["end_ns"], cols["start_ns"], cols["tid"], cols["rank"]))
        self._free_host_calls()
        self._take_host_calls(len(order), [{c: v[order] for c, v in cols.items()}])

    def _free_host_calls(self):
        self.h_start = self.h_end = self.h_op = self.h_role = self.h_waited = None  # freed before the next batch

    def _take_host_calls(self, n: int, batches: Iterable[Mapping[str, np.ndarray]]) -> None:
        """Keep the outermost calls of each thread, disjoint and in time order, so that both start
        and end are sorted within a thread and a stretch of calls is a slice: a call is kept when it
        ends after every earlier call of its thread (a running max across batches)."""
        # filled in place (tens of millions of calls: no second copy from concatenating parts)
        self.h_start, self.h_end, self.h_op = (np.empty(n, dtype=np.int64) for _ in range(3))
        self.h_role, waited_ids = np.empty(n, dtype=np.int8), np.empty(n, dtype=np.int64)
        runs: list[list[int]] = []  # [rank, tid, first position, end position] per thread
        carry: tuple = (None, None, None)  # the last thread of the previous batch and its running max
        k = 0
        for batch in batches:
            rank, tid, start, end, op, role, waited = (batch[c] for c in HOST_COLUMNS)
            enclosing = np.empty(len(end), dtype=np.int64)
            bounds = run_bounds(rank, tid)
            for a, b in zip(bounds[:-1], bounds[1:]):
                run = np.maximum.accumulate(end[a:b])
                first = carry[2] if (rank[a], tid[a]) == carry[:2] else np.iinfo(np.int64).min
                enclosing[a] = first
                enclosing[a + 1:b] = np.maximum(run[:-1], first)
                carry = (rank[a], tid[a], max(int(run[-1]), first))
            keep = end > enclosing
            kept_per_thread: list[int] = np.add.reduceat(keep, bounds[:-1]).tolist() if len(keep) else []
            for a, kept in zip(bounds[:-1], kept_per_thread):
                thread = [int(rank[a]), int(tid[a])]
                if runs and runs[-1][:2] == thread:  # the thread goes on from the last batch
                    runs[-1][3] += kept
                else:
                    pos = runs[-1][3] if runs else 0
                    runs.append(thread + [pos, pos + kept])
            lo, k = k, k + int(np.count_nonzero(keep))
            self.h_start[lo:k] = np.maximum(start[keep], enclosing[keep])
            self.h_end[lo:k], self.h_op[lo:k], self.h_role[lo:k], waited_ids[lo:k] = end[keep], op[keep], role[keep], waited[keep]
        self.h_start, self.h_end, self.h_op, self.h_role = self.h_start[:k], self.h_end[:k], self.h_op[:k], self.h_role[:k]
        self.h_waited = self.position(waited_ids[:k]).astype(np.int32)
        del waited_ids
        self.threads: dict[Thread, tuple[int, int]] = {key: (0, 0) for key in self.first_end}  # no call in the window
        self.threads.update({(r, t): (a, b) for r, t, a, b in runs})

    def has_earlier_calls(self, key: Thread) -> bool:
        """The thread has calls before the loaded ones (left out of this window)."""
        return self.first_end.get(key, self.loaded_from) < self.loaded_from

    def position(self, op_ids: np.ndarray) -> np.ndarray:
        """op_id -> position; -1 (and an op_id not in the graph) stays -1."""
        pos = np.searchsorted(self.op_id, op_ids)
        pos = np.clip(pos, 0, max(len(self.op_id) - 1, 0))
        ok = (op_ids >= 0) & (len(self.op_id) > 0)
        if len(self.op_id):
            ok &= self.op_id[pos] == op_ids
        return np.where(ok, pos, -1)
