"""The step graph as arrays, indexed by position (not op_id): GPU ops with their predecessors
(queries/cp_graph.sql) and the outermost host calls of each thread.

Built from a database (`Graph.from_db`, then `window` and `ensure`), or from plain arrays
(`Graph(...)`, `set_host_calls`), which is how the unit tests build small graphs by hand.

Size: the arrays, and the loading of a rank into them on demand, kept together: loading appends to
every array at once and must keep positions stable, which is easiest to check in one place."""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from ..duck import relation

# cp_host_nodes.role as a code: 0 other, 1 sync, 2 launch
ROLE_CODES = {"other": 0, "sync": 1, "launch": 2}
# the columns of a batch of host calls, in the order (rank, tid, start_ns, end_ns DESC, node_op_id)
HOST_COLUMNS = ("rank", "tid", "start_ns", "end_ns", "node_op_id", "role", "waited")
NONE = -1  # no op, no thread, no launch call

Thread = tuple[int, int]  # (rank, tid)
RANKS_ONE_BY_ONE = 8  # a graph from the database loads this many ranks one at a time, then the rest together


def _ints(values) -> str:
    return ", ".join(str(int(v)) for v in values)


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
    """GPU ops and host calls (by thread, then time), indexed by position.

    GPU op arrays, by position: op_id, rank, start, end; category (0 compute, 1 comm, 2 memory);
    api / ltid: the start and thread of the launch call, -1 when the trace has none;
    stream_prev / dep: positions of the op before it on its stream and of a cross-stream
    dependency (-1: none); grp: the matched collective it belongs to across ranks (-1: none).

    Built from arrays (`Graph(...)`, sorted by op_id: position = rank in op_id order), or from a
    database (`from_db`), where a rank is loaded when the walk first stands on it (`ensure`): a
    step's path visits a few ranks of hundreds (2 of 256 on bench/cluster.py's job, whose ops
    and host calls took 2.3 s and 1.3 s to load whole). Until then only the rank's collectives are
    known (start, end, group), from the cross-rank table `collective_waits`. Loading appends, so
    positions never change.
    """

    def __init__(self, op_id, rank, start, end, category, api, ltid, stream_prev_id, dep_id, grp):
        op_id = i64(op_id)
        if len(op_id) > 1 and not (np.diff(op_id) > 0).all():
            raise ValueError("GPU ops must be sorted by op_id, each once")
        self._con: Any = None  # a database to load ranks from; None: everything was given
        self._ops_ranks: set[int] = set()  # ranks whose GPU ops are loaded
        self._host_ranks: set[int] = set()  # ... and host calls, in the window
        self._window: tuple[int, int] | None = None
        self._all_ranks: list[int] | None = None
        self.ranks_one_by_one = RANKS_ONE_BY_ONE
        self.op_id, self.rank, self.start, self.end = op_id, i64(rank), i64(start), i64(end)
        self.category, self.api, self.ltid = i64(category), i64(api), i64(ltid)
        self._index()
        self.stream_prev, self.dep = self.position(i64(stream_prev_id)), self.position(i64(dep_id))
        self._groups(i64(grp))
        self.loaded_from = np.iinfo(np.int64).min
        self.first_end: dict[Thread, int] = {}
        self.set_host_calls({c: np.empty(0, dtype=np.int64) for c in HOST_COLUMNS})

    def _index(self):
        self._order = np.argsort(self.op_id, kind="stable")
        self._sorted_ids = self.op_id[self._order]

    def _groups(self, grp: np.ndarray):
        self.grp = grp
        order = np.argsort(grp, kind="stable")
        bounds = run_bounds(grp[order])
        # per collective group: its members' positions
        self.group_members = {int(grp[order[a]]): order[a:b] for a, b in zip(bounds[:-1], bounds[1:])
                              if grp[order[a]] >= 0}

    @classmethod
    def from_db(cls, con) -> Graph:
        """The matched collectives of every rank; the rest of a rank when `ensure` asks for it."""
        # the collectives matched across ranks as the claims match them (queries/collective_waits.sql:
        # on two ranks or more; no point-to-point pair whose kernels never ran at one moment - HTA's
        # trace_filter pair, 6 of 10 SendRecv pairs by order; no unnamed communicator of a rank with
        # several), so no cross-rank edge stands where no cross-rank claim does
        c = con.execute("""
            SELECT op_id, rank, start_ns, end_ns, dense_rank() OVER (ORDER BY comm, step, seq) AS grp FROM collective_waits
            ORDER BY op_id""").fetchnumpy()
        n = len(c["op_id"])
        none = np.full(n, NONE, dtype=np.int64)
        g = cls(c["op_id"], c["rank"], c["start_ns"], c["end_ns"], np.ones(n, dtype=np.int64), none, none,
                none, none, c["grp"])
        g._con = con
        return g

    @property
    def loaded_ranks(self) -> list[int]:
        """The ranks whose GPU ops are loaded (a graph given whole: none loaded, all there)."""
        return sorted(self._ops_ranks)

    def ensure(self, rank: int) -> None:
        """Rank `rank`'s GPU ops and (in the window) host calls are loaded. Ranks load one by one
        while few are visited; past RANKS_ONE_BY_ONE, all the others at once: over a 256-rank
        cluster job's shards one rank's queries took 0.1-0.3 s and all ranks' 3.6 s."""
        if self._con is None or rank in self._host_ranks:
            return
        ranks = [rank]
        if len(self._host_ranks) >= self.ranks_one_by_one:
            if self._all_ranks is None:
                self._all_ranks = [int(r) for (r,) in self._con.execute("SELECT DISTINCT rank FROM traces ORDER BY rank").fetchall()]
            ranks = sorted({rank, *(r for r in self._all_ranks if r not in self._host_ranks)})
        if todo := [r for r in ranks if r not in self._ops_ranks]:
            self._load_ops(todo)
        self._load_host(ranks)

    def _load_ops(self, ranks: list[int]) -> None:
        g = self._con.execute(f"""
            SELECT g.op_id, g.rank, g.start_ns, g.end_ns,
                   CASE g.category WHEN 'communication' THEN 1 WHEN 'memory' THEN 2 ELSE 0 END AS category,
                   -- a page migration outside every kernel serves the host's touch of managed memory
                   -- (cp_graph.sql): launched, as it were, by that thread when it began
                   coalesce(g.api_start_ns, CASE WHEN p.host_tid IS NOT NULL THEN g.start_ns END, -1) AS api,
                   coalesce(g.launch_tid, p.host_tid, -1) AS ltid,
                   coalesce(p.stream_prev, -1) AS stream_prev, coalesce(p.dep_op_id, -1) AS dep
            FROM gpu_ops g JOIN cp_gpu_preds p USING (op_id) WHERE g.rank IN ({_ints(ranks)}) ORDER BY g.op_id""").fetchnumpy()
        self._ops_ranks.update(ranks)
        ids = i64(g["op_id"])
        known = self.position(ids)  # their collectives, loaded as such
        new = known < 0
        n0, k = len(self.op_id), int(new.sum())
        pos = known.copy()
        pos[new] = np.arange(n0, n0 + k)
        grow = lambda a, fill: np.concatenate([a, np.full(k, fill, dtype=np.int64)])  # noqa: E731
        self.op_id, self.rank, self.grp = grow(self.op_id, 0), grow(self.rank, 0), grow(self.grp, NONE)
        self.start, self.end, self.category = grow(self.start, 0), grow(self.end, 0), grow(self.category, 0)
        self.api, self.ltid = grow(self.api, NONE), grow(self.ltid, NONE)
        self.stream_prev, self.dep = grow(self.stream_prev, NONE), grow(self.dep, NONE)
        self.op_id[pos], self.rank[pos] = ids, i64(g["rank"])
        self.start[pos], self.end[pos], self.category[pos] = i64(g["start_ns"]), i64(g["end_ns"]), i64(g["category"])
        self.api[pos], self.ltid[pos] = i64(g["api"]), i64(g["ltid"])
        self._index()
        # predecessors are on the same rank: all loaded now
        self.stream_prev[pos], self.dep[pos] = self.position(i64(g["stream_prev"])), self.position(i64(g["dep"]))

    def window(self, lo: int | None = None, hi: int | None = None) -> None:
        """The host calls to load from here: those reaching into [lo, hi] (all without); the
        calls loaded for the previous window are dropped."""
        self._window = None if lo is None or hi is None else (int(lo), int(hi))
        self.loaded_from = np.iinfo(np.int64).min if self._window is None else self._window[0]
        self._host_ranks = set()
        self.first_end = {}
        self.set_host_calls({c: np.empty(0, dtype=np.int64) for c in HOST_COLUMNS})

    def _load_host(self, ranks: list[int]) -> None:
        """Ranks' host calls of cp_host_nodes in the window, streamed in batches: enough for the
        steps inside it, since a walk never leaves its step. A call left out before lo cannot
        enclose one kept, so the running max keeps the same calls."""
        con, where = self._con, f"WHERE rank IN ({_ints(ranks)})"
        silent: list[Thread] = []
        if self._window is not None:
            lo, hi = self._window
            # whether a thread had calls before the window decides how a walk ends there
            first = {(int(r), int(t)): int(e) for r, t, e in con.execute(
                f"SELECT rank, tid, min(end_ns) FROM cp_host_nodes {where} GROUP BY ALL").fetchall()}
            self.first_end.update(first)
            silent = list(first)
            where += f" AND end_ns >= {lo} AND start_ns <= {hi}"
        self._host_ranks.update(ranks)
        n = con.execute(f"SELECT count(*) FROM cp_host_nodes {where}").fetchone()[0]
        reader = relation(con, f"""
            SELECT rank::BIGINT AS rank, tid, start_ns, end_ns, node_op_id,
                   CASE role WHEN 'sync' THEN 1 WHEN 'launch' THEN 2 ELSE 0 END::TINYINT AS role,
                   coalesce(waited_op_id, -1) AS waited
            FROM cp_host_nodes {where} ORDER BY rank, tid, start_ns, end_ns DESC, node_op_id""").to_arrow_reader(1 << 20)
        self._add_host_calls(n, ({c: b.column(c).to_numpy() for c in HOST_COLUMNS} for b in reader), silent)

    def set_host_calls(self, calls: Mapping[str, Iterable[int]]) -> None:
        """Host calls from arrays (columns HOST_COLUMNS, `waited` an op_id or -1), in any order;
        they replace those loaded."""
        cols = {c: i64(calls[c]) for c in HOST_COLUMNS}
        order = np.lexsort((cols["node_op_id"], -cols["end_ns"], cols["start_ns"], cols["tid"], cols["rank"]))
        self.h_start, self.h_end, self.h_op = (np.empty(0, dtype=np.int64) for _ in range(3))
        self.h_role, self.h_waited = np.empty(0, dtype=np.int8), np.empty(0, dtype=np.int32)
        self.threads: dict[Thread, tuple[int, int]] = {key: (0, 0) for key in self.first_end}  # no call in the window
        self._add_host_calls(len(order), [{c: v[order] for c, v in cols.items()}], [])

    def _add_host_calls(self, n: int, batches: Iterable[Mapping[str, np.ndarray]], silent: list[Thread]) -> None:
        """Appends the outermost calls of each thread, disjoint and in time order, so that both start
        and end are sorted within a thread and a stretch of calls is a slice: a call is kept when it
        ends after every earlier call of its thread (a running max across batches). `silent`:
        threads known to have no call here."""
        # filled in place (tens of millions of calls: no second copy from concatenating batches); the
        # first load into a window takes these arrays as they are, a later rank's is appended
        h_start, h_end, h_op = (np.empty(n, dtype=np.int64) for _ in range(3))
        h_role, waited_ids = np.empty(n, dtype=np.int8), np.empty(n, dtype=np.int64)
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
            h_start[lo:k] = np.maximum(start[keep], enclosing[keep])
            h_end[lo:k], h_op[lo:k], h_role[lo:k], waited_ids[lo:k] = end[keep], op[keep], role[keep], waited[keep]
        base = len(self.h_start)
        append = (lambda old, new: np.concatenate([old, new]) if len(old) else new)  # noqa: E731
        self.h_start, self.h_end = append(self.h_start, h_start[:k]), append(self.h_end, h_end[:k])
        self.h_op, self.h_role = append(self.h_op, h_op[:k]), append(self.h_role, h_role[:k])
        self.h_waited = append(self.h_waited, self.position(waited_ids[:k]).astype(np.int32))
        del waited_ids, h_start, h_end, h_op, h_role
        self.threads.update({key: (base, base) for key in silent})
        self.threads.update({(r, t): (base + a, base + b) for r, t, a, b in runs})

    def has_earlier_calls(self, key: Thread) -> bool:
        """The thread has calls before the loaded ones (left out of this window)."""
        return self.first_end.get(key, self.loaded_from) < self.loaded_from

    def position(self, op_ids: np.ndarray) -> np.ndarray:
        """op_id -> position; -1 (and an op_id not in the graph) stays -1."""
        ids = self._sorted_ids
        k = np.clip(np.searchsorted(ids, op_ids), 0, max(len(ids) - 1, 0))
        ok = (op_ids >= 0) & (len(ids) > 0)
        if len(ids):
            ok &= ids[k] == op_ids
            return np.where(ok, self._order[k], -1)
        return np.full(len(op_ids), -1, dtype=np.int64)
