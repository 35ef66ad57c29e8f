-- cp_graph: the dependency graph the critical path walks (DESIGN.md, "Critical path").
--
-- Inputs: gpu_ops (with launches and steps), host_ops, collectives, step_windows.
-- Parameters: tf_dep_tolerance_ns — a queued GPU op that starts within this long after an op on
--   another stream of its rank ended is taken to have waited for it (a cross-stream event wait) [20000 ns].
--
-- cp_host_nodes: host calls the path can pass through, on threads that launch GPU work:
--   CUDA runtime/driver calls and OS-runtime calls, flattened (a call nested inside another is
--   dropped), one row per call: node_op_id, rank, tid, start_ns, end_ns (ns), name,
--   role ('launch' | 'sync' | 'other'), waited_op_id (for sync calls: the GPU op whose end
--   released it — the latest-ending op of the rank launched before the call and ended inside it).
--
-- cp_edges: one row per edge, src -> dst, each end an (op_id, point) with point 'start' | 'end':
--   kind 'stream'      end of the previous op on the same stream -> start of the op
--        'launch'      start of the launch call -> start of the GPU op
--        'program'     end of the previous host call on the thread -> start of the call
--        'sync'        end of the waited GPU op -> end of the blocking host call
--        'event_wait'  end of an op on another stream -> start of a queued op that started right after it
--        'collective'  start of (comm, step, seq) on one rank -> its end on every other rank
-- Few rows probe the as-of joins below: keep DuckDB's ASOF join instead of its nested-loop plan.
SET asof_loop_join_threshold = 0;

CREATE OR REPLACE TABLE cp_host_nodes AS
WITH threads AS (
    SELECT DISTINCT rank, launch_tid AS tid FROM gpu_ops WHERE launch_tid IS NOT NULL
), calls AS (
    SELECT h.rank, h.tid, h.op_id, h.name, h.start_ns, h.end_ns, h.kind
    FROM host_ops h JOIN threads USING (rank, tid)
    WHERE h.kind IN ('cuda_runtime', 'cuda_driver', 'osrt') AND h.end_ns >= h.start_ns
), flat AS (
    SELECT *, max(end_ns) OVER (PARTITION BY rank, tid ORDER BY start_ns, end_ns DESC, op_id
                                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS enclosing_end
    FROM calls
), kept AS (
    SELECT rank, tid, op_id AS node_op_id, name, greatest(start_ns, coalesce(enclosing_end, start_ns)) AS start_ns, end_ns, kind
    FROM flat WHERE enclosing_end IS NULL OR end_ns > enclosing_end
), launchers AS (
    SELECT DISTINCT launch_op_id FROM gpu_ops WHERE launch_op_id IS NOT NULL
), roles AS (
    SELECT k.*,
           CASE WHEN regexp_matches(k.name, '(?i)^(cuda(Stream|Device|Event|Thread|Ctx)Synchronize|cu(Stream|Ctx|Event)Synchronize)')
                  OR (regexp_matches(k.name, '(?i)^cu(da)?Mem(cpy|set)') AND NOT regexp_matches(k.name, '(?i)async'))
                  OR k.node_op_id IN (SELECT s.op_id FROM sync s) THEN 'sync'
                WHEN k.node_op_id IN (SELECT launch_op_id FROM launchers) THEN 'launch'
                ELSE 'other' END AS role
    FROM kept k
), ends AS (
    SELECT rank, op_id, end_ns, api_start_ns FROM gpu_ops
)
SELECT r.node_op_id, r.rank, r.tid, r.start_ns, r.end_ns, r.name, r.kind, r.role,
       CASE WHEN r.role = 'sync' AND e.end_ns > r.start_ns AND (e.api_start_ns IS NULL OR e.api_start_ns <= r.start_ns)
            THEN e.op_id END AS waited_op_id
FROM roles r ASOF LEFT JOIN ends e ON e.rank = r.rank AND e.end_ns <= r.end_ns
ORDER BY r.rank, r.tid, r.start_ns;

CREATE OR REPLACE TABLE cp_gpu_preds AS
WITH o AS (
    SELECT op_id, rank, stream, start_ns, end_ns, api_start_ns,
           lag(op_id) OVER (PARTITION BY rank, stream ORDER BY start_ns, end_ns, op_id) AS stream_prev
    FROM gpu_ops
), ends AS (
    SELECT op_id AS dep_op_id, rank, stream AS dep_stream, end_ns AS dep_end FROM gpu_ops
)
SELECT o.op_id, o.stream_prev,
       CASE WHEN e.dep_stream <> o.stream AND e.dep_op_id <> o.op_id AND e.dep_end >= o.start_ns - coalesce(getvariable('tf_dep_tolerance_ns'), 20000)
                 AND (o.api_start_ns IS NULL OR o.api_start_ns < e.dep_end)
            THEN e.dep_op_id END AS dep_op_id
FROM o ASOF LEFT JOIN ends e ON e.rank = o.rank AND e.dep_end <= o.start_ns;

CREATE OR REPLACE TABLE cp_edges AS
SELECT 'stream' AS kind, stream_prev AS src_op_id, 'end' AS src_point, op_id AS dst_op_id, 'start' AS dst_point
FROM cp_gpu_preds WHERE stream_prev IS NOT NULL
UNION ALL
SELECT 'event_wait', dep_op_id, 'end', op_id, 'start' FROM cp_gpu_preds WHERE dep_op_id IS NOT NULL
UNION ALL
SELECT 'launch', launch_op_id, 'start', op_id, 'start' FROM gpu_ops WHERE launch_op_id IS NOT NULL
UNION ALL
SELECT 'program', lag(node_op_id) OVER (PARTITION BY rank, tid ORDER BY start_ns), 'end', node_op_id, 'start'
FROM cp_host_nodes QUALIFY lag(node_op_id) OVER (PARTITION BY rank, tid ORDER BY start_ns) IS NOT NULL
UNION ALL
SELECT 'sync', waited_op_id, 'end', node_op_id, 'end' FROM cp_host_nodes WHERE waited_op_id IS NOT NULL
UNION ALL
SELECT 'collective', a.op_id, 'start', b.op_id, 'end'
FROM collectives a JOIN collectives b ON a.comm = b.comm AND a.step = b.step AND a.seq = b.seq AND a.rank <> b.rank;
