-- @table diff_kernels: kernels by name across all ranks, per matched step (the mean over the
--     pairs): time, count, mean duration in each run; the gainers and losers, new and vanished kernels.
-- @column name       VARCHAR  text          the name of the op, kernel or call (kernels: the full demangled C++ name)
-- @column category   VARCHAR  text          what a GPU op does: compute | communication | memory
-- @column op_class   VARCHAR  text          the class of the CPU ops that launched it (queries/op_classes.sql; the most frequent one),
--     NULL where the trace links no CPU op (nsys)
-- @column a_ns       BIGINT   figure:ns     GPU time per matched step in run a (ns)
-- @column b_ns       BIGINT   figure:ns     GPU time per matched step in run b (ns)
-- @column delta_ns   BIGINT   figure:ns     b_ns - a_ns (ns)
-- @column a_count    DOUBLE   figure:count  launches per matched step in run a
-- @column b_count    DOUBLE   figure:count  launches per matched step in run b
-- @column a_mean_ns  BIGINT   figure:ns     mean duration in run a (ns)
-- @column b_mean_ns  BIGINT   figure:ns     mean duration in run b (ns)
-- @column status     VARCHAR  text          changed | new (only in b) | vanished (only in a)
-- @column noise_ns   BIGINT   figure:ns     as in diff steps: 3 × 1.4826 × the MAD of the name's per-step time, pooled over both runs
-- @column noise      BOOLEAN  flag          TRUE when |delta_ns| <= noise_ns
-- Reads two runs attached as `a` and `b`, and the matched steps in `pairs` (step_a, step_b; traceflow/compare.py).
-- scope: job
-- requires: gpu_ops, host_ops, op_classes, pairs
CREATE OR REPLACE TEMP TABLE diff_kernels AS
WITH cls AS (
    SELECT g.name, arg_max(c.op_class, n) AS op_class FROM (
        SELECT g.name, h.name AS op, count(*) AS n FROM a.gpu_ops g JOIN a.host_ops h ON h.op_id = g.cpu_op_id GROUP BY ALL
        UNION ALL
        SELECT g.name, h.name, count(*) FROM b.gpu_ops g JOIN b.host_ops h ON h.op_id = g.cpu_op_id GROUP BY ALL) g
    JOIN (SELECT * FROM a.tf_internal.op_classes UNION SELECT * FROM b.tf_internal.op_classes) c ON c.name = g.op
    GROUP BY g.name
), ka AS (
    SELECT name, any_value(category) AS category, step, sum(end_ns - start_ns) AS ns, count(*) AS n
    FROM a.gpu_ops WHERE kind = 'kernel' AND step IS NOT NULL GROUP BY name, step
), kb AS (
    SELECT name, any_value(category) AS category, step, sum(end_ns - start_ns) AS ns, count(*) AS n
    FROM b.gpu_ops WHERE kind = 'kernel' AND step IS NOT NULL GROUP BY name, step
), sa AS (
    SELECT name, any_value(category) AS category, sum(ns) / (SELECT count(*) FROM pairs) AS ns,
           sum(n) / (SELECT count(*) FROM pairs) AS n
    FROM ka WHERE step IN (SELECT step_a FROM pairs) GROUP BY name
), sb AS (
    SELECT name, any_value(category) AS category, sum(ns) / (SELECT count(*) FROM pairs) AS ns,
           sum(n) / (SELECT count(*) FROM pairs) AS n
    FROM kb WHERE step IN (SELECT step_b FROM pairs) GROUP BY name
), spread AS (
    -- per name: the per-step time's distances from its run's median, pooled over both runs
    SELECT name, median(d) AS mad FROM (
        SELECT name, abs(ns - median(ns) OVER (PARTITION BY name)) AS d FROM ka
        UNION ALL
        SELECT name, abs(ns - median(ns) OVER (PARTITION BY name)) FROM kb) GROUP BY name
)
SELECT name, coalesce(sa.category, sb.category) AS category, cls.op_class,
       coalesce(sa.ns, 0)::BIGINT AS a_ns, coalesce(sb.ns, 0)::BIGINT AS b_ns,
       (coalesce(sb.ns, 0) - coalesce(sa.ns, 0))::BIGINT AS delta_ns,
       round(coalesce(sa.n, 0), 1) AS a_count, round(coalesce(sb.n, 0), 1) AS b_count,
       (sa.ns / sa.n)::BIGINT AS a_mean_ns, (sb.ns / sb.n)::BIGINT AS b_mean_ns,
       CASE WHEN sa.name IS NULL THEN 'new' WHEN sb.name IS NULL THEN 'vanished' ELSE 'changed' END AS status,
       (3 * 1.4826 * coalesce(s.mad, 0))::BIGINT AS noise_ns,
       abs(coalesce(sb.ns, 0) - coalesce(sa.ns, 0)) <= 3 * 1.4826 * coalesce(s.mad, 0) AS noise
FROM sa FULL JOIN sb USING (name) LEFT JOIN spread s USING (name) LEFT JOIN cls USING (name)
ORDER BY abs(coalesce(sb.ns, 0) - coalesce(sa.ns, 0)) DESC, name;
