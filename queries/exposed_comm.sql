-- @table exposed_comm: how much NCCL time each rank spent with no compute to hide it.
--
--
-- One row per rank and step, inside the step's GPU window. Times in ns.
-- @column rank         INTEGER  rank          the rank (process index in the job) the row belongs to
-- @column step         INTEGER  key           the training step (ProfilerStep#N, or the --step-pattern's number); NULL outside every
--     step
-- @column comm_ns      BIGINT   figure:ns     |comm| : union of communication ops (all streams)
-- @column compute_ns   BIGINT   figure:ns     |compute| : union of compute kernels
-- @column overlap_ns   BIGINT   figure:ns     |comm ∩ compute|
-- @column overlap_pct  DOUBLE   figure:percent  100 * overlap_ns / comm_ns (percent, 0..100; NULL without communication)
-- @column exposed_ns   BIGINT   figure:ns     |comm − compute| = comm_ns − overlap_ns
-- exposed_comm shows first: rank, step, exposed_ns, comm_ns, compute_ns, overlap_pct
-- @table exposed_comm_segments: the stretches themselves (rank, start_ns, end_ns in ns), where a
--     communication op ran with no compute beside it; for the Perfetto trace.
-- @column rank      INTEGER  rank          the rank (process index in the job) the row belongs to
-- @column start_ns  BIGINT   time          start, ns since the Unix epoch (after clock alignment)
-- @column end_ns    BIGINT   time          end, ns since the Unix epoch (after clock alignment)
-- scope: rank
-- requires: gpu_state, step_windows
-- Helper tables live in schema tf_internal (out of a user's way in `.tables`); names resolve through the search path.
CREATE SCHEMA IF NOT EXISTS tf_internal;
SET search_path = 'main,tf_internal';
CREATE OR REPLACE TABLE exposed_comm AS
WITH c AS (
    -- a segment has compute iff its state is 'compute' (compute ranks first), so gpu_state's
    -- cum_compute is the running total of time with compute running
    SELECT rank, end_ns, cum_comm, cum_comm_overlap, cum_compute
    FROM gpu_state
), d AS (
    -- window edges are segment boundaries: totals = running total at the end - at the start
    SELECT w.rank, w.step,
           e.cum_comm - coalesce(b.cum_comm, 0) AS comm_ns,
           e.cum_compute - coalesce(b.cum_compute, 0) AS compute_ns,
           e.cum_comm_overlap - coalesce(b.cum_comm_overlap, 0) AS overlap_ns
    FROM step_windows w JOIN c e ON e.rank = w.rank AND e.end_ns = w.end_ns
    LEFT JOIN c b ON b.rank = w.rank AND b.end_ns = w.start_ns
)
SELECT rank, step, comm_ns::BIGINT AS comm_ns, compute_ns::BIGINT AS compute_ns, overlap_ns::BIGINT AS overlap_ns,
       round(100.0 * overlap_ns / nullif(comm_ns, 0), 2) AS overlap_pct,
       (comm_ns - overlap_ns)::BIGINT AS exposed_ns
FROM d ORDER BY rank, step;

CREATE OR REPLACE TABLE tf_internal.exposed_comm_segments AS
-- A rank's segments are contiguous, so along a run of exposed segments end_ns - cum_exposed_comm
-- stays put, and any other time between two runs moves it on: it names the run, no window needed.
SELECT rank, min(start_ns) AS start_ns, max(end_ns) AS end_ns
FROM gpu_state WHERE state = 'communication'
GROUP BY rank, end_ns - cum_exposed_comm ORDER BY rank, start_ns;

-- What `.read` of this file shows in the DuckDB shell (on a read-only database, this query alone):
SELECT * FROM exposed_comm LIMIT 20;
