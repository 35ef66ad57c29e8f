-- diff critical_path: why the step time changed, along the critical path: per matched step pair,
-- the path's time by kind and rank in each run; the deltas add up to the change in step time.
--
-- Inputs (attached as `a` and `b`): critical_path_summary; `pairs` (step_a, step_b).
--
--   step_a, step_b, kind, rank
--   a_ns, b_ns, delta_ns (b - a): critical-path time of this kind on this rank (ns)
--   step_delta_ns  the change in the step's length (the sum of delta_ns over the pair)
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
