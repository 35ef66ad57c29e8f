-- @table diff_steps: per matched step pair and rank, the step breakdown of run a beside run b.
-- One row per pair, rank and metric; rank NULL is the job: its wall is the step's window across
-- ranks, its other metrics the mean over ranks.
-- @column step_a     INTEGER  key           the step of run a
-- @column step_b     INTEGER  key           the step of run b it is matched with
-- @column rank       INTEGER  rank          the rank (process index in the job) the row belongs to
-- @column metric     VARCHAR  text          wall | compute | exposed_comm | exposed_memory | idle | launch_exposed
-- @column a_ns       BIGINT   figure:ns     the metric in run a (ns)
-- @column b_ns       BIGINT   figure:ns     the metric in run b (ns)
-- @column delta_ns   BIGINT   figure:ns     b_ns - a_ns (ns)
-- @column delta_pct  DOUBLE   figure:percent  delta_ns in percent of a_ns
-- @column noise_ns   BIGINT   figure:ns     3 × 1.4826 × the median absolute deviation of the metric from each series' median (one
--     series per run and rank, over its steps), pooled over both runs and all ranks (the job
--     rows over the job's series): a delta no larger than this is within the runs' own step-to-
--     step variation
-- @column noise      BOOLEAN  flag          TRUE when |delta_ns| <= noise_ns
-- Reads two runs attached as `a` and `b`, and the matched steps in `pairs` (step_a, step_b; traceflow/compare.py).
-- scope: job
-- requires: launch_bound_steps, pairs, step_breakdown, step_windows
CREATE OR REPLACE TEMP TABLE diff_steps AS
WITH per_rank AS (
    SELECT 'a' AS run, s.rank, s.step, u.metric, u.ns FROM a.step_breakdown s
    LEFT JOIN a.launch_bound_steps l USING (rank, step),
    LATERAL (SELECT unnest(['wall', 'compute', 'exposed_comm', 'exposed_memory', 'idle', 'launch_exposed']) AS metric,
                    unnest([s.wall_ns, s.compute_ns, s.exposed_comm_ns, s.exposed_memory_ns, s.idle_ns,
                            coalesce(l.launch_exposed_ns, 0)]) AS ns) u
    WHERE s.part = 'step'
    UNION ALL
    SELECT 'b', s.rank, s.step, u.metric, u.ns FROM b.step_breakdown s
    LEFT JOIN b.launch_bound_steps l USING (rank, step),
    LATERAL (SELECT unnest(['wall', 'compute', 'exposed_comm', 'exposed_memory', 'idle', 'launch_exposed']) AS metric,
                    unnest([s.wall_ns, s.compute_ns, s.exposed_comm_ns, s.exposed_memory_ns, s.idle_ns,
                            coalesce(l.launch_exposed_ns, 0)]) AS ns) u
    WHERE s.part = 'step'
), job AS (
    SELECT run, NULL::INTEGER AS rank, step, metric, avg(ns) AS ns FROM per_rank WHERE metric <> 'wall' GROUP BY ALL
    UNION ALL
    SELECT 'a', NULL, step, 'wall', max(end_ns) - min(start_ns) FROM a.tf_internal.step_windows GROUP BY step
    UNION ALL
    SELECT 'b', NULL, step, 'wall', max(end_ns) - min(start_ns) FROM b.tf_internal.step_windows GROUP BY step
), m AS (
    SELECT * FROM per_rank UNION ALL SELECT * FROM job
), dev AS (
    -- each value's distance from its own series' median (run, rank, metric over the steps)
    SELECT rank IS NULL AS job, metric, abs(ns - median(ns) OVER (PARTITION BY run, rank, metric)) AS d FROM m
), noise AS (
    -- pooled over both runs and all ranks: three steps a series are too few for a spread of their own,
    -- and a median over the pool is not moved by the one step that changed
    SELECT job, metric, 3 * 1.4826 * median(d) AS noise_ns FROM dev GROUP BY ALL
)
SELECT p.step_a, p.step_b, ma.rank, ma.metric, ma.ns::BIGINT AS a_ns, mb.ns::BIGINT AS b_ns,
       (mb.ns - ma.ns)::BIGINT AS delta_ns, round(100 * (mb.ns - ma.ns) / nullif(ma.ns, 0), 1) AS delta_pct,
       n.noise_ns::BIGINT AS noise_ns, abs(mb.ns - ma.ns) <= n.noise_ns AS noise
FROM pairs p
JOIN m ma ON ma.run = 'a' AND ma.step = p.step_a
JOIN m mb ON mb.run = 'b' AND mb.step = p.step_b AND mb.rank IS NOT DISTINCT FROM ma.rank AND mb.metric = ma.metric
JOIN noise n ON n.job = (ma.rank IS NULL) AND n.metric = ma.metric
ORDER BY p.step_a, ma.rank NULLS FIRST, ma.metric;
