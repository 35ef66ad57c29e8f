-- @table desync: per process group and sequence id where the ranks' Flight Recorder
--     dumps disagree, one row per kind of disagreement: the collective some ranks never reached, or
--     reached with another size, dtype or op (docs/hang-forensics.md). Empty without dumps.
--
-- Compared: collectives (not p2p calls) whose sequence id every dumped member's buffer still holds
-- (a buffer keeps its last N entries: older ids are not compared). Set-based: one GROUP BY per
-- vote, whatever the number of ranks.
--
-- @column pg                    VARCHAR    key           the process group's name ('0': the default group)
-- @column pg_desc               VARCHAR    key           its description (default_pg, ...)
-- @column seq                   BIGINT     key           the collective's sequence id in the group (1 = its first)
-- @column op                    VARCHAR    text          the op most ranks called as this seq (on a tie: the first by name)
-- @column kind                  VARCHAR    text          missing: some ranks never enqueued it | op_mismatch | size_mismatch | dtype_mismatch |
--     not_started: enqueued but not started on these ranks' GPUs while others were inside
--     it (NCCL: earlier GPU work held them)
-- @column ranks                 INTEGER[]  key           the ranks at fault: those that never arrived (missing) or never started it
--     (not_started), else the minority (on a
--     tie: every rank that called it); a list
-- @column expected              VARCHAR    text          what the majority called: op, input sizes or dtypes as recorded (NULL for missing)
-- @column got                   VARCHAR    text          what the ranks at fault called instead (NULL for missing); JSON text for sizes
-- @column waiting               INTEGER[]  key           ranks that enqueued this seq and never completed it: they waited in it; a list
-- @column no_dump               INTEGER[]  key           members of the group with no dump: what they did is unknown; a list
-- @column first                 BOOLEAN    flag          TRUE on the group's earliest disagreement: where it stopped
-- @column fault_last_completed  BIGINT     key           the last collective of the group the ranks at fault completed (the lowest)
-- @column fault_frame           VARCHAR    text          where the ranks at fault last called into the group: the innermost frame outside
--     PyTorch of their latest entry in it (file:line function)
-- @column wait_frame            VARCHAR    text          where the waiting ranks called this seq (the frame most of them share)
-- @column created_ns            BIGINT     time:unaligned when the first rank enqueued this seq (ns since epoch): when the waiting began
--
-- @table desync_ranks: per process group and member rank, where it stood.
-- @column pg               VARCHAR  key           the process group's name ('0': the default group)
-- @column rank             INTEGER  rank          the rank (process index in the job) the row belongs to
-- @column dumped           BOOLEAN  flag          FALSE: no dump from this rank
-- @column last_enqueued    BIGINT   key           the last collective seq it enqueued in the group
-- @column last_completed   BIGINT   key           the last one it completed: the later of pg_status's and its entries' (completed or
--     retired)
-- @column state            VARCHAR  text          no_dump | not_entered (never enqueued the group's first disagreement) |
--     waiting (enqueued a collective it never completed) | idle (all it enqueued completed)
-- @column op               VARCHAR  text          the op of its last enqueued collective
-- @column frame            VARCHAR  text          where it called that collective: file:line function
-- @column last_created_ns  BIGINT   time:unaligned when it enqueued that collective (ns since epoch)
-- desync shows first: pg, seq, op, kind, ranks, expected, got, waiting, no_dump
-- desync_ranks shows first: pg, rank, state, last_enqueued, last_completed, op, frame
-- desync sorts by: created_ns, pg, seq, kind
-- desync_ranks sorts by: pg, rank
-- (`traceflow query` shows the desync where it stopped first)
-- @table desync_members: the members of each process group: pg_config's ranks where a dump states them, else the ranks that dumped it.
-- @column pg       VARCHAR  key           the process group's name ('0': the default group)
-- @column pg_desc  VARCHAR  key           its description (default_pg, ...)
-- @column rank     INTEGER  rank          the rank (process index in the job) the row belongs to
-- @table desync_progress: where each member stood in each group: pg_status and its entries.
-- @column pg              VARCHAR  key           the process group's name ('0': the default group)
-- @column pg_desc         VARCHAR  key           its description (default_pg, ...)
-- @column rank            INTEGER  rank          the rank (process index in the job) the row belongs to
-- @column dumped          BOOLEAN  flag          FALSE: no dump from this rank
-- @column last_enqueued   BIGINT   key           the last collective seq it enqueued in the group
-- @column last_completed  BIGINT   key           the last one it completed: the later of pg_status's and its entries' (completed or
--     retired)
-- @column min_seq         BIGINT   key           the lowest collective seq its buffer still holds in the group
-- @table desync_calls: the collectives compared, one row per rank: ids every dumped member's buffer still holds.
-- @column pg          VARCHAR  key           the process group's name ('0': the default group)
-- @column seq         BIGINT   key           the collective's sequence id in the group (1 = its first)
-- @column rank        INTEGER  rank          the rank (process index in the job) the row belongs to
-- @column op          VARCHAR  text          the op most ranks called as this seq (on a tie: the first by name)
-- @column sizes       VARCHAR  text          the input sizes as recorded (and ' -> ' the output sizes where they differ)
-- @column dtypes      VARCHAR  text          the input dtypes as recorded
-- @column created_ns  BIGINT   time:unaligned when this rank enqueued it (ns since epoch)
-- @column user_frame  VARCHAR  text          the innermost frame outside PyTorch of its stack (file:line function)
-- @column state       VARCHAR  text          the entry's state as recorded: scheduled | started | completed
-- @column open        BOOLEAN  flag          the rank enqueued it and never completed it: it waited in it
-- @table desync_found: each disagreement found, before desync adds its frames and the members without a dump.
-- @column pg          VARCHAR    key           the process group's name ('0': the default group)
-- @column seq         BIGINT     key           the collective's sequence id in the group (1 = its first)
-- @column kind        VARCHAR    text          missing: some ranks never enqueued it | op_mismatch | size_mismatch | dtype_mismatch |
--     not_started: enqueued but not started on these ranks' GPUs while others were inside it
--     (NCCL: earlier GPU work held them)
-- @column ranks       INTEGER[]  key           the ranks at fault: those that never arrived (missing) or never started it (not_started),
--     else the minority (on a tie: every rank that called it); a list
-- @column expected    VARCHAR    text          what the majority called: op, input sizes or dtypes as recorded (NULL for missing)
-- @column got         VARCHAR    text          what the ranks at fault called instead (NULL for missing); JSON text for sizes
-- @column waiting     INTEGER[]  key           ranks that enqueued this seq and never completed it: they waited in it; a list
-- @column wait_frame  VARCHAR    text          where the waiting ranks called this seq (the frame most of them share)
-- @column created_ns  BIGINT     time:unaligned when the first rank enqueued this seq (ns since epoch): when the waiting began
-- scope: job
-- requires: fr_entries, fr_groups, fr_dumps
-- Helper tables live in schema tf_internal (out of a user's way in `.tables`); names resolve through the search path.
CREATE SCHEMA IF NOT EXISTS tf_internal;
SET search_path = 'main,tf_internal';

-- Members of each group: pg_config's ranks where a dump states them, else the ranks that dumped it.
CREATE OR REPLACE TABLE tf_internal.desync_members AS
WITH cfg AS (
    SELECT pg, any_value(pg_desc) AS pg_desc, try_cast(any_value(ranks) FILTER (WHERE ranks IS NOT NULL) AS INTEGER[]) AS members
    FROM fr_groups GROUP BY pg
)
SELECT pg, pg_desc, unnest(members) AS rank FROM cfg WHERE members IS NOT NULL
UNION ALL
SELECT DISTINCT g.pg, c.pg_desc, g.rank FROM fr_groups g JOIN cfg c USING (pg) WHERE c.members IS NULL;

-- Where each member stood in each group: pg_status and its entries. gloo updates pg_status's last
-- completed id late (a recorded dump said 2 where entry 3 was already retired): the later of the two.
CREATE OR REPLACE TABLE tf_internal.desync_progress AS
WITH e AS (
    SELECT pg, rank, min(seq) AS min_seq, max(seq) AS max_seq,
           max(seq) FILTER (WHERE state = 'completed' OR retired) AS max_done
    FROM fr_entries WHERE NOT is_p2p GROUP BY pg, rank
)
SELECT m.pg, m.pg_desc, m.rank, m.rank IN (SELECT rank FROM fr_dumps) AS dumped,
       coalesce(g.last_enqueued, e.max_seq) AS last_enqueued,
       greatest(g.last_completed, e.max_done) AS last_completed, e.min_seq
FROM desync_members m
LEFT JOIN fr_groups g ON g.pg = m.pg AND g.rank = m.rank
LEFT JOIN e ON e.pg = m.pg AND e.rank = m.rank;

-- The collectives compared: ids every dumped member's buffer still holds.
CREATE OR REPLACE TABLE tf_internal.desync_calls AS
WITH lo AS (SELECT pg, max(min_seq) AS lo FROM desync_progress WHERE dumped GROUP BY pg)
SELECT e.pg, e.seq, e.rank, e.op,
       CASE WHEN e.output_sizes IS NULL OR e.output_sizes = e.input_sizes THEN e.input_sizes
            ELSE e.input_sizes || ' -> ' || e.output_sizes END AS sizes,
       e.input_dtypes AS dtypes, e.created_ns, e.user_frame, e.state,
       e.seq > coalesce(p.last_completed, -1) AND e.state IS DISTINCT FROM 'completed' AND NOT coalesce(e.retired, FALSE) AS open
FROM fr_entries e JOIN lo USING (pg)
LEFT JOIN desync_progress p ON p.pg = e.pg AND p.rank = e.rank
WHERE NOT e.is_p2p AND e.seq >= lo.lo;

CREATE OR REPLACE TABLE tf_internal.desync_found AS
WITH per_seq AS (
    SELECT pg, seq, min(created_ns) AS created_ns, list(rank ORDER BY rank) FILTER (WHERE open) AS waiting,
           mode(user_frame) FILTER (WHERE open) AS wait_frame
    FROM desync_calls GROUP BY pg, seq
),
-- one vote per (pg, seq, what): each distinct value, its ranks, and whether it is the majority
op_votes AS (
    SELECT pg, seq, 'op_mismatch' AS kind, op AS val, count(*) AS n, list(rank ORDER BY rank) AS rs
    FROM desync_calls GROUP BY pg, seq, op
),
majority_op AS (
    SELECT pg, seq, arg_max(val, n) AS op FROM (SELECT pg, seq, val, n FROM op_votes ORDER BY val) GROUP BY pg, seq
),
-- sizes are compared where every rank sends the same: not all_to_all (splits), gather / scatter (root differs)
sized AS (
    SELECT c.* FROM desync_calls c JOIN majority_op m ON m.pg = c.pg AND m.seq = c.seq AND m.op = c.op
    WHERE c.op NOT SIMILAR TO '.*(all_to_all|alltoall|gather|scatter).*' OR c.op SIMILAR TO '.*(allgather|all_gather|reduce_scatter).*'
),
size_votes AS (
    SELECT pg, seq, 'size_mismatch' AS kind, sizes AS val, count(*) AS n, list(rank ORDER BY rank) AS rs
    FROM sized WHERE sizes IS NOT NULL GROUP BY pg, seq, sizes
),
dtype_votes AS (
    SELECT c.pg, c.seq, 'dtype_mismatch' AS kind, c.dtypes AS val, count(*) AS n, list(c.rank ORDER BY c.rank) AS rs
    FROM desync_calls c JOIN majority_op m ON m.pg = c.pg AND m.seq = c.seq AND m.op = c.op
    WHERE c.dtypes IS NOT NULL GROUP BY c.pg, c.seq, c.dtypes
),
votes AS (SELECT * FROM op_votes UNION ALL SELECT * FROM size_votes UNION ALL SELECT * FROM dtype_votes),
ranked AS (
    SELECT *, count(*) OVER w AS n_vals, count(*) FILTER (WHERE n = top) OVER w AS n_top
    FROM (SELECT *, max(n) OVER (PARTITION BY pg, seq, kind) AS top FROM votes)
    WINDOW w AS (PARTITION BY pg, seq, kind)
),
mismatch AS (
    SELECT pg, seq, kind,
           flatten(list(rs ORDER BY rs[1]) FILTER (WHERE n < top OR n_top > 1)) AS ranks,
           CASE WHEN any_value(n_top) = 1 THEN any_value(val) FILTER (WHERE n = top) END AS expected,
           string_agg(val, ' | ' ORDER BY val) FILTER (WHERE n < top OR n_top > 1) AS got
    FROM ranked WHERE n_vals > 1 GROUP BY pg, seq, kind
),
-- NCCL records when a collective started on the GPU: ranks where it is still only scheduled while
-- others are inside it are held on their GPU by earlier work (gloo records no start: never here)
not_started AS (
    SELECT pg, seq, 'not_started' AS kind, list(rank ORDER BY rank) FILTER (WHERE state = 'scheduled') AS ranks,
           NULL AS expected, NULL AS got
    FROM desync_calls WHERE open GROUP BY pg, seq
    HAVING count(*) FILTER (WHERE state = 'started') > 0 AND count(*) FILTER (WHERE state = 'scheduled') > 0
),
-- members with a dump whose last enqueued collective comes before this seq: they never arrived
missing AS (
    SELECT s.pg, s.seq, 'missing' AS kind, list(p.rank ORDER BY p.rank) AS ranks, NULL AS expected, NULL AS got
    FROM (SELECT DISTINCT pg, seq FROM desync_calls) s
    JOIN desync_progress p ON p.pg = s.pg AND p.dumped AND coalesce(p.last_enqueued, 0) < s.seq
    GROUP BY s.pg, s.seq
)
SELECT f.*, ps.waiting, ps.wait_frame, ps.created_ns
FROM (SELECT * FROM mismatch UNION ALL SELECT * FROM missing UNION ALL SELECT * FROM not_started) f JOIN per_seq ps USING (pg, seq);

CREATE OR REPLACE TABLE desync AS
WITH nd AS (
    SELECT pg, list(rank ORDER BY rank) AS no_dump FROM desync_progress WHERE NOT dumped GROUP BY pg
),
fault AS (  -- the ranks at fault, one row each, with where they stood
    SELECT f.pg, f.seq, f.kind, r AS rank FROM desync_found f, unnest(f.ranks) AS t(r)
),
fault_info AS (
    SELECT ft.pg, ft.seq, ft.kind, min(p.last_completed) AS fault_last_completed,
           mode(coalesce(c.user_frame, l.user_frame)) AS fault_frame
    FROM fault ft
    LEFT JOIN desync_progress p ON p.pg = ft.pg AND p.rank = ft.rank
    LEFT JOIN desync_calls c ON c.pg = ft.pg AND c.seq = ft.seq AND c.rank = ft.rank
    LEFT JOIN (SELECT pg, rank, arg_max(user_frame, seq) AS user_frame FROM fr_entries WHERE NOT is_p2p GROUP BY pg, rank) l
           ON l.pg = ft.pg AND l.rank = ft.rank
    GROUP BY ft.pg, ft.seq, ft.kind
)
SELECT f.pg, (SELECT any_value(pg_desc) FROM desync_members m WHERE m.pg = f.pg) AS pg_desc, f.seq::BIGINT AS seq,
       (SELECT arg_max(c.op, c.n) FROM (SELECT op, count(*) AS n FROM desync_calls c2 WHERE c2.pg = f.pg AND c2.seq = f.seq
                                        GROUP BY op ORDER BY op) c) AS op,
       f.kind, f.ranks::INTEGER[] AS ranks, f.expected::VARCHAR AS expected, f.got::VARCHAR AS got,
       coalesce(f.waiting, [])::INTEGER[] AS waiting, coalesce(nd.no_dump, [])::INTEGER[] AS no_dump,
       f.seq = min(f.seq) OVER (PARTITION BY f.pg) AS first,
       fi.fault_last_completed::BIGINT AS fault_last_completed, fi.fault_frame, f.wait_frame, f.created_ns
FROM desync_found f
LEFT JOIN nd USING (pg)
LEFT JOIN fault_info fi USING (pg, seq, kind)
ORDER BY f.created_ns, f.pg, f.seq,
         CASE f.kind WHEN 'missing' THEN 0 WHEN 'op_mismatch' THEN 1 WHEN 'size_mismatch' THEN 2
                     WHEN 'dtype_mismatch' THEN 3 ELSE 4 END;

CREATE OR REPLACE TABLE desync_ranks AS
WITH first_bad AS (SELECT pg, min(seq) AS seq FROM desync GROUP BY pg),
last AS (
    SELECT pg, rank, arg_max(op, seq) AS op, arg_max(user_frame, seq) AS frame, arg_max(created_ns, seq) AS last_created_ns
    FROM fr_entries WHERE NOT is_p2p GROUP BY pg, rank
)
SELECT p.pg, p.rank, p.dumped, p.last_enqueued, p.last_completed,
       CASE WHEN NOT p.dumped THEN 'no_dump'
            WHEN b.seq IS NOT NULL AND coalesce(p.last_enqueued, 0) < b.seq THEN 'not_entered'
            WHEN coalesce(p.last_enqueued, 0) > coalesce(p.last_completed, 0) THEN 'waiting'
            ELSE 'idle' END AS state,
       l.op, l.frame, l.last_created_ns
FROM desync_progress p LEFT JOIN first_bad b USING (pg) LEFT JOIN last l USING (pg, rank)
ORDER BY p.pg, p.rank;

-- What `.read` of this file shows in the DuckDB shell (on a read-only database, this query alone):
SELECT * FROM desync LIMIT 20;
