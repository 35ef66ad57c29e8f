"""PyTorch profiler / Kineto Chrome-trace JSON (plain or gzip) -> Arrow, streamed.

The file is decoded in bounded batches: we read a few MB, cut the text at the last event
boundary, decode `[...]` with msgspec typed structs and turn the batch into Arrow columns,
then drop it. A cut is accepted only if the piece decodes, so a `},{` inside a string or a
nested object can never split an event. Memory is bounded by the batch size, not the file.

Times: absolute ns = baseTimeNanoseconds + ts * 1000 (ts in µs, with a fractional ns part);
traces without baseTimeNanoseconds (older PyTorch) have ts in µs since the epoch.

Size: Kineto's JSON in all its versions (event kinds, two clocks, flows, args) streamed into
columns; one format, one module.
"""
from __future__ import annotations

import gc
import math
import re
from itertools import compress, repeat
from operator import attrgetter, eq, is_, is_not

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InputError, one_line
from . import kineto_memory, xla_trace
from .compressed import BoundedReader
from .model import ProcessTrace
from .ranks import IN_FILE
from .stream import HashedFile, ReadAhead

BATCH_BYTES = 8 << 20
MAX_HEADER_BYTES = 64 << 20

Num = int | float | str | None


class Args(kineto_memory.MemoryArgs):  # with the fields of [memory] events
    correlation: Num = None
    external_id: Num = msgspec.field(default=None, name="External id")
    device: Num = None
    stream: Num = None
    bytes: Num = None
    collective: str | None = msgspec.field(default=None, name="Collective name")
    pg_name: Num = msgspec.field(default=None, name="Process Group Name")
    in_nelems: Num = msgspec.field(default=None, name="In msg nelems")
    dtype: str | None = None
    name: Num = None            # process_name / thread_name metadata
    flops: Num = None
    rank: Num = None            # TraceLens's fused file: the rank each event came from (_ByRank)
    event_index: Num = msgspec.field(default=None, name="Profiler Event Index")
    ev_idx: Num = msgspec.field(default=None, name="Ev Idx")  # its name before PyTorch 2.0
    python_id: Num = msgspec.field(default=None, name="Python id")  # a python_function's, where neither is recorded
    # kept as JSON text, undecoded (a Raw cannot be in a union with None: empty means absent)
    input_dims: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Input Dims")
    input_types: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Input type")
    concrete: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Concrete Inputs")


class Event(msgspec.Struct):
    ph: str | None = None
    cat: str | None = None
    name: Num = None
    pid: Num = None
    tid: Num = None
    ts: float | None = None
    dur: float | None = None
    args: Args | None = None
    bind_id: Num = None         # XLA traces: the flow id a launch call and its kernel share (xla_trace.py)


# The types nearly every trace has. A batch that decodes with them is turned into columns by C
# loops (attrgetter, Arrow); one that does not (a float pid, a null ts) is decoded again with the
# loose types above and converted event by event. Both give the same columns.
class StrictArgs(kineto_memory.StrictMemoryArgs, frozen=True, gc=False):
    correlation: int | None = None
    external_id: int | None = msgspec.field(default=None, name="External id")
    device: int | None = None
    stream: int | None = None
    bytes: int | None = None
    collective: str | None = msgspec.field(default=None, name="Collective name")
    pg_name: Num = msgspec.field(default=None, name="Process Group Name")
    in_nelems: Num = msgspec.field(default=None, name="In msg nelems")
    dtype: str | None = None
    name: Num = None
    flops: int | None = None
    rank: int | None = None
    event_index: int | None = msgspec.field(default=None, name="Profiler Event Index")
    ev_idx: int | None = msgspec.field(default=None, name="Ev Idx")
    python_id: int | None = msgspec.field(default=None, name="Python id")
    input_dims: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Input Dims")
    input_types: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Input type")
    concrete: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Concrete Inputs")


_NO_STRICT_ARGS = StrictArgs()


class StrictEvent(msgspec.Struct, gc=False):
    ph: str | None = None
    cat: str | None = None
    name: str | None = None
    pid: int | str | None = None    # Kineto's own rows have pid "Spans" / "Traces"
    tid: int | str | None = None
    ts: float = math.nan
    dur: float = math.nan           # a complete event without a duration has no end: dropped, counted
    args: StrictArgs | None = _NO_STRICT_ARGS
    bind_id: int | None = None


class Meta(msgspec.Struct):
    """Top-level keys around traceEvents."""
    traceEvents: list[Event] = []
    baseTimeNanoseconds: int | None = None
    distributedInfo: dict | None = None
    deviceProperties: list | None = None
    hostname: str | None = None
    schemaVersion: Num = None


class StrictMeta(Meta):
    traceEvents: list[StrictEvent] = []  # type: ignore[assignment]  # msgspec decodes into the narrower type


_strict_events_decoder = msgspec.json.Decoder(list[StrictEvent])
_strict_meta_decoder = msgspec.json.Decoder(StrictMeta)
_events_decoder = msgspec.json.Decoder(list[Event])
_raw_list_decoder = msgspec.json.Decoder(list[msgspec.Raw])
_event_decoder = msgspec.json.Decoder(Event)
_meta_decoder = msgspec.json.Decoder(Meta)

GPU_CATS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset", "Memcpy": "memcpy",
            "Memset": "memset", "Kernel": "kernel"}
HOST_CATS = {"cuda_runtime": "cuda_runtime", "cuda_driver": "cuda_driver", "cpu_op": "cpu_op",
             "python_function": "python", "Runtime": "cuda_runtime", "Operator": "cpu_op"}
RANGE_CATS = {"user_annotation": False, "gpu_user_annotation": True}
DTYPE_BYTES = {"float": 4, "half": 2, "bfloat16": 2, "double": 8, "int": 4, "long": 8, "byte": 1,
               "char": 1, "bool": 1, "short": 2, "float8_e4m3fn": 1, "float8_e5m2": 1, "complexfloat": 8,
               "complexdouble": 16, "int8": 1, "uint8": 1, "int32": 4, "int64": 8, "float16": 2, "float32": 4}
COLLECTIVES = {"allreduce": "AllReduce", "all_reduce": "AllReduce", "allgather": "AllGather",
               "all_gather": "AllGather", "_allgather_base": "AllGather", "allgather_into_tensor_coalesced": "AllGather",
               "reducescatter": "ReduceScatter", "reduce_scatter": "ReduceScatter", "_reduce_scatter_base": "ReduceScatter",
               "reduce_scatter_tensor_coalesced": "ReduceScatter", "broadcast": "Broadcast", "reduce": "Reduce",
               "send": "SendRecv", "recv": "SendRecv", "sendrecv": "SendRecv", "all_to_all": "AllToAll",
               "alltoall": "AllToAll", "alltoall_base": "AllToAll", "all_to_allv": "AllToAll", "gather": "Gather",
               "scatter": "Scatter", "barrier": "Barrier"}


def open_stream(path: str):
    """(raw file, binary stream of the JSON text): gzip detected from content (magic bytes), not
    the suffix. The raw file hashes the bytes as they are read."""
    with open(path, "rb") as f:
        head = f.read(2)
    raw = HashedFile(path)
    return raw, (BoundedReader(path, "gzip", raw) if head == b"\x1f\x8b" else raw)


_TRACE_EVENTS = re.compile(rb'"traceEvents"\s*:\s*\[')
_LIST_START = re.compile(rb'(?:\xef\xbb\xbf)?\s*\[\s*(?=\{|\])')  # `[{...`: events, not an object
_WS = b" \t\r\n"


def _last_boundary(buf: bytes, end: int) -> int:
    """Index of the ',' between two top-level-looking events before `end`, or -1."""
    while True:
        i = buf.rfind(b"{", 0, end)
        if i <= 0:
            return -1
        j = i - 1
        while j >= 0 and buf[j] in _WS:
            j -= 1
        if j >= 0 and buf[j] == 44:  # ','
            k = j - 1
            while k >= 0 and buf[k] in _WS:
                k -= 1
            if k >= 0 and buf[k] == 125:  # '}'
                return j
        end = i


def read(path: str, sink, key: str = "p0") -> list[ProcessTrace]:
    """Stream `path` into `sink` (sink.write(key, table, arrow_batch)); return its trace record."""
    enabled = gc.isenabled()
    gc.disable()  # object-heavy decode: the collector would double the time
    try:
        return _read(path, sink, key)
    finally:
        if enabled:
            gc.enable()


def _read(path, sink, key):
    # Long because: one pass over the file in its own order; most lines name the file in an error.
    try:
        raw, stream = open_stream(path)
    except OSError as e:
        raise InputError(path, f"cannot open ({e.strerror})") from None
    conv = _ByRank(path)
    dropped = 0
    chunks = ReadAhead(stream, BATCH_BYTES)
    try:
        more = iter(chunks)
        buf = b""
        listed = False  # the JSON Array form: the autograd profiler's EventList.export_chrome_trace
        for chunk in more:
            buf += chunk
            m = _LIST_START.match(buf)
            if m:
                listed = conv.plain.legacy = True
                break
            m = _TRACE_EVENTS.search(buf)
            if m:
                break
            if len(buf) > MAX_HEADER_BYTES:
                raise InputError(path, "no \"traceEvents\" array in the first 64 MiB: not a PyTorch profiler trace")
        else:
            if not buf.strip():
                raise InputError(path, "empty file")
            if buf.lstrip()[:1] not in (b"{", b"["):
                raise InputError(path, "not JSON and not an nsys SQLite export: unknown format")
            raise InputError(path, "JSON has no \"traceEvents\" array: not a PyTorch profiler / Chrome trace")
        header = buf[:m.start()]
        if not listed and not header.lstrip().startswith(b"{"):
            raise InputError(path, "JSON top level is not an object: not a PyTorch profiler trace")
        if not listed:
            conv.set_meta(_decode_meta(path, header + b'"traceEvents": []}'))
        # One growing buffer, no copies per batch: buf[0] is the batch's '[' and the ',' at a cut
        # becomes its ']' while the batch decodes.
        buf = bytearray(b"[") + buf[m.end():]
        for chunk in more:
            buf += chunk
            if len(buf) < BATCH_BYTES:
                continue
            end = len(buf)
            for _ in range(64):
                cut = _last_boundary(buf, end)
                if cut < 0:
                    break
                buf[cut] = 0x5D  # ']'
                try:
                    if buf.find(b'Input', 1, cut) >= 0:  # Input Dims, Input type, Concrete Inputs
                        # shapes are kept as msgspec.Raw, which points into what it decoded: a copy
                        # of the batch, so that no view of `buf` outlives this block (an exception's
                        # frames would hold them, and `buf` could not be released or shrunk)
                        events, bad = _decode_batch(buf[:cut + 1])
                    else:
                        with memoryview(buf) as whole, whole[:cut + 1] as piece:
                            events, bad = _decode_batch(piece)
                except msgspec.DecodeError:
                    buf[cut] = 0x2C  # ',': the cut fell inside an event or a string: try an earlier one
                    end = cut
                    continue
                dropped += bad
                conv.add(events, sink, key)
                del events
                del buf[1:cut + 1]
                break
            if len(buf) > 32 * BATCH_BYTES:
                raise InputError(path, "no event boundary found in 256 MiB of JSON: not a PyTorch profiler trace")
        tail = b'{"traceEvents":' + buf + (b"}" if listed else b"")
        try:
            meta_tail = _strict_meta_decoder.decode(tail)
        except msgspec.ValidationError:
            try:
                meta_tail = _meta_decoder.decode(tail)
            except msgspec.ValidationError:
                meta_tail, bad = _decode_tail_leniently(path, tail)
                dropped += bad
        except msgspec.DecodeError as e:
            raise InputError(path, f"truncated or invalid JSON ({one_line(e, 200)})") from None
        late = meta_tail.baseTimeNanoseconds
        if late is not None:
            conv.check_base(int(late))
        if late is not None and int(late) != conv.base and sum(conv.n.values()):
            # the time base comes after the events (a trace re-serialised with its keys in another
            # order): the batches already written were timed without it. Half of a public MI300 trace
            # sat 56 years from the other half, its launch latencies overflowing INT64 when summed.
            conv.shift_times(sink, key, int(late) - conv.base)
        conv.set_meta(meta_tail)
        conv.add(meta_tail.traceEvents, sink, key)
        digest = raw.hexdigest()  # the read-ahead thread is done: it has handed over the end of the stream
    finally:
        chunks.close()
    traces = conv.finish(sink, key, dropped)
    for t in traces:
        t.source_hash = digest
    return traces


def _decode_meta(path, text: bytes) -> Meta:
    try:
        return _meta_decoder.decode(text)
    except msgspec.ValidationError as e:
        raise InputError(path, f"trace metadata has an unexpected type ({one_line(e, 200)})") from None
    except msgspec.DecodeError as e:
        raise InputError(path, f"invalid JSON before traceEvents ({one_line(e, 200)})") from None


def _decode_batch(piece: bytes):
    """`[events]` -> (events, how many were dropped). Raises msgspec.DecodeError if it is not JSON."""
    try:
        return _strict_events_decoder.decode(piece), 0
    except msgspec.ValidationError:
        pass
    try:
        return _events_decoder.decode(piece), 0
    except msgspec.ValidationError:
        return _decode_leniently(piece)


def _decode_leniently(piece: bytes):
    """A batch with a wrongly typed event: decode event by event and drop the bad ones."""
    raws = _raw_list_decoder.decode(piece)
    good, bad = [], 0
    for r in raws:
        try:
            good.append(_event_decoder.decode(r))
        except (msgspec.ValidationError, msgspec.DecodeError):
            bad += 1
    return good, bad


def _decode_tail_leniently(path, tail: bytes):
    class LooseMeta(Meta):
        traceEvents: list[msgspec.Raw] = []  # type: ignore[assignment]  # the events left undecoded
    try:
        m = msgspec.json.decode(tail, type=LooseMeta)
    except (msgspec.ValidationError, msgspec.DecodeError) as e:
        raise InputError(path, f"invalid trace JSON ({one_line(e, 200)})") from None
    good, bad = [], 0
    for r in m.traceEvents:
        try:
            good.append(_event_decoder.decode(r))
        except (msgspec.ValidationError, msgspec.DecodeError):
            bad += 1
    return Meta(traceEvents=good, baseTimeNanoseconds=m.baseTimeNanoseconds, distributedInfo=m.distributedInfo,
                deviceProperties=m.deviceProperties, hostname=m.hostname), bad


def _ns(values: list, base: int) -> np.ndarray:
    """µs floats -> int64 ns, exact for ns-resolution inputs (µs with three decimals).

    Splitting off the integer part keeps the fraction's float error below half a ns, so
    rounding the fraction gives the exact ns that the profiler wrote.
    """
    a = np.asarray(values, dtype=np.float64)
    ip = np.floor(a)
    return base + ip.astype(np.int64) * 1000 + np.rint((a - ip) * 1000.0).astype(np.int64)


def _int_or_none(v):
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and math.isfinite(v) and v.is_integer():  # 1.5 is no rank: never silently 1
        return int(v)
    if isinstance(v, str) and v.lstrip("-").isdigit():
        return int(v)
    return None


# A fused file naming more ranks than this is damaged, not a job: each rank holds open Arrow streams.
MAX_FUSED_RANKS = 4096
_FUSED_HOST = re.compile(r"RANK (\d+) - CPU")


class _ByRank:
    """One file, one process per rank: TraceLens's TraceFuse merges per-rank traces into one file and
    writes `args.rank` on every event (and adds rank x 10^k to pids and correlation ids, so they stay
    apart). Events naming a rank go to that rank's converter (key `<key>r<rank>`); a file without
    `args.rank` goes, whole, to one converter under `key`, as before. TraceFuse drops each rank's
    process_name rows and writes its own, "RANK N - CPU" / "RANK N - GPU", without args.rank: the CPU
    one names rank N's host pid."""

    def __init__(self, path):
        self.path = path
        self.plain = _Converter(path)
        self.ranks: dict[int, _Converter] = {}
        self.metas: list[Meta] = []
        self.plain_used = False

    @property
    def base(self):
        return self.plain.base

    @property
    def n(self):
        total = dict(self.plain.n)
        for c in self.ranks.values():
            for k, v in c.n.items():
                total[k] = total.get(k, 0) + v
        return total

    def check_base(self, base: int) -> None:
        self.plain.check_base(base)

    def set_meta(self, m: Meta):
        self.metas.append(m)
        for c in (self.plain, *self.ranks.values()):
            c.set_meta(m)

    def _rank(self, r: int) -> _Converter:
        c = self.ranks.get(r)
        if c is None:
            if len(self.ranks) >= MAX_FUSED_RANKS:
                raise InputError(self.path, f"events name more than {MAX_FUSED_RANKS:,} ranks in args.rank: "
                                 "not a fused trace of one job")
            c = self.ranks[r] = _Converter(self.path)
            for m in self.metas:
                c.set_meta(m)
        return c

    def add(self, events: list, sink, key):
        if not events:
            return
        args = list(map(_get["args"], events))
        for i in _where(is_, args, None):
            args[i] = _NO_ARGS
        ranks = list(map(_get["rank"], args))
        if not self.ranks and all(map(is_, ranks, repeat(None))):
            self.plain_used = True
            self.plain.add(events, sink, key)
            return
        ranks = [_int_or_none(r) for r in ranks] if not isinstance(events[0], StrictEvent) else ranks
        code = np.array([-1 if r is None else r for r in ranks], np.int64)
        for r in np.unique(code[code >= 0]).tolist():
            self._rank(r).add(list(compress(events, code == r)), sink, f"{key}r{r}")
        rest = list(compress(events, code < 0))
        if not rest:
            return
        for e in rest:
            if e.ph == "M" and e.name == "process_name" and e.args is not None and isinstance(e.pid, int):
                m = _FUSED_HOST.fullmatch(str(e.args.name))
                if m and int(m.group(1)) in self.ranks:
                    self.ranks[int(m.group(1))].host_pids.setdefault(e.pid, e.args.name)
        if any(e.ph != "M" for e in rest):
            self.plain_used = True
            self.plain.add(rest, sink, key)

    def shift_times(self, sink, key, delta_ns: int):
        sink.shift_times(key, delta_ns)
        for r in self.ranks:
            sink.shift_times(f"{key}r{r}", delta_ns)

    def finish(self, sink, key, dropped) -> list[ProcessTrace]:
        if not self.ranks:
            return [self.plain.finish(sink, key, dropped)]
        out: list[ProcessTrace] = []
        for r in sorted(self.ranks):
            t = self.ranks[r].finish(sink, f"{key}r{r}", dropped if not out else 0)
            t.rank_hint, t.rank_hint_source, t.n_processes = r, IN_FILE, len(self.ranks)
            out.append(t)
        if self.plain_used:  # events without args.rank beside ranked ones: a process of their own
            t = self.plain.finish(sink, key, 0)
            t.warnings.append(f"{sum(self.plain.n.values()):,} events carry no args.rank in a file whose other "
                              "events do (a fused trace): read as a process of their own")
            t.n_processes = len(self.ranks) + 1
            out.append(t)
        return out


# Absolute times stay below 2^62 ns (the year 2116): the analyses add two times (a midpoint, an
# interval's sum), which overflowed INT64 above it ("internal error (OutOfRangeException ...)" for a
# baseTimeNanoseconds of 2^62), and 2^63 - 1 wrapped silently to the year 1677.
TIME_LIMIT_NS = 1 << 62
TIME_LIMIT_YEAR = 2116


class _Converter:
    """Turns decoded event batches into Arrow batches of the canonical tables."""

    def __init__(self, path):
        self.path = path
        self.base = 0
        self.rank = None
        self.world_size = None
        self.hostname = None
        self.device_name = None
        self.host_pids: dict = {}
        self.n = {"gpu_ops": 0, "host_ops": 0, "ranges": 0}
        self.bad_time = 0
        self.negative = 0
        self.odd: dict[str, int] = {}  # GPU ops with a field of the wrong kind or sign, per field
        self.bad_flops = 0  # ops whose FLOP count is negative or past FLOPS_LIMIT (NULL)
        self.any_events = False
        self.version = None
        self.notes: set[str] = set()
        self.devices = None
        self.unread: dict[str, int] = {}  # complete events of categories no table takes, per category
        self.layout = xla_trace.Layout()  # an XLA trace's devices and lines; empty for Kineto's
        self.legacy = False  # a top-level list of events: the autograd profiler's (_legacy)

    def check_base(self, base: int) -> None:
        if not 0 <= base < TIME_LIMIT_NS:
            raise InputError(self.path, f"baseTimeNanoseconds {base} is no time a profiler writes (times must lie "
                             f"between 1970 and {TIME_LIMIT_YEAR}, below 2^62 ns)")

    def set_meta(self, m: Meta):
        if m.baseTimeNanoseconds is not None:
            self.check_base(int(m.baseTimeNanoseconds))
            self.base = int(m.baseTimeNanoseconds)
        di = m.distributedInfo or {}
        if isinstance(di, dict):
            for field in ("rank", "world_size"):
                v = di.get(field)
                if v is None:
                    continue
                if _int_or_none(v) is not None:
                    setattr(self, field, _int_or_none(v))
                else:
                    self.notes.add(f"distributedInfo.{field} {str(v)[:40]!r} is not a whole number: ignored")
            if isinstance(di.get("hostname"), str):
                self.hostname = di["hostname"]
        if m.hostname:
            self.hostname = m.hostname
        if m.deviceProperties and isinstance(m.deviceProperties, list):
            self.devices = kineto_memory.devices(m.deviceProperties)
            names = sorted({str(d["name"]) for d in m.deviceProperties if isinstance(d, dict) and d.get("name")})
            self.device_name = ", ".join(names) or None
        if m.schemaVersion is not None:
            self.version = f"kineto schema {m.schemaVersion}"

    def add(self, events: list, sink, key):
        if not events:
            return
        self.any_events = True
        ph = list(map(_get["ph"], events))
        for i in _where(eq, ph, "M"):
            e = events[i]
            if e.args is None or e.args is _NO_STRICT_ARGS or not isinstance(e.pid, int):
                continue
            if e.name == "process_name":
                self.host_pids.setdefault(e.pid, e.args.name)
                self.layout.process(e.pid, str(e.args.name))
            elif e.name == "thread_name" and isinstance(e.tid, int):
                self.layout.thread(e.pid, e.tid, str(e.args.name))
        mem, bad = kineto_memory.columns(events, ph, self.base, _ints, _ns, _where)
        if mem is not None:
            self.bad_time += bad
            self.n.setdefault("memory_events", 0)
            self._write(sink, key, "memory_events", mem)
        # Only complete events ('X') become rows: flow arrows and markers are often a quarter of a trace.
        xs = list(compress(events, map(eq, ph, repeat("X"))))
        if not xs:
            return
        col = _strict_columns(xs) if isinstance(xs[0], StrictEvent) else _loose_columns(xs)
        col["flops"], bad_flops = col["flops"]
        self.bad_flops += bad_flops
        if self.layout.xla:
            self.layout.remap(col)
        elif self.legacy:
            _legacy(col, list(map(_get["pid"], xs)))
        code = pc.index_in(col["cat"], value_set=_CAT_VALUES).fill_null(-1).to_numpy()
        table = np.where(code >= 0, _CAT_TABLE[code], -1)
        if (code < 0).any():  # counted per distinct category: said when nothing else is on the device
            for v in pc.value_counts(col["cat"].filter(pa.array(code < 0))).to_pylist():
                if v["values"] is not None:
                    self.unread[v["values"]] = self.unread.get(v["values"], 0) + v["counts"]
        for t, build in enumerate((self._gpu, self._host, self._ranges)):
            idx = np.flatnonzero(table == t)
            if len(idx):
                self._write(sink, key, _TABLE_NAMES[t], build(col, idx, code[idx]))

    def _write(self, sink, key, table, batch):
        if batch.num_rows:
            self.n[table] += batch.num_rows
            sink.write(key, table, batch)

    def _times(self, col, idx):
        """start/end ns, and a mask of events whose ts/dur are usable (finite, dur >= 0)."""
        ts_a, du_a = col["ts"][idx], col["dur"][idx]
        ok = np.isfinite(ts_a) & np.isfinite(du_a) & (du_a >= 0) & (np.abs(ts_a) < 9e15) & (du_a < 9e15)  # µs: ns fit int64
        with np.errstate(invalid="ignore", over="ignore"):
            ok &= (ts_a + du_a) * 1e3 < TIME_LIMIT_NS - self.base  # the absolute end below TIME_LIMIT_NS
        self.bad_time += int((~ok).sum())
        # A profiler writes times after its base (epoch or baseTimeNanoseconds): one event before it
        # would stretch the rank's timeline over days and every figure with it.
        negative = ok & (ts_a < 0)
        if negative.any():
            self.negative += int(negative.sum())
            ok &= ~negative
        ts_a, du_a = np.where(ok, ts_a, 0.0), np.where(ok, du_a, 0.0)
        start = _ns(ts_a, self.base)
        end = start + _ns(du_a, 0)
        return start, end, ok

    def _gpu(self, col, idx, code):
        start, end, ok = self._times(col, idx)
        n = len(idx)
        for field, mask in col.get("_bad", {}).items():
            k = int((mask[idx] & ok).sum())
            if k:
                self.odd[field] = self.odd.get(field, 0) + k
        # a negative byte count or device index is no measure: NULL, counted
        nbytes, device = col["bytes"].take(idx), col["gpu_device"].take(idx)
        for field, arr in (("bytes", nbytes), ("device", device)):
            neg = pc.fill_null(pc.less(arr, 0), False)
            k = pc.sum(pc.and_(neg, pa.array(ok))).as_py() or 0
            if k:
                self.odd[field] = self.odd.get(field, 0) + k
                arr = pc.if_else(neg, pa.nulls(n, pa.int64()), arr)
            if field == "bytes":
                nbytes = arr
            else:
                device = arr
        t = pa.table({
            "device": device.cast(pa.int32()),
            "stream": col["gpu_stream"].take(idx),
            "kind": _CAT_KIND.take(code),
            "name": col["name"].take(idx),
            "short_name": pa.nulls(n, pa.string()),
            "start_ns": pa.array(start, pa.int64()),
            "end_ns": pa.array(end, pa.int64()),
            "correlation_id": col["correlation"].take(idx),
            "bytes": nbytes,
            "copy_kind": pa.nulls(n, pa.string()),
            "graph_id": pa.nulls(n, pa.int64()),
            "collective": col["collective"].take(idx),
            "comm": col["comm"].take(idx),
        })
        return t.filter(pa.array(ok)) if not ok.all() else t

    def _host(self, col, idx, code):
        start, end, ok = self._times(col, idx)
        t = pa.table({
            "pid": col["pid"].take(idx),
            "tid": col["tid"].take(idx),
            "kind": _CAT_KIND.take(code),
            "name": col["name"].take(idx),
            "start_ns": pa.array(start, pa.int64()),
            "end_ns": pa.array(end, pa.int64()),
            "correlation_id": col["correlation"].take(idx),
            # links a CUDA call to the CPU op that issued it
            "external_id": col["external_id"].take(idx),
            "event_id": col["event_index"].take(idx),
            "flops": col["flops"].take(idx),
            "input_dims": col["input_dims"].take(idx),
            "input_types": col["input_types"].take(idx),
            "concrete_inputs": col["concrete_inputs"].take(idx),
        })
        return t.filter(pa.array(ok)) if not ok.all() else t

    def _ranges(self, col, idx, code):
        start, end, ok = self._times(col, idx)
        t = pa.table({
            "tid": col["tid"].take(idx),
            "domain": pa.nulls(len(idx), pa.string()),
            "name": col["name"].take(idx),
            "start_ns": pa.array(start, pa.int64()),
            "end_ns": pa.array(end, pa.int64()),
            "on_gpu": _CAT_ON_GPU.take(code),
        })
        return t.filter(pa.array(ok)) if not ok.all() else t

    def finish(self, sink, key, dropped) -> ProcessTrace:
        warnings = sorted(self.notes)
        if not self.any_events:
            raise InputError(self.path, "trace has an empty traceEvents array")
        if dropped or self.bad_time:
            warnings.append(f"dropped {dropped + self.bad_time} events with missing or invalid fields "
                            "(ts/dur not numbers, negative dur)")
        if self.negative:
            warnings.append(f"dropped {self.negative} events with a negative timestamp (before the trace's time base)")
        what = {"name": "named by a non-string (kept as its text)", "correlation": "with a correlation id that is no "
                "whole number (NULL: no launch link)", "stream": "with a stream that is no whole number (NULL)",
                "bytes": "with a negative byte count (NULL)", "device": "with a negative device index (NULL)"}
        for field, k in sorted(self.odd.items()):
            warnings.append(f"{k} GPU ops {what[field]}")
        if self.bad_flops:
            warnings.append(f"{self.bad_flops} ops with a FLOP count that is negative or past 2^50 (NULL: no work known)")
        device = {c: k for c, k in self.unread.items() if c not in _HOST_ONLY_CATS}
        unread_work = None
        if self.n["gpu_ops"] == 0 and device:
            # HTA's MTIA traces: their device work is `mtia_ccp_events`, launched by `mtia_runtime`
            # calls; "CPU-only" would say no accelerator ran, where one ran that is not read
            listed = ", ".join(f"{c} ({k:,})" for c, k in sorted(device.items(), key=lambda x: (-x[1], x[0]))[:4])
            unread_work = listed
            warnings.append(f"{UNREAD_DEVICE_WORK}{listed}; GPU figures will be empty")
        elif self.n["gpu_ops"] == 0:
            warnings.append("no GPU events (CPU-only trace): GPU figures will be empty")
        if self.layout.xla and len(gpus := set(self.layout.devices.values())) > 1:
            # one JAX process drove several devices (jax_conv_minimal_08: /device:GPU:0-7): it is one
            # rank, whose GPU figures (busy, idle, gaps, the critical path) take its devices together
            warnings.append(f"one process drove {len(gpus)} devices ({', '.join(map(str, sorted(gpus)))}): read as one "
                            "rank; its GPU figures (busy, idle, gaps) take the devices' streams together")
        if self.devices is not None:
            self.n.setdefault("devices", 0)
            self._write(sink, key, "devices", self.devices)
        pid = None
        if self.host_pids and not self.layout.xla:
            # Kineto names GPU "processes" by device index; the host process has a real pid.
            real = [p for p in self.host_pids if p > 64] or list(self.host_pids)
            pid = real[0]
        xla = self.layout
        return ProcessTrace(
            source_path=self.path,
            source_format="xla-json" if xla.xla else "autograd-json" if self.legacy else "kineto-json",
            profiler_version=self.version, hostname=self.hostname or xla.hostname, pid=pid,
            device_name=self.device_name, rank_hint=self.rank,
            rank_hint_source="distributedInfo" if self.rank is not None else None,
            world_size=self.world_size, warnings=warnings, key=key, counts=dict(self.n), unread_device_work=unread_work,
            devices=tuple(sorted(set(xla.devices.values()))))


_NO_ARGS = Args()
_TABLE_NAMES = ("gpu_ops", "host_ops", "ranges")
# The warning of a trace whose only device work is of categories not read (its list: traces.unread_device_work)
UNREAD_DEVICE_WORK = ("no GPU events of the kinds traceflow reads (CUDA / ROCm kernels, copies, memsets): "
                      "events of other categories were not read: ")
# categories a CPU-only trace holds besides CPU ops: not device work left unread
_HOST_ONLY_CATS = frozenset({"Trace", "overhead", "cpu_instant_event"})
_CAT_VALUES = pa.array([*GPU_CATS, *HOST_CATS, *RANGE_CATS], pa.string())
_CAT_TABLE = np.array([0] * len(GPU_CATS) + [1] * len(HOST_CATS) + [2] * len(RANGE_CATS), np.int64)
_CAT_KIND = pa.array([*GPU_CATS.values(), *HOST_CATS.values()] + [None] * len(RANGE_CATS), pa.string())
_CAT_ON_GPU = pa.array([None] * (len(GPU_CATS) + len(HOST_CATS)) + list(RANGE_CATS.values()), pa.bool_())


def _legacy(col: dict, pids: list) -> None:
    """The autograd profiler's JSON list (EventList.export_chrome_trace; torch.autograd.profiler before
    Kineto, and every torch since for `prof.function_events`): no categories; its rows say where they
    ran by pid: "CPU functions" (an op, on thread tid), "<device> functions" (before PyTorch 1.8, a
    kernel, on device tid). No stream: the device's index stands for it."""
    pid = pa.array([p if isinstance(p, str) else None for p in pids], pa.string())
    cpu = pc.fill_null(pc.equal(pid, "CPU functions"), False)
    device = pc.fill_null(pc.and_(pc.match_substring_regex(pid, r"^\w+ functions$"), pc.invert(cpu)), False)
    own = col["cat"]
    col["cat"] = pc.if_else(pc.and_(cpu, pc.is_null(own)), pa.scalar("cpu_op"),
                            pc.if_else(pc.and_(device, pc.is_null(own)), pa.scalar("kernel"), own))
    col["gpu_device"] = pc.if_else(device, col["tid"], pa.nulls(len(pids), pa.int64()))
    col["gpu_stream"] = col["gpu_device"]


def _nbytes(b, in_nelems, dtype):
    """The bytes an op moves: its own figure, else element count x dtype size (collectives)."""
    if b is None and in_nelems is not None and dtype:
        n = _int_or_none(in_nelems)
        size = DTYPE_BYTES.get(dtype.lower())
        b = n * size if n is not None and size else None
    return b


def _collective(c):
    return COLLECTIVES.get(c.lower(), c) if c else None


def _comm(pg):
    return str(pg) if pg is not None else None


_get = {f: attrgetter(f) for f in ("ph", "cat", "name", "pid", "tid", "ts", "dur", "args", "correlation", "external_id",
                                    "device", "stream", "bytes", "in_nelems", "collective", "pg_name", "flops", "rank", "bind_id",
                                    "event_index", "ev_idx", "python_id", "input_dims", "input_types", "concrete")}


def _raw_text(values: list, keep=None) -> pa.Array:
    """JSON kept undecoded (msgspec.Raw; empty: absent) as text, by C loops only: one join of the
    values' bytes and their lengths as offsets (2.3x faster than a bytes object per value, measured
    on 200k values). keep: a boolean mask; the values outside it are absent."""
    n = len(values)
    lens = np.fromiter(map(len, values), np.int64, n)
    if keep is not None:
        values = list(compress(values, keep))
        lens[~keep] = 0
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(lens, out=offsets[1:])
    valid = lens > 0
    typ = pa.string() if offsets[-1] < (1 << 31) else pa.large_string()
    if typ == pa.string():
        offsets = offsets.astype(np.int32)
    arr = pa.Array.from_buffers(typ, n, [pa.py_buffer(np.packbits(valid, bitorder="little")), pa.py_buffer(offsets),
                                         pa.py_buffer(b"".join(values))], null_count=n - int(valid.sum()))
    return arr.cast(pa.string()) if typ != pa.string() else arr


def _is_conv(names: pa.Array) -> np.ndarray:
    """Convolution ops: the only ones whose scalar arguments (stride, padding, ...; Kineto's Concrete
    Inputs) a figure needs, so the only ones that keep them."""
    return pc.fill_null(pc.match_substring(names, "conv"), False).to_numpy(zero_copy_only=False)


def _where(test, values: list, obj) -> np.ndarray:
    """Positions i where test(values[i], obj), found by a C loop (map over builtins, no Python frame per value)."""
    return np.flatnonzero(np.fromiter(map(test, values, repeat(obj)), bool, len(values)))


def _ints(values: list) -> pa.Array:
    """int64 column; strings among the ints are read as _int_or_none reads them."""
    try:
        return pa.array(values, pa.int64())
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        for i in _where(isinstance, values, str):
            values[i] = _int_or_none(values[i])
        return pa.array(values, pa.int64())


# One op's FLOPs: below 2^50 (1.1e15, a 50k-cube matmul is 2.5e14). A count past it, or negative, is
# no measure (NULL, counted): 2^62 or a sum past INT64 ended the MFU pack in an internal error.
FLOPS_LIMIT = 1 << 50


def _flops(values: list) -> tuple[pa.Array, int]:
    """The FLOP counts as int64, those out of [0, FLOPS_LIMIT) NULL; their count is the array's
    null count less the values that were missing (see _Converter.add)."""
    return pa.array([v if v is None or (isinstance(v, int) and 0 <= v < FLOPS_LIMIT) else None for v in values],
                    pa.int64()), sum(v is not None and not (isinstance(v, int) and 0 <= v < FLOPS_LIMIT) for v in values)


def _strict_columns(evs: list) -> dict:
    """Batch-wide columns of StrictEvents: C loops only, except over the few collectives."""
    n = len(evs)
    args = list(map(_get["args"], evs))
    for i in _where(is_, args, None):
        args[i] = _NO_STRICT_ARGS
    pid = _ints(list(map(_get["pid"], evs)))
    tid = _ints(list(map(_get["tid"], evs)))
    nbytes = list(map(_get["bytes"], args))
    nelems = list(map(_get["in_nelems"], args))
    for i in _where(is_not, nelems, None):
        nbytes[i] = _nbytes(nbytes[i], nelems[i], args[i].dtype)
    coll = list(map(_get["collective"], args))
    for i in _where(is_not, coll, None):
        coll[i] = _collective(coll[i])
    comm = list(map(_get["pg_name"], args))
    for i in _where(is_not, comm, None):
        comm[i] = _comm(comm[i])
    names = pa.array(list(map(_get["name"], evs)), pa.string()).fill_null("None")  # str(None), as the loose path
    return {
        "cat": pa.array(list(map(_get["cat"], evs)), pa.string()),
        "name": names,
        "pid": pid,
        "tid": tid,
        "ts": np.fromiter(map(_get["ts"], evs), np.float64, n),
        "dur": np.fromiter(map(_get["dur"], evs), np.float64, n),
        "correlation": pa.array(list(map(_get["correlation"], args)), pa.int64()),
        "external_id": pa.array(list(map(_get["external_id"], args)), pa.int64()),
        "event_index": pc.coalesce(*(pa.array(list(map(_get[f], args)), pa.int64()) for f in ("event_index", "ev_idx", "python_id"))),
        "gpu_device": pc.coalesce(pa.array(list(map(_get["device"], args)), pa.int64()), pid),
        "gpu_stream": pc.coalesce(pa.array(list(map(_get["stream"], args)), pa.int64()), tid),
        "bytes": pa.array(nbytes, pa.int64()),
        "collective": pa.array(coll, pa.string()),
        "comm": pa.array(comm, pa.string()),
        "flops": _flops(list(map(_get["flops"], args))),
        "bind_id": pa.array(list(map(_get["bind_id"], evs)), pa.int64()),
        "input_dims": _raw_text(list(map(_get["input_dims"], args))),
        "input_types": _raw_text(list(map(_get["input_types"], args))),
        "concrete_inputs": _raw_text(list(map(_get["concrete"], args)), _is_conv(names)),
    }


def _loose_columns(evs: list) -> dict:
    """The same columns from loosely typed Events, converting each value on its own."""
    args = [e.args or _NO_ARGS for e in evs]
    names = pa.array([e.name if isinstance(e.name, str) else str(e.name) for e in evs], pa.string())
    # values of the wrong kind, counted (docs/bad-input.md): a name that is no string is kept as its
    # text; a correlation or stream that is no whole number becomes NULL
    bad = {"name": np.array([e.name is not None and not isinstance(e.name, str) for e in evs], bool),
           "correlation": np.array([a.correlation is not None and _int_or_none(a.correlation) is None for a in args], bool),
           "stream": np.array([a.stream is not None and _int_or_none(a.stream) is None for a in args], bool)}
    return {
        "_bad": bad,
        "cat": pa.array([e.cat for e in evs], pa.string()),
        "name": names,
        "pid": pa.array([_int_or_none(e.pid) for e in evs], pa.int64()),
        "tid": pa.array([_int_or_none(e.tid) for e in evs], pa.int64()),
        "ts": np.array([e.ts if e.ts is not None else math.nan for e in evs], np.float64),
        "dur": np.array([e.dur if e.dur is not None else math.nan for e in evs], np.float64),  # no end: dropped
        "correlation": pa.array([_int_or_none(a.correlation) for a in args], pa.int64()),
        "external_id": pa.array([_int_or_none(a.external_id) for a in args], pa.int64()),
        "event_index": pa.array([_int_or_none(next((v for v in (a.event_index, a.ev_idx, a.python_id) if v is not None), None))
                                 for a in args], pa.int64()),
        "gpu_device": pa.array([_int_or_none(a.device) if a.device is not None else _int_or_none(e.pid)
                                for a, e in zip(args, evs)], pa.int64()),
        "gpu_stream": pa.array([_int_or_none(a.stream) if a.stream is not None else _int_or_none(e.tid)
                                for a, e in zip(args, evs)], pa.int64()),
        "bytes": pa.array([_nbytes(_int_or_none(a.bytes), a.in_nelems, a.dtype) for a in args], pa.int64()),
        "collective": pa.array([_collective(a.collective) for a in args], pa.string()),
        "comm": pa.array([_comm(a.pg_name) for a in args], pa.string()),
        "flops": _flops([_int_or_none(a.flops) for a in args]),
        "bind_id": pa.array([_int_or_none(e.bind_id) for e in evs], pa.int64()),
        "input_dims": _raw_text([a.input_dims for a in args]),
        "input_types": _raw_text([a.input_types for a in args]),
        "concrete_inputs": _raw_text([a.concrete for a in args], _is_conv(names)),
    }
