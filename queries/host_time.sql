-- @table host_time: every nanosecond of a rank's host timeline inside each step, given
--     exactly one cause (docs/host-time.md).
--
-- Parameters: tf_data_pattern — a CPU op or host range whose name matches is data loading
--   [(?i)dataloader|data[_ ]?load|load[_ ]?(batch|data)|next[_ ]?batch|get[_ ]?batch].
--
-- The rank's host timeline is its launching threads (those that launched GPU work) and the thread
-- holding its steps, taken together; where no launching thread holds a CPU op (XLA: the framework's
-- events on other thread ids than the runtime calls), every thread of the rank holding CPU ops too.
-- At each instant the cause is the first of these that any of those threads is inside:
--   jit_compile  compiling or loading GPU code: cuModuleLoad* / cuLibraryLoad* / cudaLibraryLoad* /
--                hipModuleLoad* calls (lazy module loading: on nvFuser's capture 15 cuLibraryLoadData
--                calls, 18.1 ms, inside its first cudaLaunchKernel calls), nvrtc* / hiprtc* / nvJitLink*
--                calls, and a CPU op or host range named for NVRTC / hiprtc / nvJitLink (nvFuser's
--                `executor_utils::NVRTC`, 352.1 ms that were no_op before). One-time: warm up or cache.
--   launch       a CUDA call that enqueued GPU work (cudaLaunchKernel, cuLaunchKernelEx,
--                cudaMemcpyAsync to pinned memory, cudaMemsetAsync, cudaEventRecord, ...)
--   sync         a blocking call of the sync pack (stream / device / event synchronize, synchronous
--                memcpy, memcpy staged through pageable memory)
--   allocator    cudaMalloc / cudaFree / cudaHostAlloc / cuMemCreate / hipFree ... (the caching
--                allocator going to the driver)
--   cuda_other   any other CUDA runtime or driver call (cudaEventQuery, cudaGetFuncBySymbol, ...)
--   data_loading a CPU op or host range whose name matches tf_data_pattern
--   cpu_op       inside a CPU op (framework / Python work the profiler recorded as an op)
--   no_op        in no recorded op at all: Python between ops, sleep, waiting for the GIL, I/O.
--                On an nsys capture without emit_nvtx there are no CPU ops: framework work is here too.
-- Launch queueing (a launched op waiting in its stream) is GPU-side time, not host time.
--
-- One row per rank, step and cause (every cause, 0 when absent):
-- @column rank         INTEGER  rank          the rank (process index in the job) the row belongs to
-- @column step         INTEGER  key           the training step (ProfilerStep#N, or the --step-pattern's number); NULL outside every
--     step
-- @column cause        VARCHAR  text          one of the eight causes above
-- @column ns           BIGINT   figure:ns     host time of that cause inside the step's host range (ns); a step's eight rows add up to step_ns exactly. NULL where the rank's CPU ops and CUDA calls are on two clocks with no consistent offset (traces.cpu_clock_consistent FALSE)
-- @column gpu_idle_ns  BIGINT   figure:ns     the part of ns during which the rank's GPU ran nothing: host time the GPU
--     waited through (ns)
-- @column step_ns      BIGINT   figure:ns     the step's host range, end - start (ns)
-- @column share        DOUBLE   figure:fraction  ns / step_ns
-- @column range_name   VARCHAR  text          no_op only: the named host range (NVTX / record_function, not the step's own) that
--     holds most (over half) of the row's time, innermost first; NULL where none does.
--     The time is the range's (nvFuser's `KernelExecutor::compileFusion`), not "no traced op"
--
-- @table host_time_spans: the timeline itself, one row per stretch of one cause.
-- @column rank        INTEGER  rank          the rank (process index in the job) the row belongs to
-- @column step        INTEGER  key           the training step (ProfilerStep#N, or the --step-pattern's number); NULL outside every
--     step
-- @column start_ns    BIGINT   time          start, ns since the Unix epoch (after clock alignment)
-- @column end_ns      BIGINT   time          end, ns since the Unix epoch (after clock alignment)
-- @column cause       VARCHAR  text          one of the eight causes above
-- @column gpu_busy    BOOLEAN  flag          the rank's GPU ran something all along the stretch
-- @column range_name  VARCHAR  text          no_op stretches: the innermost named host range around the stretch's start, else NULL
-- host_time sorts by: rank, step, list_position(['jit_compile', 'launch', 'sync', 'allocator', 'cuda_other', 'data_loading',
--     'cpu_op', 'no_op'], cause)
-- (the order the table is stored in, below: on a cluster it is a view over the shards, in no set order)
-- scope: rank
-- (each rank's rows from its own ops, ranges, steps and GPU islands: differences and comparisons of one
-- rank's times, unchanged when clock alignment moves them all; at 256 ranks on a cluster's client it
-- was +437 to +577 MiB of RSS and at 4,096 out of DuckDB's memory, docs/scale-out.md)
-- requires: gpu_islands, gpu_ops, host_ops, ranges, steps, sync, traces
-- Helper tables live in schema tf_internal (out of a user's way in `.tables`); names resolve through the search path.
CREATE SCHEMA IF NOT EXISTS tf_internal;
SET search_path = 'main,tf_internal';
SET asof_loop_join_threshold = 0;

CREATE OR REPLACE TABLE tf_internal.host_time_spans AS
WITH pat AS (
    SELECT coalesce(getvariable('tf_data_pattern'),
                    '(?i)dataloader|data[_ ]?load|load[_ ]?(batch|data)|next[_ ]?batch|get[_ ]?batch') AS p
), data_names AS (
    -- the pattern matched once per distinct name: a pattern read from a row (pat.p) is compiled
    -- again for every row it meets, 10 s of host_time's 10 s on long4's Kineto traces (229 k CPU ops)
    SELECT n.name FROM (SELECT DISTINCT name FROM host_ops WHERE kind = 'cpu_op'
                        UNION SELECT name FROM ranges WHERE NOT on_gpu) n, pat
    WHERE regexp_matches(n.name, pat.p)
), jit_names AS (  -- host ranges and CPU ops that compile GPU code at run time
    SELECT n.name FROM (SELECT DISTINCT name FROM host_ops WHERE kind = 'cpu_op'
                        UNION SELECT name FROM ranges WHERE NOT on_gpu) n
    WHERE regexp_matches(n.name, '(?i)nvrtc|hiprtc|nvjitlink')
), threads AS (
    SELECT rank, launch_tid AS tid FROM gpu_ops WHERE launch_tid IS NOT NULL
    UNION  -- and the thread that holds the steps (a rank without GPU work has no launching thread)
    SELECT r.rank, r.tid FROM ranges r JOIN steps s ON r.rank = s.rank AND r.start_ns = s.start_ns AND r.end_ns = s.end_ns
    WHERE NOT r.on_gpu
    UNION
    SELECT h.rank, h.tid FROM host_ops h JOIN steps s ON h.rank = s.rank AND h.start_ns = s.start_ns AND h.end_ns = s.end_ns
    WHERE h.kind = 'cpu_op'
    UNION
    -- a rank whose launching threads hold no CPU op records its framework's host events under other
    -- thread ids than its runtime calls (XLA: TraceMe threads `python`, `py_xla_execute/...` beside
    -- CUPTI's `Host Threads/583`): every thread holding CPU ops is its host then. Without this, on
    -- the wild jax_conv_minimal_08 trace 158.4 of the 158.6 ms called "no traced op" lay inside
    -- the python thread's block_until_ready and PjitFunction events
    SELECT h.rank, h.tid FROM host_ops h
    WHERE h.kind = 'cpu_op' AND h.rank NOT IN (
        SELECT DISTINCT o.rank FROM host_ops o SEMI JOIN gpu_ops g ON g.rank = o.rank AND g.launch_tid = o.tid
        WHERE o.kind = 'cpu_op')
      AND h.rank IN (SELECT rank FROM gpu_ops WHERE launch_tid IS NOT NULL)
), launched AS (
    SELECT DISTINCT launch_op_id AS op_id FROM gpu_ops WHERE launch_op_id IS NOT NULL
), calls AS (
    SELECT h.rank, h.start_ns, h.end_ns,
           CASE WHEN regexp_matches(h.name, '(?i)^(cuModuleLoad|cuLibraryLoad|cudaLibraryLoad|hipModuleLoad|hipLibraryLoad|nvrtc|hiprtc|nvJitLink)')
                     THEN 0
                WHEN regexp_matches(h.name, '(?i)^(cuda|hip)(Malloc|Free|HostAlloc|HostRegister|HostUnregister|MallocHost|FreeHost|MallocAsync|FreeAsync|MallocManaged|MallocPitch|Malloc3D)|^cuMem(Alloc|Free|HostAlloc|HostRegister|HostUnregister|Create|Release|Map|Unmap|AddressReserve|AddressFree|SetAccess)|^hipMem(Alloc|Free|Create|Release|Map|Unmap)|^hipExtMalloc')
                     THEN 3
                WHEN h.op_id IN (SELECT op_id FROM sync) THEN 2
                WHEN h.op_id IN (SELECT op_id FROM launched)
                     OR regexp_matches(h.name, '(?i)^(cu|cuda|hip)(LaunchKernel|LaunchCooperativeKernel|ModuleLaunchKernel|ExtLaunchKernel|GraphLaunch|Memcpy.*Async|Memset.*Async|EventRecord|StreamWaitEvent)')
                     THEN 1
                ELSE 4 END AS cause
    FROM host_ops h SEMI JOIN threads t ON h.rank = t.rank AND h.tid = t.tid
    WHERE h.kind IN ('cuda_runtime', 'cuda_driver') AND h.end_ns > h.start_ns
), cpu AS (
    SELECT h.rank, h.start_ns, h.end_ns,
           CASE WHEN h.name IN (SELECT name FROM jit_names) THEN 0 WHEN h.name IN (SELECT name FROM data_names) THEN 5 ELSE 6 END AS cause
    FROM host_ops h SEMI JOIN threads t ON h.rank = t.rank AND h.tid = t.tid
    WHERE h.kind = 'cpu_op' AND h.end_ns > h.start_ns
      -- PjRt's thread-pool regions and buffer-ready callbacks wrap a wait for the device, not
      -- framework work (what runs inside them is traced as ops of its own): on the wild
      -- jax08_attention trace one BufferSequencingEvent::Execute of 20.6 ms, on a tf_pjrt_thread_pool
      -- thread, was 20.6 of the 27.4 ms called "framework CPU work inside ops", while the python
      -- thread that issues the work held no event
      AND NOT regexp_matches(h.name, '^(ThreadpoolListener::|BufferSequencingEvent::Execute$|ThenExecuteCallback$)')
    UNION ALL
    SELECT r.rank, r.start_ns, r.end_ns, CASE WHEN r.name IN (SELECT name FROM jit_names) THEN 0 ELSE 5 END
    FROM ranges r SEMI JOIN threads t ON r.rank = t.rank AND r.tid = t.tid
    WHERE NOT r.on_gpu AND r.end_ns > r.start_ns AND (r.name IN (SELECT name FROM data_names) OR r.name IN (SELECT name FROM jit_names))
), iv AS (
    SELECT * FROM calls UNION ALL SELECT * FROM cpu
), named_ranges AS (  -- the rank's named host ranges on its threads, other than its steps' own
    SELECT r.rank, r.name, r.start_ns, r.end_ns
    FROM ranges r SEMI JOIN threads t ON r.rank = t.rank AND r.tid = t.tid
    WHERE NOT r.on_gpu AND r.end_ns > r.start_ns AND r.name IS NOT NULL AND r.name <> ''
      AND NOT EXISTS (SELECT 1 FROM steps s WHERE s.rank = r.rank AND s.start_ns = r.start_ns AND s.end_ns = r.end_ns)
), ev AS (
    -- an interval of cause k (0..6) opens and closes a count of its own: 16 bits each of one HUGEINT,
    -- so that one running sum counts all eight (7, the GPU busy; a step edge adds 0 and only splits).
    -- Seven running sums were 12 s of 14 on long4's nsys capture (1 M edges); one is 10x faster.
    SELECT rank, start_ns AS t, 1::HUGEINT << (16 * cause) AS d FROM iv
    UNION ALL SELECT rank, end_ns, -(1::HUGEINT << (16 * cause)) FROM iv
    UNION ALL SELECT rank, start_ns, 1::HUGEINT << 112 FROM gpu_islands
    UNION ALL SELECT rank, end_ns, -(1::HUGEINT << 112) FROM gpu_islands
    UNION ALL SELECT rank, start_ns, 0::HUGEINT FROM steps
    UNION ALL SELECT rank, end_ns, 0::HUGEINT FROM steps
    -- (a named range's edges split stretches too, so a no_op stretch lies in one set of ranges)
    UNION ALL SELECT rank, start_ns, 0::HUGEINT FROM named_ranges
    UNION ALL SELECT rank, end_ns, 0::HUGEINT FROM named_ranges
), edges AS (
    SELECT rank, t, sum(d) AS d FROM ev GROUP BY rank, t
), run AS (
    SELECT rank, t AS start_ns, lead(t) OVER w AS end_ns, sum(d) OVER w AS n
    FROM edges WINDOW w AS (PARTITION BY rank ORDER BY t ROWS UNBOUNDED PRECEDING)
), seg AS (
    SELECT rank, start_ns, end_ns,
           CASE WHEN n & 65535 > 0 THEN 'jit_compile' WHEN (n >> 16) & 65535 > 0 THEN 'launch' WHEN (n >> 32) & 65535 > 0 THEN 'sync'
                WHEN (n >> 48) & 65535 > 0 THEN 'allocator' WHEN (n >> 64) & 65535 > 0 THEN 'cuda_other'
                WHEN (n >> 80) & 65535 > 0 THEN 'data_loading' WHEN (n >> 96) & 65535 > 0 THEN 'cpu_op'
                ELSE 'no_op' END AS cause,
           (n >> 112) & 65535 > 0 AS gpu_busy
    FROM run WHERE end_ns > start_ns
), stepped AS (
    SELECT g.rank, s.step, g.start_ns, g.end_ns, g.cause, g.gpu_busy
    FROM seg g ASOF JOIN steps s ON g.rank = s.rank AND g.start_ns >= s.start_ns
    WHERE g.start_ns < s.end_ns
), inside AS (  -- a no_op stretch's innermost range (the shortest one holding its start)
    SELECT g.rank, g.start_ns, arg_min(r.name, r.end_ns - r.start_ns) AS range_name
    FROM stepped g JOIN named_ranges r ON r.rank = g.rank AND r.start_ns <= g.start_ns AND r.end_ns > g.start_ns
    WHERE g.cause = 'no_op'
    GROUP BY g.rank, g.start_ns
)
SELECT g.rank, g.step, g.start_ns, g.end_ns, g.cause, g.gpu_busy, i.range_name
FROM stepped g LEFT JOIN inside i USING (rank, start_ns)
ORDER BY g.rank, g.start_ns;

CREATE OR REPLACE TABLE host_time AS
WITH causes AS (
    SELECT unnest(['jit_compile', 'launch', 'sync', 'allocator', 'cuda_other', 'data_loading', 'cpu_op', 'no_op']) AS cause
), grid AS (
    SELECT s.rank, s.step, c.cause, s.end_ns - s.start_ns AS step_ns FROM steps s, causes c
), agg AS (
    SELECT rank, step, cause, sum(end_ns - start_ns) AS ns,
           sum(end_ns - start_ns) FILTER (WHERE NOT gpu_busy) AS idle_ns
    FROM host_time_spans GROUP BY ALL
), by_range AS (  -- the range holding most of a step's no_op time, where it holds over half
    SELECT rank, step, arg_max(range_name, ns) AS range_name, max(ns) AS ns
    FROM (SELECT rank, step, range_name, sum(end_ns - start_ns) AS ns FROM host_time_spans
          WHERE cause = 'no_op' AND range_name IS NOT NULL GROUP BY ALL)
    GROUP BY rank, step
), bad AS (
    SELECT DISTINCT rank FROM traces WHERE cpu_clock_consistent IS FALSE
)
SELECT g.rank, g.step, g.cause,
       CASE WHEN g.rank IN (SELECT rank FROM bad) THEN NULL ELSE coalesce(a.ns, 0) END::BIGINT AS ns,
       CASE WHEN g.rank IN (SELECT rank FROM bad) THEN NULL ELSE coalesce(a.idle_ns, 0) END::BIGINT AS gpu_idle_ns,
       g.step_ns::BIGINT AS step_ns,
       CASE WHEN g.rank IN (SELECT rank FROM bad) OR g.step_ns <= 0 THEN NULL ELSE coalesce(a.ns, 0) / g.step_ns END AS share,
       CASE WHEN g.cause = 'no_op' AND 2 * b.ns > a.ns THEN b.range_name END AS range_name
FROM grid g LEFT JOIN agg a USING (rank, step, cause) LEFT JOIN by_range b USING (rank, step)
ORDER BY g.rank, g.step, list_position(['jit_compile', 'launch', 'sync', 'allocator', 'cuda_other', 'data_loading', 'cpu_op', 'no_op'], g.cause);

-- What `.read` of this file shows in the DuckDB shell (on a read-only database, this query alone):
SELECT * FROM host_time LIMIT 20;
