"""Critical path per step across ranks: a backward walk over the graph of queries/cp_graph.sql.

The walk starts at the step's last GPU op end (across ranks) and goes back, always to the
predecessor that finished last, until the step's start; each move emits a segment, so the
segments tile [step start, step end] exactly. Kinds:
  gpu_compute, gpu_comm, gpu_memory   a GPU op was running
  launch                              between a launch call's start and its op's start
  host_cpu                            the host thread was busy (or in an OS call, e.g. a sleep)
  host_sync                           the host was blocked in a synchronize / blocking copy
  peer_wait                           a rank waited inside a collective for a peer whose trace is missing
  idle                                nothing explains the time (a queued op that started late)

Where a GPU op waited for its launch, the host is charged only from the moment the GPU's own
predecessor finished: earlier host time overlapped queued GPU work and was not on the path.
At a collective's end the walk jumps to the rank that started it last (the others waited).
Python only walks; the graph, the naming of host segments and the summaries are SQL.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .duck import relation, use_internal_schema
from .packs import pack_sql

# Segment kinds by code: the walk keeps codes and ids, queries/critical_path.sql names them.
KINDS = ("gpu_compute", "gpu_comm", "gpu_memory", "launch", "host_cpu", "host_sync", "peer_wait", "idle")
GPU_COMPUTE, GPU_COMM, GPU_MEMORY, LAUNCH, HOST_CPU, HOST_SYNC, PEER_WAIT, IDLE = range(len(KINDS))
HOST_KIND_BY_ROLE = np.array([HOST_CPU, HOST_SYNC, LAUNCH])  # cp_host_nodes.role: other, sync, launch
MAX_MOVES_PER_OP = 8
SCALAR_HOST_CALLS = 16  # shorter host stretches are walked call by call; longer ones with numpy
HOST_CALLS_PER_BATCH = 4_000_000  # ~30 bytes each in arrays: more calls than this load a few steps at a time
FLUSH_ROWS = 1 << 20
RAW_COLUMNS = ("rank", "kind", "start_ns", "end_ns", "tid", "op_id")  # -1: none


def _i64(column) -> np.ndarray:
    return np.asarray(column, dtype=np.int64)


class _Job:
    """The graph as arrays, indexed by position (not op_id)."""

    def __init__(self, con):
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
        self.op_id = _i64(g["op_id"])
        self.rank, self.start, self.end = _i64(g["rank"]), _i64(g["start_ns"]), _i64(g["end_ns"])
        self.category = _i64(g["category"])  # GPU_COMPUTE, GPU_COMM, GPU_MEMORY
        self.api, self.ltid = _i64(g["api"]), _i64(g["ltid"])  # -1: no launch call in the trace
        self.stream_prev, self.dep = self._idx(_i64(g["stream_prev"])), self._idx(_i64(g["dep"]))
        self.grp = grp = _i64(g["grp"])
        del g
        self.loaded_from, self.first_end = np.iinfo(np.int64).min, {}
        # Per collective group: its members' positions.
        order = np.argsort(grp, kind="stable")
        bounds = _run_bounds(grp[order])
        self.group_members = {int(grp[order[a]]): order[a:b] for a, b in zip(bounds[:-1], bounds[1:])
                              if grp[order[a]] >= 0}

    def load_host_calls(self, con, lo=None, hi=None):
        """The outermost host calls per thread, disjoint and in time order, so that both start and
        end are sorted within a thread and a stretch of calls is a slice. Streamed in batches: a
        call is kept when it ends after every earlier call of its thread (a running max).

        With [lo, hi], only the calls that reach into it: enough for the steps inside it, since a
        walk never leaves its step. A call left out before lo cannot enclose one kept, so the
        running max over what is loaded keeps the same calls."""
        where = "" if lo is None else f"WHERE end_ns >= {int(lo)} AND start_ns <= {int(hi)}"
        if lo is not None and not self.first_end:
            # whether a thread had calls before the window decides how a walk ends there
            self.first_end = {(int(r), int(t)): int(e) for r, t, e in con.execute(
                "SELECT rank, tid, min(end_ns) FROM cp_host_nodes GROUP BY ALL").fetchall()}
        self.loaded_from = np.iinfo(np.int64).min if lo is None else int(lo)
        self.h_start = self.h_end = self.h_op = self.h_role = self.h_waited = None  # the last batch's, freed first
        n = con.execute(f"SELECT count(*) FROM cp_host_nodes {where}").fetchone()[0]
        # filled in place (tens of millions of calls: no second copy from concatenating parts)
        self.h_start, self.h_end, self.h_op = (np.empty(n, dtype=np.int64) for _ in range(3))
        self.h_role, waited_ids = np.empty(n, dtype=np.int8), np.empty(n, dtype=np.int64)
        reader = relation(con, f"""
            SELECT rank::BIGINT AS rank, tid, start_ns, end_ns, node_op_id,
                   CASE role WHEN 'sync' THEN 1 WHEN 'launch' THEN 2 ELSE 0 END::TINYINT AS role,
                   coalesce(waited_op_id, -1) AS waited
            FROM cp_host_nodes {where} ORDER BY rank, tid, start_ns, end_ns DESC, node_op_id""").to_arrow_reader(1 << 20)
        names = ("rank", "tid", "start_ns", "end_ns", "node_op_id", "role", "waited")
        runs = []  # [rank, tid, first position, end position] per thread
        carry, k = (None, None, None), 0  # the last thread of the previous batch and its running max
        for batch in reader:
            rank, tid, start, end, op, role, waited = (batch.column(c).to_numpy() for c in names)
            enclosing = np.empty(len(end), dtype=np.int64)
            bounds = _run_bounds(rank, tid)
            for a, b in zip(bounds[:-1], bounds[1:]):
                run = np.maximum.accumulate(end[a:b])
                first = carry[2] if (rank[a], tid[a]) == carry[:2] else np.iinfo(np.int64).min
                enclosing[a] = first
                enclosing[a + 1:b] = np.maximum(run[:-1], first)
                carry = (rank[a], tid[a], max(int(run[-1]), first))
            keep = end > enclosing
            kept_per_thread = np.add.reduceat(keep, bounds[:-1]) if len(keep) else []
            for a, kept in zip(bounds[:-1], [int(x) for x in kept_per_thread]):
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
        self.h_waited = self._idx(waited_ids[:k]).astype(np.int32)
        del waited_ids
        self.threads = {key: (0, 0) for key in self.first_end}  # threads with no call in the window
        self.threads.update({(r, t): (a, b) for r, t, a, b in runs})

    def has_earlier_calls(self, key) -> bool:
        """The thread has calls before the loaded ones (left out of this window)."""
        return self.first_end.get(key, self.loaded_from) < self.loaded_from

    def _idx(self, op_ids):
        """op_id -> position; -1 stays -1."""
        pos = np.searchsorted(self.op_id, op_ids)
        pos = np.clip(pos, 0, max(len(self.op_id) - 1, 0))
        ok = (op_ids >= 0) & (len(self.op_id) > 0)
        if len(self.op_id):
            ok &= self.op_id[pos] == op_ids
        return np.where(ok, pos, -1)


def _run_bounds(*keys) -> np.ndarray:
    """Bounds of the runs of equal keys in arrays sorted by them: [0, ..., len]."""
    n = len(keys[0])
    if not n:
        return np.zeros(1, dtype=np.int64)
    change = np.zeros(n - 1, dtype=bool)
    for key in keys:
        change |= np.diff(key) != 0
    return np.concatenate([[0], np.flatnonzero(change) + 1, [n]])


class _Walk:
    def __init__(self, job: _Job, t0: int):
        self.j, self.t0 = job, t0
        # Segments go back in time. Single moves collect as tuples, long host stretches as arrays
        # (one chunk each, in the same backward order): a step can pass millions of host calls.
        self.rows: list[tuple] = []
        self.chunks: list = []

    def emit(self, rank, kind, a, b, tid=-1, op_id=-1):
        a = max(a, self.t0)
        if b > a:
            self.rows.append((rank, kind, a, b, tid, op_id))

    def _flush_rows(self):
        if self.rows:
            self.chunks.append(np.array(self.rows, dtype=np.int64).reshape(-1, len(RAW_COLUMNS)))
            self.rows = []

    def run(self, last_idx: int) -> np.ndarray:
        """Segments of the step in time order, one row per segment, columns RAW_COLUMNS."""
        j = self.j
        # idx: a GPU op's position for the gpu states, (rank, tid) or (rank,) for host ones
        state, t = "gpu_end", int(j.end[last_idx])
        idx: Any = last_idx
        budget = MAX_MOVES_PER_OP * (len(j.op_id) + len(j.h_start)) + 100
        while t > self.t0 and budget > 0:
            budget -= 1
            if state == "gpu_end":
                state, idx, t = self._gpu_end(idx, t)
            elif state == "gpu_start":
                state, idx, t = self._gpu_start(idx, t)
            elif state == "host":
                state, idx, t = self._host(idx, t, stop_at=None)
            else:
                break
        if t > self.t0:  # nothing earlier explains the time
            rank = int(j.rank[idx]) if state.startswith("gpu") else int(idx[0])
            self.emit(rank, IDLE, self.t0, t)
        self._flush_rows()
        if not self.chunks:
            return np.empty((0, len(RAW_COLUMNS)), dtype=np.int64)
        return _merge_host_runs(np.concatenate(self.chunks)[::-1])

    def _gpu_end(self, i, t):
        j = self.j
        g = int(j.grp[i])
        if g >= 0:
            members = j.group_members[g]
            starts = j.start[members]
            ok = starts <= t
            if ok.any():
                k = members[ok][np.argmax(starts[ok])]
                sk = int(j.start[k])
                # Normally k started last and waited for nobody. If a peer started only after this
                # point in time (its trace or clock disagrees), the walk cannot follow it: rank k's
                # wait for that peer stays on the path as peer_wait.
                wait = min(int(starts.max()) - sk, int(j.end[k]) - sk)
                split = min(sk + wait, t)
                self.emit(int(j.rank[k]), GPU_COMM, split, t, op_id=int(j.op_id[k]))
                self.emit(int(j.rank[k]), PEER_WAIT, sk, split, op_id=int(j.op_id[k]))
                return "gpu_start", int(k), min(t, sk)
        self.emit(int(j.rank[i]), int(j.category[i]), int(j.start[i]), t, op_id=int(j.op_id[i]))
        return "gpu_start", i, min(t, int(j.start[i]))

    def _gpu_start(self, i, t):
        j = self.j
        preds = [p for p in (int(j.stream_prev[i]), int(j.dep[i])) if p >= 0]
        gp = max(preds, key=lambda p: j.end[p]) if preds else -1
        t_g = min(int(j.end[gp]), t) if gp >= 0 else None
        t_l = int(j.api[i]) if j.api[i] >= 0 else None
        rank = int(j.rank[i])
        if t_l is not None and t_l <= t and (t_g is None or t_l > t_g):
            # The GPU waited for the host to launch this op.
            self.emit(rank, LAUNCH, t_l, t, tid=int(j.ltid[i]), op_id=int(j.op_id[i]))
            key = (rank, int(j.ltid[i]))
            if key not in j.threads:
                if t_g is None:
                    return "end", (rank,), t_l
                self.emit(rank, HOST_CPU, t_g, t_l, tid=int(j.ltid[i]))
                return "gpu_end", gp, t_g
            if t_g is None:
                return "host", key, t_l
            st, nxt, tt = self._host(key, t_l, stop_at=t_g)
            if st == "gpu_end":  # a blocking call handed back to the GPU earlier than t_g
                return st, nxt, tt
            return "gpu_end", gp, t_g
        if t_g is None:
            return "end", (rank,), t
        self.emit(rank, IDLE, t_g, t)
        return "gpu_end", gp, t_g

    def _host(self, key, t, stop_at):
        """Walk the host thread back from t; stop at `stop_at` (then the caller continues on the GPU).

        Between calls the thread ran code of its own (host_cpu). A sync call whose waited GPU op
        ended inside it hands the walk to that op (host_sync from the op's end)."""
        j = self.j
        a, b = j.threads[key]
        floor = self.t0 if stop_at is None else max(stop_at, self.t0)
        if t <= floor:
            return "host_done", key, t
        hi = a + int(np.searchsorted(j.h_start[a:b], t, side="left"))  # calls [a, hi) start before t
        lo = a + int(np.searchsorted(j.h_end[a:hi], floor, side="right"))  # ... and [lo, hi) end after floor
        if hi - lo > SCALAR_HOST_CALLS:
            return self._host_stretch(key, t, floor, stop_at, a, lo, hi)
        rank, tid = key
        k = hi - 1
        while t > floor:
            if k < a:
                if stop_at is None and not j.has_earlier_calls(key):
                    return "end", (rank,), t
                self.emit(rank, HOST_CPU, floor, t, tid=tid)
                return "host_done", key, floor
            s, e = int(j.h_start[k]), int(j.h_end[k])
            if e < t:
                self.emit(rank, HOST_CPU, max(e, floor), t, tid=tid)
                t = max(e, floor)
                continue
            role = int(j.h_role[k])
            w = int(j.h_waited[k])
            if role == 1 and w >= 0 and s < j.end[w] <= t and j.end[w] > floor:
                self.emit(rank, HOST_SYNC, int(j.end[w]), t, tid=tid, op_id=int(j.h_op[k]))
                return "gpu_end", w, int(j.end[w])
            self.emit(rank, int(HOST_KIND_BY_ROLE[role]), max(s, floor), t, tid=tid, op_id=int(j.h_op[k]))
            t = max(s, floor)
            k -= 1
        return "host_done", key, t

    def _host_stretch(self, key, t, floor, stop_at, a, lo, hi):
        """_host's loop for calls [lo, hi) at once: same segments, as one array chunk."""
        j = self.j
        rank, tid = key
        s, e = j.h_start[lo:hi], j.h_end[lo:hi]
        t_at = np.minimum(e, t)  # where the walk stands when it reaches each call
        role, w = j.h_role[lo:hi], j.h_waited[lo:hi]
        w_end = j.end[np.maximum(w, 0)] if len(j.end) else np.zeros(len(w), dtype=np.int64)
        hands_back = (role == 1) & (w >= 0) & (s < w_end) & (w_end <= t_at) & (w_end > floor)
        hit = np.flatnonzero(hands_back)
        m = int(hit[-1]) if len(hit) else -1  # the latest such sync call; calls below it are not reached
        first = m + 1
        n = hi - lo - first
        # per call, two pieces: the call itself and the thread's own time after it (up to the next call or t)
        starts = np.empty(2 * n, dtype=np.int64)
        ends = np.empty(2 * n, dtype=np.int64)
        kinds = np.empty(2 * n, dtype=np.int64)
        ops = np.empty(2 * n, dtype=np.int64)
        upper = np.append(s[first + 1:], t)
        starts[0::2], ends[0::2] = np.maximum(s[first:], floor), t_at[first:]
        kinds[0::2], ops[0::2] = HOST_KIND_BY_ROLE[role[first:]], j.h_op[lo + first:hi]
        starts[1::2], ends[1::2], kinds[1::2], ops[1::2] = np.maximum(e[first:], floor), upper, HOST_CPU, -1
        pieces = [(starts, ends, kinds, ops)]
        if m >= 0:
            gap_top = s[first] if n else t
            pieces.insert(0, (np.array([max(int(e[m]), floor)]), np.array([gap_top]), np.array([HOST_CPU]), np.array([-1])))
            out, nxt = ("gpu_end", int(w[m]), int(w_end[m])), [(int(w_end[m]), int(t_at[m]), HOST_SYNC, int(j.h_op[lo + m]))]
        else:
            low = max(int(s[0]), floor)
            nxt = []
            if low > floor and lo == a and stop_at is None and not j.has_earlier_calls(key):
                out = ("end", (rank,), low)
            else:
                nxt = [(floor, low, HOST_CPU, -1)]
                out = ("host_done", key, floor)
        if nxt:
            pieces.append(tuple(np.array(nxt, dtype=np.int64).T))
        st, en, kd, op = (np.concatenate(c) for c in zip(*pieces))
        keep = en > np.maximum(st, self.t0)
        chunk = np.empty((int(keep.sum()), len(RAW_COLUMNS)), dtype=np.int64)
        chunk[:, 0], chunk[:, 4] = rank, tid
        chunk[:, 1], chunk[:, 2], chunk[:, 3], chunk[:, 5] = kd[keep], np.maximum(st[keep], self.t0), en[keep], op[keep]
        order = np.argsort(-chunk[:, 3], kind="stable")  # backward, like the single moves
        self._flush_rows()
        self.chunks.append(chunk[order])
        return out


def _merge_host_runs(segs: np.ndarray) -> np.ndarray:
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


class _Writer:
    """Segments into critical_path_raw in bounded batches."""

    def __init__(self, con):
        self.con, self.parts, self.n = con, [], 0
        con.execute("""CREATE OR REPLACE TABLE tf_internal.critical_path_raw (step INTEGER, ordinal INTEGER, rank INTEGER,
                       kind VARCHAR, start_ns BIGINT, end_ns BIGINT, tid BIGINT, op_id BIGINT)""")

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
        tbl = pa.table(cols)
        self.con.register("cp_rows", tbl)
        self.con.execute("""INSERT INTO critical_path_raw SELECT step, ordinal, rank, (?::VARCHAR[])[kind + 1],
                            start_ns, end_ns, nullif(tid, -1), nullif(op_id, -1) FROM cp_rows""", [list(KINDS)])
        self.con.unregister("cp_rows")
        self.parts, self.n = [], 0


def compute(con):
    use_internal_schema(con, create=True)
    # databases written before cp_edges became a view hold it as a table (ingest --append keeps them)
    if con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'cp_edges'").fetchone()[0]:
        con.execute("DROP TABLE cp_edges")
    con.execute(pack_sql("cp_graph"))
    # per step: where it starts across ranks, and the op that ends last (the walk starts there)
    extents = con.execute("""
        SELECT w.step, w.t0, l.last_op FROM
            (SELECT step, min(start_ns) AS t0 FROM step_windows GROUP BY step) w
        JOIN (SELECT step, arg_max(op_id, (end_ns, -op_id)) AS last_op FROM gpu_ops WHERE step IS NOT NULL GROUP BY step) l
        USING (step) ORDER BY w.step""").fetchall()
    writer = _Writer(con)
    if extents:
        job = _Job(con)
        steps = [(int(step), int(t0), int(np.searchsorted(job.op_id, last_op))) for step, t0, last_op in extents]
        windows = [(st, t0, int(job.end[idx])) for st, t0, idx in steps]
        batches = _step_batches(con, windows, HOST_CALLS_PER_BATCH)
        for batch in batches:
            if len(batches) == 1:
                job.load_host_calls(con)
            else:
                job.load_host_calls(con, min(windows[i][1] for i in batch), max(windows[i][2] for i in batch))
            for i in batch:
                step, t0, idx = steps[i]
                writer.add(step, _Walk(job, t0).run(idx))
        del job
    writer.flush()
    sql = pack_sql("critical_path")
    con.execute(sql)
    from . import comments
    comments.apply(con, sql, ["critical_path", "critical_path_summary"])


def _step_batches(con, windows, budget: int) -> list[list[int]]:
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


def summary_lines(con, step=None) -> list[str]:
    """One line per step: the biggest segments in words, for the terminal."""
    where = "" if step is None else f"WHERE step = {int(step)}"
    out = []
    for st, wall, top in con.execute(f"""
        WITH s AS (SELECT step, sum(end_ns - start_ns) AS wall FROM critical_path {where} GROUP BY step),
             k AS (SELECT step, rank, kind, coalesce(any_value(name), '') AS name, sum(end_ns - start_ns) AS d
                   FROM critical_path {where} GROUP BY step, rank, kind, name)
        SELECT s.step, s.wall, list(struct_pack(rank := k.rank, kind := k.kind, name := k.name, d := k.d) ORDER BY k.d DESC)[1:3]
        FROM s JOIN k USING (step) GROUP BY s.step, s.wall ORDER BY s.step""").fetchall():
        parts = [f"{p['d'] / 1e6:.1f} ms ({100 * p['d'] / wall:.0f}%) {p['kind']} on rank {p['rank']}"
                 + (f" ({_short(p['name'])})" if p['name'] else "") for p in top]
        out.append(f"step {st}: {wall / 1e6:.1f} ms; " + ", ".join(parts))
    return out


def _short(name: str, n: int = 48) -> str:
    return name if len(name) <= n else name[: n - 1] + "…"
