-- @table steps: one row per training step of one rank, from the host side.
-- A step is found wherever the profiler wrote it:
--   * an NVTX range / user annotation whose name matches the step pattern (default: `step N`,
--     `iteration N`, `iter N`, `train_step N`, `training step N`, `global_step N`, `batch N`,
--     `ProfilerStep#N`, any case and separator; SET VARIABLE tf_step_pattern to change it);
--   * a CPU op named `ProfilerStep#N` (older PyTorch profilers write the step as an `Operator`).
-- A rank with none gets the whole trace as step 0 (host_ops and gpu_ops give its extent).
-- @column rank      INTEGER  rank          the rank (process index in the job) the row belongs to
-- @column step      INTEGER  key           the training step (ProfilerStep#N, or the --step-pattern's number); NULL outside every
--     step
-- @column start_ns  BIGINT   time          the start of the step's host range (ns since epoch); several ranges of one step
--     (a range and a CPU op of the same ProfilerStep) are merged
-- @column end_ns    BIGINT   time          the end of the step's host range (ns since epoch)
-- @column source    VARCHAR  text          where the step came from: 'ProfilerStep' | 'range' | 'whole trace'
-- scope: rank
-- requires: gpu_ops, host_ops, ranges, traces
-- Helper tables live in schema tf_internal (out of a user's way in `.tables`); names resolve through the search path.
CREATE SCHEMA IF NOT EXISTS tf_internal;
SET search_path = 'main,tf_internal';
CREATE OR REPLACE TABLE steps AS
WITH pat AS (
    SELECT coalesce(getvariable('tf_step_pattern'),
                    '(?i)^\s*(?:profiler[\s_]*step|train(?:ing)?[\s_-]*step|global[\s_-]*step|step|iteration|iter|batch)[\s_#:=-]*(\d+)\s*$') AS p
), candidates AS (
    SELECT rank, name, start_ns, end_ns FROM ranges WHERE NOT on_gpu AND end_ns > start_ns
    UNION ALL
    -- older torch.profiler traces: ProfilerStep#N is a CPU op ('Operator' category)
    SELECT rank, name, start_ns, end_ns FROM host_ops
    WHERE kind = 'cpu_op' AND starts_with(name, 'ProfilerStep#') AND end_ns > start_ns
), named AS (
    SELECT c.rank, TRY_CAST(regexp_extract(c.name, pat.p, 1) AS INTEGER) AS step, c.start_ns, c.end_ns,
           CASE WHEN c.name LIKE 'ProfilerStep%' THEN 'ProfilerStep' ELSE 'range' END AS source
    FROM candidates c, pat
    WHERE regexp_matches(c.name, pat.p)
), by_step AS (
    SELECT rank, step, min(start_ns) AS start_ns, max(end_ns) AS end_ns, min(source) AS source
    FROM named WHERE step IS NOT NULL GROUP BY rank, step
), extent AS (
    SELECT rank, min(start_ns) AS start_ns, max(end_ns) AS end_ns FROM (
        SELECT rank, start_ns, end_ns FROM gpu_ops UNION ALL SELECT rank, start_ns, end_ns FROM host_ops)
    GROUP BY rank
)
SELECT rank, step, start_ns, end_ns, source FROM by_step
UNION ALL
SELECT t.rank, 0, e.start_ns, e.end_ns + 1, 'whole trace'
FROM traces t JOIN extent e USING (rank)
WHERE t.rank NOT IN (SELECT rank FROM by_step)
ORDER BY rank, step;
