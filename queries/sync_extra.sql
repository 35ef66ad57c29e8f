-- sync_extra (pack `sync-extra`): the blocking calls a rank made in a step beyond its usual count of
-- them: a `torch.cuda.synchronize()` or `.item()` added to one step (a checkpoint, a debug print, a
-- stall). One that empties the GPU's queue is what lets the host time after it idle the GPU, so a
-- host stall's what-if removes the stall's extra calls with it (docs/whatif.md).
--
-- Inputs: sync (the blocking calls), host_time (each rank's steps).
--
-- Per rank and call name, the usual count is the median over the rank's steps of the calls of that
-- name in a step (a step without one counts 0); a step holding n calls of the name, n at least one
-- more than the usual count m, has floor(n - m) extra ones: its longest-blocking calls of the name.
-- One row per extra call:
--   rank, step, name  the call (INTEGER, INTEGER, VARCHAR)
--   op_id             the call's host op (sync.op_id; BIGINT)
--   start_ns, end_ns  the call (ns since epoch; BIGINT)
--   blocked_ns        its time blocked (BIGINT)
--   n                 calls of the name in the step (BIGINT)
--   usual             the rank's median count of the name per step (DOUBLE)
-- sync_extra shows first: rank, step, name, blocked_ns, n, usual
-- requires: host_time, sync
CREATE SCHEMA IF NOT EXISTS tf_internal;
SET search_path = 'main,tf_internal';

CREATE OR REPLACE TABLE sync_extra AS
WITH per AS (
    SELECT rank, step, name, count(*) AS n FROM sync WHERE step IS NOT NULL GROUP BY ALL
), grid AS (  -- every step of the rank, for every name the rank calls
    SELECT s.rank, s.step, nm.name, coalesce(p.n, 0) AS n
    FROM (SELECT DISTINCT rank, step FROM host_time) s
    JOIN (SELECT DISTINCT rank, name FROM per) nm USING (rank)
    LEFT JOIN per p USING (rank, step, name)
), extra AS (
    SELECT g.rank, g.step, g.name, g.n, b.usual, floor(g.n - b.usual)::BIGINT AS k
    FROM grid g JOIN (SELECT rank, name, median(n)::DOUBLE AS usual FROM grid GROUP BY ALL) b USING (rank, name)
    WHERE g.n - b.usual >= 1
), ranked AS (
    SELECT s.rank, s.step, s.name, s.op_id, s.start_ns, s.end_ns, s.blocked_ns, e.n, e.usual, e.k,
           row_number() OVER (PARTITION BY s.rank, s.step, s.name ORDER BY s.blocked_ns DESC, s.start_ns) AS i
    FROM sync s JOIN extra e USING (rank, step, name)
)
SELECT rank, step, name, op_id, start_ns, end_ns, blocked_ns, n, usual FROM ranked WHERE i <= k
ORDER BY rank, step, start_ns;
