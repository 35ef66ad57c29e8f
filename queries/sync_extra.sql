-- sync_extra (pack `sync-extra`): the blocking calls a rank made in a step beyond its usual count of
-- them: a `torch.cuda.synchronize()` or `.item()` added to one step (a checkpoint, a debug print, a
-- stall). One that empties the GPU's queue is what lets the host time after it idle the GPU, so a
-- host stall's what-if removes the stall's extra calls with it (docs/whatif.md).
--
-- Inputs: sync (the blocking calls), host_time (each rank's steps), cp_host_nodes (the GPU op each
--   call waited for), gpu_ops (its name).
--
-- Per rank and call name, the usual count is the median over the rank's steps of the calls of that
-- name in a step (a step without one counts 0); a step holding n calls of the name, n at least one
-- more than the usual count m, has floor(n - m) extra ones: those least like the rank's usual calls
-- of the name — first the calls waiting for a GPU op of a name (none: for no op) that this step holds
-- more of than the rank's steps usually do, then the longest-blocking. (The longest-blocking alone
-- picks the ordinary ones: on h100 nsys ddp4_sync_stall rank 1 step 1, DDP's bucket rebuild adds two
-- cudaStreamSynchronize that wait for nothing, 0.008 and 0.005 ms, beside the step's usual two
-- `loss.item()` waiting for a copy to pinned memory, 7.5 and 355.6 ms: those two were called extra.)
-- One row per extra call:
--   rank              the rank that made the call
--   step              the step it made the call in
--   name              the call's name (cudaStreamSynchronize, ...)
--   op_id             the call's host op (sync.op_id; BIGINT)
--   start_ns          when the call began (ns since epoch)
--   end_ns            when the call returned (ns since epoch)
--   blocked_ns        its time blocked (BIGINT)
--   n                 calls of the name in the step (BIGINT)
--   usual             the rank's median count of the name per step (DOUBLE)
-- sync_extra shows first: rank, step, name, blocked_ns, n, usual
-- requires: cp_host_nodes, gpu_ops, host_time, sync
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
), calls AS (  -- the calls of those names, each with the name of the GPU op it waited for ('' for none)
    SELECT s.rank, s.step, s.name, s.op_id, s.start_ns, s.end_ns, s.blocked_ns, coalesce(g.name, '') AS waited
    FROM sync s LEFT JOIN cp_host_nodes h ON h.node_op_id = s.op_id AND h.role = 'sync'
    LEFT JOIN gpu_ops g ON g.op_id = h.waited_op_id
    WHERE s.step IS NOT NULL AND (s.rank, s.name) IN (SELECT rank, name FROM extra)
), wgrid AS (  -- per step, the calls of each (name, waited op) (0 where none)
    SELECT s.rank, s.step, w.name, w.waited, count(c.op_id) AS n
    FROM (SELECT DISTINCT rank, step FROM host_time) s
    JOIN (SELECT DISTINCT rank, name, waited FROM calls) w USING (rank)
    LEFT JOIN calls c ON c.rank = s.rank AND c.step = s.step AND c.name = w.name AND c.waited = w.waited
    GROUP BY ALL
), wmore AS (  -- how many more of them the step holds than the rank's median step
    SELECT rank, step, name, waited, n - median(n) OVER (PARTITION BY rank, name, waited) AS more FROM wgrid
), ranked AS (
    SELECT c.rank, c.step, c.name, c.op_id, c.start_ns, c.end_ns, c.blocked_ns, e.n, e.usual, e.k,
           row_number() OVER (PARTITION BY c.rank, c.step, c.name ORDER BY m.more DESC, c.blocked_ns DESC, c.start_ns) AS i
    FROM calls c JOIN extra e USING (rank, step, name) JOIN wmore m USING (rank, step, name, waited)
)
SELECT rank, step, name, op_id, start_ns, end_ns, blocked_ns, n, usual FROM ranked WHERE i <= k
ORDER BY rank, step, start_ns;
