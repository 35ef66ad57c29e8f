-- critical_path (pack `critical-path`): per step, the chain of segments that set the step's
-- length across all ranks, in time order.
--
-- Inputs: critical_path_raw (written by traceflow's walk over cp_edges, see cp_graph.sql),
--   gpu_ops, host_ops, ranges. The step spans [first GPU window start, last GPU window end]
--   across ranks (step_windows); the segments tile it exactly, without overlap.
--
-- One row per segment.
--   step, ordinal (0, 1, ... in time order), rank
--   kind   gpu_compute | gpu_comm | gpu_memory | launch | host_cpu | host_sync | peer_wait | idle
--   name   the GPU op, the launch / sync call, or for host_cpu what the thread was doing
--          (the innermost CPU op, range or OS call covering most of the segment)
--   start_ns, end_ns (ns since epoch); dur_ns = end_ns - start_ns (ns); tid: host thread, op_id
--
-- critical_path_summary (pack `critical-path-summary`): per step, rank and kind: total_ns (ns)
--   and share_pct of the step's critical path (percent).
CREATE OR REPLACE TABLE critical_path AS
WITH unnamed AS (
    SELECT * FROM critical_path_raw WHERE kind = 'host_cpu' AND name IS NULL AND tid IS NOT NULL
), host_ev AS (
    SELECT rank, tid, name, start_ns, end_ns FROM host_ops WHERE kind IN ('cpu_op', 'python', 'osrt')
    UNION ALL SELECT rank, tid, name, start_ns, end_ns FROM ranges WHERE NOT on_gpu
), cover AS (
    SELECT u.step, u.ordinal, h.name,
           least(h.end_ns, u.end_ns) - greatest(h.start_ns, u.start_ns) AS overlap_ns,
           h.end_ns - h.start_ns AS len_ns, u.end_ns - u.start_ns AS dur_ns
    FROM unnamed u JOIN host_ev h ON h.rank = u.rank AND h.tid = u.tid AND h.start_ns < u.end_ns AND h.end_ns > u.start_ns
), best AS (
    SELECT step, ordinal,
           coalesce(arg_min(name, len_ns) FILTER (WHERE 2 * overlap_ns >= dur_ns), arg_max(name, overlap_ns)) AS name
    FROM cover GROUP BY step, ordinal
)
SELECT c.step, c.ordinal, c.rank, c.kind,
       coalesce(c.name, b.name, CASE WHEN c.kind = 'launch' THEN g.api_name END) AS name,
       c.start_ns, c.end_ns, c.end_ns - c.start_ns AS dur_ns, c.tid, c.op_id
FROM critical_path_raw c
LEFT JOIN best b USING (step, ordinal)
LEFT JOIN gpu_ops g ON c.kind = 'launch' AND g.op_id = c.op_id
ORDER BY c.step, c.ordinal;

CREATE OR REPLACE TABLE critical_path_summary AS
WITH t AS (SELECT step, sum(dur_ns) AS wall_ns FROM critical_path GROUP BY step)
SELECT c.step, c.rank, c.kind, sum(c.dur_ns)::BIGINT AS total_ns, count(*) AS segments,
       round(100.0 * sum(c.dur_ns) / any_value(t.wall_ns), 2) AS share_pct, any_value(t.wall_ns) AS step_wall_ns
FROM critical_path c JOIN t USING (step)
GROUP BY c.step, c.rank, c.kind ORDER BY c.step, total_ns DESC;
