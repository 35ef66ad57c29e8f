"""`traceflow whatif`: replay a step's cross-rank dependency graph with edited durations to predict
the step time after a fix (docs/whatif.md).

The graph is the critical path's (queries/cp_graph.sql): each GPU op follows the op before it on
its stream, a cross-stream dependency, and its launch on the host; a collective ends when its last
member has started plus its own transfer. The host is replayed as far as the GPU moves it: a
synchronizing call returns when the op it waited for ends, so every later call of that rank's
launching threads moves with that op. Host edits remove stretches of exactly one cause of host
time (host_time_spans, queries/host_time.sql): launch calls, allocator calls, syncs, or a rank's
abnormal host time; every later call of the rank comes that much earlier, until a sync re-anchors it. Each op keeps the lag it had beyond its latest constraint (queueing, launch
latency), so the replay of the unedited graph reproduces the measured times; its error is reported
and bounds every prediction.

Size: the replay and its scenarios share the step's arrays; one concept, one module.
"""
from __future__ import annotations

import bisect
import re
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from .duck import arrow_batches
from .errors import UsageError

READS = frozenset({"collective_waits", "cp_gpu_preds", "cp_host_nodes", "gpu_ops", "host_time", "host_time_spans", "launch_overhead",
                   "step_windows", "sync_extra"})  # the tables its SQL reads (tests/test_layers.py)

MAX_ERROR_PCT = 2.0  # a replay of the unedited graph further than this from the measured step refuses predictions
KINDS = {"compute": 0, "comm": 1, "memory": 2}
_WHY = ("measured", "op", "before", "host")  # what an op's start waited for in a replay (StepGraph.replay's why_k)


@dataclass
class Scenario:
    """What to change. Combinable; the empty scenario is the replay of the measured graph."""
    scale_kernels: list[tuple[str, float]] = field(default_factory=list)   # (regex on the kernel name, factor)
    scale_kind: dict[str, float] = field(default_factory=dict)             # compute | comm | memory -> factor
    remove_host_stall: list[int] = field(default_factory=list)             # ranks
    no_launch_overhead: bool = False
    no_launch_stall: bool = False  # stalled launch calls (launch_overhead.stall) take the rank's median launch call
    no_allocator_calls: bool = False
    no_host_syncs: bool = False
    host_ranks: list[int] = field(default_factory=list)  # launch / allocator / sync edits on these ranks only (empty: all)
    overlap_comm: bool = False
    no_stragglers: bool = False

    def describe(self) -> str:
        parts = [f"kernels /{p}/ x{f:g}" for p, f in self.scale_kernels]
        parts += [f"{k} x{f:g}" for k, f in self.scale_kind.items()]
        parts += [f"no host stall on rank {r}" for r in self.remove_host_stall]
        parts += [n for n, on in (("no launch overhead", self.no_launch_overhead), ("no launch stall", self.no_launch_stall),
                                  ("no allocator calls", self.no_allocator_calls), ("no host syncs", self.no_host_syncs),
                                  ("comm overlapped", self.overlap_comm), ("no stragglers", self.no_stragglers)) if on]
        if self.host_ranks and self.edits_host():
            parts = [p + (f" on rank {', '.join(map(str, self.host_ranks))}"
                          if p in ("no launch overhead", "no launch stall", "no allocator calls", "no host syncs") else "")
                     for p in parts]
        return ", ".join(parts) or "as measured"

    def edits_host(self) -> bool:
        """Whether the scenario edits calls that host_ranks can limit to some ranks."""
        return self.no_launch_overhead or self.no_launch_stall or self.no_allocator_calls or self.no_host_syncs


class StepGraph:
    """One step's GPU ops (in measured start order) with their constraints, and the host calls of
    their launching threads that can move them."""

    def __init__(self, con, step: int):
        # Long because: one pass that fills every column from Arrow batches and drops each batch, so the
        # step's whole Arrow table is never held beside the columns (84 bytes an op kept at 256 ranks)
        # Columns, not a Python object per op (docs/scale-out.md, "The claims' step graph in columns"):
        # 466 bytes an op kept as lists, dicts and tuples (256 ranks of bench/cluster.py's copies:
        # 54,016 ops), 84 here; 548 and 185 at the build's peak (bench/step_graph_bytes.py). array.array where the replay's Python loop reads one op at
        # a time (its items are the same Python ints and floats a list gave), numpy where the work
        # is whole columns. The ops come in Arrow batches, unsorted, into numpy; the sort by
        # (start, op id) is numpy's, so the step's rows are never one Arrow table beside the copy.
        cols: dict[str, list] = {k: [] for k in ("op_id", "rank", "start", "end", "name", "kind", "api", "sp", "dep",
                                                  "comm", "seq_step", "st_null", "seq", "sq_null")}
        names: dict = {}   # kernel name -> its code (each distinct name kept once)
        comms: dict = {}   # communicator -> its code
        for b in arrow_batches(con, _OPS_SQL, [step]):
            for k in ("op_id", "rank", "start", "end", "kind", "api", "sp", "dep"):
                cols[k].append(b.column(k).to_numpy())
            cols["name"].append(_codes(b.column("name"), names))
            cols["comm"].append(_codes(b.column("comm"), comms))
            for k, null in (("seq_step", "st_null"), ("seq", "sq_null")):
                c = b.column(k)
                cols[null].append(c.is_null().to_numpy(zero_copy_only=False))
                cols[k].append(c.fill_null(0).to_numpy())
        if not cols["op_id"] or not sum(len(x) for x in cols["op_id"]):
            raise UsageError(f"step {step} has no GPU ops")
        a = {k: np.concatenate(cols.pop(k)) for k in list(cols)}  # a column at a time: never two copies of all
        order = np.lexsort((a["op_id"], a["start"]))  # ORDER BY start_ns, op_id
        for k in a:
            a[k] = a[k][order]
        del order
        self.step, self.con = step, con
        # times relative to the step's start: ns since the epoch are 1.8e18, where a float64 steps by 256 ns
        self.t0 = con.execute("SELECT min(start_ns) FROM tf_internal.step_windows WHERE step = ?", [step]).fetchone()[0]
        base = self.t0
        n_ops = len(a["op_id"])
        self.op_id = _col("q", a["op_id"])
        self.rank = _col("i", a["rank"])
        self.start = _col("q", a["start"] - base)
        self.end = _col("q", a["end"] - base)
        self.kind = _col("b", a["kind"])
        self.api = _col("q", np.where(a["api"] >= 0, a["api"] - base, -1))
        self.name = _Names(list(names), a["name"])
        self.pos = _Pos(a["op_id"])  # op id -> index (a sorted copy of the ids, not a dict of 216,064 entries)
        # predecessors outside the step keep their measured end
        sp, dep = a["sp"], a["dep"]
        isp, idep = self.pos.indices(sp), self.pos.indices(dep)
        outside = np.unique(np.concatenate((sp[(sp >= 0) & (isp < 0)], dep[(dep >= 0) & (idep < 0)])))
        rows = con.execute("SELECT op_id, end_ns - ? FROM gpu_ops WHERE op_id IN (SELECT unnest(?))",
                           [base, outside.tolist()]).fetchall() if len(outside) else []
        ends = _Pos(np.array([o for o, _ in rows], dtype=np.int64))
        end_of = np.array([e for _, e in rows] + [0], dtype=np.int64)
        # each op's one or two predecessors, (index in the step, 0) or (-1, measured end), in the order
        # (stream predecessor, dependency): per slot, the index (-1: before the step, -2: none) and the
        # measured ends of those before the step (a few an op stream)
        self._pred: list[tuple[array, dict[int, int]]] = []
        for x, ix in ((sp, isp), (dep, idep)):
            ie = ends.indices(x)
            q = np.where(ix >= 0, ix, np.where((x >= 0) & (ie >= 0), -1, -2))
            before = np.flatnonzero(q == -1)
            self._pred.append((_col("i", q), dict(zip(before.tolist(), end_of[ie[before]].tolist()))))
        # the collectives: ops of one (comm, step, seq) on 2 ranks or more, in order of their first op
        keyed = np.flatnonzero((a["comm"] >= 0) & ~a["sq_null"])
        if len(keyed):
            keys = [a["comm"][keyed], a["st_null"][keyed], a["seq_step"][keyed], a["seq"][keyed]]
            perm = np.lexsort([keyed, *keys[::-1]])  # by key, each group's ops in index order
            o, ko = keyed[perm], [k[perm] for k in keys]
            cut = np.flatnonzero(np.any([k[1:] != k[:-1] for k in ko], axis=0)) + 1
            starts_at = np.concatenate(([0], cut))
            ends_at = np.concatenate((cut, [len(o)]))
            rk = a["rank"][o]
            lo, hi = np.minimum.reduceat(rk, starts_at), np.maximum.reduceat(rk, starts_at)
            keep = np.flatnonzero(lo < hi)  # two distinct ranks or more
            keep = keep[np.argsort(o[starts_at[keep]], kind="stable")]  # in order of their first op
            parts = [o[starts_at[g]:ends_at[g]] for g in keep]
        else:
            parts = []
        lens = np.array([len(p) for p in parts], dtype=np.int64)
        self._mem_off = _col("q", np.concatenate(([0], np.cumsum(lens))))
        self._mem = _col("i", np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64))
        group = np.full(n_ops, -1, dtype=np.int64)
        if parts:
            group[np.concatenate(parts)] = np.repeat(np.arange(len(parts)), lens)
        self.group = _col("i", group)
        self._glast = _col("i", [p[-1] for p in parts])  # its last member to start (in measured order)
        del a, sp, dep, isp, idep, group, parts
        self._load_syncs(con, base)
        self._spans_by_cause: dict[tuple[str, ...], _RankSpans] = {}

    @property
    def members(self) -> list[list[int]]:
        """The collectives: each one's ops (indices, ascending)."""
        off = self._mem_off
        return [list(self._mem[off[g]:off[g + 1]]) for g in range(len(off) - 1)]

    def _preds(self, i: int) -> list[tuple[int, int]]:
        """Op i's predecessors: (index, 0) in the step, (-1, measured end) before it."""
        out = []
        for q, before in self._pred:
            k = q[i]
            if k >= 0:
                out.append((k, 0))
            elif k == -1:
                out.append((-1, before[i]))
        return out

    def _load_syncs(self, con, base: int) -> None:
        """Each rank's synchronizing calls in the step's span (relative times) and the op each waited
        for (its index; -1 outside the step): they move the rank's host with the GPU."""
        pos = self.pos
        lo, hi = min(self.start), max(self.end)
        # A synchronous or pageable copy's call waits for its own copy (the driver stages it): the
        # copy may end after the call returns, where the as-of wait (cp_graph.sql: the latest op
        # ended before the call returned) misses it, and copies made faster would not move the host
        # (h100 kineto/launch_bound: a 256 MiB pageable HtoD copy, "copies twice as fast" gained 0.0 ms)
        rows = con.execute("""SELECT n.rank, n.start_ns, n.end_ns, coalesce(n.waited_op_id, -1), n.node_op_id,
                                     coalesce(own.op_id, -1)
                              FROM tf_internal.cp_host_nodes n
                              LEFT JOIN (SELECT rank, launch_tid, api_start_ns, arg_max(op_id, end_ns) AS op_id FROM gpu_ops
                                         WHERE kind IN ('memcpy', 'memset') AND api_start_ns IS NOT NULL GROUP BY ALL) own
                                ON own.rank = n.rank AND own.launch_tid = n.tid AND own.api_start_ns = n.start_ns
                              WHERE n.role = 'sync' AND n.end_ns >= ? AND n.start_ns <= ?
                              ORDER BY n.rank, n.end_ns, n.start_ns""",
                            [lo + base - 10**9, hi + base]).fetchall()
        self.syncs: dict[int, list] = {}
        self.sync_ids: dict[int, list] = {}  # the node op id of each of self.syncs[rank]
        for r, s, e, w, o, own in rows:
            w = pos.get(w, -1)
            own = pos.get(own, -1)
            if own >= 0 and self.start[own] <= e - base and (w < 0 or self.end[own] > self.end[w]):
                # its own copy, in this step, running before the call returned (hta-2rank's async
                # copies queued behind other work start up to 60 ms after their call: not held) and
                # ending later than the as-of op: what held the call
                w = own
            self.syncs.setdefault(r, []).append((s - base, e - base, w))
            self.sync_ids.setdefault(r, []).append(o)

    def measured(self) -> tuple[int, dict[int, int]]:
        return self._spans(self.end)

    def _spans(self, end) -> tuple[int, dict[int, int]]:
        per_rank: dict[int, int] = {}
        for r, e in zip(self.rank, end):
            per_rank[r] = max(per_rank.get(r, 0), e)
        return max(end), dict(sorted(per_rank.items()))

    # -- the replay ---------------------------------------------------------------------------
    def replay(self, sc: Scenario) -> tuple[int, dict[int, int]]:
        n = len(self.op_id)
        dur = np.array(self.end, dtype=np.float64) - np.array(self.start, dtype=np.float64)
        factor = np.ones(n)
        for pat, f in sc.scale_kernels:
            rx = re.compile(pat)
            factor *= self.name.map(lambda nm, rx=rx, f=f: f if rx.search(nm or "") else 1.0)
        for kind, f in sc.scale_kind.items():
            factor *= np.where(np.array(self.kind) == KINDS[kind], f, 1.0)
        if sc.no_stragglers:
            factor *= self._straggler_factors()
        hosts = self._hosts(sc)
        stalled = self._stalls_edited(sc)
        # the replay's own columns as doubles: its times are relative ns, exact in a float64 below 2**53
        start2, end2 = _col("d", np.zeros(n)), _col("d", np.zeros(n))
        # what each op's start waited for in the replay: WHY's kind, and the op or host time it names
        why_k, why_r = _col("b", np.zeros(n)), _col("d", np.zeros(n))
        last_of = _col("i", np.full(n, -1))  # a collective member -> the member whose start ended it
        glast, mem, off = self._glast, self._mem, self._mem_off
        for i in range(n):
            preds = self._preds(i)
            if sc.overlap_comm and self.kind[i] == 1:  # a collective waits for comm only, not for compute
                preds = [(q, e) for q, e in preds if q >= 0 and self.kind[q] == 1]
            meas = [self.end[q] if q >= 0 else e for q, e in preds]
            new = [(end2[q], 1, q) if q >= 0 else (e, 2, 0) for q, e in preds]
            host_m = host_n = None
            if self.api[i] >= 0:
                host_m = self.api[i]
                host_n = self.api[i] + hosts[self.rank[i]].shift(self.api[i], end2)
            bind_m = max(meas + ([host_m] if host_m is not None else []), default=None)
            if bind_m is None:
                start2[i] = self.start[i]  # nothing in the trace explains when it started: as measured
            else:
                lag = max(0, self.start[i] - bind_m)
                if (sc.no_launch_overhead and host_m is not None and host_m >= max(meas, default=-1)
                        and (not sc.host_ranks or self.rank[i] in sc.host_ranks)):
                    # the launch was what it waited for: its call and its ordinary latency go; a delay
                    # beyond the rank's median is the device busy with work outside the graph (another
                    # process on a shared GPU: 7 ms on h100 ddp4_sync_stall rank 1), not launch overhead
                    lag = max(0.0, lag - self.launch_latency()[self.rank[i]])
                if i in stalled:  # its launch call returns after the rank's median call: the kernel is enqueued that much earlier
                    lag = max(0.0, lag - stalled[i][2])
                cands = new + ([(host_n, 3, host_n)] if host_n is not None else [])
                if cands:
                    bind_n, why_k[i], why_r[i] = max(cands, key=lambda c: c[0])
                else:
                    bind_n = self.start[i] - lag
                start2[i] = bind_n + lag
            end2[i] = start2[i] + dur[i] * factor[i]
            g = self.group[i]
            if g >= 0 and i == glast[g]:  # the last member to start (in measured order)
                m = mem[off[g]:off[g + 1]]
                last_m = max(self.start[k] for k in m)
                j = max(m, key=lambda k: start2[k])
                for k in m:  # the collective ends when its last member started, plus its own transfer
                    end2[k] = start2[j] + max(0, self.end[k] - last_m) * factor[k]
                    last_of[k] = j
        self._last = (start2, end2, (why_k, why_r), last_of, hosts)
        return self._spans(end2)

    def predicted_path(self, limit: int = 5) -> dict:
        """The critical path of the last replay, walked back from the op that ends last through what
        each start waited for: its time by kind, and its longest segments. It stops where the host
        released a launch or where the step began; where that host had returned from a synchronizing
        call, it goes on through the op the call waited for (the host was waiting for the GPU: on h100
        ddp4_sync_stall step 4, 525.6 ms called "host" were mostly syncs waiting for collectives)."""
        start2, end2, (why_k, why_r), last_of, hosts = self._last
        names = ("gpu_compute", "gpu_comm", "gpu_memory")
        first = int(np.argmax(end2))
        i: int | None = first
        t, segs = end2[first], []
        guard = 4 * len(self.op_id) + 8  # every move goes back in time; a bound all the same, never a hang
        while i is not None and t > 0 and guard > 0:
            guard -= 1
            j = last_of[i]
            if j >= 0 and j != i:  # a collective: it ended when member j started
                segs.append((self.rank[j], "gpu_comm", self.name[i], start2[j], t))
                i, t = j, start2[j]
                continue
            segs.append((self.rank[i], names[self.kind[i]], self.name[i], start2[i], t))
            kind, ref = _WHY[why_k[i]], why_r[i]
            if kind == "op":
                q = int(ref)
                segs.append((self.rank[i], "queued", self.name[i], end2[q], start2[i]))
                i, t = q, end2[q]
            elif kind == "host":
                segs.append((self.rank[i], "launch", self.name[i], ref, start2[i]))
                anchor = hosts[self.rank[i]].released_by(ref)
                if anchor is not None and (end2[anchor[1]] > anchor[0] or end2[anchor[1]] >= t):
                    # the call returned before its op ended (a pageable copy's last chunk still in
                    # flight): the host was held by the copy's progress, not its end; walking on
                    # through the op would go forward in time
                    anchor = None
                if anchor is None:
                    segs.append((self.rank[i], "host", None, 0, ref))
                    i = None
                else:  # host work since a sync returned, the sync's own tail, then the op it waited for
                    release, w = anchor
                    segs.append((self.rank[i], "host", None, release, ref))
                    segs.append((self.rank[i], "sync", None, end2[w], release))
                    i, t = w, end2[w]
            else:
                segs.append((self.rank[i], "before", None, 0, start2[i]))
                i = None
        segs = [(r, k, nm, max(a, 0), b) for r, k, nm, a, b in segs if b > max(a, 0)]
        by_kind: dict[str, int] = {}
        for _, k, _, a, b in segs:
            by_kind[k] = by_kind.get(k, 0) + int(b - a)
        top = sorted(segs, key=lambda x: x[3] - x[4])[:limit]
        return {"by_kind_ns": dict(sorted(by_kind.items(), key=lambda kv: -kv[1])),
                "longest": [{"rank": r, "kind": k, "name": nm, "dur_ns": int(b - a)} for r, k, nm, a, b in top]}

    def launch_latency(self) -> dict[int, float]:
        """Per rank: the median time from launch call to kernel start of the step's ops whose launch
        was what they waited for (their stream and dependencies were done): the launch's own cost."""
        if getattr(self, "_latency", None) is None:
            lags: dict[int, list] = {r: [] for r in set(self.rank)}
            for i in range(len(self.op_id)):
                if self.api[i] >= 0 and self.api[i] >= max((self.end[q] if q >= 0 else e for q, e in self._preds(i)), default=-1):
                    lags[self.rank[i]].append(self.start[i] - self.api[i])
            self._latency = {r: float(np.median(v)) if v else 0.0 for r, v in lags.items()}
        return self._latency

    def _hosts(self, sc: Scenario) -> dict[int, _Host]:
        """Each rank's host timeline under the scenario: the stretches of host time it removes (from
        host_time_spans: exactly the scenario's own cause) and whether syncs still wait."""
        causes = tuple(c for c, on in (("launch", sc.no_launch_overhead), ("allocator", sc.no_allocator_calls),
                                       ("sync", sc.no_host_syncs)) if on)
        edited = set(sc.host_ranks) if sc.host_ranks else set(self.rank)
        spans = self._cause_spans(causes) if causes else None
        holes: dict[int, list] = {}
        if sc.no_launch_overhead and not sc.no_launch_stall:
            # fewer launches (fusion, a CUDA graph) leave a stalled call's lazy load in place: only its
            # usual length goes (nsys graphs fixture step 4: "CUDA graphs ... 5.4 ms" was its 5.4 ms
            # first-launch stall, which --no-launch-stall alone gains)
            for i, (a, b, _) in self.launch_stalls().items():
                holes.setdefault(self.rank[i], []).append((a, b))
        more: dict[int, list] = {}
        for i, (a, b, _) in self._stalls_edited(sc).items():  # a stalled launch call's time beyond the median call
            more.setdefault(self.rank[i], []).append((a, b))
        dropped: dict[int, set] = {}  # sync calls that no longer happen (a stall's extra syncs)
        for r in sc.remove_host_stall:
            more.setdefault(r, []).extend((a, b) for a, b, _ in self.stall_cuts().get(r, []))
            extra = self.stall_syncs().get(r, [])
            more[r].extend((a, b) for _, a, b, _ in extra)
            dropped[r] = {o for o, _, _, _ in extra}
        hosts = {}
        for r in set(self.rank):  # one rank's stretches at a time (a launch's an op: not every rank's at once)
            cuts = spans.of(r) if spans is not None and r in edited else None
            if cuts is not None and r in holes:
                cuts = _minus(_union(cuts), _union(holes[r]))
            cuts = (cuts or []) + more.get(r, [])
            keep = [x for x, o in zip(self.syncs.get(r, []), self.sync_ids.get(r, [])) if o not in dropped.get(r, ())]
            hosts[r] = _Host(keep, _union(cuts), not (sc.no_host_syncs and r in edited), self.end)
        return hosts

    def launch_stalls(self) -> dict[int, tuple[float, float, float]]:
        """The step's ops whose launch call stalled (launch_overhead.stall: over 50x the rank's median
        launch call, a lazy module / code-object load in a kernel's first launch): op index ->
        (where the call's time beyond the rank's median launch call begins, where the call ends
        (relative), that excess). The fix (warm up, eager loading) leaves the call its usual length."""
        if getattr(self, "_launch_stalls", None) is None:
            rows = self.con.execute("""
                SELECT l.op_id, l.api_start_ns + m.med - ?, l.api_start_ns + l.api_ns - ?, l.api_ns - m.med
                FROM launch_overhead l JOIN (SELECT rank, median(api_ns) AS med FROM launch_overhead GROUP BY rank) m USING (rank)
                WHERE l.stall AND l.step = ?""", [self.t0, self.t0, self.step]).fetchall()
            self._launch_stalls = {self.pos[o]: (float(a), float(b), float(x)) for o, a, b, x in rows if o in self.pos}
        return self._launch_stalls

    def _stalls_edited(self, sc: Scenario) -> dict[int, tuple[float, float, float]]:
        if not sc.no_launch_stall:
            return {}
        return {i: v for i, v in self.launch_stalls().items() if not sc.host_ranks or self.rank[i] in sc.host_ranks}

    def _cause_spans(self, causes: tuple[str, ...]) -> _RankSpans:
        """The step's host stretches of these causes, per rank (relative times)."""
        if causes not in self._spans_by_cause:
            got = self.con.execute("""SELECT rank, start_ns - ? AS a, end_ns - ? AS b FROM tf_internal.host_time_spans
                                      WHERE step = ? AND list_contains(?, cause) ORDER BY rank, start_ns""",
                                   [self.t0, self.t0, self.step, list(causes)]).fetchnumpy()
            self._spans_by_cause[causes] = _RankSpans(*(np.asarray(got[k]) for k in ("rank", "a", "b")))
        return self._spans_by_cause[causes]

    def stall_cuts(self) -> dict[int, list[tuple[float, float, str]]]:
        """Each rank's abnormal host time in this step: for each host cause that is neither a launch
        nor a sync (no_op, cpu_op, data_loading, allocator, cuda_other, jit_compile), its time in the step beyond
        the rank's median over its steps (host_time) where it is abnormal (beyond the median by more
        than OUTLIER_MADS scaled median absolute deviations: a robust outlier bound, so that a step a
        little above the median keeps its time), cut from the cause's longest stretches in the
        step, the longest first. Returns rank -> [(start, end, cause)] of the time removed (relative),
        whatever range or annotation it sits in."""
        if getattr(self, "_stall_cuts", None) is None:
            rows = self.con.execute(f"""
                WITH ex AS ({_EXCESS_SQL.format(MIN_STALL_SHARE=MIN_STALL_SHARE)}),
                sp AS (SELECT rank, cause, start_ns, end_ns, end_ns - start_ns AS len,
                              sum(end_ns - start_ns) OVER (PARTITION BY rank, cause ORDER BY end_ns - start_ns DESC, start_ns
                                                           ROWS UNBOUNDED PRECEDING) AS run
                       FROM tf_internal.host_time_spans WHERE step = ? AND list_contains(?, cause))
                SELECT sp.rank, sp.end_ns - least(sp.len, ex.excess - (sp.run - sp.len)) - ?, sp.end_ns - ?, sp.cause
                FROM sp JOIN ex USING (rank, cause) WHERE ex.step = ? AND sp.run - sp.len < ex.excess
                ORDER BY sp.rank, sp.start_ns""", [list(STALL_CAUSES), OUTLIER_MADS, self.step, list(STALL_CAUSES),
                                                   self.t0, self.t0, self.step]).fetchall()
            out: dict[int, list] = {}
            for r, a, b, c in rows:
                out.setdefault(int(r), []).append((float(a), float(b), c))
            self._stall_cuts = out
        return self._stall_cuts

    def stall_syncs(self) -> dict[int, list[tuple[int, float, float, str]]]:
        """The synchronizing calls that belong to a rank's stall in this step: in a step where the rank
        has abnormal host time (stall_cuts), the extra blocking call (queries/sync_extra.sql) that
        returned last of those begun before the stall's first removed stretch. A `torch.cuda.synchronize()` made only
        in the stalled step drains the GPU's queue, and that is what lets the stall idle the GPU: on
        the bundled ddp2_flops pair, removing the sleep alone predicts 49.8 ms against the clean run's
        48.3; with its synchronize, 48.6. Only that one: long4's nsys steps 1-10 each hold 8
        cudaEventSynchronize the other 30 steps lack, all "extra", and a stall there must not take
        300 ms waits elsewhere in the step with it. Returns rank -> [(sync op id, start, end, name)]
        (relative)."""
        if getattr(self, "_stall_syncs", None) is None:
            cuts = self.stall_cuts()
            ranks = [int(r) for r in cuts]
            rows = self.con.execute(_EXTRA_SYNC_SQL, [self.t0, self.t0, self.step, ranks]).fetchall() if ranks else []
            out: dict[int, list] = {}
            for o, r, a, b, nm in rows:
                first = min(x for x, _, _ in cuts[int(r)])
                # began before the stall (it may return a few hundred ns into it: on h100 nsys ddp4
                # rank 3 the no_op stretch begins 96 ns before cudaDeviceSynchronize returns)
                if a <= first and (int(r) not in out or b > out[int(r)][0][2]):
                    out[int(r)] = [(o, float(a), float(b), nm)]
            self._stall_syncs = out
        return self._stall_syncs

    def _straggler_factors(self) -> np.ndarray:
        """Every rank's compute in the step scaled down to the median rank's."""
        kinds, ranks = np.array(self.kind), np.array(self.rank)
        dur = np.array(self.end) - np.array(self.start)
        totals = {r: float(dur[(ranks == r) & (kinds == 0)].sum()) for r in set(self.rank)}
        med = float(np.median(list(totals.values())))
        f = np.ones(len(ranks))
        for r, tot in totals.items():
            if tot > med > 0:
                f[(ranks == r) & (kinds == 0)] = med / tot
        return f

OUTLIER_MADS = 3 * 1.4826  # 3 standard deviations of a normal spread, estimated from the MAD
STALL_CAUSES = ("no_op", "cpu_op", "data_loading", "allocator", "cuda_other", "jit_compile")  # host work, not waits nor launches
MIN_STALL_SHARE = 0.01  # an excess under 1 % of the rank's median step is not a stall worth naming (0.1 ms on long4)
# Per rank, step and host cause: its time beyond the rank's median over its steps, where abnormal.
# Parameters: the causes, OUTLIER_MADS.
_EXCESS_SQL = """
    WITH per AS (SELECT rank, step, cause, ns, step_ns FROM host_time WHERE list_contains(?, cause) AND ns IS NOT NULL),
    base AS (SELECT rank, cause, median(ns) AS med, mad(ns) AS mad, median(step_ns) AS step_med FROM per GROUP BY ALL)
    SELECT p.rank, p.step, p.cause, p.ns - b.med AS excess FROM per p JOIN base b USING (rank, cause)
    WHERE p.ns > b.med + ? * b.mad AND p.ns - b.med >= {MIN_STALL_SHARE} * b.step_med"""


# A rank's stall's extra blocking calls in a step (queries/sync_extra.sql). Parameters: t0 twice, the step, the ranks.
_EXTRA_SYNC_SQL = """SELECT op_id, rank, start_ns - ?, end_ns - ?, name FROM sync_extra
                     WHERE step = ? AND list_contains(?, rank) ORDER BY rank, start_ns"""


# One step's GPU ops with their constraints (queries/cp_graph.sql), unsorted: StepGraph sorts them.
_OPS_SQL = """
    SELECT g.op_id, g.rank, g.start_ns AS start, g.end_ns AS "end", g.name,
           CASE g.category WHEN 'communication' THEN 1 WHEN 'memory' THEN 2 ELSE 0 END AS kind,
           coalesce(g.api_start_ns, -1) AS api,
           coalesce(p.stream_prev, -1) AS sp, coalesce(p.dep_op_id, -1) AS dep, c.comm, c.step AS seq_step, c.seq
    FROM gpu_ops g JOIN tf_internal.cp_gpu_preds p USING (op_id)
    -- the collectives matched across ranks as the claims and the critical path match them
    -- (queries/collective_waits.sql: point-to-point pairs that cannot be one transfer and ranks
    -- of unnamed communicators that cannot be told apart are left out): one definition
    LEFT JOIN collective_waits c USING (op_id)
    WHERE g.step = ?"""

_DTYPES = {"q": np.int64, "i": np.int32, "b": np.int8, "d": np.float64}


def _col(code: str, values) -> array:
    """A column as array.array: 8 (or 4, 1) bytes an item, read one at a time as plain Python numbers."""
    return array(code, np.asarray(values, dtype=_DTYPES[code]).tobytes())


def _codes(column, table: dict) -> np.ndarray:
    """An Arrow column of strings as codes into `table` (string -> code, grown as new ones come); -1: null."""
    d = column.dictionary_encode()
    local = np.array([table.setdefault(x, len(table)) for x in d.dictionary.to_pylist()] + [-1], dtype=np.int64)
    return local[d.indices.fill_null(-1).to_numpy(zero_copy_only=False)]


class _Names:
    """The ops' kernel names as a sequence: each distinct name once, a code per op (a step's kernels
    repeat a few names: 1,024 ranks of bench/cluster.py's copies, 216,064 ops)."""

    def __init__(self, names: list, codes: np.ndarray):
        self.names, self.codes = names, _col("i", codes)

    def __len__(self) -> int:
        return len(self.codes)

    def __getitem__(self, i: int):
        c = self.codes[i]
        return None if c < 0 else self.names[c]

    def __iter__(self):
        names = self.names
        return (None if c < 0 else names[c] for c in self.codes)

    def map(self, f) -> np.ndarray:
        """f of each op's name, computed once per distinct name."""
        return np.array([f(x) for x in self.names] + [f(None)])[np.asarray(self.codes)]


class _RankSpans:
    """Stretches of host time sorted by rank, as three columns (24 bytes a stretch, where a list of
    tuples per rank took ~110: a launch's stretch is one an op)."""

    def __init__(self, rank: np.ndarray, start: np.ndarray, end: np.ndarray):
        self.rank, self.start, self.end = rank, start.astype(np.float64), end.astype(np.float64)

    def of(self, r: int) -> list[tuple[float, float]] | None:
        """Rank r's stretches, [(start, end)]; None where it has none."""
        i, j = np.searchsorted(self.rank, r, side="left"), np.searchsorted(self.rank, r, side="right")
        return list(zip(self.start[i:j].tolist(), self.end[i:j].tolist())) if j > i else None


class _Pos:
    """Op id -> index in the step, for ids in index order: a sorted copy of the ids and their indices
    (12 bytes an op, where a dict took ~100)."""

    def __init__(self, ids: np.ndarray):
        self._order = np.argsort(ids, kind="stable").astype(np.int32)
        self._sorted = ids[self._order]

    def indices(self, x: np.ndarray) -> np.ndarray:
        """Each id's index; -1 where it is not in the step."""
        if not len(self._sorted):
            return np.full(len(x), -1, dtype=np.int64)
        j = np.minimum(np.searchsorted(self._sorted, x), len(self._sorted) - 1)
        return np.where(self._sorted[j] == x, self._order[j], -1)

    def get(self, o, default=None):
        j = int(np.searchsorted(self._sorted, o))
        return int(self._order[j]) if j < len(self._sorted) and self._sorted[j] == o else default

    def __contains__(self, o) -> bool:
        return self.get(o) is not None

    def __getitem__(self, o) -> int:
        i = self.get(o)
        if i is None:
            raise KeyError(o)
        return i


def _union(cuts: list) -> list:
    """Sorted, disjoint stretches covering `cuts` (a stall's sync call and its host spans may touch)."""
    out: list = []
    for a, b in sorted(cuts):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _minus(spans: list, holes: list) -> list:
    """The parts of sorted disjoint `spans` outside sorted disjoint `holes`."""
    out: list = []
    for a, b in spans:
        for h0, h1 in holes:
            if h1 <= a or h0 >= b:
                continue
            if h0 > a:
                out.append((a, h0))
            a = max(a, h1)
            if a >= b:
                break
        if a < b:
            out.append((a, b))
    return out


def abnormal_host_time(con, skip_step: int | None = None) -> list[tuple[int, int, str, int]]:
    """(rank, step, cause, excess ns) of every abnormal host time of the job (the stall what-if's
    definition: StepGraph.stall_cuts), the largest first."""
    return con.execute(f"""SELECT rank, step, arg_max(cause, excess), sum(excess)::BIGINT AS ns FROM ({_EXCESS_SQL.format(MIN_STALL_SHARE=MIN_STALL_SHARE)})
                           WHERE step IS DISTINCT FROM ? GROUP BY rank, step ORDER BY ns DESC, rank, step""",
                       [list(STALL_CAUSES), OUTLIER_MADS, skip_step]).fetchall()


class _Host:
    """One rank's host timeline in the replay: how far a host time t has moved. Removed stretches
    (`cuts`, sorted, disjoint) bring every later call earlier; a synchronizing call returns when the
    op it waited for ends in the replay, so the host re-anchors there (unless syncs are removed)."""

    def __init__(self, syncs: list, cuts: list, anchor: bool, end_m):
        self.syncs = syncs if anchor else []  # (start, end, index of the op it waited for or -1)
        self.end_m = end_m
        self.cut_start = np.array([a for a, _ in cuts], dtype=np.float64)
        self.cut_end = np.array([b for _, b in cuts], dtype=np.float64)
        self.cum = np.concatenate([[0.0], np.cumsum(self.cut_end - self.cut_start)])
        self.a_end: list[float] = []   # end of each sync call that re-anchored, in order
        self.a_shift: list[float] = []  # the shift right after it
        self.a_op: list[int] = []       # the op (index) it waited for
        self.a_waited: list[bool] = []  # whether it waited for that op (the host reached it before the op ended)
        self.k = 0                      # next sync call to look at

    def removed(self, t: float) -> float:
        """Host time removed before t."""
        j = int(np.searchsorted(self.cut_end, t, side="right"))
        part = max(0.0, t - self.cut_start[j]) if j < len(self.cut_start) else 0.0
        return float(self.cum[j]) + part

    def _at(self, t: float) -> float:
        j = bisect.bisect_right(self.a_end, t) - 1
        if j < 0:
            return -self.removed(t)
        return self.a_shift[j] - (self.removed(t) - self.removed(self.a_end[j]))

    def shift(self, t: float, end2: Sequence[float]) -> float:
        while self.k < len(self.syncs) and self.syncs[self.k][1] <= t:
            s, e, w = self.syncs[self.k]
            self.k += 1
            if w >= 0:
                wi = w
                arrive = s + self._at(s)
                release = max(arrive, end2[wi])
                self.a_end.append(e)
                self.a_shift.append(release + (e - max(s, self.end_m[wi])) - e)
                self.a_op.append(wi)
                self.a_waited.append(arrive < end2[wi])
        return self._at(t)

    def released_by(self, t: float) -> tuple[float, int] | None:
        """The replayed return of the latest sync call that held this host until its op ended, at or
        before host time t (replayed), with that op; None where none had. A call the host reached
        after its op had ended returned at once: the host, not the GPU, set its time (on h100
        ddp4_sync_stall step 4 without launch overhead, rank 3 reaches five syncs 3.4 ms after their
        ops ended), so the walk goes on along the host past it."""
        for j in range(len(self.a_end) - 1, -1, -1):
            back = self.a_end[j] + self.a_shift[j]
            if back <= t and self.a_waited[j]:
                return back, self.a_op[j]
        return None


def whatif(con, steps: list[int], scenario: Scenario) -> list[dict]:
    """Per step: measured, replayed (unedited graph) and predicted step time for the job and per
    rank (ns), the replay's error, and whether the prediction stands (error within MAX_ERROR_PCT)."""
    return [_one(StepGraph(con, step), scenario) for step in steps]


def _one(g: StepGraph, scenario: Scenario, replayed: tuple | None = None) -> dict:
    measured, m_ranks = g.measured()
    replayed_ns, r_ranks = replayed or g.replay(Scenario())
    predicted, p_ranks = g.replay(scenario)
    path = g.predicted_path()
    err = 100.0 * abs(replayed_ns - measured) / measured if measured else 0.0
    ok = err <= MAX_ERROR_PCT
    return {"step": g.step, "scenario": scenario.describe(), "measured_ns": int(measured),
            "replayed_ns": int(replayed_ns), "replay_error_pct": round(err, 3),
            "predicted_ns": int(predicted) if ok else None,
            "gain_ns": int(measured - predicted) if ok else None,
            "refused": None if ok else f"the replay of the measured graph is {err:.1f}% off the measured step "
                                        f"(bound {MAX_ERROR_PCT}%): the trace lacks records the graph needs",
            "critical_path": path if ok else None,
            "ranks": [{"rank": r, "measured_ns": int(m_ranks[r]), "replayed_ns": int(r_ranks[r]),
                       "predicted_ns": int(p_ranks[r]) if ok else None} for r in m_ranks]}


def best_fixes(con, top: int = 3, skip_step: int | None = None) -> list[dict]:
    """The fixed set of scenarios on the slowest step, the median step and the step holding the job's
    largest abnormal host time (not `skip_step`: the verdict's warm-up step, whose one-off costs no
    fix repeats). A fix is worth what it gains on the step where it gains the most: a one-off fault
    gains on its own step only, and averaging that with steps it does not touch would rank it below
    fixes worth less on that very step. What the verdict's last line and the report's "what if"
    section show, the largest gain first."""
    # Long because: one pass of every candidate over each step's graph (one graph alive at a time),
    # then the rows ranked, the stall named, and the best step's graph built again to attribute.
    walls = con.execute("""SELECT step, max(end_ns) - min(start_ns) AS w FROM tf_internal.step_windows
                           WHERE step IS DISTINCT FROM ? GROUP BY step ORDER BY w, step""", [skip_step]).fetchall()
    if not walls:
        return []
    have = {w[0] for w in walls}
    abnormal = [a for a in abnormal_host_time(con, skip_step) if a[1] in have]
    steps = sorted({walls[-1][0], walls[len(walls) // 2][0]} | ({abnormal[0][1]} if abnormal else set()))
    candidates = [Scenario(no_launch_overhead=True), Scenario(no_allocator_calls=True), Scenario(no_host_syncs=True),
                  Scenario(overlap_comm=True), Scenario(no_stragglers=True), Scenario(scale_kind={"compute": 0.5})]
    if _copies_share(con, steps) >= 0.1:  # copies twice as fast: the yardstick where copies are much of the GPU time
        candidates.append(Scenario(scale_kind={"memory": 0.5}))
    if abnormal:
        candidates.insert(0, Scenario(remove_host_stall=[abnormal[0][0]]))
    # one step's graph at a time (each holds every rank's ops of its step: 40 MiB of Python at 256
    # ranks of bench/cluster.py's copies): every candidate replayed on it, then it goes
    per_sc: list[list[dict]] = [[] for _ in candidates]
    after: list[str] = []  # the stall's extra syncs (in its own step)
    for s in steps:
        g = StepGraph(con, s)
        b = g.replay(Scenario())
        for rows, sc in zip(per_sc, candidates):
            rows.append(_one(g, sc, b))
        if abnormal and s == abnormal[0][1]:
            after = sorted({nm for _, _, _, nm in g.stall_syncs().get(abnormal[0][0], [])})
        del g  # before the next step's graph is built
    out = []
    attribute: list[tuple[dict, Scenario, str, dict]] = []
    for sc, rows in zip(candidates, per_sc):
        if any(r["predicted_ns"] is None for r in rows):
            continue
        best = max(rows, key=lambda r: (r["gain_ns"], -r["step"]))
        fix = {"scenario": sc.describe(), "gain_ns": int(best["gain_ns"]), "step": best["step"], "steps": rows,
               "gain_pct": round(100.0 * best["gain_ns"] / best["measured_ns"], 1) if best["measured_ns"] else 0.0}
        cause = "launch" if sc.no_launch_overhead else "allocator" if sc.no_allocator_calls else "sync" if sc.no_host_syncs else None
        if cause and fix["gain_ns"] > 0:
            fix["fault"] = None  # _attribute's, below (the key kept in its place: the stored JSON's order)
            attribute.append((fix, sc, cause, best))
        if sc.scale_kind:
            fix["reference"] = True
        if sc.remove_host_stall:  # what it removes: the fault, named
            rank, step, cause, ns = abnormal[0]
            fix["fault"] = {"rank": rank, "step": step, "cause": cause, "host_ns": int(ns)}
            if after:
                fix["fault"]["after_sync"] = after
            fix["scenario"] = (f"no host stall on rank {rank} ({ns / 1e6:.1f} ms of abnormal {cause} host time in step {step}"
                               + (f", after an extra {' and '.join(after)}" if after else "") + ")")
        out.append(fix)
    for s in sorted({best["step"] for _, _, _, best in attribute}):  # the best step's graph again, one at a time
        g = StepGraph(con, s)
        for fix, sc, cause, best in attribute:
            if best["step"] == s and (f := _attribute(con, g, sc, cause, best)):
                fix["fault"] = f
                fix["scenario"] += (f" ({f['gain_ns'] / 1e6:.1f} ms of it from rank {f['rank']}'s {cause} calls alone "
                                    f"in step {f['step']})")
        del g
    # "compute twice as fast" is a yardstick, not a fix one can make: after the fixes, where room is left
    fixes = _same_fault_after_stall(sorted((f for f in out if not f.get("reference")), key=lambda r: -r["gain_ns"]))
    return fixes[:top] + [f for f in out if f.get("reference")]


def _copies_share(con, steps: list[int]) -> float:
    """Copies' and memsets' share of the GPU op time of these steps (the ops of their graphs, StepGraph)."""
    tot, mem = con.execute("""
        SELECT sum(g.end_ns - g.start_ns)::DOUBLE, coalesce(sum(g.end_ns - g.start_ns) FILTER (WHERE g.category = 'memory'), 0)::DOUBLE
        FROM gpu_ops g JOIN tf_internal.cp_gpu_preds p USING (op_id) LEFT JOIN collective_waits c USING (op_id)
        WHERE list_contains(?, g.step)""", [list(steps)]).fetchone()
    return mem / tot if tot else 0.0


def _same_fault_after_stall(fixes: list[dict]) -> list[dict]:
    """A host-cause fix whose gain comes from the stall's own rank and step, no more than the stall
    fix gains, is that fault found a second way (on h100 ddp4_sync_stall, "no host syncs" gains
    17.2 ms on step 4, 15.3 of it rank 3's synchronize before its sleep: the stall fix, with that
    synchronize, gains the same 15.3). The stall names the whole fault, so it comes first and the
    other fix says what it shares with it; their order otherwise stays by gain."""
    stall = next((f for f in fixes if "host_ns" in (f.get("fault") or {})), None)
    if stall is None:
        return fixes
    s = stall["fault"]
    same = [f for f in fixes if f is not stall and f.get("fault") and "host_ns" not in f["fault"]
            and (f["fault"]["rank"], f["fault"]["step"]) == (s["rank"], s["step"])
            and f["fault"]["gain_ns"] <= 1.01 * stall["gain_ns"]]
    for f in same:
        f["same_fault"] = True
        f["scenario"] = f["scenario"][:-1] + ": the stall above)" if f["scenario"].endswith(")") else f["scenario"]
    ahead = [f for f in fixes if f is not stall and f not in same and f["gain_ns"] > stall["gain_ns"]]
    rest = [f for f in fixes if f is not stall and f not in same and f not in ahead]
    return ahead + [stall] + same + rest


def _attribute(con, g: StepGraph, sc: Scenario, cause: str, row: dict, candidates: int = 4) -> dict | None:
    """Which rank's edit a host-cause fix's gain on its step comes from: the scenario replayed on one
    rank at a time (the `candidates` ranks whose GPU idled longest through that cause in the step,
    host_time); the rank whose edit alone gains the most, with its share of the whole fix's gain."""
    ranks = [r for r, in con.execute("""SELECT rank FROM host_time WHERE step = ? AND cause = ? AND gpu_idle_ns > 0
                                        ORDER BY gpu_idle_ns DESC, rank LIMIT ?""", [g.step, cause, candidates]).fetchall()]
    best = None
    for r in ranks:
        alone = replace(sc, host_ranks=[r])
        gain = row["replayed_ns"] - g.replay(alone)[0]
        if best is None or gain > best[1]:
            best = (r, gain)
    if best is None or best[1] <= 0:
        return None
    return {"rank": int(best[0]), "step": g.step, "cause": cause, "gain_ns": int(best[1]),
            "share": round(float(best[1]) / row["gain_ns"], 3) if row["gain_ns"] else None}


MAX_FACTOR = 1000.0  # what --scale-kernels / --scale-kind accept: an hour-long step stays far inside int64 ns


def parse_scenario(scale_kernels=(), scale_kind=(), remove_host_stall=(), no_launch_overhead=False,
                   overlap_comm=False, no_stragglers=False, no_allocator_calls=False, no_host_syncs=False,
                   host_ranks=(), no_launch_stall=False) -> Scenario:
    """A Scenario from the command line's strings: 'PATTERN=FACTOR', 'compute=0.5'."""
    def pair(text: str, flag: str) -> tuple[str, float]:
        key, sep, value = text.rpartition("=")
        try:
            f = float(value)
        except ValueError:
            f = -1.0
        # at most MAX_FACTOR: 'comm=inf' ended in an internal error (OverflowError), '.*=1e308' in
        # numpy overflow warnings and a step of 3.9e13 ms
        if not sep or not key or not 0 <= f <= MAX_FACTOR:
            raise UsageError(f"{flag} {text!r}: expected NAME=FACTOR with a factor from 0 to {MAX_FACTOR:g}, "
                             "e.g. '.*flash.*=0.5'")
        return key, f
    kernels = [pair(t, "--scale-kernels") for t in scale_kernels]
    for pat, _ in kernels:
        try:
            re.compile(pat)
        except re.error as e:
            raise UsageError(f"--scale-kernels {pat!r}: not a regular expression ({e})") from None
    kinds = dict(pair(t, "--scale-kind") for t in scale_kind)
    bad = set(kinds) - set(KINDS)
    if bad:
        raise UsageError(f"--scale-kind {sorted(bad)[0]!r}: one of compute, comm, memory")
    return Scenario(scale_kernels=kernels, scale_kind=kinds, remove_host_stall=list(remove_host_stall),
                    no_launch_overhead=no_launch_overhead, overlap_comm=overlap_comm, no_stragglers=no_stragglers,
                    no_allocator_calls=no_allocator_calls, no_host_syncs=no_host_syncs, host_ranks=list(host_ranks),
                    no_launch_stall=no_launch_stall)
