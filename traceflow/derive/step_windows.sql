-- @table step_windows: each step's GPU window on each rank; and the step of GPU ops whose launch is not
--     in the capture. Together they make every GPU nanosecond count once (docs/step-attribution.md).
--
--
-- A step's *own* ops are those launched inside its host range. Ordered by their first start, the
-- windows of one rank tile its timeline without overlap:
-- @column rank            INTEGER  rank          the rank (process index in the job) the row belongs to
-- @column step            INTEGER  key           the training step (ProfilerStep#N, or the --step-pattern's number); NULL outside every
--     step
-- @column start_ns        BIGINT   time          the end of the previous window (ns since epoch); the first window starts at its first own op
-- @column end_ns          BIGINT   time          the last end of the own ops of this and earlier steps, clipped at the next
--     step's first own op (ns). When the host runs ahead of the GPU, ops of step N
--     still running after step N+1's first op are counted in N+1's window: each
--     nanosecond of GPU time is in one window only.
-- @column first_op_ns     BIGINT   time          first start of an own op (ns since epoch)
-- @column last_op_end_ns  BIGINT   time          last end of an own op (ns since epoch)
-- @column n_ops           BIGINT   figure:count  the step's own ops, plus the ops without a step of their own that start in its window
--
-- Ops whose launch call is not in the capture (trimmed exports, a profiler started mid-step, a
-- second process), and ops launched between two steps' host ranges, get the step whose window
-- holds their start; ops before the first window or
-- after the last keep step NULL and are counted in step_breakdown's 'before' / 'after' rows.
-- scope: rank
-- requires: gpu_ops
-- rewrites: gpu_ops
-- Helper tables live in schema tf_internal (out of a user's way in `.tables`); names resolve through the search path.
CREATE SCHEMA IF NOT EXISTS tf_internal;
SET search_path = 'main,tf_internal';
CREATE OR REPLACE TABLE tf_internal.step_windows AS
WITH w AS (
    SELECT rank, step, min(start_ns) AS first_op_ns, max(end_ns) AS last_op_end_ns, count(*) AS n_own
    FROM gpu_ops WHERE step IS NOT NULL
    GROUP BY rank, step
), o AS (
    SELECT *, max(last_op_end_ns) OVER (PARTITION BY rank ORDER BY first_op_ns, step ROWS UNBOUNDED PRECEDING) AS run_end,
           lead(first_op_ns) OVER (PARTITION BY rank ORDER BY first_op_ns, step) AS next_first
    FROM w
), e AS (
    SELECT *, CASE WHEN next_first IS NULL THEN run_end ELSE least(run_end, next_first) END AS end_ns FROM o
)
SELECT rank, step, coalesce(lag(end_ns) OVER (PARTITION BY rank ORDER BY first_op_ns, step), first_op_ns) AS start_ns,
       end_ns, first_op_ns, last_op_end_ns, n_own AS n_ops
FROM e;

-- GPU ops without a step (no launch record, or launched between steps): the window holding their start.
CREATE OR REPLACE TEMP TABLE tf_unlaunched_step AS
SELECT g.op_id, g.rank, w.step
FROM (SELECT op_id, rank, start_ns FROM gpu_ops WHERE step IS NULL) g
ASOF JOIN step_windows w ON g.rank = w.rank AND g.start_ns >= w.start_ns
WHERE g.start_ns < w.end_ns;

UPDATE gpu_ops SET step = u.step FROM tf_unlaunched_step u WHERE gpu_ops.op_id = u.op_id;

UPDATE step_windows SET n_ops = n_ops + u.n
FROM (SELECT rank, step, count(*) AS n FROM tf_unlaunched_step GROUP BY ALL) u
WHERE step_windows.rank = u.rank AND step_windows.step = u.step;

DROP TABLE tf_unlaunched_step;
