-- @table desync_timing: each Flight Recorder entry joined with the rank's timing
--     trace (Kineto / nsys beside the dumps): the host call that enqueued it. Empty without both.
--
-- The recorder writes an entry inside the call that enqueues the collective, on the rank's own
-- clock (ns since epoch, the clock the profilers use too): the entry joins the communication call
-- of the same rank open at its created_ns (Kineto: c10d::allreduce_ and the like, or
-- record_param_comms; nsys: PyTorch's NVTX ranges of the same names). The time is the key, not the
-- profiler's Seq argument: gloo records no record_param_comms, and a sequence counted in a trace
-- starts wherever the trace starts. Clock offsets applied to the rank's trace are applied here too.
--
-- @column pg          VARCHAR  key           the entry's process group (fr_entries.pg)
-- @column seq         BIGINT   key           the entry's collective sequence number in its group (fr_entries.seq)
-- @column rank        INTEGER  rank          the rank whose buffer holds the entry (fr_entries.rank)
-- @column op          VARCHAR  text          the entry's collective or p2p call (fr_entries.op)
-- @column host_name   VARCHAR  text          the call that enqueued it (c10d::allreduce_, record_param_comms, nccl:all_reduce ...)
-- @column start_ns    BIGINT   time          when that call began, on the trace's clock (ns since epoch)
-- @column end_ns      BIGINT   time          when that call returned, on the trace's clock (ns since epoch)
-- @column host_op_id  BIGINT   id:host_ops   host_ops.op_id of the call (NULL when it is an NVTX range)
--
-- @table desync_timing_ranks: per traced rank, what it did from the moment
--     the hang began (the first enqueue of the group's first disagreement, else of the collective the
--     ranks waited in) to the end of its trace.
-- @column rank              INTEGER  rank          the traced rank the row is about
-- @column hang_ns           BIGINT   time          when the hang began (ns since epoch, the trace's clock)
-- @column trace_end_ns      BIGINT   time          the trace's last event (ns since epoch)
-- @column last_seq          BIGINT   key           the last collective of the hung group the trace shows the rank entering
-- @column host_activity     VARCHAR  text          where its host spent that stretch: the innermost host op or range (not a
--     communication call) covering at least half of the longest one's overlap
-- @column host_activity_ns  BIGINT   figure:ns     how much of the stretch it covered (ns)
-- @column in_collective_ns  BIGINT   figure:ns     how much of the stretch the rank spent inside communication calls (ns)
-- @column gpu_busy_ns       BIGINT   figure:ns     GPU time of the rank in the 5 s before the hang began (ns)
-- @column gpu_at_hang       VARCHAR  text          the GPU op running on the rank when the hang began (NULL: none)
-- @column where_stuck       VARCHAR  text          collective: inside a communication call for at least half of the stretch |
--     host: in a host op or range outside any collective for at least half of it |
--     idle: neither | NULL: its trace ends before the hang
-- desync_timing_ranks shows first: rank, where_stuck, host_activity, host_activity_ns, in_collective_ns, gpu_busy_ns, gpu_at_hang, last_seq
-- scope: job
-- requires: fr_entries, traces, host_ops, ranges, gpu_ops, desync, desync_ranks
CREATE SCHEMA IF NOT EXISTS tf_internal;
SET search_path = 'main,tf_internal';
CREATE OR REPLACE TABLE desync_timing AS
WITH t AS (
    SELECT rank, trace_id, clock_offset_ns + coalesce(cpu_clock_offset_ns, 0) AS off FROM traces
    WHERE source_format NOT IN ('fr-pickle', 'fr-json')
),
calls AS (
    SELECT trace_id, op_id, name, start_ns, end_ns FROM host_ops
    WHERE name LIKE 'c10d::%' OR name = 'record_param_comms' OR name LIKE 'nccl:%' OR name LIKE 'gloo:%'
    UNION ALL
    SELECT trace_id, NULL, name, start_ns, end_ns FROM ranges
    WHERE NOT coalesce(on_gpu, FALSE) AND (name LIKE 'c10d::%' OR name = 'record_param_comms')
)
SELECT e.pg, e.seq, e.rank, e.op, c.name AS host_name, c.start_ns, c.end_ns, c.op_id AS host_op_id
FROM fr_entries e JOIN t ON t.rank = e.rank
JOIN calls c ON c.trace_id = t.trace_id AND e.created_ns + t.off BETWEEN c.start_ns AND c.end_ns
QUALIFY row_number() OVER (PARTITION BY e.dump_id, e.record_id ORDER BY c.start_ns DESC, c.name) = 1
ORDER BY e.rank, e.pg, e.seq;

CREATE OR REPLACE TABLE desync_timing_ranks AS
WITH hung AS (  -- the group and the moment the hang began
    SELECT pg, created_ns FROM desync WHERE first
    UNION ALL
    SELECT pg, min(last_created_ns) FROM desync_ranks
    WHERE state = 'waiting' AND NOT EXISTS (SELECT 1 FROM desync) GROUP BY pg
),
h AS (SELECT arg_min(pg, created_ns) AS pg, min(created_ns) AS at FROM hung),
t AS (
    SELECT rank, trace_id, clock_offset_ns + coalesce(cpu_clock_offset_ns, 0) AS off FROM traces
    WHERE source_format NOT IN ('fr-pickle', 'fr-json')
),
th AS (SELECT t.*, h.at + t.off AS hang_ns, h.pg FROM t, h WHERE h.at IS NOT NULL),
ends AS (
    SELECT trace_id, max(end_ns) AS trace_end_ns FROM (
        SELECT trace_id, end_ns FROM host_ops UNION ALL SELECT trace_id, end_ns FROM ranges UNION ALL SELECT trace_id, end_ns FROM gpu_ops)
    GROUP BY trace_id
),
spans AS (  -- host ops and ranges overlapping the stretch from the hang to the trace's end
    SELECT th.rank, x.name, x.start_ns,
           least(x.end_ns, e.trace_end_ns) - greatest(x.start_ns, th.hang_ns) AS overlap,
           x.name LIKE 'c10d::%' OR x.name = 'record_param_comms' OR x.name LIKE 'nccl%' OR x.name LIKE 'gloo:%' AS comm
    FROM th JOIN ends e USING (trace_id)
    JOIN (SELECT trace_id, name, start_ns, end_ns FROM host_ops WHERE kind = 'cpu_op'
          UNION ALL SELECT trace_id, name, start_ns, end_ns FROM ranges WHERE NOT coalesce(on_gpu, FALSE)) x
      ON x.trace_id = th.trace_id AND x.end_ns > th.hang_ns AND x.start_ns < e.trace_end_ns
),
host AS (
    SELECT rank, max(overlap) FILTER (WHERE comm) AS in_collective_ns,
           arg_max(name, start_ns) FILTER (WHERE NOT comm AND overlap >= top / 2) AS host_activity,
           arg_max(overlap, start_ns) FILTER (WHERE NOT comm AND overlap >= top / 2) AS host_activity_ns
    FROM (SELECT *, max(overlap) FILTER (WHERE NOT comm) OVER (PARTITION BY rank) AS top FROM spans)
    GROUP BY rank
),
gpu AS (
    SELECT th.rank, sum(least(g.end_ns, th.hang_ns) - greatest(g.start_ns, th.hang_ns - 5000000000)) AS gpu_busy_ns,
           arg_max(g.name, g.start_ns) FILTER (WHERE g.start_ns <= th.hang_ns AND g.end_ns > th.hang_ns) AS gpu_at_hang
    FROM th JOIN gpu_ops g ON g.trace_id = th.trace_id AND g.end_ns > th.hang_ns - 5000000000 AND g.start_ns < th.hang_ns
    GROUP BY th.rank
)
SELECT th.rank, th.hang_ns, e.trace_end_ns,
       (SELECT max(d.seq) FROM desync_timing d WHERE d.rank = th.rank AND d.pg = th.pg) AS last_seq,
       host.host_activity, host.host_activity_ns::BIGINT AS host_activity_ns, host.in_collective_ns::BIGINT AS in_collective_ns,
       coalesce(gpu.gpu_busy_ns, 0)::BIGINT AS gpu_busy_ns, gpu.gpu_at_hang,
       CASE WHEN e.trace_end_ns IS NULL OR e.trace_end_ns <= th.hang_ns THEN NULL
            WHEN 2 * coalesce(host.in_collective_ns, 0) >= e.trace_end_ns - th.hang_ns THEN 'collective'
            WHEN 2 * coalesce(host.host_activity_ns, 0) >= e.trace_end_ns - th.hang_ns THEN 'host'
            ELSE 'idle' END AS where_stuck
FROM th LEFT JOIN ends e USING (trace_id) LEFT JOIN host USING (rank) LEFT JOIN gpu USING (rank)
ORDER BY th.rank;

-- What `.read` of this file shows in the DuckDB shell (on a read-only database, this query alone):
SELECT * FROM desync_timing_ranks LIMIT 20;
