-- @table kernels: the kernels each rank spent its GPU time on.
--
--
-- One row per rank and kernel name, largest total first. Times in ns.
-- @column rank        INTEGER  rank          the rank (process index in the job) the row belongs to
-- @column name        VARCHAR  text          the name of the op, kernel or call (kernels: the full demangled C++ name)
-- @column category    VARCHAR  text          what a GPU op does: compute | communication | memory
-- @column count       BIGINT   figure:count  launches of the kernel
-- @column total_ns    BIGINT   figure:ns     sum of durations
-- @column mean_ns     BIGINT   figure:ns     total_ns / count
-- @column busy_share  DOUBLE   figure:fraction  total_ns / the rank's busy time (union of all its GPU ops), 0..1 (kernels on
--     concurrent streams can make the shares of a rank add up to more than 1)
-- kernels shows first: rank, name, total_ns, count, mean_ns, busy_share
-- scope: rank
-- requires: gpu_islands, gpu_ops
-- Helper tables live in schema tf_internal (out of a user's way in `.tables`); names resolve through the search path.
CREATE SCHEMA IF NOT EXISTS tf_internal;
SET search_path = 'main,tf_internal';
CREATE OR REPLACE TABLE kernels AS
WITH busy AS (SELECT rank, sum(end_ns - start_ns) AS busy_ns FROM gpu_islands GROUP BY rank)
SELECT g.rank, g.name, any_value(g.category) AS category, count(*) AS count,
       sum(g.end_ns - g.start_ns)::BIGINT AS total_ns, round(avg(g.end_ns - g.start_ns))::BIGINT AS mean_ns,
       round(sum(g.end_ns - g.start_ns) / nullif(any_value(b.busy_ns), 0), 4) AS busy_share
FROM gpu_ops g JOIN busy b USING (rank)
WHERE g.kind = 'kernel'
GROUP BY g.rank, g.name ORDER BY g.rank, total_ns DESC;

-- What `.read` of this file shows in the DuckDB shell (on a read-only database, this query alone):
SELECT * FROM kernels LIMIT 20;
