"""The canonical tables (DESIGN.md, "Schema"). All times: INT64 ns since the Unix epoch.

Size: every loaded table's columns and their words (COMMENT ON), one place for all the readers.
"""
from __future__ import annotations

import pyarrow as pa

GPU_OPS = pa.schema([
    ("trace_id", pa.int32()), ("rank", pa.int32()), ("device", pa.int32()), ("stream", pa.int64()),
    ("kind", pa.string()), ("name", pa.string()), ("short_name", pa.string()),
    ("start_ns", pa.int64()), ("end_ns", pa.int64()), ("correlation_id", pa.int64()),
    ("category", pa.string()), ("collective", pa.string()), ("bytes", pa.int64()),
    ("copy_kind", pa.string()), ("graph_id", pa.int64()), ("comm", pa.string()),
])

HOST_OPS = pa.schema([
    ("trace_id", pa.int32()), ("rank", pa.int32()), ("pid", pa.int64()), ("tid", pa.int64()),
    ("kind", pa.string()), ("name", pa.string()), ("start_ns", pa.int64()), ("end_ns", pa.int64()),
    ("correlation_id", pa.int64()), ("external_id", pa.int64()),
    # Kineto with record_shapes / with_flops: what the op was called on (JSON text, as recorded)
    ("flops", pa.int64()), ("input_dims", pa.string()), ("input_types", pa.string()),
    ("concrete_inputs", pa.string()),
    # the profiler's own id of the event (Kineto's "Profiler Event Index", or "Python id"): what tells apart events
    # equal in every other field (zero-length Python calls in one microsecond), invariants.py
    ("event_id", pa.int64()),
])

RANGES = pa.schema([
    ("trace_id", pa.int32()), ("rank", pa.int32()), ("tid", pa.int64()), ("domain", pa.string()),
    ("name", pa.string()), ("start_ns", pa.int64()), ("end_ns", pa.int64()), ("on_gpu", pa.bool_()),
])

# Kineto profile_memory=True: one row per allocation (bytes > 0) or free (bytes < 0); docs/memory.md
MEMORY_EVENTS = pa.schema([
    ("trace_id", pa.int32()), ("rank", pa.int32()), ("device_type", pa.string()), ("device", pa.int32()),
    ("pid", pa.int64()), ("tid", pa.int64()), ("ts_ns", pa.int64()), ("bytes", pa.int64()), ("addr", pa.int64()),
    ("total_allocated", pa.int64()), ("total_reserved", pa.int64()),
])

# the GPUs a trace describes (Kineto deviceProperties): their memory, for the memory pack's headroom
DEVICES = pa.schema([
    ("trace_id", pa.int32()), ("rank", pa.int32()), ("device", pa.int32()), ("name", pa.string()),
    ("memory_bytes", pa.int64()),
])

# torch.cuda.memory snapshots (readers/memory_snapshot.py), joined to the rank of their file name
MEMORY_SEGMENTS = pa.schema([
    ("trace_id", pa.int32()), ("rank", pa.int32()), ("device", pa.int32()), ("address", pa.int64()),
    ("total_size", pa.int64()), ("allocated_size", pa.int64()), ("active_size", pa.int64()),
    ("requested_size", pa.int64()), ("stream", pa.int64()), ("segment_type", pa.string()), ("is_expandable", pa.bool_()),
    ("n_blocks", pa.int64()), ("largest_free_block", pa.int64()), ("source_hash", pa.string()),
])
MEMORY_SNAPSHOT_BLOCKS = pa.schema([
    ("trace_id", pa.int32()), ("rank", pa.int32()), ("device", pa.int32()), ("segment_address", pa.int64()),
    ("address", pa.int64()), ("size", pa.int64()), ("requested_size", pa.int64()), ("state", pa.string()),
    ("frames", pa.string()),
])
MEMORY_SNAPSHOT_HISTORY = pa.schema([
    ("trace_id", pa.int32()), ("rank", pa.int32()), ("device", pa.int32()), ("action", pa.string()),
    ("addr", pa.int64()), ("size", pa.int64()), ("stream", pa.int64()), ("time_ns", pa.int64()), ("frames", pa.string()),
])
# PyTorch Flight Recorder dumps (readers/flight_recorder.py; docs/hang-forensics.md): one row per
# entry of a rank's buffer, and one per process group it knew. dump_id: fr_dumps.dump_id.
FR_ENTRIES = pa.schema([
    ("dump_id", pa.int32()), ("rank", pa.int32()),
    ("pg", pa.string()), ("pg_desc", pa.string()), ("record_id", pa.int64()), ("seq", pa.int64()),
    ("collective_seq_id", pa.int64()), ("p2p_seq_id", pa.int64()), ("op_id", pa.int64()), ("is_p2p", pa.bool_()),
    ("op", pa.string()), ("profiling_name", pa.string()), ("input_sizes", pa.string()), ("output_sizes", pa.string()),
    ("input_dtypes", pa.string()), ("output_dtypes", pa.string()), ("state", pa.string()), ("retired", pa.bool_()),
    ("created_ns", pa.int64()), ("started_ns", pa.int64()), ("completed_ns", pa.int64()), ("timeout_ms", pa.int64()),
    ("thread_name", pa.string()), ("frames", pa.string()), ("user_frame", pa.string()),
])

FR_GROUPS = pa.schema([
    ("dump_id", pa.int32()), ("rank", pa.int32()),
    ("pg", pa.string()), ("pg_desc", pa.string()), ("ranks", pa.string()), ("group_size", pa.int32()),
    ("last_enqueued", pa.int64()), ("last_started", pa.int64()), ("last_completed", pa.int64()),
])

FR_TABLES = {"fr_entries": FR_ENTRIES, "fr_groups": FR_GROUPS}

FR_DUMPS_DDL = """
CREATE TABLE fr_dumps (
    dump_id INTEGER PRIMARY KEY,
    rank INTEGER NOT NULL,
    world_size INTEGER,             -- the default group's size, as the dump states it
    source_path VARCHAR,
    source_format VARCHAR,          -- 'fr-pickle' | 'fr-json'
    source_hash VARCHAR,
    version VARCHAR,                -- 'Flight Recorder 2.10'
    rank_source VARCHAR,            -- dump | file name | pattern | file order
    n_entries BIGINT,
    warnings VARCHAR[]
)
"""

TRACES_DDL = """
CREATE TABLE traces (
    trace_id INTEGER PRIMARY KEY,
    rank INTEGER NOT NULL,
    world_size INTEGER,
    source_path VARCHAR,
    source_format VARCHAR,          -- 'nsys-sqlite' | 'kineto-json' | 'xla-json' | 'autograd-json' | 'perfetto'
    source_hash VARCHAR,            -- blake2b of the file's bytes: makes re-ingest idempotent
    profiler_version VARCHAR,
    hostname VARCHAR,
    pid BIGINT,
    device_name VARCHAR,
    clock_offset_ns BIGINT DEFAULT 0,   -- added to every time of this rank (clock alignment)
    clock_skew_ns BIGINT,               -- estimated skew: its collective ends minus its peers' (median), before correction
    clock_spread_ns BIGINT,             -- spread (median absolute deviation) of those differences after alignment
    clock_note VARCHAR,                 -- why the offset was or was not applied (docs/clock-alignment.md)
    cpu_clock_offset_ns BIGINT DEFAULT 0,  -- Kineto: added to CPU ops / annotations to put them on the runtime calls' clock
    cpu_clock_consistent BOOLEAN,       -- FALSE: no single offset fits; figures mixing the two clocks are NULL
    rank_source VARCHAR,                -- where the rank came from: nccl | distributedInfo | file name | device | file order | pattern
    warnings VARCHAR[],
    unread_device_work VARCHAR          -- device events of categories not read ('cat (count), ...'); NULL where none
)
"""

TABLES = {"gpu_ops": GPU_OPS, "host_ops": HOST_OPS, "ranges": RANGES}
TABLES.update({"memory_events": MEMORY_EVENTS, "devices": DEVICES, "memory_segments": MEMORY_SEGMENTS,
               "memory_snapshot_blocks": MEMORY_SNAPSHOT_BLOCKS, "memory_snapshot_history": MEMORY_SNAPSHOT_HISTORY})

_DUCK = {pa.int32(): "INTEGER", pa.int64(): "BIGINT", pa.string(): "VARCHAR", pa.bool_(): "BOOLEAN"}

# Columns the derive step fills (see traceflow/derive/*.sql).
DERIVED = {
    "gpu_ops": [("op_id", "BIGINT"), ("api_name", "VARCHAR"), ("api_start_ns", "BIGINT"), ("api_end_ns", "BIGINT"),
                ("launch_tid", "BIGINT"), ("launch_op_id", "BIGINT"), ("issue_start_ns", "BIGINT"),
                ("cpu_op_id", "BIGINT"), ("step", "INTEGER")],
    "host_ops": [("op_id", "BIGINT")],
    "ranges": [],
    "memory_events": [], "devices": [], "memory_segments": [], "memory_snapshot_blocks": [], "memory_snapshot_history": [],
}


def duck_type(t: pa.DataType) -> str:
    return _DUCK[t]


def fr_ddl(table: str) -> str:
    return f"CREATE TABLE {table} ({', '.join(f'{f.name} {_DUCK[f.type]}' for f in FR_TABLES[table])})"


def ddl(table: str) -> str:
    cols = [f"{f.name} {_DUCK[f.type]}" for f in TABLES[table]] + [f"{n} {t}" for n, t in DERIVED[table]]
    return f"CREATE TABLE {table} ({', '.join(cols)})"


# Columns many tables share, where a table Python makes (hardware.py, gpu_sharing.py, fr_load.py)
# lists them without words of their own (the .sql modules declare each column's doc).
GLOSSARY = {
    "rank": "the rank (process index in the job) the row belongs to",
    "step": "the training step (ProfilerStep#N, or the --step-pattern's number); NULL outside every step",
    "name": "the name of the op, kernel or call (kernels: the full demangled C++ name)",
    "kind": "what kind of op or segment this is",
    "stream": "the CUDA stream",
    "op_id": "the op's op_id in gpu_ops or host_ops",
    "tid": "the host thread id",
    "category": "what a GPU op does: compute | communication | memory",
    "comm": "the NCCL communicator (process group) of the collective",
    "seq": "the collective's sequence number within its communicator and step",
    "op": "the collective (allreduce, allgather, reduce_scatter, broadcast, ...)",
    "ordinal": "position in time order within the step (0, 1, ...)",
    "start_ns": "start, ns since the Unix epoch (after clock alignment)",
    "end_ns": "end, ns since the Unix epoch (after clock alignment)",
    "dur_ns": "end_ns - start_ns (ns)",
    "bytes": "bytes moved (copies, memsets, collectives' messages)",
    "trace_id": "the input file (traces.trace_id) the row came from",
}

# What `COMMENT ON` says about the loaded tables (traceflow/comments.py; shared columns: GLOSSARY).
DOCS = {
    "traces": ("one row per traced process (rank) and the file it came from", {
        "world_size": "ranks in the job, as the file states it (or the number of ranks ingested)",
        "source_path": "the input file", "source_format": "'nsys-sqlite' | 'kineto-json' | 'xla-json' | 'autograd-json' | 'perfetto'",
        "source_hash": "blake2b of the file's bytes: makes re-ingest idempotent",
        "profiler_version": "the profiler and its version, as the file states it", "hostname": "the host the rank ran on",
        "pid": "the traced process id", "device_name": "the GPU(s) the rank used",
        "clock_offset_ns": "added to every time of this rank by clock alignment (ns)",
        "clock_skew_ns": "estimated skew: its collective ends minus its peers' (median), before correction (ns)",
        "clock_spread_ns": "spread (median absolute deviation) of those differences after alignment (ns)",
        "clock_note": "why the offset was or was not applied (docs/clock-alignment.md)",
        "cpu_clock_offset_ns": "Kineto: added to CPU ops and annotations to put them on the runtime calls' clock (ns)",
        "cpu_clock_consistent": "FALSE: no single offset fits; figures mixing the two clocks are NULL",
        "rank_source": "where the rank came from: nccl | distributedInfo | file name | device | file order | pattern",
        "warnings": "what ingest dropped or refused in this file, and why",
        "unread_device_work": "the file's only device work is of categories not read, with their counts "
                              "('mtia_ccp_events (1,234)'); NULL where none"}),
    "gpu_ops": ("one row per GPU op (kernel, memcpy, memset) of every rank", {
        "device": "the GPU index", "short_name": "the profiler's short kernel name, when it records one",
        "correlation_id": "links the op to the host call that launched it (same trace)",
        "collective": "AllReduce | AllGather | ReduceScatter | Broadcast | SendRecv | ... for NCCL kernels",
        "kind": "kernel | memcpy | memset | um_migration (an nsys unified-memory page migration: not a copy)",
        "copy_kind": "HtoD | DtoH | DtoD | ... for copies", "graph_id": "the CUDA graph it ran in, if any",
        "api_name": "the launch call (cudaLaunchKernel, ...); NULL when the launch is outside the trace",
        "api_start_ns": "when the launch call started (ns since epoch)", "api_end_ns": "when it returned (ns since epoch)",
        "launch_tid": "the host thread that launched it", "launch_op_id": "host_ops.op_id of the launch call",
        "issue_start_ns": "when the host began issuing it: the start of the CPU op around the launch call, else the launch call's",
        "cpu_op_id": "host_ops.op_id of the CPU op that made the launch call, e.g. aten::mm: the op Kineto's External id names if it contains the call on its thread, else the innermost CPU op around the call on that thread; NULL: none does"}),
    "host_ops": ("one row per host call: CPU ops, CUDA runtime and driver calls, OS runtime calls", {
        "pid": "the process id", "kind": "cpu_op | cuda_runtime | cuda_driver | osrt | ...",
        "correlation_id": "links a CUDA call to the GPU op it launched", "external_id": "Kineto: links a CUDA call to its CPU op",
        "flops": "Kineto with_flops=True: the FLOPs PyTorch's profiler counted for this op (NULL: not recorded)",
        "input_dims": "Kineto record_shapes=True, or nsys emit_nvtx(record_shapes=True) ranges' sizes: the inputs' shapes as recorded, JSON text (e.g. [[2048, 512], [512, 1536]])",
        "input_types": "Kineto record_shapes=True: the inputs' dtypes as recorded, JSON text (e.g. [\"c10::BFloat16\", \"float\"])",
        "concrete_inputs": "Kineto record_shapes=True, convolution ops only: the scalar arguments as recorded, JSON text "
                           "(e.g. [\"\", \"\", \"\", \"[2, 2]\", \"[1, 1]\", \"[1, 1]\", \"1\"]: stride, padding, dilation, groups)",
        "event_id": "Kineto: the profiler's own id of the event (Profiler Event Index; Ev Idx before PyTorch 2.0; else "
                    "a Python event's Python id); tells apart events equal in every other field (NULL: not recorded)"}),
    "ranges": ("NVTX ranges and user annotations (record_function), host side and GPU side", {
        "domain": "the NVTX domain", "on_gpu": "TRUE for Kineto's GPU-side user annotations"}),
    "memory_events": ("one row per allocation or free the PyTorch profiler (profile_memory=True) or Nsight Systems "
                      "(--cuda-memory-usage=true) recorded (docs/memory.md)", {
        "device_type": "cpu | cuda | ... (c10 DeviceType)", "device": "the device index as recorded (-1: the CPU)",
        "pid": "the process id", "tid": "the thread that allocated or freed",
        "ts_ns": "when (ns since epoch, on the CPU ops' clock)",
        "bytes": "bytes allocated (> 0) or freed (< 0)", "addr": "the block's address (pairs an allocation with its free)",
        "total_allocated": "the allocator's bytes allocated on this device just after the event (nsys: the running sum of its "
                           "CUDA allocations minus frees)",
        "total_reserved": "the caching allocator's bytes reserved from the device just after the event (the CPU allocator reserves none: 0)"}),
    "memory_segments": ("one row per segment of a CUDA caching-allocator snapshot (torch.cuda.memory._dump_snapshot; docs/memory.md)", {
        "device": "the GPU index", "address": "the segment's address", "total_size": "bytes the segment holds from the device",
        "allocated_size": "bytes of it allocated to tensors", "active_size": "bytes of it in use or awaiting a free on a stream",
        "requested_size": "bytes the allocations asked for (before rounding)", "stream": "the stream the segment serves",
        "segment_type": "'large' | 'small' pool", "is_expandable": "expandable_segments", "n_blocks": "its blocks",
        "largest_free_block": "its largest inactive (free) block: the biggest request it could serve without a new cudaMalloc",
        "source_hash": "blake2b of the snapshot file (re-ingest is idempotent)"}),
    "memory_snapshot_blocks": ("one row per block of a snapshot's segments", {
        "device": "the GPU index",
        "segment_address": "the segment holding it", "address": "the block's address", "size": "its bytes",
        "requested_size": "bytes the allocation asked for", "state": "active_allocated | active_pending_free | inactive",
        "frames": "the innermost frames of the stack that allocated it (file:line function), when history was recorded"}),
    "memory_snapshot_history": ("the allocator's recorded history in a snapshot (_record_memory_history)", {
        "device": "the GPU index", "action": "alloc | free_requested | free_completed | segment_alloc | segment_free | oom | snapshot",
        "addr": "the block or segment address", "size": "bytes", "stream": "the CUDA stream",
        "time_ns": "when (ns since epoch; the snapshot's time_us)", "frames": "the innermost frames of its stack"}),
    "devices": ("the GPUs a trace describes (Kineto deviceProperties)", {
        "device": "the device index", "name": "the device's name", "memory_bytes": "its memory (totalGlobalMem, bytes)"}),
}


# Each loaded table's columns, typed and with a role (sqlmodules.ROLES), as the SQL modules declare
# theirs: `name:role`, in table order; types from the schemas above, docs from DOCS (or the glossary).
# Flight Recorder's tables (fr_load.py)
DOCS.update({
    "fr_dumps": ("one row per PyTorch Flight Recorder dump (one rank's buffer); docs/hang-forensics.md", {
        "dump_id": "the dump's id (fr_entries.dump_id, fr_groups.dump_id)", "source_path": "the dump's file",
        "source_hash": "blake2b of the dump file (re-ingest is idempotent)",
        "world_size": "the default process group's size, as the dump states it",
        "source_format": "'fr-pickle' (watchdog / _dump_fr_trace) | 'fr-json' (_dump_fr_trace_json)",
        "version": "the dump's version field", "rank_source": "where the rank came from: dump | file name | pattern | file order",
        "n_entries": "entries in the buffer", "warnings": "what the dump lacks, and what that rules out"}),
    "fr_entries": ("one row per entry of a rank's Flight Recorder buffer: a collective or p2p call as enqueued", {
        "dump_id": "the dump the entry is from (fr_dumps.dump_id)", "record_id": "the entry's id in the rank's buffer",
        "pg": "the process group's name ('0': the default group)", "pg_desc": "its description (default_pg, ...)",
        "collective_seq_id": "the collective sequence id as recorded (collective_seq_id; seq_id in older dumps)",
        "p2p_seq_id": "the point-to-point sequence id as recorded (NULL: the dump predates it)",
        "op_id": "the recorder's op id", "is_p2p": "a point-to-point call (send, recv)",
        "output_sizes": "the outputs' shapes, JSON text, e.g. [[1000]]", "output_dtypes": "the outputs' dtypes, JSON text, e.g. [\"Float\"]",
        "timeout_ms": "the call's timeout (ms)", "thread_name": "the thread that enqueued it",
        "seq": "the call's sequence id in its group: collective_seq_id, or p2p_seq_id for point-to-point calls",
        "op": "the call (all_reduce, broadcast, send, ...)", "profiling_name": "as recorded, e.g. nccl:all_reduce",
        "input_sizes": "the inputs' shapes, JSON text, e.g. [[1000]]", "input_dtypes": "the inputs' dtypes, JSON text, e.g. [\"Float\"]",
        "state": "scheduled | started | completed (gloo records scheduled only)",
        "retired": "the recorder retired the entry (its work ended)",
        "created_ns": "when the call was enqueued (ns since epoch)", "started_ns": "when its start was seen (NCCL)",
        "completed_ns": "when its end was seen (NCCL)", "frames": "the Python stack of the call, innermost first (JSON text)",
        "user_frame": "the innermost frame outside PyTorch: file:line function"}),
    "fr_groups": ("one row per process group a dump knew: members (pg_config) and progress (pg_status)", {
        "dump_id": "the dump the row is from (fr_dumps.dump_id)", "pg": "the process group's name ('0': the default group)",
        "pg_desc": "its description (default_pg, ...)", "ranks": "the group's members, JSON text", "group_size": "members",
        "last_enqueued": "the last collective seq the rank enqueued in the group",
        "last_started": "the last one seen started (NULL: none, or a backend that does not record it: gloo)",
        "last_completed": "the last one seen completed"}),
})


_ROLES = {
    "gpu_ops": "trace_id:trace rank:rank device:key stream:key kind:text name:text short_name:text start_ns:time end_ns:time "
               "correlation_id:key category:text collective:text bytes:figure:bytes copy_kind:text graph_id:key comm:key "
               "op_id:id:gpu_ops api_name:text api_start_ns:time api_end_ns:time launch_tid:key launch_op_id:id:host_ops "
               "issue_start_ns:time cpu_op_id:id:host_ops step:key",
    "host_ops": "trace_id:trace rank:rank pid:key tid:key kind:text name:text start_ns:time end_ns:time correlation_id:key "
                "external_id:key flops:figure:flop input_dims:text input_types:text concrete_inputs:text event_id:key "
                "op_id:id:host_ops",
    "ranges": "trace_id:trace rank:rank tid:key domain:text name:text start_ns:time end_ns:time on_gpu:flag",
    "memory_events": "trace_id:trace rank:rank device_type:text device:key pid:key tid:key ts_ns:time bytes:figure:bytes "
                     "addr:key total_allocated:figure:bytes total_reserved:figure:bytes",
    "devices": "trace_id:trace rank:rank device:key name:text memory_bytes:figure:bytes",
    "memory_segments": "trace_id:trace rank:rank device:key address:key total_size:figure:bytes allocated_size:figure:bytes "
                       "active_size:figure:bytes requested_size:figure:bytes stream:key segment_type:text is_expandable:flag "
                       "n_blocks:figure:count largest_free_block:figure:bytes source_hash:text",
    "memory_snapshot_blocks": "trace_id:trace rank:rank device:key segment_address:key address:key size:figure:bytes "
                              "requested_size:figure:bytes state:text frames:text",
    # time_ns: the snapshot's own clock, which clock alignment does not shift (on either road)
    "memory_snapshot_history": "trace_id:trace rank:rank device:key action:text addr:key size:figure:bytes stream:key "
                               "time_ns:time:unaligned frames:text",
    # the job's tables: one row per rank file, or per Flight Recorder dump and what it holds
    "traces": "trace_id:trace rank:rank world_size:figure:count source_path:text source_format:text source_hash:text "
              "profiler_version:text hostname:text pid:key device_name:text clock_offset_ns:figure:ns clock_skew_ns:figure:ns "
              "clock_spread_ns:figure:ns clock_note:text cpu_clock_offset_ns:figure:ns cpu_clock_consistent:flag "
              "rank_source:text warnings:text unread_device_work:text",
    "fr_dumps": "dump_id:key rank:rank world_size:figure:count source_path:text source_format:text source_hash:text "
                "version:text rank_source:text n_entries:figure:count warnings:text",
    # fr_entries.op_id: the recorder's own id, not an op of gpu_ops / host_ops; its times stay on the
    # dump's clock (clock alignment moves the traces' ranks, not the dumps')
    "fr_entries": "dump_id:key rank:rank pg:key pg_desc:key record_id:key seq:key collective_seq_id:key p2p_seq_id:key "
                  "op_id:key is_p2p:flag op:text profiling_name:text input_sizes:text output_sizes:text input_dtypes:text "
                  "output_dtypes:text state:text retired:flag created_ns:time:unaligned started_ns:time:unaligned "
                  "completed_ns:time:unaligned "
                  "timeout_ms:figure:ms thread_name:text frames:text user_frame:text",
    "fr_groups": "dump_id:key rank:rank pg:key pg_desc:key ranks:text group_size:figure:count last_enqueued:key "
                 "last_started:key last_completed:key",
}
# the loaded tables whose rows are one rank's (a cluster's worker loads them from its rank file)
PER_RANK = tuple(TABLES)


def _ddl_types(ddl_text: str) -> dict[str, str]:
    """{column: type} of a CREATE TABLE above (one column a line)."""
    body = ddl_text[ddl_text.index("(") + 1:ddl_text.rindex(")")]
    lines = [line.split("--")[0].strip().rstrip(",") for line in body.splitlines()]
    return {p[0]: p[1] for p in (line.split() for line in lines) if len(p) >= 2}


def declared():
    """{table: sqlmodules.TableDecl} of every table ingest loads (PER_RANK: one rank's rows each)."""
    from .sqlmodules import Column, TableDecl
    out = {}
    for table, spec in _ROLES.items():
        if table in TABLES:
            types = {f.name: _DUCK[f.type] for f in TABLES[table]} | dict(DERIVED[table])
        elif table in FR_TABLES:
            types = {f.name: _DUCK[f.type] for f in FR_TABLES[table]}
        else:
            types = _ddl_types(TRACES_DDL if table == "traces" else FR_DUMPS_DDL)
        text, docs = DOCS[table]
        cols = []
        for item in spec.split():
            name, role = item.split(":", 1)
            cols.append(Column(name, types[name], role, docs.get(name) or GLOSSARY.get(name, "")))
        out[table] = TableDecl(doc=text, columns=tuple(cols))
    return out


def docs(tables) -> dict[str, tuple[str | None, dict[str, str]]]:
    """What COMMENT ON says about the loaded `tables` (comments.apply_docs), from their declarations."""
    decl = declared()
    return {t: (decl[t].doc, {c.name: c.doc for c in decl[t].columns}) for t in tables}
