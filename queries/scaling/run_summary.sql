-- scaling run_summary: one run's figures per step, as the scaling comparison needs them. Run with
-- the run's database as the default catalog (USE); appends one row to temp.runs.
--
-- getvariable('tf_run') (the run's position) and getvariable('tf_path').
--
--   run, path, ranks, steps
--   step_ns            median over steps of the step's window across ranks (ns)
--   compute_ns, exposed_comm_ns, idle_ns  medians over steps of the mean over ranks (ns)
--   wait_ns            median over steps of the mean per rank of time spent waiting in collectives for peers (ns)
--   kernels_per_step   median over (rank, step) of the compute kernels (not NCCL) a rank runs in a step: the
--                      model's structure (layers, ops) shows in it whatever the rank count of a data-parallel job
--   flops_per_rank     median over steps of the FLOPs per rank and step, where FLOPs are known for 90 % of the
--                      compute time (mfu.known_pct) on every rank, else NULL
-- And into temp.mix: the run's kernel mix, the share of its compute kernel time by kernel (its name up to the
-- first '<' or '(': Kineto and nsys spell template arguments differently).
-- scope: job
-- requires: collective_waits, gpu_ops, mfu, step_breakdown, step_windows, traces
INSERT INTO temp.mix
WITH k AS (
    SELECT regexp_replace(regexp_replace(name, '^void ', ''), '[<(].*$', '') AS kernel, sum(end_ns - start_ns) AS ns
    FROM gpu_ops WHERE kind = 'kernel' AND collective IS NULL AND end_ns > start_ns GROUP BY kernel
)
SELECT getvariable('tf_run'), kernel, ns / sum(ns) OVER () FROM k;

INSERT INTO temp.runs
WITH w AS (
    SELECT step, max(end_ns) - min(start_ns) AS ns FROM tf_internal.step_windows GROUP BY step
), s AS (
    SELECT step, avg(compute_ns) AS compute_ns, avg(exposed_comm_ns) AS exposed_comm_ns, avg(idle_ns) AS idle_ns
    FROM step_breakdown WHERE part = 'step' GROUP BY step
), c AS (
    SELECT step, sum(wait_ns) / (SELECT count(DISTINCT rank) FROM traces) AS wait_ns FROM collective_waits GROUP BY step
), k AS (
    SELECT median(n) AS n FROM (SELECT rank, step, count(*) AS n FROM gpu_ops
                                WHERE kind = 'kernel' AND collective IS NULL AND step IS NOT NULL GROUP BY rank, step)
), f AS (
    SELECT CASE WHEN min(known_pct) >= 90 THEN median(flops) END AS flops FROM mfu
)
SELECT getvariable('tf_run'), getvariable('tf_path'), (SELECT count(DISTINCT rank) FROM traces), count(*),
       median(w.ns)::BIGINT, median(s.compute_ns)::BIGINT, median(s.exposed_comm_ns)::BIGINT, median(s.idle_ns)::BIGINT,
       coalesce(median(c.wait_ns), 0)::BIGINT, (SELECT n FROM k), (SELECT flops FROM f)
FROM w JOIN s USING (step) LEFT JOIN c USING (step);
