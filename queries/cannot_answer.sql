-- @table cannot_answer: per rank, the figures the trace cannot give, and why. A figure
--     that cannot be computed from what a trace holds is NULL in its pack (never a number made up) and
--     is listed here; the verdict reads this table to say why.
--
--
-- @column rank    INTEGER  rank          the rank (process index in the job) the row belongs to
-- @column figure  VARCHAR  text          what cannot be answered: 'launch dispatch' (launch_overhead.dispatch_ns, op_work's
--     per-CPU-op figures), 'launch latency' (launch_overhead: ops whose launch call is not in
--     the trace), 'per-step figures' (no step annotation: one row for the whole trace),
--     'cross-rank timing' (no collective matched with another rank: the rank's clock cannot
--     be placed on the job's timeline)
-- @column reason  VARCHAR  text          why, in words
-- @column n_ops   BIGINT   figure:count  GPU ops the figure is missing for (NULL for figures of the whole rank)
-- scope: job
-- requires: gpu_ops, launch_overhead, steps, traces
-- Helper tables live in schema tf_internal (out of a user's way in `.tables`); names resolve through the search path.
CREATE SCHEMA IF NOT EXISTS tf_internal;
SET search_path = 'main,tf_internal';
CREATE OR REPLACE TABLE cannot_answer AS
SELECT rank, 'launch dispatch' AS figure, cannot_answer AS reason, count(*)::BIGINT AS n_ops
FROM launch_overhead WHERE cannot_answer IS NOT NULL GROUP BY rank, cannot_answer
UNION ALL
SELECT rank, 'launch latency', 'the launch call is not in the trace (no correlation id, or launched outside the capture)',
       count(*)::BIGINT
-- (unified-memory page migrations are demand paging, launched by no call: isc25-icon's 5,510 were "GPU ops
-- whose launch call is not in the trace")
FROM gpu_ops WHERE api_start_ns IS NULL AND kind <> 'um_migration' GROUP BY rank
UNION ALL
SELECT rank, 'per-step figures', 'no step annotation (ProfilerStep#N or a step range) in the trace, so one row holds the whole trace',
       NULL::BIGINT
FROM steps WHERE source = 'whole trace'
UNION ALL
SELECT rank, 'cross-rank timing', 'no collective matched with another rank: its clock offset is unknown', NULL::BIGINT
FROM traces WHERE clock_note LIKE '%no collective matched%' AND (SELECT count(*) FROM traces) > 1
ORDER BY rank, figure;

-- What `.read` of this file shows in the DuckDB shell (on a read-only database, this query alone):
SELECT * FROM cannot_answer LIMIT 20;
