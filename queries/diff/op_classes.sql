-- diff op_classes: the kernels diff grouped by the class of op that launched them (matmul,
-- attention, element-wise, ...; NULL where the trace links no CPU op), per matched step.
--
-- Inputs: diff_kernels (kernels.sql, run first).
--
--   op_class
--   a_ns, b_ns, delta_ns   GPU time per matched step (ns)
--   kernels                kernel names in the class
-- requires: diff_kernels
CREATE OR REPLACE TEMP TABLE diff_op_classes AS
SELECT op_class, sum(a_ns)::BIGINT AS a_ns, sum(b_ns)::BIGINT AS b_ns, sum(delta_ns)::BIGINT AS delta_ns, count(*) AS kernels
FROM diff_kernels GROUP BY op_class ORDER BY abs(sum(delta_ns)) DESC, op_class;
