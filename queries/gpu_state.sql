-- @table gpu_state: when each rank's GPU was busy, and with what; the base of the per-step figures.
-- @column rank                INTEGER  rank          the rank (process index in the job) the row belongs to
-- @column start_ns            BIGINT   time          start, ns since the Unix epoch (after clock alignment)
-- @column end_ns              BIGINT   time          end, ns since the Unix epoch (after clock alignment)
-- @column has_compute         BOOLEAN  flag          a compute kernel runs in the segment
-- @column has_comm            BOOLEAN  flag          an NCCL (communication) kernel runs in the segment
-- @column has_memory          BOOLEAN  flag          a memcpy or memset runs in the segment
-- @column state               VARCHAR  text          'compute' > 'communication' > 'memory' > 'idle' (the first that applies), so that compute + exposed comm + exposed memory + idle = the window, exactly
-- @column cum_compute         BIGINT   figure:ns     running total (ns) of compute from the rank's first segment to this one's end
-- @column cum_exposed_comm    BIGINT   figure:ns     running total (ns) of exposed communication from the rank's first segment to this one's end
-- @column cum_exposed_memory  BIGINT   figure:ns     running total (ns) of exposed memory from the rank's first segment to this one's end
-- @column cum_idle            BIGINT   figure:ns     running total (ns) of idle from the rank's first segment to this one's end
-- @column cum_comm            BIGINT   figure:ns     running total (ns) of communication (exposed or not) from the rank's first segment to this one's end
-- @column cum_comm_overlap    BIGINT   figure:ns     running total (ns) of communication overlapped by compute from the rank's first segment to this one's end
--
--
-- The rank's timeline cut into elementary segments (at every op start/end and
-- window edge), so each segment has one set of running ops.
-- scope: rank
-- requires: gpu_ops, step_windows
-- Helper tables live in schema tf_internal (out of a user's way in `.tables`); names resolve through the search path.
CREATE SCHEMA IF NOT EXISTS tf_internal;
SET search_path = 'main,tf_internal';
CREATE OR REPLACE TABLE tf_internal.gpu_state AS
WITH ev AS (
    SELECT rank, start_ns AS t, (category = 'compute')::INTEGER AS dc, (category = 'communication')::INTEGER AS dn,
           (category = 'memory')::INTEGER AS dm
    FROM gpu_ops WHERE end_ns > start_ns
    UNION ALL
    SELECT rank, end_ns, -(category = 'compute')::INTEGER, -(category = 'communication')::INTEGER,
           -(category = 'memory')::INTEGER
    FROM gpu_ops WHERE end_ns > start_ns
    UNION ALL SELECT rank, start_ns, 0, 0, 0 FROM step_windows
    UNION ALL SELECT rank, end_ns, 0, 0, 0 FROM step_windows
), pts AS (
    SELECT rank, t, sum(dc) AS dc, sum(dn) AS dn, sum(dm) AS dm FROM ev GROUP BY rank, t
), run AS (
    -- One window over (rank, t) instead of one partition per rank: DuckDB's per-partition windows
    -- slowed down past 8 ranks (nsys x16: 12 s -> 9 s). The running counts need no reset between
    -- ranks: each rank's op starts and ends cancel out.
    SELECT rank, t AS start_ns, CASE WHEN lead(rank) OVER o = rank THEN lead(t) OVER o END AS end_ns,
           sum(dc) OVER c AS n_compute, sum(dn) OVER c AS n_comm, sum(dm) OVER c AS n_memory
    FROM pts
    WINDOW o AS (ORDER BY rank, t), c AS (ORDER BY rank, t ROWS UNBOUNDED PRECEDING)
), seg AS (
    SELECT rank, start_ns, end_ns, n_compute > 0 AS has_compute, n_comm > 0 AS has_comm, n_memory > 0 AS has_memory,
           CASE WHEN n_compute > 0 THEN 'compute' WHEN n_comm > 0 THEN 'communication'
                WHEN n_memory > 0 THEN 'memory' ELSE 'idle' END AS state
    FROM run WHERE end_ns > start_ns
)
-- Running totals (ns) up to each segment's end: a window's figures are two lookups, not a range join.
-- Four running sums, not six: the four states tile the rank's timeline (segments are contiguous from
-- its first point), so idle = elapsed - the other three; and comm = exposed comm + overlapped comm.
, d AS (
    SELECT *, CASE WHEN state = 'compute' THEN end_ns - start_ns ELSE 0 END AS d_compute,
              CASE WHEN state = 'communication' THEN end_ns - start_ns ELSE 0 END AS d_exposed_comm,
              CASE WHEN state = 'memory' THEN end_ns - start_ns ELSE 0 END AS d_exposed_memory,
              CASE WHEN has_comm AND has_compute THEN end_ns - start_ns ELSE 0 END AS d_comm_overlap
    FROM seg
), base AS (
    -- what the job-wide running totals hold from the ranks before: subtracted, each rank starts at 0
    SELECT rank, min(start_ns) AS first_ns,
           coalesce(sum(sum(d_compute)) OVER r, 0) AS b_compute, coalesce(sum(sum(d_exposed_comm)) OVER r, 0) AS b_exposed_comm,
           coalesce(sum(sum(d_exposed_memory)) OVER r, 0) AS b_exposed_memory,
           coalesce(sum(sum(d_comm_overlap)) OVER r, 0) AS b_comm_overlap
    FROM d GROUP BY rank
    WINDOW r AS (ORDER BY rank ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
), cum AS (
    SELECT d.rank, start_ns, end_ns, has_compute, has_comm, has_memory, state, first_ns,
           sum(d_compute) OVER w - b_compute AS cum_compute,
           sum(d_exposed_comm) OVER w - b_exposed_comm AS cum_exposed_comm,
           sum(d_exposed_memory) OVER w - b_exposed_memory AS cum_exposed_memory,
           sum(d_comm_overlap) OVER w - b_comm_overlap AS cum_comm_overlap
    FROM d JOIN base USING (rank)
    WINDOW w AS (ORDER BY d.rank, start_ns ROWS UNBOUNDED PRECEDING)
)
-- BIGINT, not the HUGEINT of a sum: a cluster's worker writes this table to Parquet, which has no
-- 128-bit integers (DuckDB writes them as DOUBLE, which cannot hold ns since the epoch exactly)
SELECT rank, start_ns, end_ns, has_compute, has_comm, has_memory, state,
       cum_compute::BIGINT AS cum_compute, cum_exposed_comm::BIGINT AS cum_exposed_comm,
       cum_exposed_memory::BIGINT AS cum_exposed_memory,
       (end_ns - first_ns - cum_compute - cum_exposed_comm - cum_exposed_memory)::BIGINT AS cum_idle,
       (cum_exposed_comm + cum_comm_overlap)::BIGINT AS cum_comm,
       cum_comm_overlap::BIGINT AS cum_comm_overlap
FROM cum;

-- What `.read` of this file shows in the DuckDB shell (on a read-only database, this query alone):
SELECT * FROM gpu_state LIMIT 20;
