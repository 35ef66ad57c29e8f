-- diff idle: GPU idle time inside steps by cause, per matched step pair and rank.
--
-- Inputs (attached as `a` and `b`): idle_gaps_summary; `pairs` (step_a, step_b).
--
--   step_a, step_b, rank, cause   host_late | dependency | launch_latency
--   a_ns, b_ns, delta_ns          idle time of that cause (ns)
--   a_gaps, b_gaps                how many gaps
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
