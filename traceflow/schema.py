"""The canonical tables (DESIGN.md, "Schema"). All times: INT64 ns since the Unix epoch."""
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
])

RANGES = pa.schema([
    ("trace_id", pa.int32()), ("rank", pa.int32()), ("tid", pa.int64()), ("domain", pa.string()),
    ("name", pa.string()), ("start_ns", pa.int64()), ("end_ns", pa.int64()), ("on_gpu", pa.bool_()),
])

TRACES_DDL = """
CREATE TABLE traces (
    trace_id INTEGER PRIMARY KEY,
    rank INTEGER NOT NULL,
    world_size INTEGER,
    source_path VARCHAR,
    source_format VARCHAR,          -- 'nsys-sqlite' | 'kineto-json'
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
    rank_source VARCHAR,                -- where the rank came from: nccl | distributedInfo | file name | file order | pattern
    warnings VARCHAR[]
)
"""

TABLES = {"gpu_ops": GPU_OPS, "host_ops": HOST_OPS, "ranges": RANGES}

_DUCK = {pa.int32(): "INTEGER", pa.int64(): "BIGINT", pa.string(): "VARCHAR", pa.bool_(): "BOOLEAN"}

# Columns the derive step fills (see traceflow/derive/*.sql).
DERIVED = {
    "gpu_ops": [("op_id", "BIGINT"), ("api_name", "VARCHAR"), ("api_start_ns", "BIGINT"), ("api_end_ns", "BIGINT"),
                ("launch_tid", "BIGINT"), ("launch_op_id", "BIGINT"), ("issue_start_ns", "BIGINT"),
                ("step", "INTEGER")],
    "host_ops": [("op_id", "BIGINT")],
    "ranges": [],
}


def ddl(table: str) -> str:
    cols = [f"{f.name} {_DUCK[f.type]}" for f in TABLES[table]] + [f"{n} {t}" for n, t in DERIVED[table]]
    return f"CREATE TABLE {table} ({', '.join(cols)})"
