-- @table mfu_waterfall: per rank and step, where the step's time went between the
--     GPU's peak and the MFU it reached, each slice in ms and in MFU points, and how much of each kind
--     lay on the critical path (docs/roofline.md).
--
--
-- The slices tile the step's GPU window exactly:
--   wall_ns = ideal_ns + idle_ns + straggler_wait_ns + exposed_transfer_ns + exposed_memory_ns
--             + no_flops_compute_ns + below_roof_ns
-- @column rank                  INTEGER  rank          the rank (process index in the job) the row belongs to
-- @column step                  INTEGER  key           the training step (ProfilerStep#N, or the --step-pattern's number); NULL outside every
--     step
-- @column wall_ns               BIGINT   figure:ns     the step's GPU window (step_breakdown) (ns)
-- @column mfu_pct               DOUBLE   figure:percent  ideal_ns / wall_ns: the MFU the step reached (percent; as the mfu pack)
-- @column ideal_ns              BIGINT   figure:ns     the step's FLOPs at the device's peak: the window at 100 % MFU (ns)
-- @column idle_ns               BIGINT   figure:ns     the GPU ran nothing (ns)
-- @column straggler_wait_ns     BIGINT   figure:ns     exposed communication spent waiting for peers to reach the collectives
--     (collective_waits.wait_ns, at most the exposed communication) (ns)
-- @column exposed_transfer_ns   BIGINT   figure:ns     the rest of the exposed communication: moving the data (ns)
-- @column exposed_memory_ns     BIGINT   figure:ns     copies and memsets no kernel hid (ns)
-- @column no_flops_compute_ns   BIGINT   figure:ns     compute time of ops with no known FLOPs (element-wise, norms, optimizer; or
--     unknown to traceflow), at most what compute has left above ideal_ns (ns)
-- @column below_roof_ns         BIGINT   figure:ns     the rest of the compute time: kernels with known FLOPs running below the peak (ns)
-- @column idle_pts              DOUBLE   figure:percent  idle_ns in MFU points (percent of the window); with mfu_pct, the *_pts add up to 100
-- @column straggler_wait_pts    DOUBLE   figure:percent  straggler_wait_ns in MFU points (percent of the window)
-- @column exposed_transfer_pts  DOUBLE   figure:percent  exposed_transfer_ns in MFU points (percent of the window)
-- @column exposed_memory_pts    DOUBLE   figure:percent  exposed_memory_ns in MFU points (percent of the window)
-- @column no_flops_compute_pts  DOUBLE   figure:flop   no_flops_compute_ns in MFU points (percent of the window)
-- @column below_roof_pts        DOUBLE   figure:percent  below_roof_ns in MFU points (percent of the window)
-- @column path_ns               BIGINT   figure:ns     critical-path time that ran on this rank in the step (ns)
-- @column path_idle_ns          BIGINT   figure:ns     of path_ns: idle (ns)
-- @column path_comm_ns          BIGINT   figure:ns     of path_ns: NCCL kernels and peer waits (ns)
-- @column path_host_ns          BIGINT   figure:ns     of path_ns: host code, syncs and launches (ns)
-- @column path_compute_ns       BIGINT   figure:ns     of path_ns: compute and memory kernels (ns)
-- mfu_waterfall shows first: rank, step, mfu_pct, below_roof_pts, no_flops_compute_pts, idle_pts, straggler_wait_pts, exposed_transfer_pts, exposed_memory_pts
-- scope: job
-- requires: collective_waits, critical_path_summary, mfu, op_work, step_breakdown
-- Helper tables live in schema tf_internal (out of a user's way in `.tables`); names resolve through the search path.
CREATE SCHEMA IF NOT EXISTS tf_internal;
SET search_path = 'main,tf_internal';
CREATE OR REPLACE TABLE mfu_waterfall AS
WITH w AS (
    SELECT s.rank, s.step, s.wall_ns, s.idle_ns, s.exposed_comm_ns, s.exposed_memory_ns, s.compute_ns,
           coalesce(m.flops / (m.peak_tflops * 1e3), 0) AS ideal_raw, m.peak_tflops
    FROM step_breakdown s JOIN mfu m USING (rank, step)
    WHERE s.part = 'step'
), waits AS (
    SELECT rank, step, sum(wait_ns) AS wait_ns FROM collective_waits GROUP BY ALL
), noflops AS (
    SELECT rank, step, sum(gpu_ns) FILTER (WHERE flops IS NULL AND op_class NOT IN ('copy')) AS ns FROM op_work GROUP BY ALL
), path AS (
    SELECT rank, step, sum(total_ns) AS path_ns,
           sum(total_ns) FILTER (WHERE kind = 'idle') AS path_idle_ns,
           sum(total_ns) FILTER (WHERE kind IN ('gpu_comm', 'peer_wait')) AS path_comm_ns,
           sum(total_ns) FILTER (WHERE kind IN ('host_cpu', 'host_sync', 'launch')) AS path_host_ns,
           sum(total_ns) FILTER (WHERE kind IN ('gpu_compute', 'gpu_memory')) AS path_compute_ns
    FROM critical_path_summary GROUP BY ALL
), slices AS (
    SELECT w.rank, w.step, w.wall_ns, w.peak_tflops,
           least(w.ideal_raw, w.compute_ns)::BIGINT AS ideal_ns, w.idle_ns,
           least(coalesce(wt.wait_ns, 0), w.exposed_comm_ns)::BIGINT AS straggler_wait_ns,
           (w.exposed_comm_ns - least(coalesce(wt.wait_ns, 0), w.exposed_comm_ns))::BIGINT AS exposed_transfer_ns,
           w.exposed_memory_ns,
           least(coalesce(n.ns, 0), w.compute_ns - least(w.ideal_raw, w.compute_ns))::BIGINT AS no_flops_compute_ns,
           w.compute_ns
    FROM w LEFT JOIN waits wt USING (rank, step) LEFT JOIN noflops n USING (rank, step)
)
SELECT s.rank, s.step, s.wall_ns,
       CASE WHEN s.peak_tflops IS NOT NULL THEN round(100.0 * s.ideal_ns / s.wall_ns, 2) END AS mfu_pct,
       CASE WHEN s.peak_tflops IS NOT NULL THEN s.ideal_ns END AS ideal_ns,
       s.idle_ns, s.straggler_wait_ns, s.exposed_transfer_ns, s.exposed_memory_ns,
       CASE WHEN s.peak_tflops IS NOT NULL THEN s.no_flops_compute_ns END AS no_flops_compute_ns,
       CASE WHEN s.peak_tflops IS NOT NULL THEN s.compute_ns - s.ideal_ns - s.no_flops_compute_ns END AS below_roof_ns,
       round(100.0 * s.idle_ns / s.wall_ns, 2) AS idle_pts,
       round(100.0 * s.straggler_wait_ns / s.wall_ns, 2) AS straggler_wait_pts,
       round(100.0 * s.exposed_transfer_ns / s.wall_ns, 2) AS exposed_transfer_pts,
       round(100.0 * s.exposed_memory_ns / s.wall_ns, 2) AS exposed_memory_pts,
       CASE WHEN s.peak_tflops IS NOT NULL THEN round(100.0 * s.no_flops_compute_ns / s.wall_ns, 2) END AS no_flops_compute_pts,
       CASE WHEN s.peak_tflops IS NOT NULL THEN round(100.0 * (s.compute_ns - s.ideal_ns - s.no_flops_compute_ns) / s.wall_ns, 2) END
           AS below_roof_pts,
       coalesce(p.path_ns, 0)::BIGINT AS path_ns, coalesce(p.path_idle_ns, 0)::BIGINT AS path_idle_ns,
       coalesce(p.path_comm_ns, 0)::BIGINT AS path_comm_ns, coalesce(p.path_host_ns, 0)::BIGINT AS path_host_ns,
       coalesce(p.path_compute_ns, 0)::BIGINT AS path_compute_ns
FROM slices s LEFT JOIN path p USING (rank, step)
ORDER BY s.rank, s.step;

-- What `.read` of this file shows in the DuckDB shell (on a read-only database, this query alone):
SELECT * FROM mfu_waterfall LIMIT 20;
