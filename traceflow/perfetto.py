"""`traceflow annotate`: the job as a Perfetto trace (protobuf TrackEvent) with the findings overlaid.

Per rank one process holding its host threads, its GPU streams and traceflow's own tracks:
steps, idle gaps (labelled with their cause), exposed communication and the critical path,
whose rank changes are drawn as flow arrows. Slices on one track are made to nest (a child
that outlives its parent is cut at the parent's end), so Perfetto shows every one of them.

Size: one trace's tracks, slices and flows from SQL; the packet encoding is perfetto_packets.py.
"""
from __future__ import annotations

import gzip
import hashlib
import os
from typing import TYPE_CHECKING

import numpy as np
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TracePacket
from perfetto.trace_builder.proto_builder import StreamingTraceProtoBuilder

from .duck import arrow_table
from .errors import UsageError
from .outputs import PERFETTO_MARK, atomic_output, check_output
from .perfetto_packets import Interner, counter_packets, slice_packets

if TYPE_CHECKING:
    from .views import JobView

READS = frozenset({"critical_path", "exposed_comm_segments", "gpu_ops", "host_ops", "idle_gaps", "memory_events", "ranges",
                   "step_breakdown", "step_windows", "traces"})  # the tables its SQL reads (tests/test_layers.py)

SEQ = 0x7F1F


def _uuid(*parts) -> int:
    return int.from_bytes(hashlib.blake2b("/".join(map(str, parts)).encode(), digest_size=8).digest(), "little") >> 1


class _Writer:
    def __init__(self, f):
        self.f, self.b = f, StreamingTraceProtoBuilder(f)
        self.first = True
        self.n_slices = 0
        self.interner = Interner(SEQ)
        # The first packet marks the file as traceflow's, so that a later `annotate -o` may replace
        # it (outputs.check_output). trace_uuid shares a oneof with the other payloads: a packet of its own.
        p = self.b.create_packet()
        p.trace_uuid.lsb = PERFETTO_MARK
        p.trace_uuid.msb = int.from_bytes(os.urandom(8), "little") >> 1
        self.b.write_packet(p)

    def packet(self) -> TracePacket:
        p = self.b.create_packet()
        p.trusted_packet_sequence_id = SEQ
        if self.first:
            p.sequence_flags = TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
            self.first = False
        return p

    def track(self, uuid, name=None, parent=None, pid=None, tid=None, process_name=None, thread_name=None):
        p = self.packet()
        d = p.track_descriptor
        d.uuid = uuid
        if parent is not None:
            d.parent_uuid = parent
        if name is not None:
            d.name = name
        if pid is not None and tid is None:
            d.process.pid = pid
            d.process.process_name = process_name or name or ""
        if tid is not None:
            d.thread.pid = pid
            d.thread.tid = tid
            d.thread.thread_name = thread_name or name or ""
        self.b.write_packet(p)

    def slices(self, uuid, con, sql: str, params, name: str, args: tuple[str, ...]):
        """The slices a query returns (start_ns, end_ns, the name column, the args columns and,
        when present, flow_out / flow_in ids), encoded column by column."""
        self.slices_of(uuid, arrow_table(con, sql, params), name, args)

    def slices_of(self, uuid, t, name: str, args: tuple[str, ...]):
        """The same for an Arrow table at hand."""
        flows = {field: t[c].combine_chunks() for field, c in ((47, "flow_out"), (48, "flow_in")) if c in t.column_names}
        self.n_slices += slice_packets(self.f, SEQ, uuid, t["start_ns"].to_numpy(), t["end_ns"].to_numpy(),
                                       t[name].combine_chunks(), {a: t[a].combine_chunks() for a in args}, flows,
                                       interner=self.interner)


def _window(con, ranks, steps):
    """Time windows and ranks to keep."""
    all_ranks = [r[0] for r in con.execute("SELECT rank FROM traces ORDER BY rank").fetchall()]
    keep_ranks = [r for r in all_ranks if ranks is None or r in ranks]
    if ranks and not keep_ranks:
        raise UsageError(f"no rank {ranks} in the database (ranks: {all_ranks})")
    if steps is None:
        return keep_ranks, None
    wins = con.execute("SELECT step, min(start_ns), max(end_ns) FROM step_windows WHERE list_contains(?, step) GROUP BY step",
                       [list(steps)]).fetchall()
    if not wins:
        raise UsageError(f"no step {steps} in the database")
    return keep_ranks, [(a, b) for _, a, b in wins]


def _time_filter(wins, alias=""):
    if wins is None:
        return "TRUE"
    p = f"{alias}." if alias else ""
    return "(" + " OR ".join(f"({p}end_ns > {int(a)} AND {p}start_ns < {int(b)})" for a, b in wins) + ")"


def write_trace(job: JobView, output: str = "job.perfetto-trace", ranks=None, steps=None, force: bool = False) -> str:
    check_output(output, "perfetto", inputs=[job.path], force=force)
    con = job.con
    keep_ranks, wins = _window(con, ranks, steps)
    tf = _time_filter(wins)
    # gzip: Perfetto (the UI and trace_processor) opens gzip-compressed traces as they are, and
    # the bundled 4-rank job's 13 MB of protobuf (names interned) become 1.6 MB, below the
    # 3.2 MB of its gzip'd JSON input.
    with atomic_output(output, "perfetto", inputs=[job.path], force=force) as tmp, open(tmp, "wb") as raw, \
            gzip.GzipFile(filename="", fileobj=raw, mode="wb", compresslevel=6, mtime=0) as f:  # no FNAME: the temp file's name
        w = _Writer(f)
        for rank in keep_ranks:
            _rank_tracks(con, w, rank, tf, keep_ranks)
        _hang_tracks(con, w, keep_ranks, ranks)
    return output


def _hang_tracks(con, w: _Writer, traced: list[int], wanted):
    """Flight Recorder dumps (docs/hang-forensics.md): where each rank stopped, one slice per rank
    on a track of its own, from its last enqueued collective (or, for a rank that never entered
    the hung one, from when the others began waiting) to the end of its trace or its timeout.
    Times are put on the rank's trace clock (its clock offsets); a rank with a dump and no trace
    gets a process track of its own."""
    from .hang import findings
    f = findings(con)
    if not f:
        return
    hang_ns = min((r["created_ns"] for r in f["rows"]), default=None)
    for r in f["ranks"]:
        rank = r["rank"]
        if wanted is not None and rank not in wanted:
            continue
        off, end = con.execute("""SELECT any_value(clock_offset_ns + coalesce(cpu_clock_offset_ns, 0)),
                                         (SELECT max(end_ns) FROM host_ops h WHERE h.rank = $r)
                                  FROM traces WHERE rank = $r""", {"r": rank}).fetchone()
        off = off or 0
        if r["state"] == "not_entered" and hang_ns is not None:
            start = hang_ns
            name = f"never entered #{r['last_enqueued'] + 1 if r['last_enqueued'] is not None else '?'} of group {r['pg']}; last completed #{r['last_completed']}"
        elif r["state"] == "waiting":
            start = r["last_created_ns"]
            name = f"waiting in {r['op']} #{r['last_enqueued']} of group {r['pg']}" + (f" ({r['frame']})" if r["frame"] else "")
        elif r["state"] == "no_dump":
            continue
        else:
            start, name = r["last_created_ns"], f"idle after {r['op']} #{r['last_enqueued']} of group {r['pg']}"
        if start is None:
            continue
        start += off
        stop = max(end or 0, start + 1_000_000)
        proc = _uuid("rank", rank)
        if rank not in traced:
            w.track(proc, name=f"rank {rank} (Flight Recorder dump)", pid=1000 + rank)
        u = _uuid("tf-hang", rank, r["pg"])
        w.track(u, name="traceflow: where it stopped (Flight Recorder)", parent=proc)
        import pyarrow as pa
        w.slices_of(u, pa.table({"start_ns": pa.array([start], pa.int64()), "end_ns": pa.array([stop], pa.int64()),
                                 "name": pa.array([name]), "state": pa.array([r["state"]])}), "name", ("state",))


def _rank_tracks(con, w: _Writer, rank: int, tf: str, ranks: list[int]):
    # Long because: one rank's tracks in the order Perfetto lists them (process, threads, streams, flows).
    info = con.execute("SELECT any_value(hostname), any_value(pid) FROM traces WHERE rank = ?", [rank]).fetchone()
    pid = 1000 + rank  # real pids repeat across hosts; Perfetto needs them unique
    proc = _uuid("rank", rank)
    w.track(proc, name=f"rank {rank}" + (f" ({info[0]})" if info[0] else ""), pid=pid)

    # A launch call starts a flow arrow that its (first) GPU op ends: Perfetto draws launch -> kernel.
    # The pairs of the rank, worked out once (per thread and per stream it was 7 of the 15 s of long4 nsys).
    con.execute(f"""CREATE OR REPLACE TEMP TABLE tf_launch_flows AS
                    SELECT g.launch_op_id, min(g.op_id) AS first_op FROM gpu_ops g
                    WHERE g.rank = $rank AND g.launch_op_id IS NOT NULL AND {tf}
                          AND g.launch_op_id IN (SELECT op_id FROM host_ops WHERE rank = $rank AND {tf})
                    GROUP BY ALL""", {"rank": rank})
    # every thread's calls in one query, split here: a query per thread scanned the rank's calls
    # once per thread (54 threads on long4 nsys: 11.3 s of its 14.4 s)
    calls = arrow_table(con, f"""SELECT h.tid, h.start_ns, h.end_ns, h.name, h.kind,
                                     (hash('launch', f.first_op) >> 1)::BIGINT AS flow_out
                              FROM (SELECT * FROM host_ops WHERE rank = $rank AND tid IS NOT NULL AND {tf}) h
                              LEFT JOIN tf_launch_flows f ON f.launch_op_id = h.op_id
                              ORDER BY h.tid""", {"rank": rank})
    tids = calls["tid"].to_numpy()
    cuts = np.flatnonzero(np.diff(tids)) + 1
    for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, len(tids)]) if len(tids) else ():
        tid = int(tids[lo])
        u = _uuid("thread", rank, tid)
        w.track(u, pid=pid, tid=pid * 100_000 + (tid % 100_000), thread_name=f"thread {tid}")
        w.slices_of(u, calls.slice(lo, hi - lo), "name", ("kind",))
    rtids = con.execute(f"SELECT DISTINCT tid FROM ranges WHERE rank = ? AND NOT on_gpu AND {tf} ORDER BY tid", [rank]).fetchall()
    for (tid,) in rtids:
        u = _uuid("ranges", rank, tid)
        w.track(u, name=f"ranges (thread {tid})", parent=proc)
        w.slices(u, con, f"SELECT start_ns, end_ns, name, domain FROM ranges WHERE rank = ? AND tid IS NOT DISTINCT FROM ? AND NOT on_gpu AND {tf}",
                      [rank, tid], "name", ("domain",))

    streams = con.execute(f"SELECT DISTINCT device, stream FROM gpu_ops WHERE rank = ? AND {tf} ORDER BY ALL", [rank]).fetchall()
    for dev, stream in streams:
        u = _uuid("stream", rank, dev, stream)
        w.track(u, name=f"GPU {dev} stream {stream}", parent=proc)
        w.slices(u, con, f"""SELECT start_ns, end_ns, name, kind, category, step::BIGINT AS step, bytes,
                                    CASE WHEN op_id IN (SELECT first_op FROM tf_launch_flows)
                                         THEN (hash('launch', op_id) >> 1)::BIGINT END AS flow_in
                             FROM gpu_ops WHERE rank = $rank AND device IS NOT DISTINCT FROM $dev
                                  AND stream IS NOT DISTINCT FROM $stream AND {tf}""",
                      {"rank": rank, "dev": dev, "stream": stream}, "name", ("kind", "category", "step", "bytes"))

    u = _uuid("tf-steps", rank)
    w.track(u, name="traceflow: steps (GPU window)", parent=proc)
    w.slices(u, con, f"""SELECT start_ns, end_ns, 'step ' || step AS name, wall_ns::BIGINT AS wall_ns, idle_ns::BIGINT AS idle_ns
                              FROM step_breakdown WHERE rank = ? AND part = 'step' AND {tf}""", [rank], "name", ("wall_ns", "idle_ns"))

    u = _uuid("tf-gaps", rank)
    w.track(u, name="traceflow: idle gaps", parent=proc)
    w.slices(u, con, f"""SELECT *, 'idle: ' || coalesce(cause, 'None') || coalesce(' (' || nullif(host_activity, '') || ')', '') AS name
                              FROM (SELECT DISTINCT start_ns, end_ns, cause, host_activity, next_op FROM idle_gaps WHERE rank = ? AND {tf})""",
                  [rank], "name", ("cause", "host_activity", "next_op"))

    u = _uuid("tf-comm", rank)
    w.track(u, name="traceflow: exposed communication", parent=proc)
    w.slices(u, con, f"SELECT start_ns, end_ns, 'exposed comm' AS name FROM exposed_comm_segments WHERE rank = ? AND {tf}",
                  [rank], "name", ())

    u = _uuid("tf-cp", rank)
    w.track(u, name="traceflow: critical path", parent=proc)
    # consecutive segments of a step on two different ranks are linked by a flow arrow
    w.slices(u, con, f"""
        SELECT start_ns, end_ns, kind || coalesce(': ' || nullif(name, ''), '') AS name, step::BIGINT AS step,
               ordinal::BIGINT AS ordinal, kind,
               CASE WHEN next_rank <> rank AND list_contains($ranks, next_rank) THEN (hash(step, next_ordinal) >> 1)::BIGINT END AS flow_out,
               CASE WHEN prev_rank <> rank AND list_contains($ranks, prev_rank) THEN (hash(step, ordinal) >> 1)::BIGINT END AS flow_in
        FROM (SELECT *, lag(rank) OVER w AS prev_rank, lead(rank) OVER w AS next_rank, lead(ordinal) OVER w AS next_ordinal
              FROM critical_path WHERE {tf} WINDOW w AS (PARTITION BY step ORDER BY ordinal))
        WHERE rank = $rank ORDER BY step, ordinal""", {"ranks": ranks, "rank": rank}, "name", ("step", "ordinal", "kind"))
    _memory_counters(con, w, rank, proc, tf)


def _memory_counters(con, w: _Writer, rank: int, proc: int, tf: str):
    """Counter tracks of the rank's memory (Kineto profile_memory=True): allocated and reserved bytes
    per device after each event, as the profiler recorded them (docs/memory.md)."""
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import CounterDescriptor
    for dtype, dev in con.execute("SELECT DISTINCT device_type, device FROM memory_events WHERE rank = ? ORDER BY ALL",
                                  [rank]).fetchall():
        t = arrow_table(con, f"""SELECT start_ns AS ts_ns, total_allocated, total_reserved FROM (
                                     SELECT ts_ns AS start_ns, ts_ns AS end_ns, total_allocated, total_reserved FROM memory_events
                                     WHERE rank = ? AND device_type IS NOT DISTINCT FROM ? AND device IS NOT DISTINCT FROM ?)
                                 WHERE {tf} ORDER BY ts_ns""", [rank, dtype, dev])
        for what in ("allocated", "reserved") if dtype != "cpu" else ("allocated",):  # the CPU reserves nothing
            u = _uuid("tf-memory", rank, dtype, dev, what)
            p = w.packet()
            d = p.track_descriptor
            d.uuid, d.parent_uuid, d.name = u, proc, f"memory {what} ({dtype}:{dev})"
            d.counter.unit = CounterDescriptor.UNIT_SIZE_BYTES
            w.b.write_packet(p)
            counter_packets(w.f, SEQ, u, t["ts_ns"].to_numpy(), t[f"total_{what}"].fill_null(0).to_numpy())
