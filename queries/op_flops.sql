-- op_flops (pack `op-flops`): per CPU op with recorded arguments (Kineto record_shapes / with_flops)
-- whose work traceflow counts (matmul, attention, element-wise, norm, softmax, reduction, or any op
-- the profiler counted FLOPs for), the work its inputs imply, on the CPU or the GPU alike
-- (docs/roofline.md). op_work adds the GPU time.
--
-- Inputs: host_ops (input_dims, input_types, flops), op_classes.
--
-- Unknown stays NULL: an op kind without a formula here, a TensorList input, a missing shape.
--   rank, op_id (host_ops), name
--   op_class       matmul | attention | conv | norm | softmax | reduction | elementwise | copy | optimizer | other
--   dtype          bf16 | fp16 | fp32 | fp64 of the op's first tensor input (NULL: not recorded)
--   profiler_flops  the profiler's own count (with_flops=True), NULL where it recorded none
--   shape_flops    from the input shapes: matmuls 2·m·k·n (per batch), attention 2·b·h·s_q·s_k·(d_qk + d_v)
--                  forward and 2·b·h·s_q·s_k·(3·d_qk + 2·d_v) backward (PyTorch's FlopCounterMode conventions)
--   out_elems      elements of the output where the formula gives it (matmul, attention)
--   in_bytes       bytes of the tensor inputs (elements × dtype size)
--   out_bytes      bytes written where the output's shape follows from the op: matmul and attention
--                  (out_elems), element-wise, norm and softmax (the largest input); reductions 0 (a lower bound)
-- requires: host_ops, op_classes
-- Helper tables live in schema tf_internal (out of a user's way in `.tables`); names resolve through the search path.
CREATE SCHEMA IF NOT EXISTS tf_internal;
SET search_path = 'main,tf_internal';
CREATE OR REPLACE TABLE op_flops AS
WITH shaped AS (
    -- only the classes whose work is counted: views, allocations and copies are most ops and count none
    SELECT h.op_id, h.rank, h.name, h.flops AS profiler_flops, c.op, c.op_class,
           json_transform(h.input_dims, '["BIGINT[]"]') AS d, json_transform(h.input_types, '["VARCHAR"]') AS ty
    FROM host_ops h JOIN op_classes c USING (name)
    WHERE h.kind = 'cpu_op' AND (h.input_dims IS NOT NULL OR h.flops IS NOT NULL)
          AND (c.op_class IN ('matmul', 'attention', 'elementwise', 'norm', 'softmax', 'reduction') OR h.flops IS NOT NULL)
), tensors AS (
    -- one row per tensor input: its bytes (elements × dtype size; Scalars and lists carry no dims)
    SELECT op_id, CASE WHEN t IN ('c10::BFloat16', 'c10::Half') THEN 2 WHEN t IN ('float', 'int') THEN 4
                       WHEN t IN ('double', 'long int') THEN 8 WHEN t IN ('bool', 'unsigned char', 'signed char') THEN 1 END
                  * CASE WHEN len(dims) > 0 THEN list_product(dims) END AS b,
           t IN ('c10::BFloat16', 'c10::Half', 'float', 'int', 'double', 'long int') AS sized
    FROM (SELECT op_id, unnest(d) AS dims, unnest(ty) AS t FROM shaped)
), bytes AS (
    -- unnesting beats list lambdas over each op's inputs: 38 -> 26 ms on the bundled job, 78 -> 50 ms on long4
    SELECT op_id, sum(b)::BIGINT AS in_bytes, max(b) FILTER (WHERE sized)::BIGINT AS largest FROM tensors GROUP BY op_id
), classed AS (
    SELECT s.*, b.in_bytes, b.largest,
        CASE ty[CASE WHEN op IN ('addmm', 'baddbmm') THEN 2 ELSE 1 END]
             WHEN 'c10::BFloat16' THEN 'bf16' WHEN 'c10::Half' THEN 'fp16' WHEN 'float' THEN 'fp32'
             WHEN 'double' THEN 'fp64' END AS dtype
    FROM shaped s LEFT JOIN bytes b USING (op_id)
), formulas AS (
    SELECT *,
        CASE
            WHEN op = 'mm' AND len(d[1]) = 2 AND len(d[2]) = 2 THEN [2 * d[1][1] * d[1][2] * d[2][2], d[1][1] * d[2][2]]
            WHEN op = 'addmm' AND len(d[2]) = 2 AND len(d[3]) = 2 THEN [2 * d[2][1] * d[2][2] * d[3][2], d[2][1] * d[3][2]]
            WHEN op = 'bmm' AND len(d[1]) = 3 AND len(d[2]) = 3 THEN [2 * d[1][1] * d[1][2] * d[1][3] * d[2][3], d[1][1] * d[1][2] * d[2][3]]
            WHEN op = 'baddbmm' AND len(d[2]) = 3 AND len(d[3]) = 3 THEN [2 * d[2][1] * d[2][2] * d[2][3] * d[3][3], d[2][1] * d[2][2] * d[3][3]]
            WHEN op = 'linear' AND len(d[1]) >= 2 AND len(d[2]) = 2
                 THEN [2 * list_product(d[1]) * d[2][1], list_product(d[1]) // d[1][-1] * d[2][1]]
            -- [b, h, s, d] layout, forward: q, k, v first
            WHEN op IN ('_scaled_dot_product_cudnn_attention', '_cudnn_attention_forward', '_scaled_dot_product_flash_attention',
                        '_scaled_dot_product_efficient_attention', '_scaled_dot_product_flash_attention_for_cpu')
                 AND len(d[1]) = 4 AND len(d[2]) = 4 AND len(d[3]) = 4
                 THEN [2 * d[1][1] * d[1][2] * d[1][3] * d[2][3] * (d[1][4] + d[3][4]), d[1][1] * d[1][2] * d[1][3] * d[3][4]]
            -- [b, s, h, d] layout (the kernels' own entry points), forward
            WHEN op IN ('_flash_attention_forward', '_efficient_attention_forward')
                 AND len(d[1]) = 4 AND len(d[2]) = 4 AND len(d[3]) = 4
                 THEN [2 * d[1][1] * d[1][3] * d[1][2] * d[2][2] * (d[1][4] + d[3][4]), d[1][1] * d[1][2] * d[1][3] * d[3][4]]
            -- backward: grad_out, q, k, v first; outputs are the grads of q, k, v
            WHEN op IN ('_scaled_dot_product_cudnn_attention_backward', '_cudnn_attention_backward',
                        '_scaled_dot_product_flash_attention_backward', '_scaled_dot_product_efficient_attention_backward',
                        '_scaled_dot_product_flash_attention_for_cpu_backward')
                 AND len(d[2]) = 4 AND len(d[3]) = 4 AND len(d[4]) = 4
                 THEN [2 * d[2][1] * d[2][2] * d[2][3] * d[3][3] * (3 * d[2][4] + 2 * d[4][4]),
                       list_product(d[2]) + list_product(d[3]) + list_product(d[4])]
            WHEN op IN ('_flash_attention_backward', '_efficient_attention_backward')
                 AND len(d[2]) = 4 AND len(d[3]) = 4 AND len(d[4]) = 4
                 THEN [2 * d[2][1] * d[2][3] * d[2][2] * d[3][2] * (3 * d[2][4] + 2 * d[4][4]),
                       list_product(d[2]) + list_product(d[3]) + list_product(d[4])]
        END AS fo   -- [flops, output elements]
    FROM classed
)
SELECT rank, op_id, name, op_class, dtype, profiler_flops, fo[1]::BIGINT AS shape_flops, fo[2]::BIGINT AS out_elems,
       in_bytes,
       CASE WHEN fo IS NOT NULL THEN fo[2] * CASE dtype WHEN 'bf16' THEN 2 WHEN 'fp16' THEN 2 WHEN 'fp32' THEN 4 WHEN 'fp64' THEN 8 END
            WHEN op_class IN ('elementwise', 'norm', 'softmax') THEN largest
            WHEN op_class = 'reduction' THEN 0 END::BIGINT AS out_bytes
FROM formulas;  -- in scan order: a sort of every op cost a third of this pack

-- What `.read` of this file shows in the DuckDB shell (on a read-only database, this query alone):
SELECT * FROM op_flops LIMIT 20;
