-- @table diff_idle: GPU idle time inside steps by cause, per matched step pair and rank.
-- @column step_a    INTEGER  key           the step of run a
-- @column step_b    INTEGER  key           the step of run b it is matched with
-- @column rank      INTEGER  rank          the rank (process index in the job) the row belongs to
-- @column cause     VARCHAR  text          host_late | dependency | launch_latency (idle_gaps.cause)
-- @column a_ns      BIGINT   figure:ns     idle time of that cause in run a (ns)
-- @column b_ns      BIGINT   figure:ns     idle time of that cause in run b (ns)
-- @column delta_ns  BIGINT   figure:ns     b_ns - a_ns (ns)
-- @column a_gaps    BIGINT   figure:count  how many gaps in run a
-- @column b_gaps    BIGINT   figure:count  how many gaps in run b
-- Reads two runs attached as `a` and `b`, and the matched steps in `pairs` (step_a, step_b; traceflow/compare.py).
-- scope: job
-- requires: idle_gaps_summary, pairs
CREATE OR REPLACE TEMP TABLE diff_idle AS
WITH ia AS (
    SELECT p.step_a, p.step_b, i.rank, i.cause, sum(i.total_ns) AS ns, sum(i.n_gaps) AS n
    FROM pairs p JOIN a.idle_gaps_summary i ON i.step = p.step_a GROUP BY ALL
), ib AS (
    SELECT p.step_a, p.step_b, i.rank, i.cause, sum(i.total_ns) AS ns, sum(i.n_gaps) AS n
    FROM pairs p JOIN b.idle_gaps_summary i ON i.step = p.step_b GROUP BY ALL
)
SELECT step_a, step_b, rank, cause, coalesce(ia.ns, 0)::BIGINT AS a_ns, coalesce(ib.ns, 0)::BIGINT AS b_ns,
       (coalesce(ib.ns, 0) - coalesce(ia.ns, 0))::BIGINT AS delta_ns,
       coalesce(ia.n, 0)::BIGINT AS a_gaps, coalesce(ib.n, 0)::BIGINT AS b_gaps
FROM ia FULL JOIN ib USING (step_a, step_b, rank, cause)
ORDER BY step_a, abs(coalesce(ib.ns, 0) - coalesce(ia.ns, 0)) DESC;
