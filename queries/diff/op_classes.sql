-- @table diff_op_classes: the kernels diff grouped by the class of op that launched them (matmul,
--     attention, element-wise, ...; NULL where the trace links no CPU op), per matched step.
-- @column op_class  VARCHAR  text          the class of the CPU ops that launched the kernels (diff_kernels.op_class)
-- @column a_ns      BIGINT   figure:ns     GPU time per matched step in run a (ns)
-- @column b_ns      BIGINT   figure:ns     GPU time per matched step in run b (ns)
-- @column delta_ns  BIGINT   figure:ns     b_ns - a_ns (ns)
-- @column kernels   BIGINT   figure:count  kernel names in the class
-- scope: job
-- requires: diff_kernels
CREATE OR REPLACE TEMP TABLE diff_op_classes AS
SELECT op_class, sum(a_ns)::BIGINT AS a_ns, sum(b_ns)::BIGINT AS b_ns, sum(delta_ns)::BIGINT AS delta_ns, count(*) AS kernels
FROM diff_kernels GROUP BY op_class ORDER BY abs(sum(delta_ns)) DESC, op_class;
