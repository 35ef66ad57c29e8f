-- exposed_comm (pack `exposed-comm`): how much NCCL time each rank spent with no compute to hide it.
--
-- Inputs: step_windows, gpu_state (gpu_busy.sql).
--
-- One row per rank and step, inside the step's GPU window. Times in ns.
--   rank, step
--   comm_ns      |comm| : union of communication ops (all streams)
--   compute_ns   |compute| : union of compute kernels
--   overlap_ns   |comm ∩ compute|
--   overlap_pct  100 * overlap_ns / comm_ns (percent, 0..100; NULL without communication)
--   exposed_ns   |comm − compute| = comm_ns − overlap_ns
CREATE OR REPLACE TABLE exposed_comm AS
WITH seg AS (
    SELECT w.rank, w.step, s.has_comm, s.has_compute, s.end_ns - s.start_ns AS d
    FROM step_windows w JOIN gpu_state s
      ON s.rank = w.rank AND s.start_ns >= w.start_ns AND s.end_ns <= w.end_ns
)
SELECT rank, step,
       coalesce(sum(d) FILTER (WHERE has_comm), 0)::BIGINT AS comm_ns,
       coalesce(sum(d) FILTER (WHERE has_compute), 0)::BIGINT AS compute_ns,
       coalesce(sum(d) FILTER (WHERE has_comm AND has_compute), 0)::BIGINT AS overlap_ns,
       round(100.0 * coalesce(sum(d) FILTER (WHERE has_comm AND has_compute), 0)
             / nullif(sum(d) FILTER (WHERE has_comm), 0), 2) AS overlap_pct,
       coalesce(sum(d) FILTER (WHERE has_comm AND NOT has_compute), 0)::BIGINT AS exposed_ns
FROM seg GROUP BY rank, step ORDER BY rank, step;

-- exposed_comm_segments: the stretches themselves (rank, start_ns, end_ns in ns), where a
-- communication op ran with no compute beside it; for the Perfetto trace.
CREATE OR REPLACE TABLE exposed_comm_segments AS
WITH s AS (
    SELECT rank, start_ns, end_ns, state = 'communication' AS exposed,
           lag(end_ns) OVER (PARTITION BY rank ORDER BY start_ns) AS prev_end,
           lag(state = 'communication') OVER (PARTITION BY rank ORDER BY start_ns) AS prev_exposed
    FROM gpu_state
), g AS (
    SELECT *, sum(CASE WHEN exposed AND prev_exposed AND prev_end = start_ns THEN 0 ELSE 1 END)
                  OVER (PARTITION BY rank ORDER BY start_ns ROWS UNBOUNDED PRECEDING) AS grp
    FROM s
)
SELECT rank, min(start_ns) AS start_ns, max(end_ns) AS end_ns FROM g WHERE exposed GROUP BY rank, grp ORDER BY rank, start_ns;
