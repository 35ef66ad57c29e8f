"""JAX / XLA Chrome traces: the trace viewer JSON of the TensorBoard profiler plugin / XProf
(`<host>.trace.json.gz` in plugins/profile/<run>/, and what XProf serves from an .xplane.pb). The same Chrome-trace JSON as Kineto's, streamed by the same
reader (kineto.py); what differs is where the GPU work is. Kineto says it in each event's `cat`; XLA
says it in the names of the process and thread an event is on, given first, as metadata rows:

- a process named `[<host> ]/device:GPU:N` (or TPU:N) is device N; `/host:CPU` is the host;
- on a device, a thread named `Stream #S[(...)]` holds stream S's kernels and copies (copies are
  named `Copy...` / `Memcpy...`, memsets `Memset...`);
- `XLA Modules`, `XLA Ops`, `Framework Ops`, `Framework Name Scope`, `Source code`, `Steps` are lines
  the profiler derives from those: GPU-side ranges, not GPU work of their own. A device with no stream
  threads (a TPU) has its work on `XLA Ops`: those are its GPU ops;
- the host's launch calls (`cat` gpu_launch: hipLaunchKernel, cuLaunchKernel, ...) and the kernels
  they launch share a flow id (`bind_id`): the correlation id of both.

So the map step is: a category per (process, thread), then Kineto's columns. One concept, one place.
"""
from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

DEVICE = re.compile(r"(?:^|\s)/device:(GPU|TPU):(\d+)$")
HOST = re.compile(r"(?:^|\s)/host:CPU$")
STREAM = re.compile(r"^Stream #(\d+)")
DERIVED_LINES = ("XLA Modules", "XLA Ops", "Framework Ops", "Framework Name Scope", "Source code", "Steps",
                 "TensorFlow Name Scope", "TensorFlow Ops")
# XProf's trace viewer JSON gives times in us after the capture's start, with no wall clock (the
# wild corpus' five XLA files: first events 23-367 us): two captures both start near 0, so their
# times cannot say whether they ran together, nor align them. A time under one day after the epoch
# is such a clock.
CAPTURE_RELATIVE_NS = 86_400 * 10**9
# XLA's collectives: NCCL / RCCL kernels on a GPU, the HLO collective ops (a TPU's XLA Ops line)
COLLECTIVE = r"(?i)nccl|rccl|all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute|allreduce|allgather"
# Kineto categories the rows are given (kineto.GPU_CATS / HOST_CATS / RANGE_CATS take them from there)
LAUNCH_CAT = "gpu_launch"


class Layout:
    """The processes and threads of an XLA trace, from its metadata rows."""

    def __init__(self):
        self.devices: dict[int, int] = {}      # pid -> device index
        self.device_kind: dict[int, str] = {}  # pid -> 'GPU' | 'TPU'
        self.hosts: set[int] = set()
        self.hostname: str | None = None
        self.threads: dict[tuple[int, int], str] = {}
        self._cats: dict | None = None

    @property
    def xla(self) -> bool:
        return bool(self.devices)

    def process(self, pid: int, name: str):
        if (m := DEVICE.search(name)) is not None:
            self.devices[pid] = int(m.group(2))
            self.device_kind[pid] = m.group(1)
            host = name[:m.start()].strip()
        elif HOST.search(name):
            self.hosts.add(pid)
            host = name[:-len("/host:CPU")].strip()
        else:
            return
        self.hostname = self.hostname or host or None
        self._cats = None

    def thread(self, pid: int, tid: int, name: str):
        self.threads[pid, tid] = name
        self._cats = None

    def _categories(self) -> dict:
        """(pid, tid) -> (Kineto category, stream) of the rows on that thread; None: the row's own cat."""
        streams = {pid for (pid, _), n in self.threads.items() if pid in self.devices and STREAM.match(n)}
        out: dict[tuple[int, int], tuple[str, int | None]] = {}
        for (pid, tid), name in self.threads.items():
            if pid not in self.devices:
                continue
            if (m := STREAM.match(name)) is not None:
                out[pid, tid] = ("kernel", int(m.group(1)))
            elif name.startswith("XLA Ops") and pid not in streams:
                out[pid, tid] = ("kernel", tid)          # a TPU: its ops are its work
            elif name.startswith(DERIVED_LINES):
                out[pid, tid] = ("gpu_user_annotation", None)
        return out

    def remap(self, col: dict) -> None:
        """Kineto's columns of a batch -> the same columns as this trace's layout says (in place).
        Columnar: the (process, thread) of each row is looked up in the layout's few threads at once."""
        if self._cats is None:
            self._cats = self._categories()
        pid = col["pid"].fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
        tid = col["tid"].fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
        n = len(pid)
        line_keys = list(self._cats)
        keys = (pid << 32) | (tid & 0xFFFFFFFF)
        known = np.array([(p << 32) | (t & 0xFFFFFFFF) for p, t in line_keys], np.int64)
        at = pc.index_in(pa.array(keys), pa.array(known, pa.int64())).fill_null(-1).to_numpy(zero_copy_only=False)
        hit = at >= 0
        line_cat = np.array([self._cats[k][0] for k in line_keys] + [None], object)
        line_stream = pa.array([self._cats[k][1] for k in line_keys] + [None], pa.int64())
        line_device = pa.array([self.devices[p] for p, _ in line_keys] + [None], pa.int64())
        own = col["cat"].to_numpy(zero_copy_only=False).astype(object)
        cat = np.where(hit, line_cat[at], own)
        names = col["name"]
        copy = pc.fill_null(pc.match_substring_regex(names, r"(?i)^(copy|memcpy)"), False).to_numpy(zero_copy_only=False)
        memset = pc.fill_null(pc.match_substring_regex(names, r"(?i)^memset"), False).to_numpy(zero_copy_only=False)
        work = hit & (cat == "kernel")
        cat[work & copy] = "gpu_memcpy"
        cat[work & memset & ~copy] = "gpu_memset"
        on_device = np.isin(pid, np.array(list(self.devices), np.int64))
        cat[on_device & ~hit] = None          # a device row on no line read (counters, flows)
        on_host = np.isin(pid, np.array(list(self.hosts), np.int64)) & ~on_device
        cat[on_host & (own == LAUNCH_CAT)] = "cuda_runtime"
        cat[on_host & (own != LAUNCH_CAT)] = "cpu_op"
        col["cat"] = pa.array(cat, pa.string())
        take = pa.array(np.where(hit, at, len(line_keys)))
        col["gpu_stream"] = pc.if_else(pa.array(work), line_stream.take(take), col["gpu_stream"])
        col["gpu_device"] = line_device.take(take)
        linked = (work | (on_host & (own == LAUNCH_CAT)))
        col["correlation"] = pc.if_else(pa.array(linked), col["bind_id"], pa.nulls(n, pa.int64()))
