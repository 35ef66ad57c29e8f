-- @table partial_capture: why the capture cannot support a cross-rank claim.
--     A straggler, a wait charged to a rank, a critical path across ranks all need every rank of the
--     communicator and every one of its collectives; with ranks missing, the rank that kept the others
--     waiting may be one whose trace is absent (HTA's trace_filter pair: 2 of 128 ranks, and a 190.7 ms
--     "straggler" among the two).
--
--
-- One row per reason (none: the capture is whole as far as the traces tell):
-- @column reason      VARCHAR  text          'ranks missing' (fewer ranks than the world size the traces record) |
--     'unpaired point-to-point' (send/receive kernels matched by order that never ran at one
--     moment: events filtered or dropped from the capture) | 'communicators unknown' (no
--     communicator recorded and a rank with two communication streams or more: which ranks
--     share which communicator cannot be told, collective_waits.sql)
-- @column ranks       INTEGER  figure:count  ranks present
-- @column world_size  INTEGER  figure:bytes  the world size the traces record (NULL for unpaired point-to-point)
-- @column n           BIGINT   figure:count  ranks missing, point-to-point matches left out, or ranks with several unnamed
--     communicators
-- @column note        VARCHAR  text          the same in words
-- partial_capture shows first: reason, ranks, world_size, n, note
-- scope: job
-- requires: collectives, traces
CREATE SCHEMA IF NOT EXISTS tf_internal;
SET search_path = 'main,tf_internal';
CREATE OR REPLACE TABLE partial_capture AS
WITH w AS (
    SELECT count(DISTINCT rank)::INTEGER AS ranks, max(world_size)::INTEGER AS world_size FROM traces
), p2p AS (
    SELECT count(*) AS n FROM (
        SELECT comm, step, seq FROM collectives GROUP BY comm, step, seq
        HAVING count(DISTINCT rank) >= 2 AND mode(op) IN ('SendRecv', 'Send', 'Recv') AND max(start_ns) >= min(end_ns))
)
SELECT 'ranks missing' AS reason, ranks, world_size, (world_size - ranks)::BIGINT AS n,
       printf('%d of %d ranks traced', ranks, world_size) AS note
FROM w WHERE world_size > ranks
UNION ALL
SELECT 'unpaired point-to-point', (SELECT ranks FROM w), NULL, n,
       printf('%d point-to-point matches whose kernels never ran at one moment (events filtered or dropped)', n)
FROM p2p WHERE n > 0
UNION ALL
SELECT 'communicators unknown', (SELECT ranks FROM w), NULL, count(*),
       printf('rank%s %s: %s communication streams and no communicator recorded (no process group name or NCCL payload), so '
              'which ranks share a communicator cannot be told', CASE WHEN count(*) > 1 THEN 's' ELSE '' END,
              string_agg(rank::VARCHAR, ', ' ORDER BY rank), max(n)::VARCHAR)
FROM (SELECT rank, count(DISTINCT comm) AS n FROM collectives WHERE NOT comm_recorded GROUP BY rank HAVING count(DISTINCT comm) > 1)
HAVING count(*) > 0;

-- What `.read` of this file shows in the DuckDB shell (on a read-only database, this query alone):
SELECT * FROM partial_capture;
