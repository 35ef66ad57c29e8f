-- steps: one row per training step of one rank.
-- Input: ranges (host side only). A step is a range whose name matches the step pattern
--   (default: `step N`, `iteration N`, `ProfilerStep#N`; SET VARIABLE tf_step_pattern to change it);
--   a rank with no such range gets the whole trace as step 0.
-- Output columns:
--   rank INTEGER, step INTEGER, start_ns / end_ns BIGINT (ns since epoch, host range),
--   source VARCHAR ('ProfilerStep' | 'range' | 'whole trace').
CREATE OR REPLACE TABLE steps AS
WITH pat AS (
    SELECT coalesce(getvariable('tf_step_pattern'),
                    '(?i)^\s*(?:profilerstep#|step|iteration|iter)[\s_#:=-]*(\d+)\s*$') AS p
), named AS (
    SELECT r.rank, TRY_CAST(regexp_extract(r.name, pat.p, 1) AS INTEGER) AS step, r.start_ns, r.end_ns,
           CASE WHEN r.name LIKE 'ProfilerStep%' THEN 'ProfilerStep' ELSE 'range' END AS source
    FROM ranges r, pat
    WHERE NOT r.on_gpu AND regexp_matches(r.name, pat.p) AND r.end_ns > r.start_ns
), by_step AS (
    SELECT rank, step, min(start_ns) AS start_ns, max(end_ns) AS end_ns, any_value(source) AS source
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
