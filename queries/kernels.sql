-- kernels (pack `kernels`): the kernels each rank spent its GPU time on.
--
-- Inputs: gpu_ops, gpu_islands.
--
-- One row per rank and kernel name, largest total first. Times in ns.
--   rank, name, category
--   count       launches of the kernel
--   total_ns    sum of durations
--   mean_ns     total_ns / count
--   busy_share  total_ns / the rank's busy time (union of all its GPU ops), 0..1 (kernels on
--               concurrent streams can make the shares of a rank add up to more than 1)
-- kernels shows first: rank, name, total_ns, count, mean_ns, busy_share
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
