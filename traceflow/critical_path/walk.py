"""The backward walk of one step: from the op that ends last to the step's start, always to the
predecessor that finished last; each move emits a segment, so the segments tile the step.

Where a GPU op waited for its launch, the host is charged only from the moment the GPU's own
predecessor finished: earlier host time overlapped queued GPU work and was not on the path. At a
collective's end the walk jumps to the rank that started it last (the others waited).

Size: the walk's moves share one state; the numpy stretch is the loop's twin, kept beside it so that
the two are read (and tested, tests/test_critical_path_walk.py) together.
"""
from __future__ import annotations

from enum import Enum
from typing import NamedTuple

import numpy as np

from .graph import Graph
from .segments import GPU_COMM, HOST_CPU, HOST_KIND_BY_ROLE, HOST_SYNC, IDLE, LAUNCH, PEER_WAIT, RAW_COLUMNS, merge_host_runs

MAX_MOVES_PER_OP = 8  # a bound on the loop: every move passes an op or a call, a few moves each
SCALAR_HOST_CALLS = 16  # shorter host stretches are walked call by call; longer ones with numpy


class State(Enum):
    GPU_END = "gpu_end"      # at the end of GPU op `op`: what ran until t?
    GPU_START = "gpu_start"  # at the start of GPU op `op`: what held it back?
    HOST_DONE = "host_done"  # a host stretch reached the time its caller asked for
    END = "end"              # nothing earlier in the trace explains t: the rest is idle


class Position(NamedTuple):
    """Where the walk stands: a state, a time, a rank, and the op (GPU states) or thread (host)."""
    state: State
    t: int
    rank: int
    op: int = -1   # a GPU op's position in the Graph
    tid: int = -1  # a host thread


class Walk:
    def __init__(self, graph: Graph, t0: int, scalar_host_calls: int = SCALAR_HOST_CALLS):
        self.j, self.t0, self.scalar_host_calls = graph, t0, scalar_host_calls
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

    def run(self, last: int) -> np.ndarray:
        """Segments from t0 to the end of GPU op `last` (a position), in time order, one row per
        segment, columns RAW_COLUMNS."""
        j = self.j
        pos = Position(State.GPU_END, int(j.end[last]), int(j.rank[last]), op=last)
        moves = {State.GPU_END: self._gpu_end, State.GPU_START: self._gpu_start}
        n = 0
        while pos.t > self.t0 and pos.state in moves:
            j.ensure(pos.rank)  # a rank of a graph from the database loads when the walk first stands on it
            n += 1
            if n > MAX_MOVES_PER_OP * (len(j.op_id) + len(j.h_start)) + 100:
                break
            pos = moves[pos.state](pos)
        if pos.t > self.t0:  # nothing earlier explains the time
            self.emit(pos.rank, IDLE, self.t0, pos.t)
        self._flush_rows()
        if not self.chunks:
            return np.empty((0, len(RAW_COLUMNS)), dtype=np.int64)
        return merge_host_runs(np.concatenate(self.chunks)[::-1])

    def _gpu_end(self, pos: Position) -> Position:
        j, i, t = self.j, pos.op, pos.t
        g = int(j.grp[i])
        if g >= 0:
            members = j.group_members[g]
            starts = j.start[members]
            ok = starts <= t
            if ok.any():
                k = int(members[ok][np.argmax(starts[ok])])
                sk, rk = int(j.start[k]), int(j.rank[k])
                # Normally k started last and waited for nobody. If a peer started only after this
                # point in time (its trace or clock disagrees), the walk cannot follow it: rank k's
                # wait for that peer stays on the path as peer_wait.
                wait = min(int(starts.max()) - sk, int(j.end[k]) - sk)
                split = min(sk + wait, t)
                self.emit(rk, GPU_COMM, split, t, op_id=int(j.op_id[k]))
                self.emit(rk, PEER_WAIT, sk, split, op_id=int(j.op_id[k]))
                return Position(State.GPU_START, min(t, sk), rk, op=k)
        self.emit(pos.rank, int(j.category[i]), int(j.start[i]), t, op_id=int(j.op_id[i]))
        return Position(State.GPU_START, min(t, int(j.start[i])), pos.rank, op=i)

    def _gpu_start(self, pos: Position) -> Position:
        j, i, t, rank = self.j, pos.op, pos.t, pos.rank
        preds = [p for p in (int(j.stream_prev[i]), int(j.dep[i])) if p >= 0]
        gp = max(preds, key=lambda p: j.end[p]) if preds else -1
        t_g = min(int(j.end[gp]), t) if gp >= 0 else None
        t_l = int(j.api[i]) if j.api[i] >= 0 else None
        after_gpu = Position(State.GPU_END, t_g, int(j.rank[gp]), op=gp) if t_g is not None else None
        if t_l is not None and t_l <= t and (t_g is None or t_l > t_g):
            # The GPU waited for the host to launch this op.
            tid = int(j.ltid[i])
            self.emit(rank, LAUNCH, t_l, t, tid=tid, op_id=int(j.op_id[i]))
            if (rank, tid) not in j.threads:
                if after_gpu is None:
                    return Position(State.END, t_l, rank)
                self.emit(rank, HOST_CPU, t_g, t_l, tid=tid)
                return after_gpu
            host = self._host(rank, tid, t_l, stop_at=t_g)
            if after_gpu is None or host.state is State.GPU_END:  # a blocking call handed back to the GPU earlier
                return host
            return after_gpu
        if after_gpu is None:
            return Position(State.END, t, rank)
        self.emit(rank, IDLE, t_g, t)
        return after_gpu

    def _host(self, rank: int, tid: int, t: int, stop_at: int | None) -> Position:
        """Walk host thread (rank, tid) back from t; stop at `stop_at` (then the caller continues
        on the GPU), or at the step's start.

        Between calls the thread ran code of its own (host_cpu). A sync call whose waited GPU op
        ended inside it hands the walk to that op (host_sync from the op's end)."""
        j = self.j
        key = (rank, tid)
        a, b = j.threads[key]
        floor = self.t0 if stop_at is None else max(stop_at, self.t0)
        if t <= floor:
            return Position(State.HOST_DONE, t, rank, tid=tid)
        hi = a + int(np.searchsorted(j.h_start[a:b], t, side="left"))  # calls [a, hi) start before t
        lo = a + int(np.searchsorted(j.h_end[a:hi], floor, side="right"))  # ... and [lo, hi) end after floor
        if hi - lo > self.scalar_host_calls:
            return self._host_stretch(rank, tid, t, floor, stop_at, a, lo, hi)
        k = hi - 1
        while t > floor:
            if k < a:
                if stop_at is None and not j.has_earlier_calls(key):
                    return Position(State.END, t, rank)
                self.emit(rank, HOST_CPU, floor, t, tid=tid)
                return Position(State.HOST_DONE, floor, rank, tid=tid)
            s, e = int(j.h_start[k]), int(j.h_end[k])
            if e < t:
                self.emit(rank, HOST_CPU, max(e, floor), t, tid=tid)
                t = max(e, floor)
                continue
            role = int(j.h_role[k])
            w = int(j.h_waited[k])
            if role == 1 and w >= 0 and s < j.end[w] <= t and j.end[w] > floor:
                self.emit(rank, HOST_SYNC, int(j.end[w]), t, tid=tid, op_id=int(j.h_op[k]))
                return Position(State.GPU_END, int(j.end[w]), int(j.rank[w]), op=w)
            self.emit(rank, int(HOST_KIND_BY_ROLE[role]), max(s, floor), t, tid=tid, op_id=int(j.h_op[k]))
            t = max(s, floor)
            k -= 1
        return Position(State.HOST_DONE, t, rank, tid=tid)

    def _host_stretch(self, rank, tid, t, floor, stop_at, a, lo, hi) -> Position:
        """_host's loop for calls [lo, hi) at once: same segments, as one array chunk."""
        j = self.j
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
            wm = int(w[m])
            out = Position(State.GPU_END, int(w_end[m]), int(j.rank[wm]), op=wm)
            nxt = [(int(w_end[m]), int(t_at[m]), HOST_SYNC, int(j.h_op[lo + m]))]
        else:
            low = max(int(s[0]), floor)
            nxt = []
            if low > floor and lo == a and stop_at is None and not j.has_earlier_calls((rank, tid)):
                out = Position(State.END, low, rank)
            else:
                nxt = [(floor, low, HOST_CPU, -1)]
                out = Position(State.HOST_DONE, floor, rank, tid=tid)
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
