-- @table gpu_islands: maximal busy intervals of each rank (the union of all its GPU ops, all streams).
-- @column rank            INTEGER  rank          the rank (process index in the job) the row belongs to
-- @column island          BIGINT   key           the island's number within the rank, in time order
-- @column start_ns        BIGINT   time          start, ns since the Unix epoch (after clock alignment)
-- @column end_ns          BIGINT   time          end, ns since the Unix epoch (after clock alignment)
-- @column first_op_id     BIGINT   id:gpu_ops    an op starting the island (the op that ended the idle gap before it)
-- @column busy_before_ns  BIGINT   figure:ns     busy time of the rank before this island (ns)
--
--
-- scope: rank
-- requires: gpu_ops
-- Helper tables live in schema tf_internal (out of a user's way in `.tables`); names resolve through the search path.
CREATE SCHEMA IF NOT EXISTS tf_internal;
SET search_path = 'main,tf_internal';
CREATE OR REPLACE TABLE tf_internal.gpu_islands AS
WITH o AS (
    SELECT rank, start_ns, end_ns, op_id,
           max(end_ns) OVER (PARTITION BY rank ORDER BY start_ns, end_ns, op_id
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
    FROM gpu_ops WHERE end_ns >= start_ns
), n AS (
    SELECT *, sum(CASE WHEN prev_end IS NULL OR start_ns > prev_end THEN 1 ELSE 0 END)
                  OVER (PARTITION BY rank ORDER BY start_ns, end_ns, op_id ROWS UNBOUNDED PRECEDING) AS island
    FROM o
), i AS (
    SELECT rank, island, min(start_ns) AS start_ns, max(end_ns) AS end_ns, arg_min(op_id, start_ns) AS first_op_id
    FROM n GROUP BY rank, island
)
SELECT rank, island::BIGINT AS island, start_ns, end_ns, first_op_id, coalesce(sum(end_ns - start_ns) OVER (PARTITION BY rank ORDER BY start_ns
                   ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0)::BIGINT AS busy_before_ns
FROM i;

-- What `.read` of this file shows in the DuckDB shell (on a read-only database, this query alone):
SELECT * FROM gpu_islands LIMIT 20;
