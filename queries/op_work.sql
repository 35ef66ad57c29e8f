-- @table op_work: per CPU op that launched GPU work, the work it did (FLOPs, bytes moved)
--     and how close its kernels ran to the GPU's roofs (docs/roofline.md).
--
-- Parameters: tf_roofline_min_ns — an op whose kernels ran shorter than this is 'latency' bound:
--   too short to judge against a roof [5000 ns].
--
-- An op is the innermost CPU op whose External id the launch call carries (aten::mm, not the
-- aten::linear around it), so FLOPs are counted once. Ops without recorded shapes, and op kinds with
-- no formula here, have NULL flops: never a guess.
-- @column rank             INTEGER  rank          the rank (process index in the job) the row belongs to
-- @column step             INTEGER  key           the training step (ProfilerStep#N, or the --step-pattern's number); NULL outside every
--     step
-- @column op_id            BIGINT   id:host_ops   the CPU op (host_ops.op_id)
-- @column name             VARCHAR  text          the name of the op, kernel or call (kernels: the full demangled C++ name)
-- @column op_class         VARCHAR  text          matmul | attention | conv | norm | softmax | reduction | elementwise | copy | optimizer |
--     other
-- @column dtype            VARCHAR  text          bf16 | fp16 | fp32 | fp64 of the op's first tensor input (NULL: not recorded)
-- @column kernels          BIGINT   figure:count  GPU ops it launched (compute and memory; NCCL kernels are not op work)
-- @column gpu_ns           BIGINT   figure:ns     their summed run time (ns)
-- @column flops            BIGINT   figure:flop   the profiler's own count (with_flops=True) where recorded, else from the input shapes:
--     matmuls 2·m·k·n (per batch), convolutions, attention 2·b·h·s_q·s_k·(d_qk + d_v) forward and
--     2·b·h·s_q·s_k·(3·d_qk + 2·d_v) backward (PyTorch's FlopCounterMode conventions)
-- @column flops_source     VARCHAR  text          'profiler' | 'shapes' | NULL
-- @column bytes            BIGINT   figure:bytes  bytes read from the tensor inputs plus the output written where its shape follows
--     from the op (matmul, attention, element-wise, norm, softmax); reductions count inputs only
-- @column intensity        DOUBLE   figure:ratio  flops / bytes (FLOP per byte)
-- @column achieved_tflops  DOUBLE   figure:tflops  flops / gpu_ns (TFLOP/s)
-- @column achieved_gbps    DOUBLE   figure:gbps   bytes / gpu_ns (GB/s)
-- @column peak_tflops      DOUBLE   figure:tflops  the device's dense peak for dtype (device_peaks, TFLOP/s; an unknown dtype: any_tflops)
-- @column peak_gbps        DOUBLE   figure:gbps   its memory bandwidth (GB/s)
-- @column roof_pct         DOUBLE   figure:percent  achieved / attainable, where attainable = min(peak_tflops, intensity × peak_gbps)
--     (bytes-only ops: achieved_gbps / peak_gbps), in percent
-- @column bound            VARCHAR  text          compute (intensity at or past the ridge point) | memory | latency (ran under
--     tf_roofline_min_ns) | NULL (no work known)
--
-- op_work_kernels (helper): gpu_op_id -> op_id of the CPU op that launched it, with rank, step, dur_ns.
-- op_work shows first: rank, step, name, op_class, gpu_ns, achieved_tflops, roof_pct, bound
-- scope: rank
-- requires: device_peaks, host_ops, op_classes, op_flops, op_work_kernels
-- Helper tables live in schema tf_internal (out of a user's way in `.tables`); names resolve through the search path.
CREATE SCHEMA IF NOT EXISTS tf_internal;
SET search_path = 'main,tf_internal';
CREATE OR REPLACE TABLE op_work AS
WITH per_op AS (
    SELECT op_id, any_value(rank) AS rank, min(step) AS step, count(*) AS kernels, sum(dur_ns)::BIGINT AS gpu_ns
    FROM op_work_kernels GROUP BY op_id
), work AS (
    SELECT p.rank, p.step, p.op_id, h.name, c.op_class, f.dtype, p.kernels, p.gpu_ns,
           coalesce(f.profiler_flops, f.shape_flops) AS flops,
           CASE WHEN f.profiler_flops IS NOT NULL THEN 'profiler' WHEN f.shape_flops IS NOT NULL THEN 'shapes' END AS flops_source,
           f.in_bytes + f.out_bytes AS bytes
    FROM per_op p JOIN host_ops h USING (op_id) LEFT JOIN op_classes c USING (name) LEFT JOIN op_flops f USING (op_id)
), j AS (
    SELECT w.*, pk.gbps AS peak_gbps,
           CASE WHEN w.dtype IS NULL THEN pk.any_tflops  -- not recorded (nsys emit_nvtx)
                WHEN w.dtype = 'bf16' THEN pk.bf16_tflops WHEN w.dtype = 'fp16' THEN pk.fp16_tflops
                WHEN w.dtype = 'fp32' THEN pk.fp32_tflops WHEN w.dtype = 'fp64' THEN pk.fp64_tflops END AS peak_tflops
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
FROM j;  -- in scan order: op_work is as long as the launching ops, and a sort of it was a third of its cost


-- What `.read` of this file shows in the DuckDB shell (on a read-only database, this query alone):
SELECT * FROM op_work LIMIT 20;
