-- op_work (pack `op-work`): per CPU op that launched GPU work, the work it did (FLOPs, bytes moved)
-- and how close its kernels ran to the GPU's roofs (docs/roofline.md).
--
-- Inputs: gpu_ops (launch links), host_ops (Kineto record_shapes / with_flops args), device_peaks.
-- Parameters: tf_roofline_min_ns — an op whose kernels ran shorter than this is 'latency' bound:
--   too short to judge against a roof [5000 ns].
--
-- An op is the innermost CPU op whose External id the launch call carries (aten::mm, not the
-- aten::linear around it), so FLOPs are counted once. Ops without recorded shapes, and op kinds with
-- no formula here, have NULL flops: never a guess.
--   rank, step, op_id (host_ops), name
--   op_class     matmul | attention | conv | norm | softmax | reduction | elementwise | copy | optimizer | other
--   dtype        bf16 | fp16 | fp32 | fp64 of the op's first tensor input (NULL: not recorded)
--   kernels      GPU ops it launched (compute and memory; NCCL kernels are not op work)
--   gpu_ns       their summed run time (ns)
--   flops        the profiler's own count (with_flops=True) where recorded, else from the input shapes:
--                matmuls 2·m·k·n (per batch), attention 2·b·h·s_q·s_k·(d_qk + d_v) forward and
--                2·b·h·s_q·s_k·(3·d_qk + 2·d_v) backward (PyTorch's FlopCounterMode conventions)
--   flops_source 'profiler' | 'shapes' | NULL
--   bytes        bytes read from the tensor inputs plus the output written where its shape follows
--                from the op (matmul, attention, element-wise, norm, softmax); reductions count inputs only
--   intensity    flops / bytes (FLOP per byte)
--   achieved_tflops, achieved_gbps  flops / gpu_ns and bytes / gpu_ns (TFLOP/s, GB/s)
--   peak_tflops  the device's dense peak for dtype (device_peaks); peak_gbps its memory bandwidth
--   roof_pct     achieved / attainable, where attainable = min(peak_tflops, intensity × peak_gbps)
--                (bytes-only ops: achieved_gbps / peak_gbps), in percent
--   bound        compute (intensity at or past the ridge point) | memory | latency (ran under
--                tf_roofline_min_ns) | NULL (no work known)
-- requires: device_peaks, gpu_ops, host_ops
-- Helper tables live in schema tf_internal (out of a user's way in `.tables`); names resolve through the search path.
CREATE SCHEMA IF NOT EXISTS tf_internal;
SET search_path = 'main,tf_internal';
CREATE OR REPLACE TABLE op_work AS
WITH launched AS (
    SELECT g.rank, g.step, g.start_ns, g.end_ns, h.trace_id, h.external_id
    FROM gpu_ops g JOIN host_ops h ON h.op_id = g.launch_op_id
    WHERE g.category <> 'communication' AND h.external_id IS NOT NULL
), cpu AS (
    -- an External id names one CPU op; were it repeated, the latest-starting (innermost) one
    SELECT trace_id, external_id, arg_max(op_id, start_ns) AS op_id
    FROM host_ops WHERE kind = 'cpu_op' AND (trace_id, external_id) IN (SELECT trace_id, external_id FROM launched)
    GROUP BY ALL
), per_op AS (
    SELECT c.op_id, any_value(l.rank) AS rank, min(l.step) AS step, count(*) AS kernels,
           sum(l.end_ns - l.start_ns)::BIGINT AS gpu_ns
    FROM launched l JOIN cpu c USING (trace_id, external_id) GROUP BY c.op_id
), shaped AS (
    SELECT p.*, h.name, h.flops AS profiler_flops, regexp_replace(h.name, '^aten::', '') AS op,
           json_transform(h.input_dims, '["BIGINT[]"]') AS d, json_transform(h.input_types, '["VARCHAR"]') AS ty
    FROM per_op p JOIN host_ops h USING (op_id)
), classed AS (
    SELECT *,
        CASE WHEN op IN ('mm', 'addmm', 'bmm', 'baddbmm', 'linear', 'matmul', 'addmv', 'mv', 'dot') THEN 'matmul'
             WHEN op LIKE '%attention%' THEN 'attention'
             WHEN op LIKE '%conv%' THEN 'conv'
             WHEN op LIKE '%norm%' AND op NOT IN ('norm', 'linalg_vector_norm') THEN 'norm'
             WHEN op LIKE '%softmax%' THEN 'softmax'
             WHEN op IN ('sum', 'mean', 'amax', 'amin', 'max', 'min', 'norm', 'linalg_vector_norm', 'prod', 'argmax',
                         'argmin', 'var', 'std', 'any', 'all', 'cumsum') THEN 'reduction'
             WHEN op LIKE '\_foreach\_%' ESCAPE '\' OR op LIKE '\_fused\_%' ESCAPE '\' THEN 'optimizer'
             WHEN op IN ('copy_', '_to_copy', 'to', 'clone', 'contiguous', 'cat', 'stack', 'index_select', 'gather',
                         'scatter', 'embedding', 'index', 'fill_', 'zero_', 'zeros_like', 'ones_like') THEN 'copy'
             WHEN regexp_matches(op, '^(add|sub|mul|div|neg|abs|exp|log|pow|sqrt|rsqrt|sigmoid|tanh|relu|gelu|silu|'
                                     'threshold|where|clamp|lerp|addcmul|addcdiv|maximum|minimum|eq|ne|lt|gt|le|ge|'
                                     'masked_fill|dropout|native_dropout|bernoulli|sin|cos|reciprocal|sign|'
                                     'gelu_backward|silu_backward|threshold_backward|sigmoid_backward|tanh_backward|'
                                     'native_dropout_backward)_?$') THEN 'elementwise'
             ELSE 'other' END AS op_class,
        CASE ty[CASE WHEN op IN ('addmm', 'baddbmm') THEN 2 ELSE 1 END]
             WHEN 'c10::BFloat16' THEN 'bf16' WHEN 'c10::Half' THEN 'fp16' WHEN 'float' THEN 'fp32'
             WHEN 'double' THEN 'fp64' END AS dtype,
        -- inputs read: each tensor input's elements × its dtype's size (Scalars and lists carry no dims)
        list_sum(list_transform(list_zip(d, ty), x -> CASE WHEN x[2] IN ('c10::BFloat16', 'c10::Half') THEN 2
                 WHEN x[2] IN ('float', 'int') THEN 4 WHEN x[2] IN ('double', 'long int') THEN 8
                 WHEN x[2] IN ('bool', 'unsigned char', 'signed char') THEN 1 END
                 * CASE WHEN len(x[1]) > 0 THEN list_product(x[1]) END))::BIGINT AS in_bytes
    FROM shaped
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
), work AS (
    SELECT rank, step, op_id, name, op_class, dtype, kernels, gpu_ns,
           coalesce(profiler_flops, fo[1]) AS flops,
           CASE WHEN profiler_flops IS NOT NULL THEN 'profiler' WHEN fo[1] IS NOT NULL THEN 'shapes' END AS flops_source,
           in_bytes + CASE WHEN fo IS NOT NULL THEN fo[2] * CASE dtype WHEN 'bf16' THEN 2 WHEN 'fp16' THEN 2
                                                                       WHEN 'fp32' THEN 4 WHEN 'fp64' THEN 8 END
                           WHEN op_class IN ('elementwise', 'norm', 'softmax')
                           THEN list_max(list_transform(list_zip(d, ty), x -> CASE WHEN x[2] IN ('c10::BFloat16', 'c10::Half') THEN 2
                                 WHEN x[2] IN ('float', 'int') THEN 4 WHEN x[2] IN ('double', 'long int') THEN 8 END
                                 * CASE WHEN len(x[1]) > 0 THEN list_product(x[1]) END))
                           WHEN op_class = 'reduction' THEN 0 END AS bytes
    FROM formulas
), j AS (
    SELECT w.*, pk.gbps AS peak_gbps,
           CASE w.dtype WHEN 'bf16' THEN pk.bf16_tflops WHEN 'fp16' THEN pk.fp16_tflops
                        WHEN 'fp32' THEN pk.fp32_tflops WHEN 'fp64' THEN pk.fp64_tflops END AS peak_tflops
    FROM work w LEFT JOIN device_peaks pk USING (rank)
)
SELECT rank, step, op_id, name, op_class, dtype, kernels, gpu_ns, flops::BIGINT AS flops, flops_source,
       bytes::BIGINT AS bytes,
       round(flops / nullif(bytes, 0), 2) AS intensity,
       round(flops / nullif(gpu_ns, 0) / 1e3, 3) AS achieved_tflops,
       round(bytes / nullif(gpu_ns, 0), 2) AS achieved_gbps,
       peak_tflops, peak_gbps,
       round(100 * CASE WHEN flops IS NOT NULL
                        THEN (flops / nullif(gpu_ns, 0) / 1e3) / least(peak_tflops, flops / nullif(bytes, 0) * peak_gbps / 1e3)
                        ELSE (bytes / nullif(gpu_ns, 0)) / peak_gbps END, 1) AS roof_pct,
       CASE WHEN flops IS NULL AND bytes IS NULL THEN NULL
            WHEN gpu_ns < coalesce(getvariable('tf_roofline_min_ns'), 5000) THEN 'latency'
            WHEN flops IS NOT NULL AND bytes > 0 AND peak_tflops IS NOT NULL AND peak_gbps IS NOT NULL
                 AND flops / bytes >= peak_tflops * 1e3 / peak_gbps THEN 'compute'
            WHEN bytes IS NOT NULL THEN 'memory'
       END AS bound
FROM j
ORDER BY rank, op_id;


-- What `.read` of this file shows in the DuckDB shell (on a read-only database, this query alone):
SELECT * FROM op_work LIMIT 20;
