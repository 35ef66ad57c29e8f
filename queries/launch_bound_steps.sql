-- @table launch_bound_steps: per rank and step, how much GPU idle launching cost.
--
-- Parameters: tf_launch_bound_share — a step is launch-bound when its exposed launch overhead is
--   at least this share of the step's GPU window [0.3], and larger than its compute time.
--
-- @column rank                INTEGER  rank          the rank (process index in the job) the row belongs to
-- @column step                INTEGER  key           the training step (ProfilerStep#N, or the --step-pattern's number); NULL outside every
--     step
-- @column launches            BIGINT   figure:count  launched GPU ops of the step
-- @column api_ns              BIGINT   figure:ns     time in launch calls (ns)
-- @column launch_exposed_ns   BIGINT   figure:ns     idle time inside the window during which the op that ended the idle gap was
--     being issued ([issue_start, gpu_start] of that op; gaps are disjoint, so
--     nothing is counted twice), less the idle that stalled launch calls ended (stall_ns) (ns)
-- @column stall_ns            BIGINT   figure:ns     idle ended by an op whose launch call stalled (launch_overhead.stall: a
--     one-time lazy module load, not launch throughput): left out of launch_exposed_ns, so that a
--     one-off stall makes no step launch-bound (hta mi250_minitoy step 1: 6.6 of 7.1 ms, "80 % of the
--     GPU window waiting for launches" from one 6.5 ms hipLaunchKernel) (ns)
-- @column wall_ns             BIGINT   figure:ns     the step's GPU window, as in step_breakdown (ns)
-- @column compute_ns          BIGINT   figure:ns     the step's compute time, as in step_breakdown (ns)
-- @column launch_exposed_pct  DOUBLE   figure:percent  launch_exposed_ns in percent of wall_ns
-- @column launch_bound        BOOLEAN  flag          launch_exposed_ns is at least tf_launch_bound_share of the window and more
--     than the step's compute time
-- launch_bound_steps shows first: rank, step, launch_exposed_ns, launch_exposed_pct, launch_bound, launches
-- scope: rank
-- requires: idle_gaps, launch_overhead, step_breakdown
-- Helper tables live in schema tf_internal (out of a user's way in `.tables`); names resolve through the search path.
CREATE SCHEMA IF NOT EXISTS tf_internal;
SET search_path = 'main,tf_internal';
CREATE OR REPLACE TABLE launch_bound_steps AS
WITH stalled AS (
    SELECT op_id FROM launch_overhead WHERE stall
), ex AS (
    SELECT rank, step,
           sum(CASE WHEN next_issue_start_ns IS NOT NULL AND next_issue_start_ns < end_ns
                         AND NOT coalesce(next_op_id IN (SELECT op_id FROM stalled), false)
                    THEN end_ns - greatest(start_ns, next_issue_start_ns) ELSE 0 END)::BIGINT AS launch_exposed_ns,
           sum(CASE WHEN next_issue_start_ns IS NOT NULL AND next_issue_start_ns < end_ns
                         AND coalesce(next_op_id IN (SELECT op_id FROM stalled), false)
                    THEN end_ns - greatest(start_ns, next_issue_start_ns) ELSE 0 END)::BIGINT AS stall_ns
    FROM idle_gaps GROUP BY rank, step
), n AS (
    SELECT rank, step, count(*) AS launches, sum(api_ns)::BIGINT AS api_ns FROM launch_overhead GROUP BY rank, step
)
SELECT s.rank, s.step, coalesce(n.launches, 0) AS launches, coalesce(n.api_ns, 0) AS api_ns,
       coalesce(ex.launch_exposed_ns, 0) AS launch_exposed_ns, coalesce(ex.stall_ns, 0) AS stall_ns, s.wall_ns, s.compute_ns,
       round(100.0 * coalesce(ex.launch_exposed_ns, 0) / nullif(s.wall_ns, 0), 2) AS launch_exposed_pct,
       coalesce(ex.launch_exposed_ns, 0) >= coalesce(getvariable('tf_launch_bound_share'), 0.3) * s.wall_ns
           AND coalesce(ex.launch_exposed_ns, 0) > s.compute_ns AS launch_bound
FROM step_breakdown s LEFT JOIN ex USING (rank, step) LEFT JOIN n USING (rank, step)
WHERE s.part = 'step'
ORDER BY s.rank, s.step;

-- What `.read` of this file shows in the DuckDB shell (on a read-only database, this query alone):
SELECT * FROM launch_bound_steps LIMIT 20;
