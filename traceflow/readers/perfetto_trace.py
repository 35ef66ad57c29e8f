"""Perfetto protobuf traces (`.perfetto-trace`, `.pftrace`; gzip or not) of the layout traceflow's
`annotate` / `postmortem` write (perfetto.py): a process track per rank (`rank R[ (host)]`), its
host threads (thread tracks, the call's kind as the `kind` debug annotation), its CPU-side ranges
(`ranges (thread T)`), its GPU streams (`GPU D stream S`, the op's `category` annotation) and
traceflow's own tracks (`traceflow: ...`, not read: they are derived). A launch call's flow id ends
on the GPU op it launched: both rows' correlation id. So a trace traceflow wrote reads back to the
same GPU ops (tests/test_formats.py).

Decoded with the protobuf package and the Perfetto protos the `perfetto` dependency ships, one
packet at a time from a stream (bounded memory per packet; the slices of a track are kept until the
end). No public Perfetto trace of GPU work of another layout (GpuRenderStageEvent, PyTorch's
cupti_monitor) was found to check a reader of it on: such a trace is refused, naming what it holds.

Size: the packet decoder and the map of traceflow's own track layout back onto the tables, one concept.
"""
from __future__ import annotations

import re
from collections import defaultdict

import pyarrow as pa

from ..errors import InputError
from .compressed import BoundedReader
from .model import ProcessTrace

GPU_TRACK = re.compile(r"^GPU (-?\d+|None) stream (-?\d+|None)$")
RANK_TRACK = re.compile(r"^rank (\d+)(?: \((.*)\))?$")
RANGES_TRACK = re.compile(r"^ranges \(thread (-?\d+|None)\)$")
THREAD_NAME = re.compile(r"^thread (-?\d+)$")
BEGIN, END = 1, 2
# (field, wire type) a trace's first packet starts with: trusted_uid, clock_snapshot, timestamp,
# trusted_packet_sequence_id, track_event, interned_data, sequence_flags, trace_config,
# synchronization_marker, track_descriptor, trace_uuid (traceflow's first)
FIRST_FIELDS = frozenset({(3, 0), (6, 2), (8, 0), (10, 0), (11, 2), (12, 2), (13, 0), (33, 2), (36, 2), (60, 2), (89, 2)})
MAX_PACKET = 64 << 20


def looks_like(head: bytes) -> bool:
    """A Trace's first bytes: field 1 (packet), length-delimited, then a TracePacket whose first field
    is one traceflow writes first (trace_uuid 27, or trusted_packet_sequence_id 10 / timestamp 8)."""
    if head[:1] != b"\x0a":
        return False
    n, i = _varint(head, 1)
    if n is None or not 0 < n < MAX_PACKET:
        return False
    t, _ = _varint(head, i)
    return t is not None and (t >> 3, t & 7) in FIRST_FIELDS


def _varint(b: bytes, i: int):
    shift = value = 0
    while i < len(b):
        byte = b[i]
        value |= (byte & 0x7F) << shift
        i += 1
        if not byte & 0x80:
            return value, i
        shift += 7
        if shift > 63:
            return None, i
    return None, i


def _packets(path: str, f):
    """The TracePacket messages of a Trace, one at a time."""
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TracePacket
    while True:
        tag = f.read(1)
        if not tag:
            return
        if tag != b"\x0a":
            raise InputError(path, f"not a Perfetto trace past byte {f.tell() if hasattr(f, 'tell') else '?'}: "
                             f"field tag {tag[0]:#x} where a packet was expected")
        raw = b""
        while True:
            c = f.read(1)
            if not c:
                raise InputError(path, "truncated Perfetto trace (ends inside a packet's length)")
            raw += c
            if not c[0] & 0x80 or len(raw) > 9:
                break
        n, _ = _varint(raw, 0)
        if n is None or n > MAX_PACKET:
            raise InputError(path, "damaged Perfetto trace (a packet's length is no length)")
        body = f.read(n)
        if len(body) != n:
            raise InputError(path, "truncated Perfetto trace (ends inside a packet)")
        p = TracePacket()
        try:
            p.ParseFromString(body)
        except Exception as e:  # noqa: BLE001 - protobuf's DecodeError and friends: the file is damaged
            raise InputError(path, f"damaged Perfetto trace (a packet does not decode: {type(e).__name__})") from None
        yield p


def read(path: str, sink, key: str = "p") -> list[ProcessTrace]:
    with open(path, "rb") as raw:
        gz = raw.read(2) == b"\x1f\x8b"
    f = BoundedReader(path, "gzip") if gz else open(path, "rb")
    try:
        tracks, slices = _decode(path, f)
    finally:
        f.close()
    return _tables(path, sink, key, tracks, slices)


def _decode(path, f):
    tracks: dict[int, dict] = {}
    names: dict[tuple[int, int], str] = {}     # (sequence, iid) -> event name
    annots: dict[tuple[int, int], str] = {}    # (sequence, iid) -> debug annotation name
    open_: dict[int, list] = defaultdict(list)  # track -> stack of begun slices
    slices: dict[int, list] = defaultdict(list)
    for p in _packets(path, f):
        seq = p.trusted_packet_sequence_id
        if p.HasField("interned_data"):
            for e in p.interned_data.event_names:
                names[seq, e.iid] = e.name
            for e in p.interned_data.debug_annotation_names:
                annots[seq, e.iid] = e.name
        if p.HasField("track_descriptor"):
            d = p.track_descriptor
            # a track may be described again, with fewer fields (rocprofv3's pftrace repeats a thread
            # track's descriptor with its parent only): a later descriptor adds to the earlier one
            t = tracks.setdefault(d.uuid, {"name": "", "parent": None, "pid": None, "process_name": None,
                                           "thread_name": None, "thread_pid": None})
            if d.HasField("name"):
                t["name"] = d.name
            if d.HasField("parent_uuid"):
                t["parent"] = d.parent_uuid
            if d.HasField("process"):
                t["pid"], t["process_name"] = d.process.pid, d.process.process_name
            if d.HasField("thread"):
                t["thread_name"], t["thread_pid"] = d.thread.thread_name, d.thread.pid
        if p.HasField("track_event"):
            e = p.track_event
            if e.type == BEGIN:
                args = {}
                for a in e.debug_annotations:
                    an = a.name if a.HasField("name") else annots.get((seq, a.name_iid), "")
                    args[an] = a.int_value if a.HasField("int_value") else a.string_value if a.HasField("string_value") else None
                name = e.name if e.HasField("name") else names.get((seq, e.name_iid), "")
                flow_out = e.flow_ids[0] if e.flow_ids else None
                flow_in = e.terminating_flow_ids[0] if e.terminating_flow_ids else None
                open_[e.track_uuid].append((p.timestamp, name, args, flow_out, flow_in))
            elif e.type == END:
                stack = open_[e.track_uuid]
                if not stack:
                    raise InputError(path, "damaged Perfetto trace (a slice ends that never began)")
                ts, name, args, fo, fi = stack.pop()
                slices[e.track_uuid].append((ts, p.timestamp, name, args, fo, fi))
    return tracks, slices


def _flow(v):
    """A flow id (uint64 on the wire) as traceflow's correlation id (int64)."""
    return None if v is None else (v - (1 << 64) if v >= 1 << 63 else v)


def _tables(path, sink, key, tracks, slices) -> list[ProcessTrace]:
    procs = {u: t for u, t in tracks.items() if t["pid"] is not None}
    gpu_tracks = {u: t for u, t in tracks.items() if GPU_TRACK.match(t["name"] or "") and t["parent"] in procs}
    if not gpu_tracks:
        kinds = sorted({re.sub(r"\d+", "N", t["name"] or t["thread_name"] or t["process_name"] or "")
                        for t in tracks.values()})[:4]
        raise InputError(path, "a Perfetto trace with no GPU stream tracks of the layout traceflow writes "
                         f"('GPU D stream S'; it has {len(tracks):,} tracks: {', '.join(map(repr, kinds)) or 'none'}): "
                         "traceflow reads Perfetto traces it wrote itself")
    out = []
    for i, (pu, proc) in enumerate(sorted(procs.items(), key=lambda x: x[1]["pid"])):
        m = RANK_TRACK.match(proc["name"] or proc["process_name"] or "")
        k = f"{key}{i}"
        gpu, host, ranges = [], [], []
        for u, t in tracks.items():
            if u in gpu_tracks and t["parent"] == pu:
                g = GPU_TRACK.match(t["name"])
                assert g is not None  # gpu_tracks holds only the tracks it matches
                dev, stream = (None if x == "None" else int(x) for x in g.groups())
                for s, e, name, args, _, fi in slices.get(u, ()):
                    kind = args.get("kind")  # traces written before the kind was: from the category and name
                    if kind is None:
                        kind = "kernel" if args.get("category") != "memory" else "memset" if "memset" in name.lower() else "memcpy"
                    gpu.append((dev, stream, kind, name, s, e, _flow(fi), args.get("bytes")))
            elif t["thread_pid"] == proc["pid"]:
                tm = THREAD_NAME.match(t["thread_name"] or "")
                tid = int(tm.group(1)) if tm else None
                for s, e, name, args, fo, _ in slices.get(u, ()):
                    host.append((tid, args.get("kind"), name, s, e, _flow(fo)))
            elif t["parent"] == pu and (r := RANGES_TRACK.match(t["name"] or "")):
                tid = None if r.group(1) == "None" else int(r.group(1))
                for s, e, name, args, _, _ in slices.get(u, ()):
                    ranges.append((tid, args.get("domain"), name, s, e))
        if gpu:
            cols = list(zip(*gpu))
            sink.write(k, "gpu_ops", pa.table({
                "device": pa.array(cols[0], pa.int32()), "stream": pa.array(cols[1], pa.int64()),
                "kind": pa.array(cols[2], pa.string()), "name": pa.array(cols[3], pa.string()),
                "start_ns": pa.array(cols[4], pa.int64()), "end_ns": pa.array(cols[5], pa.int64()),
                "correlation_id": pa.array(cols[6], pa.int64()), "bytes": pa.array(cols[7], pa.int64())}))
        if host:
            cols = list(zip(*host))
            sink.write(k, "host_ops", pa.table({
                "tid": pa.array(cols[0], pa.int64()), "kind": pa.array(cols[1], pa.string()),
                "name": pa.array(cols[2], pa.string()), "start_ns": pa.array(cols[3], pa.int64()),
                "end_ns": pa.array(cols[4], pa.int64()), "correlation_id": pa.array(cols[5], pa.int64())}))
        if ranges:
            cols = list(zip(*ranges))
            sink.write(k, "ranges", pa.table({
                "tid": pa.array(cols[0], pa.int64()), "domain": pa.array(cols[1], pa.string()),
                "name": pa.array(cols[2], pa.string()), "start_ns": pa.array(cols[3], pa.int64()),
                "end_ns": pa.array(cols[4], pa.int64()), "on_gpu": pa.array([False] * len(ranges), pa.bool_())}))
        out.append(ProcessTrace(
            source_path=path, source_format="perfetto", key=k, pid=proc["pid"],
            hostname=m.group(2) if m else None, rank_hint=int(m.group(1)) if m else None,
            rank_hint_source="track name" if m else None, n_processes=len(procs),
            devices=tuple(sorted({g[0] for g in gpu if g[0] is not None})),
            counts={"gpu_ops": len(gpu), "host_ops": len(host), "ranges": len(ranges)}))
    return out

