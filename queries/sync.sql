-- @table sync: host calls that block the CPU until the GPU catches up.
--
--
-- Blocking calls: stream / device / context / event synchronize, synchronous memcpy / memset
-- (cudaMemcpy, cuMemcpyDtoH, hipMemcpyWithStream, ...; HIP's calls alike), and async memcpy calls whose copy touches pageable host
-- memory (the driver stages them, so the host waits).
-- One row per blocking call. Times in ns.
-- @column rank        INTEGER  rank          the rank (process index in the job) the row belongs to
-- @column step        INTEGER  key           the step holding the call's start
-- @column tid         BIGINT   key           the host thread id
-- @column name        VARCHAR  text          the name of the op, kernel or call (kernels: the full demangled C++ name)
-- @column start_ns    BIGINT   time          when the host call began (ns since epoch)
-- @column end_ns      BIGINT   time          when the host call returned (ns since epoch)
-- @column blocked_ns  BIGINT   figure:ns     end_ns - start_ns: time the host thread spent inside it
-- @column reason      VARCHAR  text          'synchronize' | 'sync memcpy' | 'pageable memcpy'
-- @column gpu_op      VARCHAR  text          the GPU op the call launched, when it launched one (memcpy)
-- @column op_id       BIGINT   id:host_ops   the blocking call (host_ops.op_id)
-- @column cause       VARCHAR  text          what to fix: 'sync', or for a copy staged through pageable memory its direction
--     and 'pageable' ('HtoD pageable', 'DtoH pageable': pin the host buffer, not "remove
--     the sync"; a 256 MiB pageable HtoD copy blocks 33-59 ms per step on h100 launch_bound)
-- @column startup_ns  BIGINT   figure:ns     the part of blocked_ns before the rank's first GPU op in the trace: runtime
--     start-up (or a wait for work before the capture), a one-time cost, never per-step (rocprof v1's HIP trace of
--     a vector add: the first hipMemcpyWithStream blocks 275.060 ms, 275.039 ms of it before any GPU op; the
--     step's other five calls block 0.944 ms in all); 0 on a rank with no GPU op
-- Few rows probe the as-of joins below: keep DuckDB's ASOF join instead of its nested-loop plan.
-- sync shows first: rank, step, name, blocked_ns, reason, gpu_op
-- scope: rank
-- requires: gpu_ops, host_ops, steps
-- Helper tables live in schema tf_internal (out of a user's way in `.tables`); names resolve through the search path.
CREATE SCHEMA IF NOT EXISTS tf_internal;
SET search_path = 'main,tf_internal';
SET asof_loop_join_threshold = 0;

CREATE OR REPLACE TABLE sync AS
WITH calls AS (
    SELECT h.rank, h.trace_id, h.tid, h.name, h.start_ns, h.end_ns, h.correlation_id, h.op_id,
           CASE WHEN regexp_matches(h.name, '(?i)^((cuda|hip)(Stream|Device|Event|Thread|Ctx)Synchronize|cu(Stream|Ctx|Event)Synchronize)')
                     THEN 'synchronize'
                -- HIP's too (ROCm rpd, Kineto on ROCm): hipMemcpyWithStream is PyTorch's blocking copy_ on ROCm;
                -- rocmprofiledata mytrace.rpd: 22 calls hold 345.6 ms waiting for the GPU, their copies 0.75 ms
                WHEN regexp_matches(h.name, '(?i)^(cu(da)?|hip)Mem(cpy|set)') AND NOT regexp_matches(h.name, '(?i)async')
                     THEN 'sync memcpy'
           END AS reason
    FROM host_ops h WHERE h.kind IN ('cuda_runtime', 'cuda_driver')
), pageable AS (
    SELECT op_id AS gpu_op_id, name AS gpu_op, trace_id, correlation_id, name ILIKE '%pageable%' AS is_pageable
    FROM gpu_ops WHERE kind IN ('memcpy', 'memset') AND correlation_id IS NOT NULL
), first_op AS (  -- the rank's first GPU op: blocking before it waits for no recorded GPU work
    SELECT rank, min(start_ns) AS first_ns FROM gpu_ops GROUP BY rank
), j AS (
    SELECT c.*, p.gpu_op, coalesce(c.reason, CASE WHEN p.is_pageable THEN 'pageable memcpy' END) AS why
    FROM calls c LEFT JOIN pageable p USING (trace_id, correlation_id)
)
SELECT j.rank, CASE WHEN j.start_ns < s.end_ns THEN s.step END AS step, j.tid, j.name, j.start_ns, j.end_ns,
       j.end_ns - j.start_ns AS blocked_ns, j.why AS reason, j.gpu_op, j.op_id,
       CASE WHEN j.why = 'pageable memcpy'
            THEN coalesce(nullif(regexp_extract(j.gpu_op, '(HtoD|DtoH|DtoD|HtoH|PtoP)', 1), ''), 'copy') || ' pageable'
            ELSE 'sync' END AS cause,
       greatest(0, least(j.end_ns, coalesce(f.first_ns, j.start_ns)) - j.start_ns) AS startup_ns
FROM j ASOF LEFT JOIN steps s ON j.rank = s.rank AND j.start_ns >= s.start_ns
LEFT JOIN first_op f ON f.rank = j.rank
WHERE j.why IS NOT NULL
ORDER BY j.rank, j.start_ns;

-- What `.read` of this file shows in the DuckDB shell (on a read-only database, this query alone):
SELECT * FROM sync LIMIT 20;
