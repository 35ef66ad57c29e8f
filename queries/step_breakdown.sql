-- @table step_breakdown: where each rank's GPU time went in each step, and outside steps.
--
--
-- One row per rank and step, plus a row per rank for GPU work before its first step's window and
-- one for work after its last (step NULL): the rows of a rank tile its GPU timeline, so their
-- busy_ns add up to the union of its GPU ops, every nanosecond once (docs/step-attribution.md).
-- All durations in ns; *_pct in percent of wall_ns.
-- @column rank                INTEGER  rank          the rank (process index in the job) the row belongs to
-- @column step                INTEGER  key           the step (NULL on the outside rows)
-- @column part                VARCHAR  text          'step' | 'before' (GPU work before the first step's window: launched before
--     the capture's steps, or before the capture) | 'after' (after the last window)
-- @column start_ns            BIGINT   time          the GPU window's start (ns since epoch), step_windows.sql: the end of the previous
--     window
-- @column end_ns              BIGINT   time          the GPU window's end (ns since epoch): the last end of the step's own ops,
--     clipped at the next step's first op
-- @column host_start_ns       BIGINT   time          the start of the step's host range (ns since epoch); NULL on outside rows
-- @column host_end_ns         BIGINT   time          the end of the step's host range (ns since epoch); NULL on outside rows
-- @column n_ops               BIGINT   figure:count  GPU ops of the step (its own and those without a step whose start is in the window)
-- @column wall_ns             BIGINT   figure:ns     end_ns - start_ns
-- @column busy_ns             BIGINT   figure:ns     union of the rank's GPU ops (all streams) inside the window
-- @column idle_ns             BIGINT   figure:ns     wall_ns - busy_ns
-- @column compute_ns          BIGINT   figure:ns     union of compute kernels
-- @column exposed_comm_ns     BIGINT   figure:ns     communication not overlapped by compute
-- @column exposed_memory_ns   BIGINT   figure:ns     memcpy/memset not overlapped by compute or communication
-- @column idle_pct            DOUBLE   figure:percent  idle_ns in percent of wall_ns
-- @column compute_pct         DOUBLE   figure:percent  compute_ns in percent of wall_ns
-- @column exposed_comm_pct    DOUBLE   figure:percent  exposed_comm_ns in percent of wall_ns
-- @column exposed_memory_pct  DOUBLE   figure:percent  exposed_memory_ns in percent of wall_ns
-- Invariant: compute_ns + exposed_comm_ns + exposed_memory_ns + idle_ns = wall_ns.
-- step_breakdown shows first: rank, step, busy_ns, idle_ns, compute_ns, exposed_comm_ns, idle_pct, compute_pct, exposed_comm_pct, wall_ns, exposed_memory_ns, exposed_memory_pct
-- scope: rank
-- requires: gpu_ops, gpu_state, step_windows, steps
-- Helper tables live in schema tf_internal (out of a user's way in `.tables`); names resolve through the search path.
CREATE SCHEMA IF NOT EXISTS tf_internal;
SET search_path = 'main,tf_internal';
CREATE OR REPLACE TABLE step_breakdown AS
WITH c AS (
    SELECT rank, end_ns, cum_compute, cum_exposed_comm, cum_exposed_memory, cum_idle FROM gpu_state
), extent AS (
    SELECT rank, min(start_ns) AS first_ns, max(end_ns) AS last_ns FROM gpu_ops WHERE end_ns > start_ns GROUP BY rank
), bounds AS (
    SELECT rank, min(start_ns) AS ws, max(end_ns) AS we FROM step_windows GROUP BY rank
), stepless AS (
    -- ops without a step lie before the first window or after the last (step_windows.sql)
    SELECT g.rank, count(*) FILTER (WHERE b.we IS NULL OR g.start_ns < b.ws) AS n_before,
           count(*) FILTER (WHERE g.start_ns >= b.we) AS n_after
    FROM gpu_ops g LEFT JOIN bounds b USING (rank) WHERE g.step IS NULL GROUP BY g.rank
), outside AS (
    SELECT e.rank, NULL::INTEGER AS step, 'before' AS part, e.first_ns AS start_ns, coalesce(b.ws, e.last_ns) AS end_ns,
           coalesce(n.n_before, 0) AS n_ops
    FROM extent e LEFT JOIN bounds b USING (rank) LEFT JOIN stepless n USING (rank)
    WHERE e.first_ns < coalesce(b.ws, e.last_ns + 1)
    UNION ALL
    SELECT e.rank, NULL, 'after', b.we, e.last_ns, coalesce(n.n_after, 0)
    FROM extent e JOIN bounds b USING (rank) LEFT JOIN stepless n USING (rank) WHERE e.last_ns > b.we
), rows AS (
    SELECT rank, step, 'step' AS part, start_ns, end_ns, n_ops FROM step_windows
    UNION ALL SELECT * FROM outside
), agg AS (
    -- window edges are segment boundaries: totals = running total at the end - at the start
    SELECT w.rank, w.step, w.part, w.start_ns, w.end_ns, w.n_ops,
           coalesce(e.cum_compute, 0) - coalesce(b.cum_compute, 0) AS compute_ns,
           coalesce(e.cum_exposed_comm, 0) - coalesce(b.cum_exposed_comm, 0) AS exposed_comm_ns,
           coalesce(e.cum_exposed_memory, 0) - coalesce(b.cum_exposed_memory, 0) AS exposed_memory_ns,
           coalesce(e.cum_idle, 0) - coalesce(b.cum_idle, 0) AS idle_ns
    FROM rows w LEFT JOIN c e ON e.rank = w.rank AND e.end_ns = w.end_ns
    LEFT JOIN c b ON b.rank = w.rank AND b.end_ns = w.start_ns
)
SELECT a.rank, a.step, a.part, a.start_ns, a.end_ns, st.start_ns AS host_start_ns, st.end_ns AS host_end_ns, a.n_ops,
       a.end_ns - a.start_ns AS wall_ns,
       (a.compute_ns + a.exposed_comm_ns + a.exposed_memory_ns)::BIGINT AS busy_ns, a.idle_ns::BIGINT AS idle_ns,
       a.compute_ns::BIGINT AS compute_ns, a.exposed_comm_ns::BIGINT AS exposed_comm_ns,
       a.exposed_memory_ns::BIGINT AS exposed_memory_ns,
       round(100.0 * a.idle_ns / nullif(a.end_ns - a.start_ns, 0), 2) AS idle_pct,
       round(100.0 * a.compute_ns / nullif(a.end_ns - a.start_ns, 0), 2) AS compute_pct,
       round(100.0 * a.exposed_comm_ns / nullif(a.end_ns - a.start_ns, 0), 2) AS exposed_comm_pct,
       round(100.0 * a.exposed_memory_ns / nullif(a.end_ns - a.start_ns, 0), 2) AS exposed_memory_pct
FROM agg a LEFT JOIN steps st ON st.rank = a.rank AND st.step = a.step
ORDER BY a.rank, a.start_ns, a.step NULLS FIRST;

-- What `.read` of this file shows in the DuckDB shell (on a read-only database, this query alone):
SELECT * FROM step_breakdown LIMIT 20;
