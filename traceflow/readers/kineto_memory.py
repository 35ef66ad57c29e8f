"""PyTorch profiler `[memory]` events (profile_memory=True) and the devices' memory -> Arrow.

With `profile_memory=True` the profiler writes one instant event (`"ph": "i"`, name `[memory]`)
per allocation and per free, after all the ops of the trace:

    {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": .., "tid": .., "ts": ..,
     "args": {"Total Reserved": 0, "Total Allocated": 524288, "Bytes": 262144, "Device Id": -1,
              "Device Type": 0, "Addr": 94579777053696, ...}}

`Bytes` is positive for an allocation, negative for a free; `Total Allocated` / `Total Reserved`
are the allocator's totals for that device just after the event (reserved: what the caching
allocator holds from the device; the CPU allocator caches nothing and writes 0). Kineto's reader
(kineto.py) decodes these fields with the rest of each event (the args structs there inherit
them from here) and hands each batch to `columns`, which turns the batch's memory events into the
`memory_events` table with C loops only. A batch without one costs a comparison per event.

The trace header's `deviceProperties` give each GPU's memory (`totalGlobalMem`): the `devices`
table, against which the memory pack states the headroom.
"""
from __future__ import annotations

from itertools import compress, repeat
from operator import attrgetter, eq, is_

import msgspec
import numpy as np
import pyarrow as pa

Num = int | float | str | None

MEMORY_NAME = "[memory]"
# c10::DeviceType, by its number (Kineto writes the number): the ones a trace may name
DEVICE_TYPES = pa.array(["cpu", "cuda", "mkldnn", "opengl", "opencl", "ideep", "hip", "fpga", "maia", "xla",
                         "vulkan", "metal", "xpu", "mps", "meta", "hpu", "ve", "lazy", "ipu", "mtia", "privateuse1"],
                        pa.string())


class MemoryArgs(msgspec.Struct):
    """The `[memory]` fields of an event's args, loosely typed (kineto.Args inherits them)."""
    total_reserved: Num = msgspec.field(default=None, name="Total Reserved")
    total_allocated: Num = msgspec.field(default=None, name="Total Allocated")
    mem_bytes: Num = msgspec.field(default=None, name="Bytes")
    device_id: Num = msgspec.field(default=None, name="Device Id")
    device_type: Num = msgspec.field(default=None, name="Device Type")
    addr: Num = msgspec.field(default=None, name="Addr")


class StrictMemoryArgs(msgspec.Struct, frozen=True, gc=False):
    """The same fields as the types every profiler writes them (kineto.StrictArgs inherits them)."""
    total_reserved: int | None = msgspec.field(default=None, name="Total Reserved")
    total_allocated: int | None = msgspec.field(default=None, name="Total Allocated")
    mem_bytes: int | None = msgspec.field(default=None, name="Bytes")
    device_id: int | None = msgspec.field(default=None, name="Device Id")
    device_type: int | None = msgspec.field(default=None, name="Device Type")
    addr: int | None = msgspec.field(default=None, name="Addr")


_get = {f: attrgetter(f) for f in ("name", "pid", "tid", "ts", "args", "total_reserved", "total_allocated", "mem_bytes",
                                    "device_id", "device_type", "addr")}


def _whole(v):
    if isinstance(v, bool):
        return None
    if isinstance(v, float):
        return int(v) if np.isfinite(v) and v.is_integer() else None
    return v if isinstance(v, (int, str)) else None


def columns(events: list, ph: list, base: int, int_column, ns, where) -> tuple[pa.Table | None, int]:
    """The batch's `[memory]` events as a memory_events batch (None if it has none), and how many
    were dropped (no time, or no byte count). `ph`: the events' phases; `int_column`, `ns`, `where`:
    kineto.py's converters (int64 column, µs -> ns, positions where a test holds)."""
    cand = list(compress(events, map(eq, ph, repeat("i"))))  # C loops only: a batch without one costs this
    if not cand:
        return None, 0
    mem = list(compress(cand, map(eq, map(_get["name"], cand), repeat(MEMORY_NAME))))
    if not mem:
        return None, 0
    args = list(map(_get["args"], mem))
    if len(where(is_, args, None)):
        keep = [a is not None for a in args]
        mem, args = list(compress(mem, keep)), list(compress(args, keep))
    n = len(mem)
    try:
        ts = np.fromiter(map(_get["ts"], mem), np.float64, n)
    except TypeError:  # a loosely typed batch: a null ts
        ts = np.array([t if isinstance(t, (int, float)) else np.nan for t in map(_get["ts"], mem)], np.float64)

    def ints(values):
        try:
            return int_column(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError):  # a loosely typed batch: 1.0, 1.5, true
            return int_column([_whole(v) for v in values])
    nbytes = ints(list(map(_get["mem_bytes"], args)))
    ok = np.isfinite(ts) & (np.abs(ts) < 9e15) & ~np.asarray(nbytes.is_null().to_numpy(zero_copy_only=False))
    dtype = ints(list(map(_get["device_type"], args)))
    code = dtype.to_numpy(zero_copy_only=False)
    known = np.isfinite(code) & (code >= 0) & (code < len(DEVICE_TYPES))
    names = DEVICE_TYPES.take(pa.array(np.where(known, code, 0).astype(np.int64), mask=~known))
    t = pa.table({
        "device_type": names,
        "device": ints(list(map(_get["device_id"], args))).cast(pa.int32()),
        "pid": ints(list(map(_get["pid"], mem))),
        "tid": ints(list(map(_get["tid"], mem))),
        "ts_ns": pa.array(ns(np.where(ok, ts, 0.0), base), pa.int64()),
        "bytes": nbytes,
        "addr": ints(list(map(_get["addr"], args))),
        "total_allocated": ints(list(map(_get["total_allocated"], args))),
        "total_reserved": ints(list(map(_get["total_reserved"], args))),
    })
    dropped = n - int(ok.sum())
    return (t.filter(pa.array(ok)) if dropped else t), dropped


def devices(props) -> pa.Table | None:
    """The trace's `deviceProperties` as a devices batch (device, name, memory_bytes), or None."""
    rows = [d for d in props or [] if isinstance(d, dict)]
    if not rows:
        return None

    def whole(v):
        return v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**63 else None
    return pa.table({
        "device": pa.array([whole(d.get("id")) for d in rows], pa.int32()),
        "name": pa.array([str(d["name"]) if d.get("name") is not None else None for d in rows], pa.string()),
        "memory_bytes": pa.array([whole(d.get("totalGlobalMem")) for d in rows], pa.int64()),
    })
