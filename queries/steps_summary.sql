-- step_breakdown (pack `steps`): where each rank's GPU time went in each step.
--
-- Inputs: step_windows, gpu_state (gpu_busy.sql), steps.
--
-- One row per rank and step. All durations in ns; *_pct in percent of wall_ns.
--   rank, step
--   start_ns, end_ns     the GPU window (ns since epoch): first op start .. last op end of the ops
--                        launched inside the step's host range
--   host_start_ns, host_end_ns  the step's host range (ns since epoch)
--   wall_ns              end_ns - start_ns
--   busy_ns              union of the rank's GPU ops (all streams) inside the window
--   idle_ns              wall_ns - busy_ns
--   compute_ns           union of compute kernels
--   exposed_comm_ns      communication not overlapped by compute
--   exposed_memory_ns    memcpy/memset not overlapped by compute or communication
--   Invariant: compute_ns + exposed_comm_ns + exposed_memory_ns + idle_ns = wall_ns.
CREATE OR REPLACE TABLE step_breakdown AS
WITH c AS (
    SELECT rank, end_ns, cum_compute, cum_exposed_comm, cum_exposed_memory, cum_idle FROM gpu_state
), agg AS (
    -- window edges are segment boundaries: totals = running total at the end - at the start
    SELECT w.rank, w.step,
           e.cum_compute - coalesce(b.cum_compute, 0) AS compute_ns,
           e.cum_exposed_comm - coalesce(b.cum_exposed_comm, 0) AS exposed_comm_ns,
           e.cum_exposed_memory - coalesce(b.cum_exposed_memory, 0) AS exposed_memory_ns,
           e.cum_idle - coalesce(b.cum_idle, 0) AS idle_ns
    FROM step_windows w JOIN c e ON e.rank = w.rank AND e.end_ns = w.end_ns
    LEFT JOIN c b ON b.rank = w.rank AND b.end_ns = w.start_ns
)
SELECT w.rank, w.step, w.start_ns, w.end_ns, st.start_ns AS host_start_ns, st.end_ns AS host_end_ns,
       w.end_ns - w.start_ns AS wall_ns,
       (a.compute_ns + a.exposed_comm_ns + a.exposed_memory_ns)::BIGINT AS busy_ns, a.idle_ns::BIGINT AS idle_ns,
       a.compute_ns::BIGINT AS compute_ns, a.exposed_comm_ns::BIGINT AS exposed_comm_ns,
       a.exposed_memory_ns::BIGINT AS exposed_memory_ns,
       round(100.0 * a.idle_ns / nullif(w.end_ns - w.start_ns, 0), 2) AS idle_pct,
       round(100.0 * a.compute_ns / nullif(w.end_ns - w.start_ns, 0), 2) AS compute_pct,
       round(100.0 * a.exposed_comm_ns / nullif(w.end_ns - w.start_ns, 0), 2) AS exposed_comm_pct,
       round(100.0 * a.exposed_memory_ns / nullif(w.end_ns - w.start_ns, 0), 2) AS exposed_memory_pct
FROM step_windows w JOIN agg a USING (rank, step) LEFT JOIN steps st USING (rank, step)
ORDER BY w.rank, w.step;
