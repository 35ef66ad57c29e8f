-- @table scaling: how a job's step time scales with its rank count, from one row per run (temp.runs).
--
--
-- The run with the fewest ranks is the base (p0, T0); for a run with p ranks, n = p / p0:
-- @column run               INTEGER  key           as in run_summary
-- @column path              VARCHAR  text          as in run_summary
-- @column ranks             INTEGER  figure:count  as in run_summary
-- @column step_ns           BIGINT   figure:ns     as in run_summary
-- @column compute_ns        BIGINT   figure:ns     as in run_summary
-- @column exposed_comm_ns   BIGINT   figure:ns     as in run_summary
-- @column wait_ns           BIGINT   figure:ns     as in run_summary
-- @column idle_ns           BIGINT   figure:ns     as in run_summary
-- @column n                 DOUBLE   figure:count  p / p0
-- @column speedup           DOUBLE   figure:ratio  strong: T0 / T; weak (scaled speedup): n × T0 / T
-- @column efficiency_pct    DOUBLE   figure:percent  speedup / n, in percent (parallel efficiency; for weak scaling T0 / T)
-- @column per_gpu_rel       DOUBLE   figure:ratio  throughput per GPU relative to the base run: strong T0 / (n × T), weak T0 / T
-- @column karp_flatt        DOUBLE   figure:ratio  the serial fraction the speedup implies (Karp–Flatt): (1/speedup − 1/n) / (1 − 1/n);
--     NULL for the base run. A serial fraction only in [0, 1], i.e. for 1 <= speedup <= n and
--     one workload: above 1 the step got slower with more ranks, below 0 the speedup is superlinear
-- @column karp_flatt_valid  BOOLEAN  flag          karp_flatt lies in [0, 1] (a serial fraction); NULL for the base run
-- @column exposed_comm_pct  DOUBLE   figure:percent  exposed communication and waits for peers in percent of the step
-- @column wait_pct          DOUBLE   figure:percent  exposed communication and waits for peers in percent of the step
-- @column kernels_rel       DOUBLE   figure:ratio  kernels_per_step / the base run's: 1 for one model on more ranks (data parallel)
-- @column mix_overlap_pct   DOUBLE   figure:percent  how much of the run's compute kernel time is in kernels in the same proportion as in the
--     base run (sum over kernels of the smaller of the two shares), in percent: 100 for one model
-- @column flops_rel         DOUBLE   figure:flop   FLOPs per step (strong: of all ranks together; weak: per rank) / the base run's; NULL
--     where FLOPs are not known for 90 % of the compute time
-- @column same_model        BOOLEAN  flag          FALSE where the runs look like different models: kernels_rel outside [0.8, 1.25],
--     mix_overlap_pct under 60, or flops_rel outside [0.8, 1.25]
-- scope: job
-- requires: runs
CREATE OR REPLACE TEMP TABLE scaling AS
WITH b AS (SELECT run AS run0, ranks AS p0, step_ns AS t0, kernels_per_step AS k0, flops_per_rank AS f0
           FROM temp.runs ORDER BY ranks, run LIMIT 1),
mix AS (
    SELECT m.run, round(100 * sum(least(m.share, coalesce(o.share, 0))), 1) AS overlap
    FROM temp.mix m LEFT JOIN temp.mix o ON o.run = (SELECT run0 FROM b) AND o.kernel = m.kernel GROUP BY m.run
),
r AS (
    SELECT r.*, r.ranks / b.p0 AS n,
           CASE getvariable('tf_mode') WHEN 'weak' THEN (r.ranks / b.p0) * b.t0 / r.step_ns ELSE b.t0 / r.step_ns END AS speedup
    FROM temp.runs r, b
), f AS (
    SELECT r.*, CASE WHEN r.n > 1 THEN (1 / r.speedup - 1 / r.n) / (1 - 1 / r.n) END AS kf,
           round(r.kernels_per_step / nullif(b.k0, 0), 3) AS kernels_rel, mix.overlap AS mix_overlap_pct,
           round(CASE getvariable('tf_mode') WHEN 'weak' THEN r.flops_per_rank / b.f0
                 ELSE r.flops_per_rank * r.ranks / (b.f0 * b.p0) END, 3) AS flops_rel
    FROM r CROSS JOIN b LEFT JOIN mix ON mix.run = r.run
)
SELECT run, path, ranks, step_ns, compute_ns, exposed_comm_ns, wait_ns, idle_ns, round(n, 3) AS n,
       round(speedup, 4) AS speedup, round(100 * speedup / n, 1) AS efficiency_pct, round(speedup / n, 4) AS per_gpu_rel,
       round(kf, 4) AS karp_flatt, kf BETWEEN 0 AND 1 AS karp_flatt_valid,
       round(100.0 * exposed_comm_ns / step_ns, 1) AS exposed_comm_pct, round(100.0 * wait_ns / step_ns, 1) AS wait_pct,
       kernels_rel, mix_overlap_pct, flops_rel,
       coalesce(kernels_rel BETWEEN 0.8 AND 1.25, TRUE) AND coalesce(mix_overlap_pct >= 60, TRUE)
           AND coalesce(flops_rel BETWEEN 0.8 AND 1.25, TRUE) AS same_model
FROM f ORDER BY ranks, run;
