"""The critical-path walk on small graphs built here (times and edges, no trace files): runs in a
clean clone without ../shared. Each case states the path a person would draw by hand."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from traceflow.critical_path import KINDS, Graph, Walk
from traceflow.critical_path.graph import HOST_COLUMNS, ROLE_CODES


def build(ops: list[dict], calls: list[dict] = ()) -> Graph:
    """ops: op_id, rank, start, end and optionally cat (0 compute, 1 comm, 2 memory), api/ltid (the
    launch call's start and thread), prev/dep (op_ids), grp (a collective across ranks).
    calls: rank, tid, start, end, op (node id), role (other/sync/launch), waited (an op_id)."""
    ops = sorted(ops, key=lambda o: o["op_id"])
    col = lambda k, d=-1: [o.get(k, d) for o in ops]
    g = Graph(col("op_id"), col("rank"), col("start"), col("end"), col("cat", 0), col("api"), col("ltid"),
              col("prev"), col("dep"), col("grp"))
    names = dict(zip(HOST_COLUMNS, ("rank", "tid", "start", "end", "op", "role", "waited")))
    g.set_host_calls({c: [ROLE_CODES[k[n]] if n == "role" else k.get(n, -1) for k in calls]
                      for c, n in names.items()})
    return g


def path(g: Graph, t0: int, last_op_id: int, **kw) -> list[tuple]:
    """(rank, kind, start, end) per segment, in time order."""
    segs = Walk(g, t0, **kw).run(int(np.searchsorted(g.op_id, last_op_id)))
    return [(int(r), KINDS[k], int(a), int(b)) for r, k, a, b, _, _ in segs]


def test_a_stream_with_a_gap_nothing_explains():
    g = build([dict(op_id=1, rank=0, start=0, end=10), dict(op_id=2, rank=0, start=15, end=20, prev=1)])
    assert path(g, 0, 2) == [(0, "gpu_compute", 0, 10), (0, "idle", 10, 15), (0, "gpu_compute", 15, 20)]


def test_a_late_launch_charges_the_host_from_the_gpus_own_predecessor():
    """Op 2 was launched at 12, after op 1 ended at 10: launch from 12, the thread's own code
    before it back to 10, and nothing of the host before 10 (it overlapped op 1)."""
    g = build([dict(op_id=1, rank=0, start=0, end=10, api=0, ltid=7),
               dict(op_id=2, rank=0, start=15, end=20, prev=1, api=12, ltid=7)],
              [dict(rank=0, tid=7, start=0, end=1, op=101, role="launch"),
               dict(rank=0, tid=7, start=12, end=13, op=102, role="launch")])
    assert path(g, 0, 2) == [(0, "gpu_compute", 0, 10), (0, "host_cpu", 10, 12), (0, "launch", 12, 15),
                             (0, "gpu_compute", 15, 20)]


def test_a_collective_is_charged_to_the_rank_that_started_it_last():
    """Rank 0 reached the all-reduce at 10 and waited for rank 1 (computing until 25): the path
    runs on rank 1; rank 0's wait is not on it."""
    g = build([dict(op_id=1, rank=0, start=0, end=10), dict(op_id=2, rank=0, start=10, end=30, cat=1, prev=1, grp=1),
               dict(op_id=3, rank=1, start=0, end=25), dict(op_id=4, rank=1, start=25, end=30, cat=1, prev=3, grp=1)])
    assert path(g, 0, 2) == [(1, "gpu_compute", 0, 25), (1, "gpu_comm", 25, 30)]


def test_a_peer_that_starts_after_the_collective_ended_is_peer_wait():
    """Rank 1's member starts at 35, after rank 0's ended at 30 (a clock that disagrees): the walk
    cannot follow it, and rank 0's time in the collective is a wait for a peer."""
    g = build([dict(op_id=1, rank=0, start=0, end=10), dict(op_id=2, rank=0, start=10, end=30, cat=1, prev=1, grp=1),
               dict(op_id=3, rank=1, start=35, end=40, cat=1, grp=1)])
    assert path(g, 0, 2) == [(0, "gpu_compute", 0, 10), (0, "peer_wait", 10, 30)]


@pytest.mark.parametrize("same_stream", [True, False])
def test_a_synchronize_hands_the_walk_back_to_the_op_it_waited_for(same_stream):
    """The host blocked in a sync from 2 until op 1 ended at 10, then launched op 2. Op 2 on op 1's
    stream reaches op 1 through the stream; on another stream, only through the sync call."""
    prev = 1 if same_stream else -1
    g = build([dict(op_id=1, rank=0, start=0, end=10, api=0, ltid=7),
               dict(op_id=2, rank=0, start=14, end=20, prev=prev, api=12, ltid=7)],
              [dict(rank=0, tid=7, start=0, end=1, op=101, role="launch"),
               dict(rank=0, tid=7, start=2, end=12, op=103, role="sync", waited=1),
               dict(rank=0, tid=7, start=12, end=13, op=102, role="launch")])
    assert path(g, 0, 2) == [(0, "gpu_compute", 0, 10), (0, "host_sync", 10, 12), (0, "launch", 12, 14),
                             (0, "gpu_compute", 14, 20)]


def test_the_walk_stops_at_the_steps_start():
    g = build([dict(op_id=1, rank=0, start=0, end=10), dict(op_id=2, rank=0, start=15, end=20, prev=1)])
    assert path(g, 12, 2) == [(0, "idle", 12, 15), (0, "gpu_compute", 15, 20)]


def test_a_graph_must_come_sorted_by_op_id():
    with pytest.raises(ValueError, match="sorted by op_id"):
        Graph([2, 1], [0, 0], [0, 5], [5, 9], [0, 0], [-1, -1], [-1, -1], [-1, -1], [-1, -1], [-1, -1])


@st.composite
def jobs(draw):
    """A plausible job: per rank one host thread that launches ops in order onto two streams,
    sometimes synchronizes on the last op, and ends each rank with an all-reduce that all ranks join."""
    n_ranks = draw(st.integers(1, 3))
    ops, calls, op_id, call_id = [], [], 1, 1000
    time = st.integers(0, 20)
    for rank in range(n_ranks):
        t, last_on = 0, {}
        for _ in range(draw(st.integers(1, 30))):
            t += draw(time)
            if draw(st.integers(0, 5)) == 0 and last_on:  # a synchronize on the latest op
                waited = max(last_on.values(), key=lambda o: o["end"])
                end = max(t + 1, waited["end"] + draw(time))
                calls.append(dict(rank=rank, tid=1, start=t, end=end, op=call_id, role="sync", waited=waited["op_id"]))
                t, call_id = end, call_id + 1
                continue
            stream = draw(st.integers(0, 1))
            launch_end = t + 1 + draw(time)
            calls.append(dict(rank=rank, tid=1, start=t, end=launch_end, op=call_id, role="launch"))
            prev = last_on.get(stream)
            start = max(launch_end + draw(time), prev["end"] if prev else 0)
            op = dict(op_id=op_id, rank=rank, start=start, end=start + 1 + draw(st.integers(0, 50)), api=t, ltid=1,
                      prev=prev["op_id"] if prev else -1, cat=draw(st.integers(0, 2)))
            ops.append(op)
            last_on[stream], op_id, call_id, t = op, op_id + 1, call_id + 1, launch_end
            if draw(st.booleans()):  # the thread's own code between calls
                t += draw(time)
        prev = max(last_on.values(), key=lambda o: o["end"]) if last_on else None
        start = (prev["end"] if prev else 0) + draw(time)
        ops.append(dict(op_id=op_id, rank=rank, start=start, end=start + 5, cat=1, grp=1,
                        prev=prev["op_id"] if prev else -1))
        op_id += 1
    # a collective ends everywhere when its last member has started
    members = [o for o in ops if o.get("grp") == 1]
    last_start = max(o["start"] for o in members)
    for o in members:
        o["end"] = last_start + 5
    return ops, calls


@settings(max_examples=150, deadline=None, database=None)  # no .hypothesis folder left in the clone
@given(jobs(), st.integers(0, 40))
def test_segments_tile_the_step_and_numpy_stretches_equal_the_loop(job, t0):
    ops, calls = job
    g = build(ops, calls)
    last = max(ops, key=lambda o: (o["end"], -o["op_id"]))["op_id"]
    end = max(o["end"] for o in ops)
    loop = path(g, t0, last, scalar_host_calls=10**9)
    assert loop == path(g, t0, last, scalar_host_calls=0)
    if end <= t0:
        assert loop == []
        return
    assert loop[0][2] == t0 and loop[-1][3] == end
    assert all(a[3] == b[2] for a, b in zip(loop, loop[1:])), "contiguous, no overlap"
    assert all(b > a for _, _, a, b in loop)
    ranks = {o["rank"] for o in ops}
    assert {r for r, *_ in loop} <= ranks
