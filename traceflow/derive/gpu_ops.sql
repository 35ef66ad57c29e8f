-- gpu_ops: classify every GPU op and attach its launch and step.
-- Adds / fills:
--   category  'communication' (kernels comm_kernels.sql names: NCCL, RCCL, DeepEP, NVSHMEM, custom all-reduce ...)
--             | 'memory' (memcpy, memset) | 'compute' (other kernels)
--   collective AllReduce | AllGather | ReduceScatter | Broadcast | SendRecv | ... from the kernel name
--              when the profiler gave none
--   copy_kind  HtoD | DtoH | DtoD | ... for memcpy
--   op_id      BIGINT id (host ops have ids from 1e12 on, given while loading)
--   api_name, api_start_ns, api_end_ns, launch_tid, launch_op_id: the host call with the same
--              correlation id that enqueued the op (NULL when the launch is outside the trace)
--   issue_start_ns  when the host began issuing the op: the start of the CPU op that made the
--              launch call (Kineto links them by External id), else the launch call's start
--   cpu_op_id  host_ops.op_id of that CPU op: the one the launch call's External id names when it
--              contains the call on the call's thread; else (no External id, as nsys's emit_nvtx ops
--              have, or one naming an op elsewhere) the innermost CPU op open on the launching thread
--              that contains the call; NULL when none does, or the trace's CPU clock disagrees with
--              its runtime calls' (docs/step-attribution.md, "Launch links")
--   step       the step whose host range holds the launch call's start; for a rank with no
--              launch calls at all, or whose only step is the whole trace, the step holding the
--              op's own start. Ops still without a step (launch not in the capture, or launched
--              between steps) get the step whose GPU window holds them in step_windows.sql.
-- Kernel names are long (C++ templates, often 1 KB): they stay out of the sorts and joins, which
-- run on a narrow table of the derived columns, which then updates gpu_ops in place by rowid.
-- scope: rank
-- requires: comm_kernels, gpu_ops, host_ops, steps, traces
-- rewrites: gpu_ops
-- Helper tables live in schema tf_internal (out of a user's way in `.tables`); names resolve through the search path.
CREATE SCHEMA IF NOT EXISTS tf_internal;
SET search_path = 'main,tf_internal';
CREATE OR REPLACE TEMP TABLE gpu_ops_derived AS
WITH launch AS (
    SELECT trace_id, correlation_id,
           arg_min(name, start_ns) AS api_name, min(start_ns) AS api_start_ns,
           arg_min(end_ns, start_ns) AS api_end_ns, arg_min(tid, start_ns) AS launch_tid,
           arg_min(op_id, start_ns) AS launch_op_id, arg_min(external_id, start_ns) AS external_id
    FROM host_ops
    WHERE kind IN ('cuda_runtime', 'cuda_driver') AND correlation_id IS NOT NULL
          -- most runtime calls launch nothing: group only those whose id a GPU op carries
          AND (trace_id, correlation_id) IN (SELECT trace_id, correlation_id FROM gpu_ops WHERE correlation_id IS NOT NULL)
    GROUP BY trace_id, correlation_id
), linked AS (
    -- The CPU op a launch call's External id names, kept only where that op contains the call on
    -- the call's own thread: in some public traces the runtime call's External id is its own
    -- correlation id and names an unrelated CPU op (an H2D copy issued in aten::to was charged to an
    -- aten::empty_strided 7 ms later). 10 us of slack at each edge, as host_clock.py allows.
    SELECT l.trace_id, l.correlation_id, arg_max(c.op_id, c.start_ns) AS cpu_op_id
    FROM launch l JOIN host_ops c ON c.trace_id = l.trace_id AND c.external_id = l.external_id
         AND c.kind = 'cpu_op' AND c.tid = l.launch_tid
         AND c.start_ns <= l.api_start_ns + 10000 AND c.end_ns + 10000 >= l.api_end_ns
    WHERE l.external_id IS NOT NULL
    GROUP BY l.trace_id, l.correlation_id
), unlinked AS (
    -- launches left to link by nesting: no External id (nsys's emit_nvtx ops), or one that names no
    -- CPU op around the call. Never on a trace whose CPU ops sit on a clock no offset reconciles.
    SELECT l.* FROM launch l ANTI JOIN linked k USING (trace_id, correlation_id)
    WHERE l.trace_id NOT IN (SELECT trace_id FROM traces WHERE cpu_clock_consistent IS FALSE)
), nest_events AS (
    -- As HTA and TraceLens do: the op around a launch call is the innermost CPU op open on its thread
    -- when the call starts. Ranges nest, so with D ops open then,
    -- it is the latest to start, before the call, of the ops at depth D: a running count of opens
    -- and closes gives both depths, and an ASOF join the op (no range join of every launch with
    -- every op of its thread). At one time, opens come before calls, and calls before closes.
    SELECT trace_id, tid, start_ns AS t, 0 AS ord, 1 AS delta, op_id, NULL::BIGINT AS correlation_id
    FROM host_ops WHERE kind = 'cpu_op' AND (trace_id, tid) IN (SELECT trace_id, launch_tid FROM unlinked)
    UNION ALL
    SELECT trace_id, tid, end_ns, 2, -1, NULL, NULL
    FROM host_ops WHERE kind = 'cpu_op' AND (trace_id, tid) IN (SELECT trace_id, launch_tid FROM unlinked)
    UNION ALL
    SELECT trace_id, launch_tid, api_start_ns, 1, 0, NULL, correlation_id FROM unlinked
), depths AS (
    SELECT *, sum(delta) OVER (PARTITION BY trace_id, tid ORDER BY t, ord ROWS UNBOUNDED PRECEDING) AS depth
    FROM nest_events
), opened AS (
    SELECT trace_id, tid, depth, t AS start_ns, op_id FROM depths WHERE delta = 1
), candidates AS (
    SELECT c.trace_id, c.correlation_id, o.op_id
    FROM (SELECT * FROM depths WHERE delta = 0 AND depth > 0) c
    ASOF JOIN opened o ON o.trace_id = c.trace_id AND o.tid = c.tid AND o.depth = c.depth AND o.start_ns <= c.t
    UNION ALL
    -- Ops that do not nest cleanly (Kineto's us rounding: a child closing after its sibling opens)
    -- throw the depths off; the latest op to open before the call is the other candidate (it found
    -- 5 of 98 launches on a public CNN benchmark that the depths missed)
    SELECT c.trace_id, c.correlation_id, o.op_id
    FROM (SELECT * FROM depths WHERE delta = 0) c
    ASOF JOIN opened o ON o.trace_id = c.trace_id AND o.tid = c.tid AND o.start_ns <= c.t
), nested AS (
    -- checked as the External-id links are: the op found must contain the call
    SELECT k.trace_id, k.correlation_id, arg_max(k.op_id, h.start_ns) AS cpu_op_id
    FROM candidates k JOIN unlinked u USING (trace_id, correlation_id)
    JOIN host_ops h ON h.op_id = k.op_id AND h.start_ns <= u.api_start_ns AND h.end_ns >= u.api_end_ns
    GROUP BY k.trace_id, k.correlation_id
), issuer AS (
    SELECT k.trace_id, k.correlation_id, k.cpu_op_id,
           -- CPU ops on a clock of their own that no offset reconciles (host_clock.py): no time from them
           CASE WHEN k.trace_id NOT IN (SELECT trace_id FROM traces WHERE cpu_clock_consistent IS FALSE)
                THEN h.start_ns END AS issue_start_ns
    FROM (SELECT * FROM linked UNION ALL SELECT * FROM nested) k JOIN host_ops h ON h.op_id = k.cpu_op_id
), comm_names AS (
    -- communication kernels by name (comm_kernels.sql: the table of which libraries' kernels are), once
    -- per distinct name (a few thousand), not per op
    SELECT n.name, arg_min(c.library, c.priority) AS library, arg_min(c.op, c.priority) AS op
    FROM (SELECT DISTINCT name FROM gpu_ops WHERE kind = 'kernel') n
    JOIN comm_kernels c ON regexp_matches(n.name, '(?i)' || c.pattern)
    GROUP BY n.name
), comm_ops AS (
    SELECT name, coalesce(op,
        CASE lower(regexp_extract(name, '(?i)^\s*(?:void\s+)?(?:nccl|rccl)(?:DevKernel|Kernel)?_([A-Za-z]+)', 1))
            WHEN 'allreduce' THEN 'AllReduce' WHEN 'allgather' THEN 'AllGather'
            WHEN 'reducescatter' THEN 'ReduceScatter' WHEN 'broadcast' THEN 'Broadcast'
            WHEN 'reduce' THEN 'Reduce' WHEN 'sendrecv' THEN 'SendRecv' WHEN 'send' THEN 'SendRecv'
            WHEN 'recv' THEN 'SendRecv' WHEN 'alltoall' THEN 'AllToAll' WHEN '' THEN NULL
            ELSE regexp_extract(name, '(?i)^\s*(?:void\s+)?(?:nccl|rccl)(?:DevKernel|Kernel)?_([A-Za-z]+)', 1) END,
        -- other libraries' kernels: a word in the name
        CASE WHEN regexp_matches(name, '(?i)all_?reduce') THEN 'AllReduce'
             WHEN regexp_matches(name, '(?i)all_?gather') THEN 'AllGather'
             WHEN regexp_matches(name, '(?i)reduce_?scatter') THEN 'ReduceScatter'
             WHEN regexp_matches(name, '(?i)all_?to_?all') THEN 'AllToAll'
             WHEN regexp_matches(name, '(?i)broadcast') THEN 'Broadcast'
             WHEN regexp_matches(name, '(?i)send|recv|put|get') THEN 'SendRecv' END) AS op
    FROM comm_names
), ops AS (
    SELECT g.rowid AS rid, g.trace_id, g.rank, g.correlation_id, g.start_ns, g.end_ns,
        CASE WHEN c.name IS NOT NULL THEN 'communication'
             WHEN g.kind IN ('memcpy', 'memset', 'um_migration') THEN 'memory'  -- (page migrations move data too)
             ELSE 'compute' END AS category,
        coalesce(g.collective, c.op) AS collective,
        coalesce(g.copy_kind, nullif(regexp_extract(g.name, '^Memcpy ([A-Za-z]+)', 1), '')) AS copy_kind
    FROM gpu_ops g LEFT JOIN comm_ops c ON g.kind = 'kernel' AND c.name = g.name
), joined AS (
    SELECT o.rid, o.rank, o.start_ns, o.category, o.collective, o.copy_kind,
        row_number() OVER (ORDER BY o.trace_id, o.start_ns, o.end_ns) AS op_id,
        l.api_name, l.api_start_ns, l.api_end_ns, l.launch_tid, l.launch_op_id,
        CASE WHEN i.issue_start_ns <= l.api_start_ns THEN i.issue_start_ns ELSE l.api_start_ns END AS issue_start_ns,
        i.cpu_op_id
    FROM ops o LEFT JOIN launch l USING (trace_id, correlation_id)
    LEFT JOIN issuer i ON i.trace_id = l.trace_id AND i.correlation_id = l.correlation_id
), ranks_with_launches AS (
    SELECT DISTINCT rank FROM joined WHERE api_start_ns IS NOT NULL
), keyed AS (
    SELECT * EXCLUDE (start_ns),
        CASE WHEN api_start_ns IS NOT NULL THEN api_start_ns
             WHEN rank NOT IN (SELECT rank FROM ranks_with_launches)
                  OR rank IN (SELECT rank FROM steps WHERE source = 'whole trace') THEN start_ns END AS step_key
    FROM joined
)
SELECT k.rid, k.category, CASE WHEN k.category = 'communication' THEN k.collective END AS collective, k.copy_kind,
       k.op_id, k.api_name, k.api_start_ns, k.api_end_ns, k.launch_tid, k.launch_op_id, k.issue_start_ns, k.cpu_op_id,
       CASE WHEN k.step_key < s.end_ns THEN s.step END AS step
FROM keyed k ASOF LEFT JOIN steps s ON k.rank = s.rank AND k.step_key >= s.start_ns;

-- Updated in place, not rewritten: a copy of gpu_ops carried every kernel's long name through
-- memory again (3 M ops at 256 ranks: 8 s of the 16 s of this file, spilling past the memory limit;
-- the derive phase went 17.8 -> 12.9 s there, 2.95 -> 2.21 s at 64 ranks, every table identical)
UPDATE gpu_ops SET category = d.category, collective = d.collective, copy_kind = d.copy_kind, op_id = d.op_id,
       api_name = d.api_name, api_start_ns = d.api_start_ns, api_end_ns = d.api_end_ns, launch_tid = d.launch_tid,
       launch_op_id = d.launch_op_id, issue_start_ns = d.issue_start_ns, cpu_op_id = d.cpu_op_id, step = d.step
FROM gpu_ops_derived d WHERE gpu_ops.rowid = d.rid;

DROP TABLE gpu_ops_derived;
