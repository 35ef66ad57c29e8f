-- @table memory_findings: the memory packs' findings as rows with the columns of the
--     verdict's `findings` (queries/findings.sql; traceflow/verdict.py FINDING_TABLES); the words for each
--     kind are in traceflow/memory.py. Definitions: docs/memory.md.
--
--
-- @column priority             INTEGER  key           1 memory_near_limit (running out of memory is a fault) | 2 memory_above_peers
-- @column kind                 VARCHAR  text          memory_near_limit: a rank's peak reserve within tf_memory_limit_pct [10 %] of its device's
--     memory (memory.near_device_limit; the step with the least headroom) |
--     memory_above_peers: a rank whose peak lies tf_memory_peer_pct [20 %] or more above its
--     peers' median (memory_ranks.far_above_peers)
-- @column rank                 INTEGER  rank          the rank
-- @column step                 INTEGER  key           the step of its peak
-- @column bytes                BIGINT   figure:bytes  the peak: reserved (memory_near_limit) or allocated (memory_above_peers)
-- @column share_pct            DOUBLE   figure:percent  memory_near_limit: the headroom left, percent of the device's memory; memory_above_peers:
--     percent above the peers' median
-- @column evidence             VARCHAR  text          the CPU op whose allocations hold the most of the peak (memory_ranks.top_op)
-- @column note                 VARCHAR  text          the device, as device_type:device
-- @column device_memory_bytes  BIGINT   figure:bytes  the device's memory (memory_near_limit)
-- @column peers_median_bytes   BIGINT   figure:bytes  the other ranks' median peak (memory_above_peers)
-- @column evidence_bytes       BIGINT   figure:bytes  the bytes `evidence` holds at the peak
-- @column cost_ns              BIGINT   figure:ns     NULL: a memory finding costs no time
-- memory_findings shows first: priority, kind, rank, step, bytes, share_pct, evidence, note
-- scope: job
-- requires: memory, memory_ranks
CREATE SCHEMA IF NOT EXISTS tf_internal;
SET search_path = 'main,tf_internal';
CREATE OR REPLACE TABLE memory_findings AS
SELECT * FROM (
    SELECT 1 AS priority, 'memory_near_limit' AS kind, m.rank, m.step, m.peak_reserved_bytes AS bytes,
           m.headroom_pct AS share_pct, r.top_op AS evidence, m.device_type || ':' || m.device AS note,
           m.device_memory_bytes, NULL::BIGINT AS peers_median_bytes, r.top_op_bytes AS evidence_bytes, NULL::BIGINT AS cost_ns
    FROM memory m LEFT JOIN memory_ranks r USING (rank, device_type)
    WHERE m.near_device_limit
    QUALIFY row_number() OVER (PARTITION BY m.rank ORDER BY m.headroom_pct, m.step) = 1
    UNION ALL
    SELECT 2, 'memory_above_peers', rank, step, peak_allocated_bytes, above_peers_pct, top_op, device_type || ':' || device,
           NULL, peers_median_bytes, top_op_bytes, NULL
    FROM memory_ranks WHERE far_above_peers
)
ORDER BY priority, share_pct DESC, rank;
