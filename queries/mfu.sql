-- @table mfu: per rank and step, model FLOPs utilisation (MFU) and hardware FLOPs utilisation
--     over busy time, so the gap between the two is visible (docs/roofline.md).
--
--
-- @column rank          INTEGER  rank          the rank (process index in the job) the row belongs to
-- @column step          INTEGER  key           the training step (ProfilerStep#N, or the --step-pattern's number); NULL outside every
--     step
-- @column flops         BIGINT   figure:flop   FLOPs of the step's ops with known work (op_work.flops)
-- @column dtype         VARCHAR  text          the dtype that carried most of those FLOPs; its peak is the denominator (NULL: not
--     recorded, as with nsys emit_nvtx; device_peaks.any_tflops is then the peak)
-- @column peak_tflops   DOUBLE   figure:tflops  the device's dense peak for that dtype (TFLOP/s)
-- @column wall_ns       BIGINT   figure:ns     the step's GPU window (step_breakdown)
-- @column busy_ns       BIGINT   figure:ns     the time the GPU ran anything in the window (step_breakdown)
-- @column mfu_pct       DOUBLE   figure:percent  flops / (wall_ns × peak): the share of the GPU's peak the step achieved (percent)
-- @column busy_hfu_pct  DOUBLE   figure:percent  flops / (busy_ns × peak): the same over the time the GPU was busy (percent);
--     the gap to mfu_pct is idle time
-- @column known_pct     DOUBLE   figure:percent  share of the step's compute-kernel time whose op has known FLOPs (percent): below
--     100, MFU is a lower bound
-- mfu shows first: rank, step, mfu_pct, busy_hfu_pct, known_pct, dtype, peak_tflops
-- scope: rank
-- requires: device_peaks, gpu_ops, op_work, step_breakdown
-- Helper tables live in schema tf_internal (out of a user's way in `.tables`); names resolve through the search path.
CREATE SCHEMA IF NOT EXISTS tf_internal;
SET search_path = 'main,tf_internal';
CREATE OR REPLACE TABLE mfu AS
WITH f AS (
    SELECT rank, step, sum(flops) AS flops, arg_max(dtype, flops) AS dtype
    FROM (SELECT rank, step, dtype, sum(flops) AS flops FROM op_work WHERE flops IS NOT NULL GROUP BY ALL)
    GROUP BY rank, step
), compute AS (
    SELECT rank, step, sum(end_ns - start_ns) AS compute_kernel_ns FROM gpu_ops WHERE category = 'compute' GROUP BY ALL
), known AS (
    SELECT rank, step, sum(gpu_ns) FILTER (WHERE flops IS NOT NULL) AS known_ns FROM op_work GROUP BY ALL
)
SELECT s.rank, s.step, f.flops::BIGINT AS flops, f.dtype, p.peak_tflops, s.wall_ns, s.busy_ns,
       round(100 * f.flops / (s.wall_ns * p.peak_tflops * 1e3), 2) AS mfu_pct,
       round(100 * f.flops / (nullif(s.busy_ns, 0) * p.peak_tflops * 1e3), 2) AS busy_hfu_pct,
       round(100.0 * least(coalesce(k.known_ns, 0), c.compute_kernel_ns) / nullif(c.compute_kernel_ns, 0), 1) AS known_pct
FROM step_breakdown s
LEFT JOIN f USING (rank, step) LEFT JOIN compute c USING (rank, step) LEFT JOIN known k USING (rank, step)
LEFT JOIN (SELECT rank, CASE d.dtype WHEN 'bf16' THEN bf16_tflops WHEN 'fp16' THEN fp16_tflops
                                     WHEN 'fp32' THEN fp32_tflops WHEN 'fp64' THEN fp64_tflops
                                     WHEN '?' THEN any_tflops END AS peak_tflops, d.dtype
           FROM device_peaks, (SELECT unnest(['bf16', 'fp16', 'fp32', 'fp64', '?']) AS dtype) d) p
       -- '?': FLOPs of ops whose dtype the trace does not record (nsys emit_nvtx)
       ON p.rank = s.rank AND p.dtype = coalesce(f.dtype, '?')
WHERE s.part = 'step'
ORDER BY s.rank, s.step;

-- What `.read` of this file shows in the DuckDB shell (on a read-only database, this query alone):
SELECT * FROM mfu LIMIT 20;
