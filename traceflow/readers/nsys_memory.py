"""Nsight Systems CUDA memory usage (`nsys profile --cuda-memory-usage=true`) -> memory_events rows.

The export's `CUDA_GPU_MEMORY_USAGE_EVENTS` has one row per CUDA allocation and per free, as CUPTI
saw them at the CUDA API (cudaMalloc / cudaFree, cudaHostAlloc, module statics), below any caching
allocator:

    start (ns after the session start), globalPid, deviceId, contextId, address, pc, bytes,
    memKind (ENUM_CUDA_MEM_KIND: Pageable, Pinned, Device, Array, Managed, Device Static, ...),
    memoryOperationType (0 allocation, 1 free), name, correlationId (the API call), ...

It states no totals: the allocated figure after each event is the running sum, per process and
device, of the allocations minus the frees in time order (at one ns, an allocation before a free,
then by address: the order memory.sql pairs them in). It counts from zero at the start of the
capture: what was allocated before it is not in the export. What nsys sees is what the process
holds from the device, i.e. what a caching allocator (PyTorch's) has reserved, so on the GPU both
totals are that sum (a caching allocator's tensors, its `allocated`, are not in the export).
Device, Array and Device Static memory is the GPU's (`cuda`, its deviceId); Pageable and Pinned
memory the host's (`cpu`, device -1, reserving nothing, as Kineto writes the CPU); Managed memory
belongs to no one device and is left out, counted in a warning. docs/memory.md.
"""
from __future__ import annotations

TABLE = "CUDA_GPU_MEMORY_USAGE_EVENTS"
REQUIRED = ("start", "deviceId", "address", "bytes", "memKind", "memoryOperationType")
GPU_KINDS = ("Device", "Array", "Device Static")
HOST_KINDS = ("Pageable", "Pinned")


def _quote(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def create(con, cols: set[str], base: int, one_process: bool, kinds: dict) -> list[str]:
    """Creates the temp table `mem` (gpid + the memory_events columns) from the export's table, with
    `cols` its columns, `base` the session start (ns since the epoch), `kinds` memKind -> label.
    The allocating thread is the one of the API call with the event's correlationId (host table `h`).
    Returns the warnings (rows left out, and why)."""
    if not set(REQUIRED) <= cols:
        con.execute("""CREATE TEMP TABLE mem (gpid BIGINT, device_type VARCHAR, device INTEGER, pid BIGINT, tid BIGINT,
                       ts_ns BIGINT, bytes BIGINT, addr BIGINT, total_allocated BIGINT, total_reserved BIGINT)""")
        return [f"{TABLE} lacks {', '.join(c for c in REQUIRED if c not in cols)}: its memory events are not read"] \
            if cols else []
    gpid = "NULL::BIGINT" if one_process or "globalPid" not in cols else "TRY_CAST(globalPid AS BIGINT)"
    corr = "TRY_CAST(correlationId AS BIGINT)" if "correlationId" in cols else "NULL::BIGINT"
    label = "(CASE TRY_CAST(memKind AS INTEGER) " + " ".join(f"WHEN {int(k)} THEN {_quote(str(v))}" for k, v in kinds.items()) + " END)"
    gpu, host = (", ".join(map(_quote, k)) for k in (GPU_KINDS, HOST_KINDS))
    # TRY_CAST: a damaged row (text where a number belongs) is left out and counted, not the whole file
    con.execute(f"""CREATE TEMP TABLE mem_raw AS
        SELECT {gpid} AS gpid, CASE WHEN {label} IN ({gpu}) THEN 'cuda' WHEN {label} IN ({host}) THEN 'cpu' END AS device_type,
               TRY_CAST(deviceId AS INTEGER) AS gpu, TRY_CAST(start AS BIGINT) AS rel,
               TRY_CAST(start AS DOUBLE) = floor(TRY_CAST(start AS DOUBLE)) AS whole,
               TRY_CAST(memoryOperationType AS INTEGER) AS op, TRY_CAST(bytes AS BIGINT) AS size,
               TRY_CAST(address AS BIGINT) AS addr, {corr} AS corr
        FROM src.{TABLE}""")
    warnings = []
    for cond, why in (("device_type IS NULL", "of Managed or unknown memory (on no one device)"),
                      ("size IS NULL OR size <= 0 OR addr IS NULL OR gpu IS NULL OR op IS NULL OR op NOT IN (0, 1)",
                       "with no size, address or device, or an operation neither allocation (0) nor free (1)"),
                      (f"rel IS NULL OR whole IS NOT TRUE OR rel < 0 OR rel > {2**62}",
                       "with no time, a time not a whole ns, or one outside the session")):
        n = con.execute(f"SELECT count(*) FROM mem_raw WHERE {cond}").fetchone()[0]
        if n:
            con.execute(f"DELETE FROM mem_raw WHERE {cond}")
            warnings.append(f"left out {n} CUDA memory usage events {why}")
    con.execute(f"""CREATE TEMP TABLE mem AS
        WITH calls AS (
            SELECT gpid, correlation_id, any_value(tid) AS tid FROM h
            WHERE kind IN ('cuda_runtime', 'cuda_driver') AND correlation_id IS NOT NULL GROUP BY ALL
        )
        SELECT r.gpid, r.device_type, CASE WHEN r.device_type = 'cpu' THEN -1 ELSE r.gpu END AS device,
               (r.gpid >> 24) & 16777215 AS pid, c.tid, r.rel + {int(base)} AS ts_ns, r.bytes, r.addr,
               (sum(r.bytes) OVER w)::BIGINT AS total_allocated,
               CASE WHEN r.device_type = 'cpu' THEN 0 ELSE (sum(r.bytes) OVER w)::BIGINT END AS total_reserved
        FROM (SELECT *, CASE op WHEN 0 THEN size ELSE -size END AS bytes FROM mem_raw) r LEFT JOIN calls c ON c.gpid IS NOT DISTINCT FROM r.gpid AND c.correlation_id = r.corr
        WINDOW w AS (PARTITION BY r.gpid, r.device_type, CASE WHEN r.device_type = 'cpu' THEN -1 ELSE r.gpu END
                     ORDER BY r.rel, r.op, r.addr ROWS UNBOUNDED PRECEDING)""")
    con.execute("DROP TABLE mem_raw")
    return warnings
