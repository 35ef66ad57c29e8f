-- cp_graph: the dependency graph the critical path walks (DESIGN.md, "Critical path").
--
-- Parameters: tf_dep_tolerance_ns — a queued GPU op that starts within this long after an op on
--   another stream of its rank ended is taken to have waited for it (a cross-stream event wait) [20000 ns].
--
-- @table cp_host_nodes: host calls the path can pass through, on threads that launch GPU work: CUDA
--     runtime/driver calls and OS-runtime calls, one row per call.
-- @column node_op_id    BIGINT   id:host_ops   the call's op_id (its name and kind: host_ops)
-- @column rank          INTEGER  rank          the rank (process index in the job) the row belongs to
-- @column tid           BIGINT   key           the host thread id
-- @column start_ns      BIGINT   time          start, ns since the Unix epoch (after clock alignment)
-- @column end_ns        BIGINT   time          end, ns since the Unix epoch (after clock alignment)
-- @column role          VARCHAR  text          'launch' | 'sync' | 'other'; 'sync': a blocking call of the sync pack
-- @column waited_op_id  BIGINT   id:gpu_ops    for sync calls: the GPU op whose end released it, the latest-ending op of the rank launched before the call and ended inside it
-- The walk (traceflow/critical_path.py) keeps the outermost calls: a call nested inside another
-- is dropped, one overlapping the call before starts where that one ended. (A running max over
-- tens of millions of calls is a slow window aggregate in DuckDB and a fast cumulative max in numpy.)
--
-- Few rows probe the as-of joins below: keep DuckDB's ASOF join instead of its nested-loop plan.
-- (cp_edges.sql lists the graph as edges, for reading.)
-- @table cp_gpu_preds: each GPU op's predecessors in the graph: the op before it on its stream, and the op on another stream it waited for
-- @column op_id        BIGINT  id:gpu_ops    the GPU op (gpu_ops.op_id)
-- @column stream_prev  BIGINT  id:gpu_ops    the op before it on the same stream (NULL: the first)
-- @column dep_op_id    BIGINT  id:gpu_ops    a queued op's cross-stream event wait: the op on another stream of its rank that ended within tf_dep_tolerance_ns before it started (NULL: none);
--     for a unified-memory page migration: the op of its rank running when it began (a kernel's page fault), else the op that ended last before it
-- @column host_tid     BIGINT  key           for a page migration during which no other op of its rank runs, and for an op whose launch call is not in
--     the trace: the rank's thread that launches most ops (the host touching managed memory, or launching unrecorded);
--     the walk takes the op's start as its "launch". NULL otherwise
--
-- Unified-memory page migrations (gpu_ops.kind um_migration) are not ops a program queues on a stream: the
-- driver moves pages when a kernel or the CPU touches them. Chained by stream like copies, they hid the
-- kernels: on ISC25-ICON's stdpar export (5,510 migrations, 7 kernels on another stream) the path walked
-- only migrations and called 42.1 ms of running kernels idle. So a migration is no stream's op: it hangs
-- on the kernel it ran inside, or, outside every kernel (the CPU reading managed memory back), on host time.
-- scope: rank
-- requires: gpu_ops, host_ops, sync
-- Helper tables live in schema tf_internal (out of a user's way in `.tables`); names resolve through the search path.
CREATE SCHEMA IF NOT EXISTS tf_internal;
SET search_path = 'main,tf_internal';
SET asof_loop_join_threshold = 0;

CREATE OR REPLACE TABLE tf_internal.cp_host_nodes AS
WITH threads AS (
    SELECT DISTINCT rank, launch_tid AS tid FROM gpu_ops WHERE launch_tid IS NOT NULL
), calls AS (
    SELECT h.rank, h.tid, h.op_id AS node_op_id, h.start_ns, h.end_ns, h.kind
    FROM host_ops h SEMI JOIN threads t ON h.rank = t.rank AND h.tid = t.tid
    WHERE h.kind IN ('cuda_runtime', 'cuda_driver', 'osrt') AND h.end_ns >= h.start_ns
), cuda AS (
    -- OS-runtime calls neither launch nor block on the GPU (sync holds CUDA calls only): only the
    -- CUDA calls, a small part of a job's host calls, are looked up by id
    SELECT * EXCLUDE (kind),
           CASE WHEN node_op_id IN (SELECT op_id FROM sync) THEN 'sync'
                WHEN node_op_id IN (SELECT launch_op_id FROM gpu_ops WHERE launch_op_id IS NOT NULL) THEN 'launch'
                ELSE 'other' END AS role
    FROM calls WHERE kind <> 'osrt'
), ends AS (
    SELECT rank, op_id, end_ns, api_start_ns FROM gpu_ops
)
SELECT node_op_id, rank, tid, start_ns, end_ns, 'other' AS role, NULL::BIGINT AS waited_op_id FROM calls WHERE kind = 'osrt'
UNION ALL
SELECT node_op_id, rank, tid, start_ns, end_ns, role, NULL FROM cuda WHERE role <> 'sync'
UNION ALL
-- only sync calls wait for a GPU op: the as-of join probes those few rows
SELECT c.node_op_id, c.rank, c.tid, c.start_ns, c.end_ns, c.role,
       CASE WHEN e.end_ns > c.start_ns AND (e.api_start_ns IS NULL OR e.api_start_ns <= c.start_ns) THEN e.op_id END
FROM (SELECT * FROM cuda WHERE role = 'sync') c ASOF LEFT JOIN ends e ON e.rank = c.rank AND e.end_ns <= c.end_ns;

CREATE OR REPLACE TABLE tf_internal.cp_gpu_preds AS
WITH o AS (
    SELECT op_id, rank, stream, start_ns, end_ns, api_start_ns,
           lag(op_id) OVER (PARTITION BY rank, stream ORDER BY start_ns, end_ns, op_id) AS stream_prev
    FROM gpu_ops WHERE kind <> 'um_migration'
), ends AS (
    SELECT op_id AS dep_op_id, rank, stream AS dep_stream, end_ns AS dep_end FROM gpu_ops WHERE kind <> 'um_migration'
), mig AS (
    SELECT op_id, rank, start_ns FROM gpu_ops WHERE kind = 'um_migration'
), inside AS (
    -- the op running when a migration began (few rows: only jobs with managed memory have migrations)
    SELECT m.op_id, arg_max(k.op_id, k.end_ns) AS dep_op_id
    FROM mig m JOIN gpu_ops k ON k.rank = m.rank AND k.start_ns <= m.start_ns AND k.end_ns > m.start_ns
    WHERE k.kind <> 'um_migration'
    GROUP BY m.op_id
), any_end AS (
    SELECT op_id AS dep_op_id, rank, end_ns AS dep_end FROM gpu_ops
), host AS (
    SELECT rank, mode(launch_tid) AS tid FROM gpu_ops WHERE launch_tid IS NOT NULL
      AND rank IN (SELECT rank FROM gpu_ops WHERE api_start_ns IS NULL) GROUP BY rank
)
SELECT o.op_id, o.stream_prev,
       CASE WHEN e.dep_stream <> o.stream AND e.dep_op_id <> o.op_id AND e.dep_end >= o.start_ns - coalesce(getvariable('tf_dep_tolerance_ns'), 20000)
                 AND (o.api_start_ns IS NULL OR o.api_start_ns < e.dep_end)
            THEN e.dep_op_id END AS dep_op_id,
       -- an op whose launch call the trace lacks (Triton kernels launched through the driver, with no
       -- runtime call in a Kineto file) was still launched by the rank's host: on GPUPuzzlers' fusion
       -- trace the 2.3 ms before them called "GPU idle, nothing else on the path" was the launching
       -- thread running Python and torch.compile wrappers throughout
       CASE WHEN o.api_start_ns IS NULL THEN h.tid END AS host_tid
FROM o ASOF LEFT JOIN ends e ON e.rank = o.rank AND e.dep_end <= o.start_ns
LEFT JOIN host h ON h.rank = o.rank
UNION ALL
SELECT m.op_id, NULL, coalesce(i.dep_op_id, CASE WHEN a.dep_op_id <> m.op_id THEN a.dep_op_id END),
       CASE WHEN i.dep_op_id IS NULL THEN h.tid END
FROM mig m LEFT JOIN inside i USING (op_id) LEFT JOIN host h USING (rank)
ASOF LEFT JOIN any_end a ON a.rank = m.rank AND a.dep_end <= m.start_ns;
