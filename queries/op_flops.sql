-- @table op_flops: per CPU op with recorded arguments (Kineto record_shapes / with_flops)
--     whose work traceflow counts (matmul, attention, convolution, element-wise, norm, softmax, reduction, copy_,
--     fill_, zero_, clone, contiguous, or any op
--     the profiler counted FLOPs for), the work its inputs imply, on the CPU or the GPU alike
--     (docs/roofline.md). op_work adds the GPU time.
--
--
-- Unknown stays NULL: an op kind without a formula here, a TensorList input, a missing shape.
-- @column rank            INTEGER  rank          the rank (process index in the job) the row belongs to
-- @column op_id           BIGINT   id:host_ops   the CPU op (host_ops.op_id)
-- @column name            VARCHAR  text          the name of the op, kernel or call (kernels: the full demangled C++ name)
-- @column op_class        VARCHAR  text          matmul | attention | conv | norm | softmax | reduction | elementwise | copy | optimizer |
--     other
-- @column dtype           VARCHAR  text          bf16 | fp16 | fp32 | fp64 of the op's first tensor input (NULL: not recorded)
-- @column profiler_flops  BIGINT   figure:flop   the profiler's own count (with_flops=True), NULL where it recorded none
-- @column shape_flops     BIGINT   figure:flop   from the input shapes: matmuls 2·m·k·n (per batch), attention 2·b·h·s_q·s_k·(d_qk + d_v)
--     forward and 2·b·h·s_q·s_k·(3·d_qk + 2·d_v) backward, convolutions 2·N·prod(spatial)·prod(weight)
--     (spatial: the output's, the input's when transposed; backward per its output_mask)
--     (PyTorch's FlopCounterMode conventions)
-- @column out_elems       BIGINT   figure:count  elements of the output where the formula gives it (matmul, attention, convolution)
-- @column in_bytes        BIGINT   figure:bytes  bytes of the tensor inputs (elements × dtype size)
-- @column out_bytes       BIGINT   figure:bytes  bytes written where the output's shape follows from the op: matmul, attention, convolution
--     (out_elems), element-wise, norm, softmax, clone and contiguous (the largest input);
--     reductions 0 (a lower bound); copy_, fill_ and zero_ 0 (the tensor they write is an input).
--     Other copies (to, _to_copy: the target dtype is not kept; cat, stack and the optimizers'
--     _foreach_ ops: a TensorList's dtypes are not recorded) stay NULL
-- op_flops shows first: rank, op_id, name, op_class, dtype, shape_flops, profiler_flops
-- scope: rank
-- requires: host_ops, op_classes
-- Helper tables live in schema tf_internal (out of a user's way in `.tables`); names resolve through the search path.
CREATE SCHEMA IF NOT EXISTS tf_internal;
SET search_path = 'main,tf_internal';
-- a convolution's stride, padding, ...: a one-element list applies to every spatial dimension
CREATE OR REPLACE TEMP MACRO tf_conv_arg(l, i) AS CASE WHEN len(l) = 1 THEN l[1] ELSE l[i] END;
CREATE OR REPLACE TABLE op_flops AS
WITH counted AS (
    -- only the classes whose work is counted: views, allocations and copies are most ops and count none
    SELECT h.op_id, h.rank, h.name, h.flops AS profiler_flops, h.input_dims, h.input_types, h.concrete_inputs, c.op, c.op_class
    FROM host_ops h JOIN op_classes c USING (name)
    WHERE h.kind = 'cpu_op' AND (h.input_dims IS NOT NULL OR h.flops IS NOT NULL)
          AND (c.op_class IN ('matmul', 'attention', 'conv', 'elementwise', 'norm', 'softmax', 'reduction') OR h.flops IS NOT NULL
               OR c.op IN ('copy_', 'fill_', 'zero_', 'clone', 'contiguous'))
), shaped AS (
    -- the work follows from (op, shapes, dtypes) alone, and a job repeats a few hundred of those
    -- over and over (191 distinct shape lists over 200k ops on long4): each is worked out once
    SELECT row_number() OVER () AS shape_id, name, op, op_class, input_dims, input_types, concrete_inputs,
           json_transform(input_dims, '["BIGINT[]"]') AS d, json_transform(input_types, '["VARCHAR"]') AS ty,
           json_transform(concrete_inputs, '["VARCHAR"]') AS ci
    FROM (SELECT DISTINCT name, op, op_class, input_dims, input_types, concrete_inputs FROM counted)
), conv_args AS (
    -- where each convolution op keeps its arguments (1-based, in Concrete Inputs; aten's schemas):
    -- stride, padding, dilation (NULL: 1), transposed (a position, or NULL with the constant),
    -- output_padding and groups (read for transposed ones only)
    SELECT * FROM (VALUES
        ('convolution', 4, 5, 6, 7, NULL, 8, 9), ('_convolution', 4, 5, 6, 7, NULL, 8, 9),
        ('conv1d', 4, 5, 6, NULL, FALSE, NULL, NULL), ('conv2d', 4, 5, 6, NULL, FALSE, NULL, NULL),
        ('conv3d', 4, 5, 6, NULL, FALSE, NULL, NULL), ('cudnn_convolution', 4, 3, 5, NULL, FALSE, NULL, NULL),
        ('miopen_convolution', 5, 4, 6, NULL, FALSE, NULL, NULL), ('mkldnn_convolution', 5, 4, 6, NULL, FALSE, NULL, NULL),
        ('_slow_conv2d_forward', 5, 6, NULL, NULL, FALSE, NULL, NULL),
        ('conv_transpose1d', 4, 5, 8, NULL, TRUE, 6, 7), ('conv_transpose2d', 4, 5, 8, NULL, TRUE, 6, 7),
        ('conv_transpose3d', 4, 5, 8, NULL, TRUE, 6, 7), ('cudnn_convolution_transpose', 5, 3, 6, NULL, TRUE, 4, 7),
        ('convolution_backward', 5, 6, 7, 8, NULL, 9, 10)
    ) t(op, stride_at, padding_at, dilation_at, transposed_at, transposed_always, out_padding_at, groups_at)
), conv AS (
    -- x input [N, C, spatial...], w weight [C_out, C_in / groups, kernel...] (transposed: [C_in, C_out / groups, ...]).
    -- FLOPs as FlopCounterMode counts them: 2 · N · prod(spatial) · w[1] · w[2] · prod(kernel), where
    -- spatial is the output's (the input's when transposed); the output's extent per dimension is
    -- (x + 2·padding − dilation·(k − 1) − 1) // stride + 1, or (x − 1)·stride − 2·padding + dilation·(k − 1)
    -- + output_padding + 1 when transposed. A one-element list applies to every dimension.
    SELECT shape_id, op, d, x, w, go, mask, tr, groups,
           list_product(list_transform(range(1, len(x) - 1), lambda i:
               CASE WHEN tr THEN (x[i + 2] - 1) * tf_conv_arg(st, i) - 2 * tf_conv_arg(pa, i) + coalesce(tf_conv_arg(di, i), 1) * (w[i + 2] - 1)
                                 + coalesce(tf_conv_arg(op_, i), 0) + 1
                    ELSE (x[i + 2] + 2 * tf_conv_arg(pa, i) - coalesce(tf_conv_arg(di, i), 1) * (w[i + 2] - 1) - 1) // tf_conv_arg(st, i) + 1 END)) AS out_spatial
    FROM (
        SELECT s.shape_id, s.op, s.d,
               CASE WHEN s.op = 'convolution_backward' THEN s.d[2] ELSE s.d[1] END AS x,
               CASE WHEN s.op = 'convolution_backward' THEN s.d[3] ELSE s.d[2] END AS w,
               CASE WHEN s.op = 'convolution_backward' THEN s.d[1] END AS go,
               CASE WHEN s.op = 'convolution_backward' THEN json_transform(lower(s.ci[11]), '["BOOLEAN"]') END AS mask,
               coalesce(a.transposed_always, lower(s.ci[a.transposed_at]) = 'true') AS tr,
               json_transform(s.ci[a.stride_at], '["BIGINT"]') AS st, json_transform(s.ci[a.padding_at], '["BIGINT"]') AS pa,
               json_transform(s.ci[a.dilation_at], '["BIGINT"]') AS di, json_transform(s.ci[a.out_padding_at], '["BIGINT"]') AS op_,
               TRY_CAST(s.ci[a.groups_at] AS BIGINT) AS groups
        FROM shaped s JOIN conv_args a USING (op)
        WHERE s.op_class = 'conv' AND len(s.d[1]) BETWEEN 3 AND 5
    )
    WHERE len(x) BETWEEN 3 AND 5 AND len(w) = len(x)
), conv_work AS (
    SELECT shape_id,
        CASE WHEN op <> 'convolution_backward'
             THEN [2 * x[1] * CASE WHEN tr THEN list_product(x[3:]) ELSE out_spatial END * list_product(w),
                   x[1] * CASE WHEN tr THEN w[2] * groups ELSE w[1] END * out_spatial]
             -- backward: grad_out, input, weight; output_mask says which of grad_input, grad_weight, grad_bias it computes
             WHEN len(mask) = 3 AND len(go) = len(x)
             THEN [CASE WHEN mask[1] THEN 2 * go[1] * list_product(CASE WHEN tr THEN x[3:] ELSE go[3:] END) * list_product(w) ELSE 0 END
                   + CASE WHEN mask[2] THEN 2 * CASE WHEN tr THEN go[2] * x[2] * x[1] * list_product(x[3:])
                                                     ELSE x[2] * go[2] * go[1] * list_product(go[3:]) END * list_product(w[3:]) ELSE 0 END,
                   CASE WHEN mask[1] THEN list_product(x) ELSE 0 END + CASE WHEN mask[2] THEN list_product(w) ELSE 0 END
                   + CASE WHEN mask[3] THEN go[2] ELSE 0 END]
        END AS fo
    FROM conv
), tensors AS (
    -- one row per tensor input: its bytes (elements × dtype size; Scalars and lists carry no dims)
    SELECT shape_id, CASE WHEN t IN ('c10::BFloat16', 'c10::Half') THEN 2 WHEN t IN ('float', 'int') THEN 4
                       WHEN t IN ('double', 'long int') THEN 8 WHEN t IN ('bool', 'unsigned char', 'signed char') THEN 1 END
                  * CASE WHEN len(dims) > 0 THEN list_product(dims) ELSE 1 END AS b,  -- [] with a dtype: a 0-d tensor
           t IN ('c10::BFloat16', 'c10::Half', 'float', 'int', 'double', 'long int') AS sized
    FROM (SELECT shape_id, unnest(d) AS dims, unnest(ty) AS t FROM shaped)
), bytes AS (
    -- unnesting beats list lambdas over each op's inputs: 38 -> 26 ms on the bundled job, 78 -> 50 ms on long4
    SELECT shape_id, sum(b)::BIGINT AS in_bytes, max(b) FILTER (WHERE sized)::BIGINT AS largest FROM tensors GROUP BY shape_id
), classed AS (
    SELECT s.*, b.in_bytes, b.largest,
        CASE ty[CASE WHEN op IN ('addmm', 'baddbmm') THEN 2 ELSE 1 END]
             WHEN 'c10::BFloat16' THEN 'bf16' WHEN 'c10::Half' THEN 'fp16' WHEN 'float' THEN 'fp32'
             WHEN 'double' THEN 'fp64' END AS dtype
    FROM shaped s LEFT JOIN bytes b USING (shape_id)
), formulas AS (
    SELECT c.*,
        CASE
            WHEN c.op_class = 'conv' THEN cw.fo
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
    FROM classed c LEFT JOIN conv_work cw USING (shape_id)
)
SELECT c.rank, c.op_id, c.name, c.op_class, f.dtype, c.profiler_flops, f.fo[1]::BIGINT AS shape_flops,
       f.fo[2]::BIGINT AS out_elems, f.in_bytes,
       CASE WHEN f.fo IS NOT NULL THEN f.fo[2] * CASE f.dtype WHEN 'bf16' THEN 2 WHEN 'fp16' THEN 2 WHEN 'fp32' THEN 4 WHEN 'fp64' THEN 8 END
            WHEN c.op_class IN ('elementwise', 'norm', 'softmax') OR c.op IN ('clone', 'contiguous') THEN f.largest
            -- written in place without being read: its bytes are among the inputs' already
            WHEN c.op IN ('copy_', 'fill_', 'zero_') THEN 0
            WHEN c.op_class = 'reduction' THEN 0 END::BIGINT AS out_bytes
FROM counted c LEFT JOIN formulas f
     ON c.name = f.name AND c.input_dims IS NOT DISTINCT FROM f.input_dims AND c.input_types IS NOT DISTINCT FROM f.input_types
        AND c.concrete_inputs IS NOT DISTINCT FROM f.concrete_inputs;

-- What `.read` of this file shows in the DuckDB shell (on a read-only database, this query alone):
SELECT * FROM op_flops LIMIT 20;
