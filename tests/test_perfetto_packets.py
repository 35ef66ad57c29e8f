"""The columnar Perfetto encoder against the protobuf library, and its nesting against the stack."""
from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pytest
from conftest import connect, needs_shared

from traceflow import perfetto
from traceflow.perfetto_packets import _nest_loop, nest_events, slice_packets


def library_bytes(uuid, start, end, names, args, flows=None) -> bytes:
    """The same slices, one protobuf object per packet (the perfetto package's own classes), in
    the order of nest_events (checked against the stack below)."""
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace
    out = io.BytesIO()
    for ts, kind, i in zip(*nest_events(start, end)):
        t = Trace()
        p = t.packet.add()
        p.timestamp, p.trusted_packet_sequence_id = int(ts), perfetto.SEQ
        e = p.track_event
        e.type, e.track_uuid = int(kind), uuid
        if kind == 1:
            e.name = names[i] or "?"
            for k, v in args.items():
                if v[i] is None:
                    continue
                a = e.debug_annotations.add()
                a.name = k
                if isinstance(v[i], int):
                    a.int_value = v[i]
                else:
                    a.string_value = v[i]
            for field, ids in (flows or {}).items():
                if ids[i] is not None:
                    (e.flow_ids if field == 47 else e.terminating_flow_ids).append(ids[i])
        out.write(t.SerializeToString())
    return out.getvalue()


def columnar_bytes(uuid, start, end, names, args, flows=None) -> bytes:
    f = io.BytesIO()
    slice_packets(f, perfetto.SEQ, uuid, np.array(start, dtype=np.int64), np.array(end, dtype=np.int64),
                  pa.array(names, pa.string()), {k: pa.array(v) for k, v in args.items()},
                  {k: pa.array(v, pa.int64()) for k, v in (flows or {}).items()})
    return f.getvalue()


@needs_shared
@pytest.mark.parametrize("table, cols", [
    ("host_ops", ("kind",)),
    ("gpu_ops", ("category", "step", "bytes")),
])
def test_packets_equal_protobuf_library(ingested, table, cols):
    """Real tracks (nested host calls, GPU streams with NULL args, long kernel names): byte for byte."""
    db = connect(ingested("h100/nsys/ddp4_sync_stall"))
    key = "tid" if table == "host_ops" else "stream"
    for (k,) in db.execute(f"SELECT DISTINCT {key} FROM {table} WHERE rank = 1 ORDER BY 1").fetchall():
        t = db.execute(f"SELECT start_ns, end_ns, name, {', '.join(cols)} FROM {table} WHERE rank = 1 AND {key} = ?",
                       [k]).to_arrow_table().to_pydict()
        args = {c: t[c] for c in cols}
        uuid = perfetto._uuid("test", k)
        want = library_bytes(uuid, t["start_ns"], t["end_ns"], t["name"], args)
        assert len(want) > 0 and columnar_bytes(uuid, t["start_ns"], t["end_ns"], t["name"], args) == want


def test_packets_edge_cases_equal_protobuf_library():
    """Empty and NULL names ('?'), NULL and negative ints, a huge uuid, flow ids, empty tracks, non-ASCII."""
    start = [0, 5, 5, 10, 10, 12, 30]
    end = [20, 5, 15, 10, 25, 40, 31]  # zero-length slices, partial overlaps (cut at the parent's end)
    names = ["a", "", None, "ünïcode ✓", "x" * 300, "b", "c"]
    args = {"kind": ["k", None, "", "z", None, "y", "w"], "n": [1, None, -5, 2**40, 0, 7, None]}
    flows = {47: [None, 2**62 + 7, None, 5, None, None, 1], 48: [3, None, None, None, 2**40, None, None]}
    for uuid in (1, 2**62 + 12345):
        assert columnar_bytes(uuid, start, end, names, args) == library_bytes(uuid, start, end, names, args)
        assert columnar_bytes(uuid, start, end, names, args, flows) == library_bytes(uuid, start, end, names, args, flows)
    assert columnar_bytes(3, [], [], [], {}) == b""


@pytest.mark.parametrize("seed", range(40))
def test_nest_fast_path_equals_stack(seed):
    """Random slices: laminar ones (the fast path) and overlapping ones give what the stack gives."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    start = rng.integers(0, 50, n)
    end = start + rng.integers(0, 20, n) * (rng.random(n) < 0.9)
    if seed % 2:  # nested by construction: children inside their parent
        start, end = np.sort(start), None
        end = np.empty(n, dtype=np.int64)
        stack = []
        for i, s in enumerate(start):
            while stack and end[stack[-1]] <= s:
                stack.pop()
            limit = end[stack[-1]] if stack else s + 40
            end[i] = s + int(rng.integers(0, limit - s + 1))
            stack.append(i)
    order = np.lexsort((-end, start))
    want = _nest_loop(start[order].astype(np.int64), end[order].astype(np.int64), order)
    got = nest_events(start, end)
    for a, b in zip(got, want):
        assert np.array_equal(a, b)
