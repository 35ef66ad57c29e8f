-- @table critical_path: per step, the chain of segments that set the step's
--     length across all ranks, in time order.
--
-- The step spans [first GPU window start, last GPU window end] across ranks (step_windows); the
-- segments tile it exactly, without overlap. critical_path_raw is written by traceflow's walk over
-- cp_edges (cp_graph.sql).
--
-- One row per segment.
-- @column step      INTEGER  key           the training step (ProfilerStep#N, or the --step-pattern's number); NULL outside every
--     step
-- @column ordinal   INTEGER  key           position in time order within the step (0, 1, ...)
-- @column rank      INTEGER  rank          the rank (process index in the job) the row belongs to
-- @column kind      VARCHAR  text          gpu_compute | gpu_comm | gpu_memory | launch | host_cpu | host_sync | peer_wait | idle
-- @column name      VARCHAR  text          the GPU op, the launch / sync call or OS call (by op_id; the walk writes ids only). The
--     walk joins adjacent host_cpu stretches of a thread into one segment (a polling loop is one
--     segment, not millions); it keeps the id of its longest call when calls fill most of it.
--     Otherwise host_cpu is named by what the thread was doing: the innermost CPU op at the
--     segment's midpoint, else the innermost range.
-- @column start_ns  BIGINT   time          start, ns since the Unix epoch (after clock alignment)
-- @column end_ns    BIGINT   time          end, ns since the Unix epoch (after clock alignment)
-- @column dur_ns    BIGINT   figure:ns     end_ns - start_ns (ns)
-- @column tid       BIGINT   key           the host thread id
-- @column op_id     BIGINT   key           the op's op_id in gpu_ops or host_ops
-- @column bound     VARCHAR  text          for GPU kernels: the bound of the op that launched them (op_work: compute | memory |
--     latency), NULL where its work is unknown or the segment is not a kernel
--
-- @table critical_path_summary: per step, rank and kind, the time on the critical path.
-- @column step          INTEGER  key           the training step (ProfilerStep#N, or the --step-pattern's number); NULL outside every
--     step
-- @column rank          INTEGER  rank          the rank (process index in the job) the row belongs to
-- @column kind          VARCHAR  text          gpu_compute | gpu_comm | gpu_memory | launch | host_cpu | host_sync | peer_wait | idle
-- @column total_ns      BIGINT   figure:ns     time of the step's critical path in segments of this rank and kind (ns)
-- @column segments      BIGINT   figure:count  how many segments
-- @column share_pct     DOUBLE   figure:percent  total_ns / step_wall_ns (percent)
-- @column step_wall_ns  HUGEINT  figure:ns     the step's span across ranks: the length of its critical path (ns)
-- Few rows probe the as-of joins below: keep DuckDB's ASOF join instead of its nested-loop plan.
-- critical_path shows first: step, rank, kind, name, dur_ns, bound
-- critical_path_summary shows first: step, rank, kind, total_ns, share_pct, segments
-- scope: job
-- requires: critical_path_raw, gpu_ops, host_ops, op_work, op_work_kernels, ranges
-- Helper tables live in schema tf_internal (out of a user's way in `.tables`); names resolve through the search path.
CREATE SCHEMA IF NOT EXISTS tf_internal;
SET search_path = 'main,tf_internal';
SET asof_loop_join_threshold = 0;

CREATE OR REPLACE TABLE critical_path AS
WITH unnamed AS (
    SELECT step, ordinal, rank, tid, (start_ns + end_ns) // 2 AS mid
    FROM critical_path_raw WHERE kind = 'host_cpu' AND op_id IS NULL AND tid IS NOT NULL
), ops AS (
    -- (ids, not names, through the as-of join's sort: the few names found are looked up after)
    SELECT rank, tid, start_ns, end_ns, op_id FROM host_ops
    WHERE kind IN ('cpu_op', 'python', 'osrt') AND (rank, tid) IN (SELECT DISTINCT rank, tid FROM unnamed)
), covering AS (
    -- host ops nest on a thread: the latest-starting one before the midpoint, if it still runs
    -- there, is the innermost op covering it (linear, unlike an interval join)
    SELECT u.step, u.ordinal, CASE WHEN o.end_ns >= u.mid THEN o.op_id END AS op_id
    FROM unnamed u ASOF LEFT JOIN ops o ON o.rank = u.rank AND o.tid = u.tid AND o.start_ns <= u.mid
), host_names AS (
    -- the few host ops named on the path, found by id first: a join on host_ops itself would hash
    -- every host op's name (tens of millions)
    SELECT op_id, name FROM host_ops
    WHERE op_id IN (SELECT op_id FROM critical_path_raw UNION ALL SELECT op_id FROM covering)
), path_gpu AS (
    -- likewise the GPU ops on the path, and their CPU ops' work, each filtered by id before any join:
    -- a join on gpu_ops itself built a hash table of every op with its kernel name (3 M ops at 256
    -- ranks: 0.84 s of this query's 1.64 s); joined whole, op_work_kernels and op_work then held
    -- every op's row (filtered first: 1.18 -> 0.72 s, peak RSS 516 -> 235 MiB)
    SELECT g.op_id, g.name, g.api_name, k.op_id AS cpu_op_id
    FROM (SELECT op_id, name, api_name FROM gpu_ops WHERE op_id IN (SELECT op_id FROM critical_path_raw)) g
    LEFT JOIN (SELECT gpu_op_id, op_id FROM op_work_kernels
               WHERE gpu_op_id IN (SELECT op_id FROM critical_path_raw)) k ON k.gpu_op_id = g.op_id
), path_work AS (
    SELECT op_id, bound FROM op_work WHERE op_id IN (SELECT cpu_op_id FROM path_gpu)
), by_op AS (
    SELECT c.step, c.ordinal, h.name FROM covering c LEFT JOIN host_names h ON h.op_id = c.op_id
), by_range AS (
    SELECT u.step, u.ordinal, arg_min(r.name, r.end_ns - r.start_ns) AS name
    FROM unnamed u JOIN ranges r ON r.rank = u.rank AND r.tid = u.tid AND NOT r.on_gpu
                                AND r.start_ns <= u.mid AND r.end_ns >= u.mid
    GROUP BY u.step, u.ordinal
), best AS (
    SELECT step, ordinal, coalesce(o.name, r.name) AS name FROM by_op o FULL JOIN by_range r USING (step, ordinal)
)
SELECT c.step, c.ordinal, c.rank, c.kind,
       coalesce(CASE WHEN c.kind = 'launch' THEN g.api_name ELSE g.name END, h.name, b.name) AS name,
       c.start_ns, c.end_ns, c.end_ns - c.start_ns AS dur_ns, c.tid, c.op_id,
       CASE WHEN c.kind IN ('gpu_compute', 'gpu_memory') THEN w.bound END AS bound
FROM critical_path_raw c
LEFT JOIN best b USING (step, ordinal)
-- plain equi-joins: an extra ON condition would make DuckDB loop
LEFT JOIN path_gpu g ON g.op_id = c.op_id
LEFT JOIN host_names h ON h.op_id = c.op_id
LEFT JOIN path_work w ON w.op_id = g.cpu_op_id
ORDER BY c.step, c.ordinal;

CREATE OR REPLACE TABLE critical_path_summary AS
WITH t AS (SELECT step, sum(dur_ns) AS wall_ns FROM critical_path GROUP BY step)
SELECT c.step, c.rank, c.kind, sum(c.dur_ns)::BIGINT AS total_ns, count(*) AS segments,
       round(100.0 * sum(c.dur_ns) / any_value(t.wall_ns), 2) AS share_pct, any_value(t.wall_ns) AS step_wall_ns
FROM critical_path c JOIN t USING (step)
GROUP BY c.step, c.rank, c.kind ORDER BY c.step, total_ns DESC;

-- What `.read` of this file shows in the DuckDB shell (on a read-only database, this query alone):
SELECT * FROM critical_path LIMIT 20;
