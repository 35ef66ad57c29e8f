-- @table findings: the verdict's findings as rows, most important first; Python
--     (traceflow/verdict.py) only turns each into a sentence. Other packs may add rows of the same
--     columns (traceflow/verdict.py FINDING_TABLES); the verdict orders them all by (priority, cost_ns).
-- @column priority        INTEGER    key           0 the job stopped (hang forensics) | 1 a fault: a rank or step doing worse than
--     its baseline by 5 % of the median step or more (per step, for a straggler) | 2 the
--     dominant cause of the typical step, then smaller faults | 3 a caveat on the
--     figures (shared GPUs, coverage, what the trace cannot give) | 4 a note (launch-bound kernels, exposed
--     communication, MFU)
-- @column kind            VARCHAR    text          step_outlier | straggler | extra_sync | host_syncs | pageable_copy | dominant | shared_gpu | sharing |
--     partial_capture | coverage | cannot_answer | unrecorded_work | yardstick | bound_withheld | launch_bound_steps |
--     launch_names | exposed_comm | mfu | mfu_empty
-- @column rank            INTEGER    rank          the rank it concerns (NULL: every rank)
-- @column step            INTEGER    key           the step it concerns (NULL: every analysed step)
-- @column class           VARCHAR    text          what kind of time, as in step_causes.class
-- @column cause           VARCHAR    text          the finer cause within the class, as in step_causes.cause
-- @column cost_ns         BIGINT     figure:ns     what it cost over the analysed steps: for a fault its excess over the baseline
--     (step_outlier: in its step; straggler: per step times the steps), for the
--     dominant cause its time on the critical path (ns; NULL for notes)
-- @column value_ns        BIGINT     figure:ns     the figure itself: path time of the cause in the rank and step, the straggler's
--     delay per step, the class's path time per step (ns)
-- @column baseline_ns     BIGINT     figure:ns     what the rest of the job does: the median of the same figure over the other steps
--     (step_outlier) or the other ranks (straggler) (ns)
-- @column share_pct       DOUBLE     figure:percent  value as a percent of the step's critical path (of the median step's for
--     per-step figures); coverage: percent of GPU time inside steps; mfu: the MFU;
--     launch_bound_steps: the most launch-exposed share of a step's GPU window;
--     cannot_answer: the share of those ranks' GPU ops the figure is missing for
-- @column low_pct         DOUBLE     figure:percent  dominant: the class's least share over the analysed steps; mfu: the share of
--     compute time with known FLOPs
-- @column high_pct        DOUBLE     figure:percent  dominant: the class's greatest share over the analysed steps; mfu: the share of
--     op time that is memory-bound
-- @column evidence        VARCHAR    text          the op, call or kernel that shows it; cannot_answer: the figure
-- @column evidence_ns     BIGINT     figure:ns     its time (ns): the host's longest idle gap with its cause (step_outlier),
--     the extra synchronising per step (straggler with cause sync), the GPU compute per
--     step beyond the other ranks' median (cause more compute: an uneven shard, a slower
--     GPU) or how much later than theirs its GPU began the step, its host late too
--     (cause late step start), or its GPU's idle before the collectives it started late, under half its lateness
--     (cause gpu behind: its own earlier GPU work ends late, not its host),
--     the named op's run time per rank and step (dominant compute, communication, memory copies: the op
--     name with the most run time in the class; host: the cause's path time),
--     the part of the idle after the launch calls had returned (launch_names:
--     launch_overhead.exposed_queued_ns), the calls' blocking before the rank's first GPU op, once, left out
--     of the per-step figure (host_syncs: sync.startup_ns, a mean over the ranks)
-- @column activity        VARCHAR    text          what the host was doing in that gap, or the synchronising call
-- @column peers           INTEGER[]  key           the ranks that waited for this rank in its collectives
-- @column peer_wait_ns    BIGINT     figure:ns     their wait in those collectives in total (ns)
-- @column n               BIGINT     figure:count  a count: collectives started last (straggler), ranks sharing one GPU, kernel
--     names, launch-bound steps, ops with known FLOPs (mfu_empty), GPU ops a figure is
--     missing for (cannot_answer; NULL for a figure of the whole rank), launch calls with no GPU op
--     in the trace (unrecorded_work, cause 'launches without GPU ops'; share_pct: of the ranks' launch
--     calls; 0 for cause 'communication kernels only')
-- @column per_step        DOUBLE     figure:count straggler: how many more blocking calls (evidence) it makes per step than the
--     median other rank
-- @column bytes           BIGINT     figure:bytes  dominant memory copies: bytes copied per step on the path
-- @column ranks           INTEGER[]  key           ranks concerned (shared_gpu: the ranks on one GPU; cannot_answer: the ranks giving one
--     reason)
-- @column steps           INTEGER[]  key           steps concerned (launch_bound_steps; dominant with a launch stall: the steps holding one)
-- @column note            VARCHAR    text          a short qualifier: how a shared GPU was identified, the MFU lower bound, why a
--     figure cannot be given (cannot_answer); for a host step_outlier, the blocking
--     calls the rank made in that step beyond its usual count (sync_extra) that returned
--     as its longest host-late gap began (they emptied the GPU's queue),
--     comma-separated
-- @column fix             VARCHAR    text          the change a user makes, worded for the recorded cause and the program's stack
--     (traceflow/claims.py, at ingest); NULL where none fits or its replay gains nothing
--     above noise
-- @column gain_ns         BIGINT     figure:ns     the what-if replay's gain per affected step (ns)
-- @column steps_affected  INTEGER    figure:count  analysed steps where the cause recurs (1 for a one-off)
-- @column recover_ns      BIGINT     figure:ns     gain over the capture, gain per step x steps affected: the fixes' ranking (ns)
-- @column yardstick       BOOLEAN    flag          a bound (compute or copies twice as fast, no stragglers), never advice
-- @column repro_sql       VARCHAR    text          SQL over this database whose first row's column `figure` is the claim's figure
-- @column figure          DOUBLE     figure:mixed  the figure the sentence states, in `unit`
-- @column unit            VARCHAR    text          the figure's unit: ns or %
-- @column baseline        DOUBLE     figure:mixed  what the figure is set against, in its unit
-- @column scenario        VARCHAR    text          the `traceflow whatif` flags that replay the fix
-- @column fix_short       VARCHAR    text          the fix in a few words, for the headline
-- @column claim           INTEGER    key           the row's place in the verdict: fixes by recover_ns first, then the facts
-- findings shows first: claim, kind, rank, step, cause, figure, fix, recover_ns, evidence
-- @table findings_steps: the steps the findings compare, each with its wall time; a warm-up first step is marked.
-- @column step     INTEGER  key           the training step
-- @column wall_ns  BIGINT   figure:ns     the step's window across ranks, last end - first start (ns)
-- @column warmup   BOOLEAN  flag          a warm-up first step: over 1.5 × the median, when there are three steps or more
-- scope: job
-- requires: cannot_answer, collective_waits, gpu_devices, gpu_sharing, partial_capture, gpu_ops, idle_gaps, launch_bound_steps, launch_overhead, launch_overhead_summary, mfu, op_work, step_breakdown, step_coverage, step_causes, step_windows, stragglers, sync, sync_extra, unrecorded_work
-- Helper tables live in schema tf_internal (out of a user's way in `.tables`); names resolve through the search path.
CREATE SCHEMA IF NOT EXISTS tf_internal;
SET search_path = 'main,tf_internal';

-- The steps the findings compare: all but a warm-up first step (one much longer than the median,
-- when there are three steps or more: allocation, autotuning, compilation).
CREATE OR REPLACE TABLE tf_internal.findings_steps AS
WITH w AS (
    SELECT step, max(end_ns) - min(start_ns) AS wall_ns FROM step_windows GROUP BY step
), m AS (
    SELECT median(wall_ns) AS med, count(*) AS n, min(step) AS first FROM w
)
SELECT w.step, w.wall_ns, (m.n >= 3 AND w.step = m.first AND w.wall_ns > 1.5 * m.med) AS warmup
FROM w, m;

CREATE OR REPLACE TABLE findings AS
WITH st AS (
    SELECT step, wall_ns FROM findings_steps WHERE NOT warmup
), ref AS (
    -- the median analysed step, and the smallest excess worth a sentence, at least 1 ms: 5 % of it
    -- in one step (one step's noise: 2-3 % on the bundled jobs), 2 % per step for a median over steps
    SELECT median(wall_ns) AS med, count(*) AS n, greatest(1e6, 0.05 * median(wall_ns)) AS material,
           greatest(1e6, 0.02 * median(wall_ns)) AS material_per_step FROM st
), cells AS (
    -- path time per (step, rank, class, cause) in the analysed steps
    SELECT c.* FROM step_causes c WHERE c.step IN (SELECT step FROM st)
), class_step AS (
    -- every analysed step x every class seen: the class's path time in the step, 0 where absent
    SELECT s.step, k.class, coalesce(sum(c.path_ns), 0) AS ns
    FROM st s CROSS JOIN (SELECT DISTINCT class FROM cells) k
    LEFT JOIN cells c ON c.step = s.step AND c.class = k.class
    GROUP BY s.step, k.class
), cause_step AS (
    -- every analysed step x every (class, cause) seen: its path time in the step, 0 where absent
    SELECT s.step, k.class, k.cause, coalesce(sum(c.path_ns), 0) AS ns
    FROM st s CROSS JOIN (SELECT DISTINCT class, cause FROM cells) k
    LEFT JOIN cells c ON c.step = s.step AND c.class = k.class AND c.cause = k.cause
    GROUP BY s.step, k.class, k.cause
), outlier AS (
    -- a rank's time of one cause on a step's path against the median over the OTHER steps of that
    -- cause's path time (all ranks together); needs two other steps. By cause, not class: a rank's
    -- 40 ms sleep must not hide in the launch time another rank puts on the path in every step.
    SELECT c.step, c.rank, c.class, c.cause, c.top_name, c.path_ns AS value_ns,
           (SELECT median(o.ns) FROM cause_step o WHERE o.class = c.class AND o.cause = c.cause AND o.step <> c.step) AS baseline_ns
    FROM cells c WHERE (SELECT n FROM ref) >= 3 AND c.class NOT IN ('idle')
), outlier_best AS (
    SELECT step, rank, arg_max(class, value_ns - baseline_ns) AS class, arg_max(cause, value_ns - baseline_ns) AS cause,
           -- (arg_max_null: the cause's own name or none; arg_max skips a NULL name and gave a host
           -- stall the name of the rank's NCCL kernel, another cause's row)
           arg_max_null(top_name, value_ns - baseline_ns) AS top_name, arg_max(value_ns, value_ns - baseline_ns) AS value_ns,
           arg_max(baseline_ns, value_ns - baseline_ns) AS baseline_ns, max(value_ns - baseline_ns) AS excess
    FROM outlier GROUP BY step, rank
), outliers AS (
    SELECT * FROM outlier_best WHERE excess >= (SELECT material FROM ref) AND value_ns >= 2 * baseline_ns
), gap AS (
    -- the evidence on the host: the rank's longest host-late idle gap in that step, and what the host did
    SELECT o.step, o.rank, arg_max(g.dur_ns, g.dur_ns) AS gap_ns, arg_max(g.host_activity, g.dur_ns) AS activity,
           arg_max(g.start_ns, g.dur_ns) AS gap_start_ns, arg_max(g.end_ns, g.dur_ns) AS gap_end_ns
    FROM outliers o JOIN idle_gaps g ON g.rank = o.rank AND g.step = o.step AND g.cause = 'host_late'
    GROUP BY o.step, o.rank
), stall_sync AS (
    -- the blocking calls the rank made in that step beyond its usual count (sync_extra) that returned
    -- as that gap began: the call emptied the GPU's queue, which is why the host time after it left
    -- the GPU idle (the stalls' synchronize returns 25-40 us after their GPU's last op ended on the
    -- bundled jobs; h100 nsys ddp4 rank 1 step 1's extra syncs, DDP's bucket rebuild, return 385 ms
    -- and more before its longest gap: they are not why the GPU idled)
    SELECT x.rank, x.step, string_agg(DISTINCT x.name, ', ' ORDER BY x.name) AS names
    FROM sync_extra x JOIN gap g ON g.rank = x.rank AND g.step = x.step
    WHERE x.end_ns >= g.gap_start_ns - 50000 AND x.end_ns < g.gap_end_ns
    GROUP BY x.rank, x.step
), waited AS (
    -- the peers this rank kept waiting in that step's collectives (it started them last)
    -- (collective_waits.blamed_ns: only its communicator's ranks, only after the second-last arrival;
    -- none where its lateness was turns of a shared GPU, none on a partial capture)
    SELECT s.step, s.last_rank AS rank, sum(s.blamed_wait_ns)::BIGINT AS peer_wait_ns,
           (SELECT list(DISTINCT w.rank ORDER BY w.rank) FROM collective_waits w
            WHERE w.step = s.step AND w.last_rank = s.last_rank AND w.rank <> s.last_rank AND w.blamed_ns > 0
              AND NOT w.sharing) AS peers
    FROM stragglers s WHERE (s.step, s.last_rank) IN (SELECT step, rank FROM outliers) AND NOT s.sharing
      AND NOT EXISTS (SELECT 1 FROM partial_capture)
    GROUP BY s.step, s.last_rank
), late AS (
    -- straggling that repeats: per rank and step, how much later it started the collectives it
    -- started last than the next-latest rank (stragglers.last_by_ns), 0 in steps it was never last;
    -- lateness by turns of a shared GPU is not its own (stragglers.sharing: bundled ddp4_sync_stall
    -- rank 1, 62.6 ms late in all, 22.5 ms of it with its host on time, as turns)
    SELECT s.step, r.rank, coalesce(sum(x.last_by_ns), 0) AS delay_ns, count(x.seq) AS times_last,
           coalesce(sum(x.blamed_wait_ns), 0) AS wait_ns
    FROM st s CROSS JOIN (SELECT DISTINCT rank FROM collective_waits) r
    LEFT JOIN stragglers x ON x.step = s.step AND x.last_rank = r.rank AND NOT x.sharing
    GROUP BY s.step, r.rank
), late_rank AS (
    -- the median over steps: a one-off stall in one step does not make a rank a straggler
    SELECT rank, median(delay_ns) AS delay_ns, sum(times_last) AS times_last, sum(wait_ns) AS wait_ns FROM late GROUP BY rank
), late_base AS (
    SELECT a.rank, a.delay_ns, a.times_last, a.wait_ns,
           (SELECT median(b.delay_ns) FROM late_rank b WHERE b.rank <> a.rank) AS baseline_ns
    FROM late_rank a WHERE (SELECT count(*) FROM late_rank) >= 2
), stragglers_found AS (
    SELECT * FROM late_base WHERE delay_ns - baseline_ns >= (SELECT material_per_step FROM ref) AND delay_ns >= 2 * baseline_ns
      AND NOT EXISTS (SELECT 1 FROM partial_capture)  -- the rank they waited for may be one not traced
), strag_steps AS (
    -- each rank's GPU compute and host step start in the analysed steps
    SELECT rank, step, compute_ns, host_start_ns, start_ns FROM step_breakdown
    WHERE part = 'step' AND step IN (SELECT step FROM st) AND host_start_ns IS NOT NULL
), strag_why AS (
    -- why a straggler starts late, when no extra blocking call says it: its GPU computes more than
    -- the other ranks (median per step, then over steps: an uneven shard, a slower GPU), or it began
    -- the step later than theirs, its host and its GPU both (what it did before the step is outside
    -- the step). Both: a host that runs ahead of its GPU by different amounts on each rank starts its
    -- steps at unrelated times (h100 kineto ddp4_straggler rank 1: host 679.7 ms late, GPU 11.6 ms);
    -- the GPU's lateness is the figure
    SELECT f.rank,
           median(c.compute_ns - (SELECT median(o.compute_ns) FROM strag_steps o WHERE o.step = c.step AND o.rank <> c.rank)) AS more_compute_ns,
           median(c.host_start_ns - (SELECT median(o.host_start_ns) FROM strag_steps o WHERE o.step = c.step AND o.rank <> c.rank)) AS late_host_ns,
           median(c.start_ns - (SELECT median(o.start_ns) FROM strag_steps o WHERE o.step = c.step AND o.rank <> c.rank)) AS late_gpu_ns
    FROM stragglers_found f JOIN strag_steps c ON c.rank = f.rank GROUP BY f.rank
), sync_rate AS (
    -- the synchronising call a straggler makes more often than the other ranks, per analysed step
    SELECT rank, name, count(*) / (SELECT n FROM ref) AS per_step, sum(blocked_ns - startup_ns) / (SELECT n FROM ref) AS ns_per_step
    FROM sync WHERE step IN (SELECT step FROM st) GROUP BY rank, name
), sync_all AS (
    -- every rank x every call name, 0 where the rank never made it
    SELECT q.rank, n.name, coalesce(r.per_step, 0) AS per_step, coalesce(r.ns_per_step, 0) AS ns_per_step
    FROM (SELECT DISTINCT rank FROM collective_waits) q CROSS JOIN (SELECT DISTINCT name FROM sync_rate) n
    LEFT JOIN sync_rate r ON r.rank = q.rank AND r.name = n.name
), sync_more AS (
    SELECT f.rank, s.name, any_value(s.per_step) AS per_step, any_value(s.ns_per_step) AS ns_per_step,
           any_value(s.per_step) - median(o.per_step) AS extra, any_value(s.ns_per_step) - median(o.ns_per_step) AS extra_ns
    FROM stragglers_found f JOIN sync_all s ON s.rank = f.rank JOIN sync_all o ON o.name = s.name AND o.rank <> f.rank
    GROUP BY f.rank, s.name
), host_idle AS (
    -- per straggler, its GPU's idle time in the lateness before each collective it started late (the
    -- last_by_ns before its start: its own GPU ops' time there taken out, overlaps counted twice, so
    -- never more idle than there was), per step. A host call makes a rank late only by leaving its
    -- GPU idle; a GPU still running its earlier work is late by that work (nsys mfu_2gpu_before rank 1:
    -- 22 collectives 10.9 ms late per step, its GPU idle 0.045 ms right before them in all; bundled
    -- ddp4_sync_stall rank 1, blocked in loss.item(): its GPU idle most of the lateness)
    SELECT f.rank, sum(greatest(0, x.last_by_ns - coalesce(
               (SELECT sum(least(g.end_ns, x.start_ns) - greatest(g.start_ns, x.start_ns - x.last_by_ns)) FROM gpu_ops g
                WHERE g.rank = f.rank AND g.end_ns > x.start_ns - x.last_by_ns AND g.start_ns < x.start_ns), 0)))
               / (SELECT n FROM ref) AS idle_ns
    FROM stragglers_found f JOIN stragglers x ON x.last_rank = f.rank AND NOT x.sharing AND x.step IN (SELECT step FROM st)
    GROUP BY f.rank
), sync_best AS (
    -- a blocking call the rank makes more often than its peers explains its lateness only where its
    -- GPU idled before the late collectives for most of the lateness and the call's extra time per
    -- step covers that (mfu_2gpu_before rank 1: one more cudaMemcpyAsync, 0.02 ms more, 10.9 ms late)
    SELECT m.rank, arg_max(m.name, m.extra) AS name, max(m.extra) AS extra, arg_max(m.ns_per_step, m.extra) AS ns_per_step
    FROM sync_more m JOIN stragglers_found f USING (rank) LEFT JOIN host_idle h USING (rank)
    WHERE m.extra >= 1 AND m.extra_ns > 0 AND coalesce(h.idle_ns, 0) >= 0.5 * f.delay_ns AND m.extra_ns >= 0.5 * f.delay_ns
    GROUP BY m.rank
), dominant AS (
    SELECT class, sum(ns) AS ns, min(100.0 * ns / s.wall_ns) AS low_pct, max(100.0 * ns / s.wall_ns) AS high_pct
    FROM class_step JOIN st s USING (step) GROUP BY class
), dominant_detail AS (
    SELECT class, arg_max(cause, ns) AS cause, arg_max_null(top_name, ns) AS top_name, max(ns) AS cause_ns, arg_max(bytes, ns) AS bytes
    FROM (SELECT class, cause, sum(path_ns) AS ns, arg_max(top_name, path_ns) AS top_name, sum(bytes) AS bytes
          FROM cells GROUP BY class, cause) GROUP BY class
), dominant_op AS (
    -- per class, the GPU op name with the most run time launched in the analysed steps, per rank and
    -- step: the op the sentence names ("the kernel taking the most time"). The longest single segment
    -- on the path named another (deepseek train.json: FlashAttnBwd, 1.5 ms at most a call, where the
    -- compute kernel with the most time, 32.8 ms a step, is another cutlass kernel)
    SELECT CASE category WHEN 'communication' THEN 'communication' WHEN 'memory' THEN 'memory copies' ELSE 'compute' END AS class,
           arg_max(name, ns) AS name,
           max(ns) / (SELECT n FROM ref) / greatest(1, (SELECT count(DISTINCT rank) FROM gpu_ops)) AS ns
    FROM (SELECT category, name, sum(end_ns - start_ns) AS ns FROM gpu_ops
          WHERE step IN (SELECT step FROM st) AND category IN ('compute', 'communication', 'memory') GROUP BY ALL)
    GROUP BY 1
), shared AS (
    -- ranks on one GPU: the same UUID (nsys), else the same host and device index, else (Kineto
    -- records no host) the same device index of one job: said as possible, not certain
    SELECT coalesce(gpu_uuid, hostname || ':' || device, ':' || device) AS gpu,
           CASE WHEN any_value(gpu_uuid) IS NOT NULL THEN 'the same GPU UUID'
                WHEN any_value(hostname) IS NOT NULL THEN 'the same host and device index'
                ELSE 'the same device index, no host or GPU id recorded' END AS how,
           list(DISTINCT rank ORDER BY rank) AS ranks, any_value(device) AS device
    FROM gpu_devices GROUP BY 1 HAVING count(DISTINCT rank) > 1
), launch_names AS (
    SELECT count(DISTINCT name) AS names, sum(total_exposed_ns) AS exposed, sum(total_gpu_ns) AS gpu,
           sum(total_exposed_queued_ns) AS queued
    FROM launch_overhead_summary WHERE launch_bound
), launch_stall AS (
    -- a one-time launch stall: stalled launch calls (launch_overhead.stall: over 50x the rank's median
    -- launch call, lazy loading of a module / code object inside the first launch of a kernel) holding
    -- over half the analysed steps' launch idle; graphs or fusion remove none of it (hta mi250_minitoy
    -- ROCm 6.2: one hipLaunchKernel of 6,543 us in ProfilerStep#1, the others 3.7-12.7 us, 6.6 ms of
    -- the 7.1 ms launch idle)
    -- Every analysed step holding one is named (steps): only the first analysed step was searched, so a
    -- stall in a later step (a kernel first launched there) went unsaid. Over half of the launch idle
    -- still decides: the nsys graphs fixture's injected launch loop in step 4 holds a 5.4 ms
    -- cudaLaunchKernel beside 9.4 ms of other launch idle, no one-time stall.
    -- The call named is the one whose op ended the most idle, and only stalled calls that ended some
    -- count: rocprof v1's vector add named a 275 ms hipMemcpyWithStream (runtime initialisation, before
    -- the GPU window, no idle) over the 9.4 ms hipLaunchKernel that held all 9.4 ms of idle.
    SELECT arg_max(l.api_name, l.exposed_ns) AS name, arg_max(l.api_ns, l.exposed_ns) AS api_ns, count(*) AS n,
           sum(l.exposed_ns) AS exposed, list(DISTINCT l.step ORDER BY l.step) AS steps
    FROM launch_overhead l
    WHERE l.step IN (SELECT step FROM st) AND l.stall AND l.exposed_ns > 0
    HAVING count(*) > 0
       AND sum(l.exposed_ns) > 0.5 * (SELECT sum(exposed_ns) FROM launch_overhead WHERE step IN (SELECT step FROM st))
), lb AS (
    SELECT list(DISTINCT step ORDER BY step) AS steps, max(launch_exposed_pct) AS pct FROM launch_bound_steps WHERE launch_bound
), xc AS (
    SELECT sum(exposed_comm_ns) AS ns, sum(wall_ns) AS wall FROM step_breakdown WHERE part = 'step'
), cov AS (
    SELECT rank, coverage_pct, before_ns, after_ns FROM step_coverage WHERE coverage_pct < 90 ORDER BY coverage_pct, rank LIMIT 1
), cannot AS (
    -- what the trace cannot give (queries/cannot_answer.sql), the ranks that say the same thing
    -- together: per rank, a figure of the whole rank, or one missing for at least 10 % of its GPU
    -- ops (a few launches cut off at the capture's edges change no figure the verdict states)
    SELECT c.figure, c.reason, list(c.rank ORDER BY c.rank) AS ranks, sum(c.n_ops) AS n,
           round(100.0 * sum(c.n_ops) / nullif(sum(o.n), 0), 1) AS share_pct
    -- (of the ops a call launches: unified-memory page migrations are none)
    FROM cannot_answer c LEFT JOIN (SELECT rank, count(*) AS n FROM gpu_ops WHERE kind <> 'um_migration' GROUP BY rank) o USING (rank)
    WHERE c.n_ops IS NULL OR c.n_ops >= 0.1 * o.n
    GROUP BY c.figure, c.reason
), unlinked AS (
    -- the ranks whose trace leaves GPU work out (unrecorded_work.sql: the rule's one place), a row per reason
    SELECT reason, sum(launches) AS launches, sum(unlinked) AS n, list(rank ORDER BY rank) AS ranks
    FROM tf_internal.unrecorded_work GROUP BY reason
), mfu_step AS (
    -- the median step by time among those with an MFU
    SELECT step, median(mfu_pct) AS mfu_pct, median(known_pct) AS known_pct, median(wall_ns) AS wall
    FROM mfu WHERE mfu_pct IS NOT NULL GROUP BY step
), mfu_mid AS (
    SELECT * FROM mfu_step ORDER BY wall, step LIMIT 1 OFFSET (SELECT count(*) // 2 FROM mfu_step)
), mem AS (
    SELECT 100.0 * sum(w.gpu_ns) FILTER (WHERE w.bound = 'memory') / nullif(sum(w.gpu_ns) FILTER (WHERE w.bound IS NOT NULL), 0) AS pct,
           (SELECT name FROM op_work WHERE step = (SELECT step FROM mfu_mid) AND bound = 'memory'
            GROUP BY name ORDER BY sum(gpu_ns) DESC, name LIMIT 1) AS name
    FROM op_work w WHERE w.step = (SELECT step FROM mfu_mid)
), mfu_missing AS (
    -- MFU counts a model's FLOPs: those of matmuls, attention and convolutions (PyTorch's
    -- FlopCounterMode convention; element-wise work is none). It is a lower bound only where such ops
    -- have unknown FLOPs in that step (tracelens b200 eager: vLLM's attention, 36 ops, 0.49 of 1.27 ms),
    -- not where some compute time lies in other ops (bundled ddp4_sync_stall: every matmul and
    -- attention op known, 33 % of compute time with FLOPs)
    SELECT round(100.0 * sum(gpu_ns) FILTER (WHERE flops IS NULL) / nullif(sum(gpu_ns), 0), 1) AS pct
    FROM op_work WHERE step = (SELECT step FROM mfu_mid) AND op_class IN ('matmul', 'attention', 'conv')
), u AS (
-- every column once (each branch below names only the columns it fills; the final SELECT types them)
SELECT NULL::INTEGER AS priority, NULL::VARCHAR AS kind, NULL::INTEGER AS rank, NULL::INTEGER AS step,
       NULL::VARCHAR AS class, NULL::VARCHAR AS cause, NULL::BIGINT AS cost_ns, NULL::BIGINT AS value_ns,
       NULL::BIGINT AS baseline_ns, NULL::DOUBLE AS share_pct, NULL::DOUBLE AS low_pct, NULL::DOUBLE AS high_pct,
       NULL::VARCHAR AS evidence, NULL::BIGINT AS evidence_ns, NULL::VARCHAR AS activity, NULL::INTEGER[] AS peers,
       NULL::BIGINT AS peer_wait_ns, NULL::BIGINT AS n, NULL::DOUBLE AS per_step, NULL::BIGINT AS bytes,
       NULL::INTEGER[] AS ranks, NULL::INTEGER[] AS steps, NULL::VARCHAR AS note
WHERE false
UNION ALL BY NAME
SELECT 1 AS priority, 'step_outlier' AS kind, o.rank, o.step, o.class, o.cause, o.excess AS cost_ns, o.value_ns,
       o.baseline_ns, round(100.0 * o.value_ns / nullif((SELECT wall_ns FROM st WHERE st.step = o.step), 0), 2) AS share_pct,
       o.top_name AS evidence, g.gap_ns AS evidence_ns, g.activity, w.peers, w.peer_wait_ns, x.names AS note
FROM outliers o LEFT JOIN gap g USING (step, rank) LEFT JOIN waited w USING (step, rank)
LEFT JOIN stall_sync x USING (step, rank)
UNION ALL BY NAME
SELECT CASE WHEN f.delay_ns - f.baseline_ns >= 0.05 * (SELECT med FROM ref) THEN 1 ELSE 2 END AS priority,
       'straggler' AS kind, f.rank,
       CASE WHEN s.name IS NOT NULL THEN 'host' WHEN y.more_compute_ns >= 0.5 * f.delay_ns THEN 'compute'
            WHEN least(y.late_host_ns, y.late_gpu_ns) >= 0.5 * f.delay_ns THEN 'host'
            WHEN h.idle_ns < 0.5 * f.delay_ns THEN 'compute' ELSE 'peer wait' END AS class,
       CASE WHEN s.name IS NOT NULL THEN 'sync' WHEN y.more_compute_ns >= 0.5 * f.delay_ns THEN 'more compute'
            WHEN least(y.late_host_ns, y.late_gpu_ns) >= 0.5 * f.delay_ns THEN 'late step start'
            WHEN h.idle_ns < 0.5 * f.delay_ns THEN 'gpu behind' ELSE 'late start' END AS cause,
       (f.delay_ns - f.baseline_ns) * (SELECT n FROM ref) AS cost_ns, f.delay_ns AS value_ns, f.baseline_ns,
       round(100.0 * f.delay_ns / (SELECT med FROM ref), 2) AS share_pct, s.name AS evidence,
       CASE WHEN s.name IS NOT NULL THEN s.ns_per_step WHEN y.more_compute_ns >= 0.5 * f.delay_ns THEN y.more_compute_ns
            WHEN least(y.late_host_ns, y.late_gpu_ns) >= 0.5 * f.delay_ns THEN y.late_gpu_ns
            WHEN h.idle_ns < 0.5 * f.delay_ns THEN h.idle_ns END AS evidence_ns,
       (SELECT list(DISTINCT rank ORDER BY rank) FROM collective_waits
        WHERE last_rank = f.rank AND rank <> f.rank AND blamed_ns > 0 AND NOT sharing) AS peers,
       f.wait_ns AS peer_wait_ns, f.times_last AS n, round(s.extra, 2) AS per_step
FROM stragglers_found f LEFT JOIN sync_best s USING (rank) LEFT JOIN strag_why y USING (rank) LEFT JOIN host_idle h USING (rank)
UNION ALL BY NAME
SELECT 2 AS priority, 'dominant' AS kind, d.class, CASE WHEN k.n IS NOT NULL THEN 'jit_compile' ELSE x.cause END AS cause,
       d.ns AS cost_ns, d.ns / (SELECT n FROM ref) AS value_ns,
       round(100.0 * d.ns / (SELECT sum(wall_ns) FROM st), 2) AS share_pct, round(d.low_pct, 2) AS low_pct,
       round(d.high_pct, 2) AS high_pct, coalesce(k.name, o.name, x.top_name) AS evidence,
       CASE WHEN k.n IS NOT NULL THEN k.exposed / (SELECT n FROM ref) WHEN o.name IS NOT NULL THEN o.ns ELSE x.cause_ns END AS evidence_ns,
       x.bytes / (SELECT n FROM ref) AS bytes,
       CASE WHEN k.n IS NOT NULL THEN 'launch stall: ' || k.n || ' launch call(s) over 50x the median launch in '
            || len(k.steps) || ' step(s), the one ending the most idle ' || round(k.api_ns / 1e3) || ' us' END AS note,
       k.steps
FROM dominant d JOIN dominant_detail x USING (class)
LEFT JOIN launch_stall k ON d.class = 'host' AND x.cause = 'launch'
LEFT JOIN dominant_op o USING (class)
WHERE d.ns = (SELECT max(ns) FROM dominant)
UNION ALL BY NAME
SELECT 3 AS priority, 'shared_gpu' AS kind, len(ranks) AS n, ranks, how AS note FROM shared
UNION ALL BY NAME
-- once, what time slicing does to every cross-rank figure: the collectives started late by turns
-- (n), their lateness left out of stragglers and peer waits (value_ns), the slice (evidence_ns)
SELECT 3 AS priority, 'sharing' AS kind, g.ranks, g.turn_ns AS evidence_ns,
       (SELECT count(*) FROM stragglers x WHERE x.sharing AND list_contains(g.ranks, x.last_rank)) AS n,
       (SELECT sum(x.last_by_ns) FROM stragglers x WHERE x.sharing AND list_contains(g.ranks, x.last_rank)) AS value_ns,
       'cross-rank lateness of whole turns of the shared GPU is left out of stragglers and peer waits; '
       || g.how AS note
FROM gpu_sharing g WHERE g.time_sliced
UNION ALL BY NAME
SELECT 3 AS priority, 'partial_capture' AS kind, reason AS cause, n, note FROM partial_capture
UNION ALL BY NAME
SELECT 3 AS priority, 'coverage' AS kind, rank, before_ns + after_ns AS value_ns, coverage_pct AS share_pct,
       before_ns AS evidence_ns FROM cov
UNION ALL BY NAME
SELECT 3 AS priority, 'cannot_answer' AS kind, figure AS evidence, reason AS note, ranks, n, share_pct FROM cannot
UNION ALL BY NAME
SELECT 3 AS priority, 'unrecorded_work' AS kind, reason AS cause, n,
       CASE WHEN launches > 0 THEN round(100.0 * n / launches, 1) END AS share_pct, ranks
FROM unlinked
UNION ALL BY NAME
SELECT 4 AS priority, 'launch_bound_steps' AS kind, 'host' AS class, 'launch' AS cause, pct AS share_pct,
       len(steps) AS n, steps FROM lb WHERE len(steps) > 0
UNION ALL BY NAME
SELECT 4 AS priority, 'launch_names' AS kind, 'host' AS class, 'launch' AS cause, exposed AS cost_ns,
       exposed AS value_ns, gpu AS baseline_ns, names AS n, queued AS evidence_ns
FROM launch_names WHERE names > 0 AND exposed > 0.05 * (SELECT med FROM ref)
UNION ALL BY NAME
SELECT 4 AS priority, 'exposed_comm' AS kind, 'communication' AS class, 'NCCL kernels' AS cause, ns AS cost_ns,
       ns AS value_ns, round(100.0 * ns / wall, 2) AS share_pct
FROM xc WHERE wall > 0 AND ns > 0.2 * wall
  AND (SELECT arg_max(class, ns) FROM dominant) IS DISTINCT FROM 'communication'  -- said already
UNION ALL BY NAME
SELECT 4 AS priority, 'mfu' AS kind, m.step, m.mfu_pct AS share_pct, m.known_pct AS low_pct, mem.pct AS high_pct,
       mem.name AS evidence,
       CASE WHEN x.pct > 0 THEN 'lower bound: FLOPs unknown for ' || x.pct || ' % of its matmul, attention and '
                                || 'convolution op time' END AS note
FROM mfu_mid m, mem, mfu_missing x
WHERE coalesce(x.pct, 0) <= 50
UNION ALL BY NAME
-- FLOPs unknown for most of the FLOP-carrying op time: no MFU is claimed (docs/roofline.md "When MFU
-- is not computed": counted over under half that time, the figure leaves out more work than it holds;
-- kineto resnet50_num_workers_4, no Concrete Inputs recorded: "0.0 % MFU", 99.9 % unknown)
SELECT 3 AS priority, 'cannot_answer' AS kind, m.step, 'MFU' AS evidence, x.pct AS share_pct,
       (SELECT list(DISTINCT rank ORDER BY rank) FROM mfu WHERE step = m.step AND mfu_pct IS NOT NULL) AS ranks,
       'FLOPs unknown for ' || x.pct || ' % of step ' || m.step || '''s matmul, attention and convolution op time '
       || '(the trace records no flops for them, nor all their formula needs: shapes, a convolution''s stride and padding): '
       || 'an MFU of the rest would leave out most of the time that carries FLOPs' AS note
FROM mfu_mid m, mfu_missing x
WHERE x.pct > 50
UNION ALL BY NAME
SELECT 4 AS priority, 'mfu_empty' AS kind, (SELECT count(*) FROM op_work WHERE flops IS NOT NULL) AS n
WHERE NOT EXISTS (SELECT 1 FROM mfu_step) AND EXISTS (SELECT 1 FROM mfu)
)
SELECT priority::INTEGER AS priority, kind::VARCHAR AS kind, rank::INTEGER AS rank, step::INTEGER AS step,
       class::VARCHAR AS class, cause::VARCHAR AS cause, round(cost_ns)::BIGINT AS cost_ns,
       round(value_ns)::BIGINT AS value_ns, round(baseline_ns)::BIGINT AS baseline_ns, share_pct::DOUBLE AS share_pct,
       low_pct::DOUBLE AS low_pct, round(high_pct, 2)::DOUBLE AS high_pct, evidence::VARCHAR AS evidence,
       round(evidence_ns)::BIGINT AS evidence_ns, activity::VARCHAR AS activity, peers::INTEGER[] AS peers,
       peer_wait_ns::BIGINT AS peer_wait_ns, n::BIGINT AS n, per_step::DOUBLE AS per_step,
       round(bytes)::BIGINT AS bytes, ranks::INTEGER[] AS ranks, steps::INTEGER[] AS steps, note::VARCHAR AS note,
       -- the claim columns: traceflow/claims.py fills them at ingest, from the what-if replay
       NULL::VARCHAR AS fix, NULL::BIGINT AS gain_ns, NULL::INTEGER AS steps_affected, NULL::BIGINT AS recover_ns,
       false AS yardstick, NULL::VARCHAR AS repro_sql, NULL::DOUBLE AS figure, NULL::VARCHAR AS unit,
       NULL::DOUBLE AS baseline, NULL::VARCHAR AS scenario, NULL::VARCHAR AS fix_short, NULL::INTEGER AS claim
FROM u
ORDER BY priority, cost_ns DESC NULLS LAST, kind, rank, step;

-- What `.read` of this file shows in the DuckDB shell (on a read-only database, this query alone):
SELECT * FROM findings;
