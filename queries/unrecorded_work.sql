-- @table unrecorded_work: the ranks whose trace leaves GPU work out, so that GPU idle on them may be
--     work the trace did not record (step_causes' idle cause 'unrecorded work', the verdict's caveat).
-- @column rank      INTEGER  rank          the rank (process index in the job) the row belongs to
-- @column reason    VARCHAR  text          'launches without GPU ops': at least 10, and a tenth, of the rank's launch
--     calls have no GPU op in the trace (rocprof-unified-viewer's llama.cpp decode CSVs, a kernel trace and an API
--     trace sampled apart: 178 of 180 hipLaunchKernel without a kernel); 'communication kernels only': every GPU op is a
--     collective kernel and the trace holds no host call (TraceLens's NCCL-only TraceFuse output: the compute between
--     the collectives was filtered out, and read as 97 % "GPU idle with nothing else on the path")
-- @column launches  BIGINT   figure:count  launch calls in the rank's trace (cuda / hip ...LaunchKernel, graph launches)
-- @column unlinked  BIGINT   figure:count  those with no GPU op in the trace
-- scope: rank
-- requires: gpu_ops, host_ops
-- One place for the rule (step_causes.sql and findings.sql read it).
CREATE SCHEMA IF NOT EXISTS tf_internal;
SET search_path = 'main,tf_internal';
CREATE OR REPLACE TABLE tf_internal.unrecorded_work AS
WITH calls AS (
    SELECT h.rank, count(*) AS launches,
           count(*) FILTER (WHERE h.op_id NOT IN (SELECT launch_op_id FROM gpu_ops WHERE launch_op_id IS NOT NULL)) AS unlinked
    FROM host_ops h
    WHERE h.kind IN ('cuda_runtime', 'cuda_driver') AND regexp_matches(h.name, '(?i)launchkernel|graphlaunch|launchcooperative')
    GROUP BY h.rank
), ops AS (
    SELECT rank, count(*) AS n, count(*) FILTER (WHERE category = 'communication') AS comm FROM gpu_ops GROUP BY rank
), hosts AS (
    SELECT rank, count(*) AS n FROM host_ops GROUP BY rank
)
SELECT c.rank::INTEGER AS rank, 'launches without GPU ops' AS reason, c.launches::BIGINT AS launches, c.unlinked::BIGINT AS unlinked
FROM calls c WHERE c.unlinked >= 10 AND c.unlinked >= 0.1 * c.launches
UNION ALL
SELECT o.rank::INTEGER, 'communication kernels only', 0::BIGINT, 0::BIGINT
FROM ops o LEFT JOIN hosts h USING (rank)
WHERE o.comm = o.n AND o.n > 0 AND coalesce(h.n, 0) = 0
ORDER BY rank;
