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

import numpy as np

from .packs import pack_sql

GPU_KINDS = ("gpu_compute", "gpu_comm", "gpu_memory")  # by category code, see _Job
MAX_MOVES_PER_OP = 8


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
        # codes and ids, not strings: SQL names the few ops on the path (queries/critical_path.sql)
        self.category = _i64(g["category"])
        self.api, self.ltid = _i64(g["api"]), _i64(g["ltid"])  # -1: no launch call in the trace
        self.stream_prev, self.dep = self._idx(_i64(g["stream_prev"])), self._idx(_i64(g["dep"]))
        self.grp = grp = _i64(g["grp"])
        # Per collective group: its members' positions.
        order = np.argsort(grp, kind="stable")
        gs = grp[order]
        self.group_members = {}
        if len(gs):
            cuts = np.flatnonzero(np.diff(gs)) + 1
            for chunk in np.split(order, cuts):
                if grp[chunk[0]] >= 0:
                    self.group_members[int(grp[chunk[0]])] = chunk

        h = con.execute("""SELECT rank, tid, start_ns, end_ns, node_op_id,
                                  CASE role WHEN 'sync' THEN 1 WHEN 'launch' THEN 2 ELSE 0 END AS role,
                                  coalesce(waited_op_id, -1) AS waited
                           FROM cp_host_nodes ORDER BY rank, tid, start_ns""").fetchnumpy()
        self.h_rank, self.h_tid = _i64(h["rank"]), _i64(h["tid"])
        self.h_start, self.h_end = _i64(h["start_ns"]), _i64(h["end_ns"])
        # ids, not names: a job has millions of host calls; SQL names the few on the path
        self.h_op, self.h_role = _i64(h["node_op_id"]), _i64(h["role"])
        self.h_waited = self._idx(_i64(h["waited"]))
        self.threads = {}
        if len(self.h_rank):
            keys = self.h_rank * (1 << 32) + self.h_tid
            cuts = np.flatnonzero(np.diff(keys)) + 1
            bounds = np.concatenate([[0], cuts, [len(keys)]])
            for a, b in zip(bounds[:-1], bounds[1:]):
                self.threads[(int(self.h_rank[a]), int(self.h_tid[a]))] = (int(a), int(b))

    def _idx(self, op_ids):
        """op_id -> position; -1 stays -1."""
        pos = np.searchsorted(self.op_id, op_ids)
        pos = np.clip(pos, 0, max(len(self.op_id) - 1, 0))
        ok = (op_ids >= 0) & (len(self.op_id) > 0)
        if len(self.op_id):
            ok &= self.op_id[pos] == op_ids
        return np.where(ok, pos, -1)


class _Walk:
    def __init__(self, job: _Job, step: int, t0: int):
        self.j, self.step, self.t0 = job, step, t0
        self.segs = []  # (rank, kind, name, start, end, tid, op_id)

    def emit(self, rank, kind, name, a, b, tid=None, op_id=None):
        a = max(a, self.t0)
        if b > a:
            self.segs.append((rank, kind, name, a, b, tid, op_id))

    def run(self, last_idx: int):
        j = self.j
        state, idx, t = "gpu_end", last_idx, int(j.end[last_idx])
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
            self.emit(rank, "idle", None, self.t0, t)
        self.segs.reverse()
        return self.segs

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
                self.emit(int(j.rank[k]), "gpu_comm", None, split, t, op_id=int(j.op_id[k]))
                self.emit(int(j.rank[k]), "peer_wait", None, sk, split, op_id=int(j.op_id[k]))
                return "gpu_start", int(k), min(t, sk)
        self.emit(int(j.rank[i]), GPU_KINDS[j.category[i]], None, int(j.start[i]), t, op_id=int(j.op_id[i]))
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
            self.emit(rank, "launch", None, t_l, t, tid=int(j.ltid[i]), op_id=int(j.op_id[i]))
            key = (rank, int(j.ltid[i]))
            if key not in j.threads:
                if t_g is None:
                    return "end", (rank,), t_l
                self.emit(rank, "host_cpu", None, t_g, t_l, tid=int(j.ltid[i]))
                return "gpu_end", gp, t_g
            if t_g is None:
                return "host", key, t_l
            st, nxt, tt = self._host(key, t_l, stop_at=t_g)
            if st == "gpu_end":  # a blocking call handed back to the GPU earlier than t_g
                return st, nxt, tt
            return "gpu_end", gp, t_g
        if t_g is None:
            return "end", (rank,), t
        self.emit(rank, "idle", None, t_g, t)
        return "gpu_end", gp, t_g

    def _host(self, key, t, stop_at):
        """Walk the host thread back from t; stop at `stop_at` (then the caller continues on the GPU)."""
        j = self.j
        rank, tid = key
        a, b = j.threads[key]
        floor = self.t0 if stop_at is None else max(stop_at, self.t0)
        k = a + int(np.searchsorted(j.h_start[a:b], t, side="left")) - 1
        while t > floor:
            if k < a:
                if stop_at is None:
                    return "end", (rank,), t
                self.emit(rank, "host_cpu", None, floor, t, tid=tid)
                return "host_done", key, floor
            s, e = int(j.h_start[k]), int(j.h_end[k])
            if e < t:
                self.emit(rank, "host_cpu", None, max(e, floor), t, tid=tid)
                t = max(e, floor)
                continue
            role = int(j.h_role[k])
            w = int(j.h_waited[k])
            if role == 1 and w >= 0 and s < j.end[w] <= t and j.end[w] > floor:
                self.emit(rank, "host_sync", None, int(j.end[w]), t, tid=tid, op_id=int(j.h_op[k]))
                return "gpu_end", w, int(j.end[w])
            kind = ("host_cpu", "host_sync", "launch")[role]
            self.emit(rank, kind, None, max(s, floor), t, tid=tid, op_id=int(j.h_op[k]))
            t = max(s, floor)
            k -= 1
        return "host_done", key, t


def compute(con):
    con.execute(pack_sql("cp_graph"))
    # per step: where it starts across ranks, and the op that ends last (the walk starts there)
    extents = con.execute("""
        SELECT w.step, w.t0, l.last_op FROM
            (SELECT step, min(start_ns) AS t0 FROM step_windows GROUP BY step) w
        JOIN (SELECT step, arg_max(op_id, (end_ns, -op_id)) AS last_op FROM gpu_ops WHERE step IS NOT NULL GROUP BY step) l
        USING (step) ORDER BY w.step""").fetchall()
    rows = []
    job = _Job(con) if extents else None
    for step, t0, last_op in extents:
        idx = int(np.searchsorted(job.op_id, last_op))
        segs = _Walk(job, int(step), int(t0)).run(idx)
        rows.extend((int(step), n, *s) for n, s in enumerate(segs))
    con.execute("""CREATE OR REPLACE TABLE critical_path_raw (step INTEGER, ordinal INTEGER, rank INTEGER, kind VARCHAR,
                   name VARCHAR, start_ns BIGINT, end_ns BIGINT, tid BIGINT, op_id BIGINT)""")
    if rows:
        import pyarrow as pa
        cols = list(zip(*rows))
        names = ["step", "ordinal", "rank", "kind", "name", "start_ns", "end_ns", "tid", "op_id"]
        types = [pa.int32(), pa.int32(), pa.int32(), pa.string(), pa.string(), pa.int64(), pa.int64(), pa.int64(), pa.int64()]
        tbl = pa.table({n: pa.array(c, t) for n, c, t in zip(names, cols, types)})
        con.register("cp_rows", tbl)
        con.execute("INSERT INTO critical_path_raw SELECT * FROM cp_rows")
        con.unregister("cp_rows")
    con.execute(pack_sql("critical_path"))


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
