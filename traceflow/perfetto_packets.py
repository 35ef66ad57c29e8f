"""Perfetto slice events of whole tracks, encoded column by column with numpy.

A host thread or a GPU stream holds up to millions of slices; one protobuf object per packet
cost ~6 µs each (nsys long4: 38 s for 3 M slices). Here each field of every packet is a
column of bytes (offsets + data, like an Arrow binary array) and packets are the columns
concatenated row by row. The wire format is protobuf's: Trace.packet (1) -> TracePacket
{timestamp (8), trusted_packet_sequence_id (10), track_event (11) -> TrackEvent
{debug_annotations (4), type (9), track_uuid (11), name (23), flow_ids (47, fixed64),
terminating_flow_ids (48, fixed64)}}; DebugAnnotation {int_value (4), string_value (6), name (10)}.

Size: one encoder per packet type, columnar; they share the interning tables.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

BEGIN, END = 1, 2  # TrackEvent.TYPE_SLICE_BEGIN / TYPE_SLICE_END
CHUNK_EVENTS = 1 << 17  # events encoded at once: bounds the memory of a track of millions


# --- nesting ----------------------------------------------------------------------------------

def nest_events(start: np.ndarray, end: np.ndarray):
    """Begin/end events of slices on one track, in an order Perfetto accepts: properly nested,
    an end before a begin at the same time. A slice that outlives the one it starts inside is
    cut at that one's end. Returns (ts, type, slice index), one row per event."""
    start, end = np.asarray(start, dtype=np.int64), np.asarray(end, dtype=np.int64)
    order = np.lexsort((-end, start))  # stable: equal slices keep their order
    s, e = start[order], end[order]
    n = len(s)
    i2 = 2 * np.arange(n, dtype=np.int64)
    zero = e == s
    # keys (time, end-first rank, tie): among ends at one time the inner (later) slice closes first;
    # a zero-length slice closes right after its own begin
    ts = np.concatenate([s, e])
    rank = np.concatenate([np.ones(n, np.int8), zero.astype(np.int8)])
    tie = np.concatenate([i2, np.where(zero, i2 + 1, -i2)])
    ev = np.lexsort((tie, rank, ts))
    kind = np.where(ev < n, BEGIN, END).astype(np.int8)
    idx = ev % n if n else ev
    if not _is_nested(kind, idx):
        return _nest_loop(s, e, order)
    return ts[ev], kind, order[idx]


def _is_nested(kind, idx) -> bool:
    """Every end closes the slice opened last: per depth level, events alternate begin, end of one slice."""
    if not len(kind):
        return True
    step = np.where(kind == BEGIN, 1, -1)
    depth = np.cumsum(step)
    if depth.min() < 0:
        return False
    level = np.where(kind == BEGIN, depth, depth + 1)
    by_level = np.argsort(level, kind="stable")
    k, i = kind[by_level], idx[by_level]
    return bool(np.all(k[0::2] == BEGIN) and np.all(k[1::2] == END) and np.array_equal(i[0::2], i[1::2]))


def _nest_loop(s, e, order):
    """The same events when some slices overlap without nesting: a stack, one slice at a time."""
    e = e.copy()
    ts, kinds, idx, stack = [], [], [], []
    for i in range(len(s)):
        while stack and e[stack[-1]] <= s[i]:
            top = stack.pop()
            ts.append(e[top]), kinds.append(END), idx.append(top)
        if stack and e[i] > e[stack[-1]]:
            e[i] = e[stack[-1]]  # a child may not outlive its parent on one track
        ts.append(s[i]), kinds.append(BEGIN), idx.append(i)
        stack.append(i)
    while stack:
        top = stack.pop()
        ts.append(e[top]), kinds.append(END), idx.append(top)
    idx = np.asarray(idx, dtype=np.int64)
    return np.asarray(ts, dtype=np.int64), np.asarray(kinds, dtype=np.int8), order[idx] if len(idx) else idx


# --- byte columns -----------------------------------------------------------------------------
# A packet's fields are columns (bytes per row); a message is its fields concatenated row by
# row. Nothing is copied until the whole tree is written: every byte goes straight to its place.

def _offsets(lengths: np.ndarray) -> np.ndarray:
    out = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=out[1:])
    return out


class Const:
    """The same bytes in every row (a field's tag)."""

    def __init__(self, b: bytes, n: int):
        self.b, self.lengths = b, np.full(n, len(b), dtype=np.int64)

    def write(self, out, pos, rows):
        at = pos if rows is None else pos[rows]
        for k, byte in enumerate(self.b):
            out[at + k] = byte


class Varints:
    """Protobuf varints; a negative int64 as its 10-byte two's complement, as protobuf writes int64."""

    def __init__(self, values):
        self.v = np.asarray(values).astype(np.int64).view(np.uint64)
        self.lengths = np.ones(len(self.v), dtype=np.int64)
        for k in range(1, 10):
            self.lengths += (self.v >> np.uint64(7 * k)) != 0

    def write(self, out, pos, rows):
        v, lengths = (self.v, self.lengths) if rows is None else (self.v[rows], self.lengths[rows])
        at = pos if rows is None else pos[rows]
        for k in range(10):
            m = lengths > k
            if not m.any():
                break
            byte = ((v[m] >> np.uint64(7 * k)) & np.uint64(0x7F)).astype(np.uint8)
            out[at[m] + k] = byte | np.where(lengths[m] > k + 1, 0x80, 0).astype(np.uint8)


class Fixed64:
    """8 little-endian bytes per row."""

    def __init__(self, values):
        self.v = np.asarray(values).astype("<i8").view(np.uint8).reshape(-1, 8)
        self.lengths = np.full(len(self.v), 8, dtype=np.int64)

    def write(self, out, pos, rows):
        v, at = (self.v, pos) if rows is None else (self.v[rows], pos[rows])
        for k in range(8):
            out[at + k] = v[:, k]


class Bytes:
    """Variable bytes per row: row i is data[offsets[i]:offsets[i + 1]] (an Arrow binary column)."""

    def __init__(self, offsets: np.ndarray, data: np.ndarray):
        self.offsets, self.data, self.lengths = offsets, data, np.diff(offsets)

    @classmethod
    def strings(cls, arr: pa.Array) -> Bytes:
        arr = pc.cast(arr, pa.large_binary())
        _, off, data = arr.buffers()
        offsets = np.frombuffer(off, np.int64)[arr.offset:arr.offset + len(arr) + 1]
        data = np.frombuffer(data, np.uint8) if data is not None else np.empty(0, np.uint8)
        return cls(offsets - offsets[0], data[offsets[0]:offsets[-1]])

    def write(self, out, pos, rows):
        if rows is None:
            if len(self.data):
                out[np.repeat(pos - self.offsets[:-1], self.lengths) + np.arange(len(self.data))] = self.data
            return
        lengths = self.lengths[rows]
        within = np.arange(int(lengths.sum())) - np.repeat(_offsets(lengths)[:-1], lengths)
        out[np.repeat(pos[rows], lengths) + within] = self.data[np.repeat(self.offsets[:-1][rows], lengths) + within]


class Concat:
    """Row i: row i of each part, one after the other."""

    def __init__(self, *parts):
        self.parts, self.lengths = parts, sum(p.lengths for p in parts)

    def write(self, out, pos, rows):
        pos = pos.copy()
        for p in self.parts:
            p.write(out, pos, rows)
            pos += p.lengths


class Where:
    """A part present only in some rows (an optional field)."""

    def __init__(self, part, keep: np.ndarray):
        self.part, self.keep, self.lengths = part, keep, np.where(keep, part.lengths, 0)

    def write(self, out, pos, rows):
        self.part.write(out, pos, self.keep if rows is None else rows & self.keep)


def materialize(part) -> np.ndarray:
    out = np.empty(int(part.lengths.sum()), dtype=np.uint8)
    part.write(out, _offsets(part.lengths)[:-1], None)
    return out


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        out.append((value & 0x7F) | (0x80 if value > 0x7F else 0))
        value >>= 7
        if not value:
            return bytes(out)


def tag(field: int, wire: int) -> bytes:
    return varint((field << 3) | wire)


def length_delimited(field: int, body) -> Concat:
    return Concat(Const(tag(field, 2), len(body.lengths)), Varints(body.lengths), body)


def varint_field(field: int, values) -> Concat:
    return Concat(Const(tag(field, 0), len(values)), Varints(values))


# --- packets ----------------------------------------------------------------------------------

class Interner:
    """Perfetto's interning (InternedData on the packet sequence): each event name and debug
    annotation name is written once, with an id; events carry the id. Names repeat millions of
    times (a kernel's C++ name is often 1 KB): the bundled 4-rank job's trace went from 18.9 MB to
    a fraction of that."""

    NEEDS_STATE = tag(13, 0) + varint(2)  # TracePacket.sequence_flags = SEQ_NEEDS_INCREMENTAL_STATE

    def __init__(self, seq_id: int):
        self.seq_id = seq_id
        self.ids: dict[tuple[int, str], int] = {}  # (InternedData field, name) -> iid

    def iids(self, f, field: int, values: list[str]) -> list[int]:
        """The ids of `values` in InternedData's `field` (2 event_names, 3 debug_annotation_names),
        writing a packet with the ones not seen before."""
        new = []
        for v in values:
            if (field, v) not in self.ids:
                self.ids[(field, v)] = len(self.ids) + 1
                new.append(v)
        if new:
            entries = b"".join(
                tag(field, 2) + _delimited(tag(1, 0) + varint(self.ids[(field, v)]) + tag(2, 2) + _delimited(v.encode()))
                for v in new)
            body = tag(10, 0) + varint(self.seq_id) + self.NEEDS_STATE + tag(12, 2) + _delimited(entries)
            f.write(tag(1, 2) + _delimited(body))
        return [self.ids[(field, v)] for v in values]


def _delimited(b: bytes) -> bytes:
    return varint(len(b)) + b


def slice_packets(f, seq_id: int, track_uuid: int, start, end, names: pa.Array, args: dict[str, pa.Array],
                  flows: dict[int, pa.Array] | None = None, interner: Interner | None = None) -> int:
    """Writes the slices of one track (arrays of equal length; args: name -> int or string
    column, NULL = left out; flows: 47 (flow_ids) or 48 (terminating_flow_ids) -> one flow id
    per slice or NULL) as begin/end packets to the open file f. Returns the slice count.
    With an interner, names are written as interned ids (TrackEvent.name_iid,
    DebugAnnotation.name_iid)."""
    ts_all, kind_all, idx_all = nest_events(start, end)
    names = pc.if_else(pc.fill_null(pc.equal(names, ""), True), "?", names) if len(names) else names
    for a in range(0, len(ts_all), CHUNK_EVENTS):
        ts, kind, idx = ts_all[a:a + CHUNK_EVENTS], kind_all[a:a + CHUNK_EVENTS], idx_all[a:a + CHUNK_EVENTS]
        n, begin = len(ts), kind == BEGIN
        take = pa.array(idx)
        fields: list[Any] = []
        for key, column in args.items():
            col = column.take(take)
            if pa.types.is_null(col.type):  # never set
                continue
            present = begin & ~np.asarray(col.is_null().to_numpy(zero_copy_only=False))
            if pa.types.is_integer(col.type):
                value = varint_field(4, col.fill_null(0).to_numpy())
            else:
                value = length_delimited(6, Bytes.strings(col.fill_null("")))
            if interner is None:
                name = Const(tag(10, 2) + varint(len(key.encode())) + key.encode(), n)
            else:
                name = Const(tag(1, 0) + varint(interner.iids(f, 3, [key])[0]), n)
            fields.append(Where(length_delimited(4, Concat(value, name)), present))
        fields.append(varint_field(9, kind))
        fields.append(Const(tag(11, 0) + varint(track_uuid), n))
        if interner is None:
            fields.append(Where(length_delimited(23, Bytes.strings(names.take(take))), begin))
        else:
            chunk = names.take(pa.array(idx[begin])).dictionary_encode()
            ids = np.array(interner.iids(f, 2, chunk.dictionary.to_pylist()), dtype=np.int64)
            name_iid = np.zeros(n, dtype=np.int64)
            name_iid[begin] = ids[chunk.indices.to_numpy()]
            fields.append(Where(varint_field(10, name_iid), begin))
        for field, column in sorted((flows or {}).items()):
            col = column.take(take)
            present = begin & ~np.asarray(col.is_null().to_numpy(zero_copy_only=False))
            fields.append(Where(Concat(Const(tag(field, 1), n), Fixed64(col.fill_null(0).to_numpy())), present))
        packet = Concat(varint_field(8, ts), varint_field(10, np.full(n, seq_id)), length_delimited(11, Concat(*fields)))
        if interner is not None:
            packet = Concat(packet, Const(Interner.NEEDS_STATE, n))
        f.write(materialize(length_delimited(1, packet)).tobytes())
    return int(len(start))


COUNTER = 4  # TrackEvent.TYPE_COUNTER


def counter_packets(f, seq_id: int, track_uuid: int, ts: np.ndarray, values: np.ndarray) -> int:
    """Writes the values of one counter track (TrackEvent.counter_value, field 30, at each ts) to the
    open file f, column by column as slice_packets does (memory events can outnumber kernels tenfold).
    Returns the count."""
    for a in range(0, len(ts), CHUNK_EVENTS):
        t, v = ts[a:a + CHUNK_EVENTS], values[a:a + CHUNK_EVENTS]
        n = len(t)
        event = Concat(varint_field(9, np.full(n, COUNTER)), Const(tag(11, 0) + varint(track_uuid), n), varint_field(30, v))
        packet = Concat(varint_field(8, t), varint_field(10, np.full(n, seq_id)), length_delimited(11, event))
        f.write(materialize(length_delimited(1, packet)).tobytes())
    return int(len(ts))
