"""CUDA caching-allocator snapshots (`torch.cuda.memory._dump_snapshot()` pickles) -> Arrow.

A snapshot is a pickled dict of plain data: `segments` (each cudaMalloc'd segment with its blocks:
address, size, requested_size, state, frames) and `device_traces` (per device, the allocator's
recent history when `_record_memory_history` ran: alloc / free_requested / free_completed /
segment_alloc / segment_free / oom, each with addr, size, stream, time_us and frames). It is read
only through the restricted unpickler (safe_pickle): a pickle that names any class or function
is refused, naming the file.

A snapshot holds no rank: it is given the rank of its file name (rank3_snapshot.pickle), or the
job's only rank, and joins that rank's trace (pipeline.py). The lists are Python objects once
unpickled, so this reader is a Python loop per block and per history entry (the one per-row reader
of the package; a snapshot has thousands of blocks, not millions of events).
"""
from __future__ import annotations

import hashlib

import pyarrow as pa

from ..errors import InputError
from . import safe_pickle
from .model import ProcessTrace

FORMAT = "torch-memory-snapshot"
FRAMES_KEPT = 6   # the innermost frames of an allocation's stack, as text


def _int(v):
    return v if isinstance(v, int) and not isinstance(v, bool) and -2**63 <= v < 2**63 else None


def _str(v):
    return v if isinstance(v, str) else None


def _frames(frames) -> str | None:
    if not isinstance(frames, list) or not frames:
        return None
    out = []
    for f in frames[:FRAMES_KEPT]:
        if isinstance(f, dict):
            out.append(f"{f.get('filename', '?')}:{f.get('line', '?')} {f.get('name', '?')}")
    return "\n".join(out) or None


def read(path: str, sink, key: str) -> list[ProcessTrace]:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise InputError(path, f"cannot read ({e.strerror})") from None
    snap = safe_pickle.loads(data, path)
    if not isinstance(snap, dict) or not isinstance(snap.get("segments"), list):
        raise InputError(path, "a pickle without a `segments` list: not a torch.cuda.memory snapshot")
    seg_rows: dict[str, list] = {k: [] for k in ("device", "address", "total_size", "allocated_size", "active_size",
                                                 "requested_size", "stream", "segment_type", "is_expandable",
                                                 "n_blocks", "largest_free_block")}
    blk_rows: dict[str, list] = {k: [] for k in ("device", "segment_address", "address", "size", "requested_size",
                                                 "state", "frames")}
    for s in snap["segments"]:
        if not isinstance(s, dict):
            continue
        blocks = [b for b in s.get("blocks") or [] if isinstance(b, dict)]
        dev, seg_addr = _int(s.get("device")), _int(s.get("address"))
        for k in ("total_size", "allocated_size", "active_size", "requested_size", "stream"):
            seg_rows[k].append(_int(s.get(k)))
        seg_rows["device"].append(dev)
        seg_rows["address"].append(seg_addr)
        seg_rows["segment_type"].append(_str(s.get("segment_type")))
        seg_rows["is_expandable"].append(s.get("is_expandable") if isinstance(s.get("is_expandable"), bool) else None)
        seg_rows["n_blocks"].append(len(blocks))
        free = [_int(b.get("size")) or 0 for b in blocks if b.get("state") == "inactive"]
        seg_rows["largest_free_block"].append(max(free) if free else 0)
        for b in blocks:
            blk_rows["device"].append(dev)
            blk_rows["segment_address"].append(seg_addr)
            blk_rows["address"].append(_int(b.get("address")))
            blk_rows["size"].append(_int(b.get("size")))
            blk_rows["requested_size"].append(_int(b.get("requested_size")))
            blk_rows["state"].append(_str(b.get("state")))
            blk_rows["frames"].append(_frames(b.get("frames")))
    hist: dict[str, list] = {k: [] for k in ("device", "action", "addr", "size", "stream", "time_ns", "frames")}
    traces = snap.get("device_traces")
    for dev, entries in enumerate(traces if isinstance(traces, list) else []):
        for entry in entries if isinstance(entries, list) else []:
            if not isinstance(entry, dict):
                continue
            hist["device"].append(dev)
            hist["action"].append(_str(entry.get("action")))
            hist["addr"].append(_int(entry.get("addr")))
            hist["size"].append(_int(entry.get("size")))
            hist["stream"].append(_int(entry.get("stream")))
            t = _int(entry.get("time_us"))
            hist["time_ns"].append(t * 1000 if t is not None and abs(t) < 2**63 // 1000 else None)
            hist["frames"].append(_frames(entry.get("frames")))
    digest = hashlib.blake2b(data, digest_size=16).hexdigest()
    n = {"memory_segments": len(seg_rows["device"]), "memory_snapshot_blocks": len(blk_rows["device"]),
         "memory_snapshot_history": len(hist["device"])}
    for table, rows in (("memory_segments", seg_rows), ("memory_snapshot_blocks", blk_rows), ("memory_snapshot_history", hist)):
        if rows["device"]:
            sink.write(key, table, pa.table({**rows, "source_hash": [digest] * len(rows["device"])}))
    warnings = [] if n["memory_segments"] else ["the snapshot holds no segments (nothing was allocated on the GPU)"]
    return [ProcessTrace(source_path=path, source_format=FORMAT, key=key, source_hash=digest, warnings=warnings,
                         counts=n, profiler_version="torch.cuda.memory._snapshot")]
