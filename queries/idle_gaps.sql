-- @table idle_gaps: every stretch inside a step's GPU window where the rank's GPU
--     ran nothing, with its cause and what the host was doing meanwhile.
--
-- Parameters (DuckDB variables; defaults in brackets):
--   tf_launch_threshold_ns  gaps shorter than this are launch latency when the next op was queued [5000 ns = 5 µs]
--
-- One row per gap, listed under the step whose GPU window holds it (step_windows: the windows of
-- a rank tile its timeline, and a gap never straddles two, since every window edge is an op's start
-- or end). So a step's gaps add up to its idle_ns in step_breakdown. Gaps before the first window
-- or after the last are listed with step NULL, as step_breakdown's 'before' / 'after' rows.
-- @column rank                 INTEGER  rank          the rank (process index in the job) the row belongs to
-- @column step                 INTEGER  key           the training step (ProfilerStep#N, or the --step-pattern's number); NULL outside every
--     step
-- @column start_ns             BIGINT   time          when the gap began (ns since epoch)
-- @column end_ns               BIGINT   time          when the gap ended (ns since epoch)
-- @column dur_ns               BIGINT   figure:ns     end_ns - start_ns (ns)
-- @column cause                VARCHAR  text          'host_late'       the op that ended the gap was launched after the gap began: the GPU starved
--     waiting for the host
--     'launch_latency'  the next op was already queued and the gap is shorter than the threshold
--     'dependency'      the next op was already queued (or launched before the trace began) and
--     waited on another stream, an event, a peer or a host sync
-- @column next_op              VARCHAR  text          name of the GPU op that ended the gap
-- @column next_op_id           BIGINT   id:gpu_ops    its op_id (gpu_ops)
-- @column next_api_start_ns    BIGINT   time          when that op's launch call started (ns; NULL if outside the trace)
-- @column next_issue_start_ns  BIGINT   time          when the host began issuing it (the CPU op around the launch call; ns)
-- @column host_tid             BIGINT   key           the host thread looked at: the one that launched next_op, else the rank's main thread
-- @column host_activity        VARCHAR  text          what that thread was doing at the gap's midpoint (for gaps of at least the
--     threshold): the innermost (shortest) host call running there (CPU op, CUDA
--     call, OS runtime call such as clock_nanosleep) that fills at least half of the
--     gap, else the innermost NVTX / annotation range there; NULL if neither
--
-- @table idle_gaps_summary: per rank, step and cause, the idle gaps together.
-- @column rank      INTEGER  rank          the rank (process index in the job) the row belongs to
-- @column step      INTEGER  key           the training step (ProfilerStep#N, or the --step-pattern's number); NULL outside every
--     step
-- @column cause     VARCHAR  text          'host_late'       the op that ended the gap was launched after the gap began: the GPU
--     starved waiting for the host 'launch_latency'  the next op was already queued and the gap
--     is shorter than the threshold 'dependency'      the next op was already queued (or
--     launched before the trace began) and waited on another stream, an event, a peer or a host
--     sync
-- @column n_gaps    BIGINT   figure:count  how many gaps
-- @column total_ns  BIGINT   figure:ns     their total length (ns)
-- @column max_ns    BIGINT   figure:ns     the longest (ns)
-- Few rows probe the as-of join below: keep DuckDB's ASOF join instead of its nested-loop plan.
-- idle_gaps shows first: rank, step, dur_ns, cause, host_activity, next_op, start_ns
-- idle_gaps_summary shows first: rank, step, cause, n_gaps, total_ns, max_ns
-- idle_gaps sorts by: dur_ns DESC, rank, start_ns
-- idle_gaps_summary sorts by: rank, step, total_ns DESC
-- scope: rank
-- requires: gpu_islands, gpu_ops, host_ops, ranges, step_windows
-- Helper tables live in schema tf_internal (out of a user's way in `.tables`); names resolve through the search path.
CREATE SCHEMA IF NOT EXISTS tf_internal;
SET search_path = 'main,tf_internal';
SET asof_loop_join_threshold = 0;

CREATE OR REPLACE TABLE idle_gaps AS
WITH params AS (
    SELECT coalesce(getvariable('tf_launch_threshold_ns'), 5000)::BIGINT AS launch_thr
), gaps AS (
    SELECT rank, lag(end_ns) OVER (PARTITION BY rank ORDER BY start_ns) AS start_ns, start_ns AS end_ns, first_op_id
    FROM gpu_islands
), main_thread AS (
    SELECT rank, arg_max(launch_tid, n) AS tid FROM (
        SELECT rank, launch_tid, count(*) AS n FROM gpu_ops WHERE launch_tid IS NOT NULL GROUP BY ALL)
    GROUP BY rank
), g AS (
    SELECT gp.rank, CASE WHEN gp.end_ns <= w.end_ns THEN w.step END AS step,
           gp.start_ns, gp.end_ns, gp.end_ns - gp.start_ns AS dur_ns,
           n.op_id AS next_op_id, n.api_start_ns AS next_api_start_ns,
           coalesce(n.issue_start_ns, n.api_start_ns) AS next_issue_start_ns,
           coalesce(n.launch_tid, mt.tid) AS host_tid, n.trace_id
    FROM gaps gp
    JOIN (SELECT op_id, step, api_start_ns, issue_start_ns, launch_tid, trace_id FROM gpu_ops) n ON n.op_id = gp.first_op_id
    ASOF LEFT JOIN step_windows w ON gp.rank = w.rank AND gp.start_ns >= w.start_ns
    LEFT JOIN main_thread mt ON mt.rank = gp.rank
    WHERE gp.start_ns IS NOT NULL AND gp.end_ns > gp.start_ns
), pts AS (
    SELECT rank, step, start_ns, host_tid, start_ns + dur_ns // 2 AS mid, end_ns, dur_ns FROM g
    WHERE dur_ns >= (SELECT launch_thr FROM params)
), threads AS (
    -- only the threads asked about: NCCL's helper threads alone hold millions of OS calls
    SELECT DISTINCT rank, host_tid AS tid FROM pts
), spans AS (
    -- what those threads were doing: their calls (by id: names are looked up for the few
    -- found), then their NVTX / annotation ranges
    SELECT rank, tid, start_ns, end_ns, op_id, NULL::VARCHAR AS range_name FROM host_ops
    WHERE (rank, tid) IN (FROM threads)
    UNION ALL
    SELECT rank, tid, start_ns, end_ns, NULL, name FROM ranges
    WHERE NOT on_gpu AND (rank, tid) IN (FROM threads)
), levelled AS (
    -- lvl: the power of two just above a span's length (2^(lvl-1) <= end - start < 2^lvl)
    SELECT *, CASE WHEN end_ns > start_ns THEN floor(log2(end_ns - start_ns))::INTEGER + 1 ELSE 0 END AS lvl
    FROM spans
), probes AS (
    -- A span shorter than 2^lvl that covers mid starts in mid's bucket of width 2^lvl or in the
    -- one before. So probing those two buckets at every level finds every span covering mid with
    -- equality (hash) joins: an interval join costs points x spans per thread here, and an as-of
    -- join by start misses an outer call when the latest-starting one ended before mid.
    SELECT p.rank, p.step, p.start_ns, p.end_ns, p.dur_ns, p.host_tid, p.mid, l.lvl, (p.mid >> l.lvl) - b.back AS bucket
    FROM pts p, range(0, 63) l(lvl), (VALUES (0), (1)) b(back)
), covering AS (
    -- innermost = shortest covering span (calls nest on a thread); ties broken for a stable answer.
    -- A call names the gap only where it fills at least half of it: a 1,439 ms stretch was credited to
    -- a cuEventRecord running at its midpoint (its calls: 0.92 ms); else the call around it, or the range
    SELECT p.rank, p.step, p.start_ns,
           arg_min(s.op_id, (s.end_ns - s.start_ns, -s.start_ns, -s.op_id))
               FILTER (WHERE s.op_id IS NOT NULL
                       AND 2 * (least(s.end_ns, p.end_ns) - greatest(s.start_ns, p.start_ns)) >= p.dur_ns) AS op_id,
           arg_min(s.range_name, (s.end_ns - s.start_ns, -s.start_ns, s.range_name)) FILTER (WHERE s.op_id IS NULL) AS range_name
    FROM probes p JOIN levelled s ON s.rank = p.rank AND s.tid = p.host_tid AND s.lvl = p.lvl
                                 AND s.start_ns >> s.lvl = p.bucket
    WHERE s.start_ns <= p.mid AND s.end_ns >= p.mid
    GROUP BY ALL
), best AS (
    SELECT c.rank, c.step, c.start_ns, coalesce(h.name, c.range_name) AS host_activity
    FROM covering c LEFT JOIN host_ops h ON h.op_id = c.op_id
)
SELECT g.rank, g.step, g.start_ns, g.end_ns, g.dur_ns,
       CASE WHEN g.next_api_start_ns >= g.start_ns THEN 'host_late'
            WHEN g.dur_ns < p.launch_thr THEN 'launch_latency'
            ELSE 'dependency' END AS cause,
       nm.name AS next_op, g.next_op_id, g.next_api_start_ns, g.next_issue_start_ns, g.host_tid, b.host_activity
FROM g CROSS JOIN params p LEFT JOIN best b ON b.rank = g.rank AND b.start_ns = g.start_ns  -- step may be NULL
-- kernel names are long: they join the narrow rows last
LEFT JOIN gpu_ops nm ON nm.op_id = g.next_op_id
ORDER BY g.rank, g.start_ns;

CREATE OR REPLACE TABLE idle_gaps_summary AS
SELECT rank, step, cause, count(*) AS n_gaps, sum(dur_ns)::BIGINT AS total_ns, max(dur_ns) AS max_ns
FROM idle_gaps GROUP BY ALL ORDER BY rank, step, total_ns DESC;

-- What `.read` of this file shows in the DuckDB shell (on a read-only database, this query alone):
SELECT * FROM idle_gaps LIMIT 20;
