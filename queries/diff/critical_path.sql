-- @table diff_critical_path: why the step time changed, along the critical path: per matched step
--     pair, the path's time by kind and rank in each run; the deltas add up to the change in step time.
-- @column step_a         INTEGER  key           the step of run a
-- @column step_b         INTEGER  key           the step of run b it is matched with
-- @column kind           VARCHAR  text          the critical path segment's kind (critical_path.kind)
-- @column rank           INTEGER  rank          the rank (process index in the job) the row belongs to
-- @column a_ns           BIGINT   figure:ns     critical-path time of this kind on this rank in run a (ns)
-- @column b_ns           BIGINT   figure:ns     the same in run b (ns)
-- @column delta_ns       BIGINT   figure:ns     b_ns - a_ns (ns)
-- @column step_delta_ns  BIGINT   figure:ns     the change in the step's length (the sum of delta_ns over the pair)
-- Reads two runs attached as `a` and `b`, and the matched steps in `pairs` (step_a, step_b; traceflow/compare.py).
-- scope: job
-- requires: critical_path_summary, pairs
CREATE OR REPLACE TEMP TABLE diff_critical_path AS
WITH ca AS (
    SELECT p.step_a, p.step_b, c.kind, c.rank, sum(c.total_ns) AS ns
    FROM pairs p JOIN a.critical_path_summary c ON c.step = p.step_a GROUP BY ALL
), cb AS (
    SELECT p.step_a, p.step_b, c.kind, c.rank, sum(c.total_ns) AS ns
    FROM pairs p JOIN b.critical_path_summary c ON c.step = p.step_b GROUP BY ALL
), j AS (
    SELECT step_a, step_b, kind, rank, coalesce(ca.ns, 0)::BIGINT AS a_ns, coalesce(cb.ns, 0)::BIGINT AS b_ns
    FROM ca FULL JOIN cb USING (step_a, step_b, kind, rank)
)
SELECT *, b_ns - a_ns AS delta_ns, sum(b_ns - a_ns) OVER (PARTITION BY step_a, step_b)::BIGINT AS step_delta_ns
FROM j ORDER BY step_a, abs(b_ns - a_ns) DESC, kind, rank;
