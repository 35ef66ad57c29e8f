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
WITH seg AS (
    SELECT w.rank, w.step, s.state, s.end_ns - s.start_ns AS d
    FROM step_windows w JOIN gpu_state s
      ON s.rank = w.rank AND s.start_ns >= w.start_ns AND s.end_ns <= w.end_ns
), agg AS (
    SELECT rank, step,
           sum(d) FILTER (WHERE state <> 'idle') AS busy_ns,
           sum(d) FILTER (WHERE state = 'idle') AS idle_ns,
           sum(d) FILTER (WHERE state = 'compute') AS compute_ns,
           sum(d) FILTER (WHERE state = 'communication') AS exposed_comm_ns,
           sum(d) FILTER (WHERE state = 'memory') AS exposed_memory_ns
    FROM seg GROUP BY rank, step
)
SELECT w.rank, w.step, w.start_ns, w.end_ns, st.start_ns AS host_start_ns, st.end_ns AS host_end_ns,
       w.end_ns - w.start_ns AS wall_ns,
       coalesce(a.busy_ns, 0)::BIGINT AS busy_ns, coalesce(a.idle_ns, 0)::BIGINT AS idle_ns,
       coalesce(a.compute_ns, 0)::BIGINT AS compute_ns, coalesce(a.exposed_comm_ns, 0)::BIGINT AS exposed_comm_ns,
       coalesce(a.exposed_memory_ns, 0)::BIGINT AS exposed_memory_ns,
       round(100.0 * coalesce(a.idle_ns, 0) / nullif(w.end_ns - w.start_ns, 0), 2) AS idle_pct,
       round(100.0 * coalesce(a.compute_ns, 0) / nullif(w.end_ns - w.start_ns, 0), 2) AS compute_pct,
       round(100.0 * coalesce(a.exposed_comm_ns, 0) / nullif(w.end_ns - w.start_ns, 0), 2) AS exposed_comm_pct,
       round(100.0 * coalesce(a.exposed_memory_ns, 0) / nullif(w.end_ns - w.start_ns, 0), 2) AS exposed_memory_pct
FROM step_windows w LEFT JOIN agg a USING (rank, step) LEFT JOIN steps st USING (rank, step)
ORDER BY w.rank, w.step;
