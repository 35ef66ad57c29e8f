-- scaling run_summary: one run's figures per step, as the scaling comparison needs them. Run with
-- the run's database as the default catalog (USE); appends one row to temp.runs.
--
-- Inputs: traces, step_breakdown, collective_waits, tf_internal.step_windows; getvariable('tf_run')
-- (the run's position) and getvariable('tf_path').
--
--   run, path, ranks, steps
--   step_ns            median over steps of the step's window across ranks (ns)
--   compute_ns, exposed_comm_ns, idle_ns  medians over steps of the mean over ranks (ns)
--   wait_ns            median over steps of the mean per rank of time spent waiting in collectives for peers (ns)
INSERT INTO temp.runs
WITH w AS (
    SELECT step, max(end_ns) - min(start_ns) AS ns FROM tf_internal.step_windows GROUP BY step
), s AS (
    SELECT step, avg(compute_ns) AS compute_ns, avg(exposed_comm_ns) AS exposed_comm_ns, avg(idle_ns) AS idle_ns
    FROM step_breakdown WHERE part = 'step' GROUP BY step
), c AS (
    SELECT step, sum(wait_ns) / (SELECT count(DISTINCT rank) FROM traces) AS wait_ns FROM collective_waits GROUP BY step
)
SELECT getvariable('tf_run'), getvariable('tf_path'), (SELECT count(DISTINCT rank) FROM traces), count(*),
       median(w.ns)::BIGINT, median(s.compute_ns)::BIGINT, median(s.exposed_comm_ns)::BIGINT, median(s.idle_ns)::BIGINT,
       coalesce(median(c.wait_ns), 0)::BIGINT
FROM w JOIN s USING (step) LEFT JOIN c USING (step);
