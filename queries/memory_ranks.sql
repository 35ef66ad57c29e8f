-- @table memory_ranks: the ranks side by side: each rank's highest memory peak, how far it
--     lies above its peers', and the op holding most of it (uneven shards and pipeline stages show here).
--
-- Parameters (DuckDB variables; defaults in brackets):
--   tf_memory_peer_pct  a rank peaks far above its peers when its peak exceeds their median by this much [20 %]
--
-- One row per rank and device type (cpu, cuda, ...): the rank's highest peak_allocated_bytes over its
-- steps and devices of that type (the first step that reached it). Bytes; ns since epoch.
-- @column rank                  INTEGER  rank          the rank (process index in the job) the row belongs to
-- @column device_type           VARCHAR  text          cpu | cuda | ... (memory.device_type)
-- @column device                INTEGER  key           the device of that peak
-- @column step                  INTEGER  key           the step of that peak
-- @column peak_allocated_bytes  BIGINT   figure:bytes  the peak (memory.peak_allocated_bytes)
-- @column above_peers_pct       DOUBLE   figure:percent  above_peers_bytes in percent of peers_median_bytes
-- @column top_op                VARCHAR  text          the CPU op whose allocations hold the most bytes at the peak (memory_peak_allocations)
-- @column headroom_pct          DOUBLE   figure:percent  memory.headroom_pct of that step (NULL: unknown)
-- @column peak_ns               BIGINT   time          when it was reached
-- @column peak_reserved_bytes   BIGINT   figure:bytes  the rank's highest reserved total in that step (NULL on the CPU)
-- @column device_memory_bytes   BIGINT   figure:bytes  the device's memory (NULL: unknown)
-- @column near_device_limit     BOOLEAN  flag          memory.near_device_limit of that step (NULL: unknown)
-- @column top_op_bytes          BIGINT   figure:bytes  those bytes
-- @column top_allocation_bytes  BIGINT   figure:bytes  the largest single allocation live at the peak
-- @column top_allocation_op     VARCHAR  text          the CPU op that made it
-- @column peers_median_bytes    BIGINT   figure:bytes  the median peak of the other ranks (same device type); NULL with no peers
-- @column above_peers_bytes     BIGINT   figure:bytes  peak_allocated_bytes - peers_median_bytes
-- @column highest               BOOLEAN  flag          the rank with the highest peak of its device type (ties: the lowest rank)
-- @column far_above_peers       BOOLEAN  flag          above_peers_pct >= tf_memory_peer_pct
-- memory_ranks shows first: rank, step, peak_allocated_bytes, above_peers_pct, top_op, headroom_pct, near_device_limit
-- scope: job
-- requires: memory, memory_peak_allocations
-- Helper tables live in schema tf_internal (out of a user's way in `.tables`); names resolve through the search path.
CREATE SCHEMA IF NOT EXISTS tf_internal;
SET search_path = 'main,tf_internal';
CREATE OR REPLACE TABLE memory_ranks AS
WITH best AS (
    SELECT * FROM (
        SELECT *, row_number() OVER (PARTITION BY rank, device_type ORDER BY peak_allocated_bytes DESC, step, device) AS k
        FROM memory)
    WHERE k = 1
), by_op AS (
    SELECT a.rank, a.device_type, a.op_name, sum(a.bytes)::BIGINT AS bytes
    FROM memory_peak_allocations a JOIN best b USING (rank, step, device_type, device)
    GROUP BY ALL
), top_op AS (
    SELECT rank, device_type, arg_max(op_name, bytes) AS top_op, max(bytes) AS top_op_bytes FROM by_op GROUP BY ALL
), top_alloc AS (
    SELECT a.rank, a.device_type, a.bytes AS top_allocation_bytes, a.op_name AS top_allocation_op
    FROM memory_peak_allocations a JOIN best b USING (rank, step, device_type, device) WHERE a.pos = 1
), peers AS (
    SELECT b.rank, b.device_type, (SELECT median(o.peak_allocated_bytes) FROM best o
                                   WHERE o.device_type = b.device_type AND o.rank <> b.rank)::BIGINT AS peers_median_bytes
    FROM best b
)
SELECT b.rank, b.device_type, b.device, b.step, b.peak_allocated_bytes,
       round(100.0 * (b.peak_allocated_bytes - p.peers_median_bytes) / nullif(p.peers_median_bytes, 0), 2) AS above_peers_pct,
       t.top_op, b.headroom_pct, b.peak_ns, b.peak_reserved_bytes, b.device_memory_bytes, b.near_device_limit,
       t.top_op_bytes, a.top_allocation_bytes, a.top_allocation_op,
       p.peers_median_bytes, b.peak_allocated_bytes - p.peers_median_bytes AS above_peers_bytes,
       row_number() OVER (PARTITION BY b.device_type ORDER BY b.peak_allocated_bytes DESC, b.rank) = 1 AS highest,
       coalesce(100.0 * (b.peak_allocated_bytes - p.peers_median_bytes) / nullif(p.peers_median_bytes, 0)
                >= coalesce(getvariable('tf_memory_peer_pct'), 20), FALSE) AS far_above_peers
FROM best b LEFT JOIN top_op t USING (rank, device_type) LEFT JOIN top_alloc a USING (rank, device_type)
LEFT JOIN peers p USING (rank, device_type)
ORDER BY b.device_type, b.rank;
