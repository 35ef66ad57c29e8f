-- @table step_coverage: per rank, what share of the capture's GPU time lies in steps.
--
--
-- @column rank          INTEGER  rank          the rank (process index in the job) the row belongs to
-- @column gpu_busy_ns   BIGINT   figure:ns     union of all the rank's GPU ops (ns)
-- @column in_steps_ns   BIGINT   figure:ns     busy time inside step windows (ns)
-- @column before_ns     BIGINT   figure:ns     busy time before the first step's window (ns)
-- @column after_ns      BIGINT   figure:ns     busy time after the last step's window (ns)
-- @column coverage_pct  DOUBLE   figure:percent  in_steps_ns / gpu_busy_ns (percent)
-- @column ops_outside   BIGINT   figure:count  GPU ops with no step
-- step_coverage shows first: rank, coverage_pct, before_ns, after_ns
-- scope: job
-- requires: step_breakdown
-- Helper tables live in schema tf_internal (out of a user's way in `.tables`); names resolve through the search path.
CREATE SCHEMA IF NOT EXISTS tf_internal;
SET search_path = 'main,tf_internal';
CREATE OR REPLACE TABLE step_coverage AS
SELECT rank, sum(busy_ns)::BIGINT AS gpu_busy_ns,
       coalesce(sum(busy_ns) FILTER (WHERE part = 'step'), 0)::BIGINT AS in_steps_ns,
       coalesce(sum(busy_ns) FILTER (WHERE part = 'before'), 0)::BIGINT AS before_ns,
       coalesce(sum(busy_ns) FILTER (WHERE part = 'after'), 0)::BIGINT AS after_ns,
       round(100.0 * coalesce(sum(busy_ns) FILTER (WHERE part = 'step'), 0) / nullif(sum(busy_ns), 0), 2) AS coverage_pct,
       coalesce(sum(n_ops) FILTER (WHERE part <> 'step'), 0)::BIGINT AS ops_outside
FROM step_breakdown GROUP BY rank ORDER BY rank;

-- What `.read` of this file shows in the DuckDB shell (on a read-only database, this query alone):
SELECT * FROM step_coverage LIMIT 20;
