-- scaling: how a job's step time scales with its rank count, from one row per run (temp.runs).
--
-- Inputs: temp.runs (run_summary.sql per run); getvariable('tf_mode'): 'strong' (the same total work
-- on more ranks) or 'weak' (the same work per rank).
--
-- The run with the fewest ranks is the base (p0, T0); for a run with p ranks, n = p / p0:
--   run, path, ranks, step_ns, compute_ns, exposed_comm_ns, wait_ns, idle_ns  as in run_summary
--   n                 p / p0
--   speedup           strong: T0 / T; weak (scaled speedup): n × T0 / T
--   efficiency_pct    speedup / n, in percent (parallel efficiency; for weak scaling T0 / T)
--   per_gpu_rel       throughput per GPU relative to the base run: strong T0 / (n × T), weak T0 / T
--   karp_flatt        the serial fraction the speedup implies (Karp–Flatt): (1/speedup − 1/n) / (1 − 1/n);
--                     NULL for the base run
--   exposed_comm_pct, wait_pct  exposed communication and waits for peers in percent of the step
CREATE OR REPLACE TEMP TABLE scaling AS
WITH b AS (SELECT ranks AS p0, step_ns AS t0 FROM temp.runs ORDER BY ranks, run LIMIT 1),
r AS (
    SELECT r.*, r.ranks / b.p0 AS n,
           CASE getvariable('tf_mode') WHEN 'weak' THEN (r.ranks / b.p0) * b.t0 / r.step_ns ELSE b.t0 / r.step_ns END AS speedup
    FROM temp.runs r, b
)
SELECT run, path, ranks, step_ns, compute_ns, exposed_comm_ns, wait_ns, idle_ns, round(n, 3) AS n,
       round(speedup, 4) AS speedup, round(100 * speedup / n, 1) AS efficiency_pct, round(speedup / n, 4) AS per_gpu_rel,
       CASE WHEN n > 1 THEN round((1 / speedup - 1 / n) / (1 - 1 / n), 4) END AS karp_flatt,
       round(100.0 * exposed_comm_ns / step_ns, 1) AS exposed_comm_pct, round(100.0 * wait_ns / step_ns, 1) AS wait_pct
FROM r ORDER BY ranks, run;
