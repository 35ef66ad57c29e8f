-- @table sync_extra: the blocking calls a rank made in a step beyond its usual count of
--     them: a `torch.cuda.synchronize()` or `.item()` added to one step (a checkpoint, a debug print, a
--     stall). One that empties the GPU's queue is what lets the host time after it idle the GPU, so a
--     host stall's what-if removes the stall's extra calls with it (docs/whatif.md).
--
--
-- Per rank and call name, the usual count is the median over the rank's steps of the calls of that
-- name in a step (a step without one counts 0); a step holding n calls of the name, n at least one
-- more than the usual count m, has floor(n - m) extra ones: those least like the rank's usual calls
-- of the name — first the calls waiting for a GPU op of a name (none: for no op) that this step holds
-- more of than the rank's steps usually do, then the longest-blocking. (The longest-blocking alone
-- picks the ordinary ones: on h100 nsys ddp4_sync_stall rank 1 step 1, DDP's bucket rebuild adds two
-- cudaStreamSynchronize that wait for nothing, 0.008 and 0.005 ms, beside the step's usual two
-- `loss.item()` waiting for a copy to pinned memory, 7.5 and 355.6 ms: those two were called extra.)
-- One row per extra call:
-- @column rank        INTEGER  rank          the rank that made the call
-- @column step        INTEGER  key           the step it made the call in
-- @column name        VARCHAR  text          the call's name (cudaStreamSynchronize, ...)
-- @column op_id       BIGINT   id:host_ops   the call's host op (sync.op_id)
-- @column start_ns    BIGINT   time          when the call began (ns since epoch)
-- @column end_ns      BIGINT   time          when the call returned (ns since epoch)
-- @column blocked_ns  BIGINT   figure:ns     its time blocked
-- @column n           BIGINT   figure:count  calls of the name in the step
-- @column usual       DOUBLE   figure:count  the rank's median count of the name per step
-- @column cause       VARCHAR  text          the call's cause in sync: 'sync', or '<direction> pageable' for an async copy staged
--     through pageable memory (pin the buffer, not "remove the sync")
--
-- @table sync_extra_peers: the blocking calls a rank makes more often per step than
--     its peers do. The same count in every step is invisible to sync_extra (its own usual count), yet a
--     rank that blocks in cudaDeviceSynchronize every step where its peers make no such call is a cause its
--     peers are not (h100 ddp4_sync_stall rank 1: `loss.item()` after every micro-step, two
--     cudaStreamSynchronize per step, blocked 377.3 ms per step on nsys, where the other ranks make none).
--     Counts per step, not blocked time, pick the rows: on the same job ranks 0, 2 and 3 block 214-318 ms
--     per step in the 8 cudaEventSynchronize every rank makes, waiting for rank 1; blocking longer in
--     a call the peers make too is waiting, not a cause. Only where two or more ranks have steps.
--     One row per rank and call name it makes at least one more time per step than its peers (median):
-- @column rank              INTEGER    rank          the rank making the calls
-- @column name              VARCHAR    text          the blocking call's name
-- @column cause             VARCHAR    text          'sync' or '<direction> pageable', as in sync_extra
-- @column steps             BIGINT     figure:count  the rank's steps
-- @column steps_with        BIGINT     figure:count  those holding more calls of the name than the peers' median count
-- @column per_step          DOUBLE     figure:count  the rank's median count of the call per step (a step without one counts 0)
-- @column peers_per_step    DOUBLE     figure:count  the median over the other ranks of their median count
-- @column blocked_ns        BIGINT     figure:ns     the rank's median time blocked in the call per step (ns)
-- @column peers_blocked_ns  BIGINT     figure:ns     the median over the other ranks of theirs (ns)
-- @column peers             INTEGER[]  key           the other ranks
-- sync_extra shows first: rank, step, name, blocked_ns, n, usual
-- sync_extra_peers shows first: rank, name, cause, per_step, peers_per_step, blocked_ns, peers_blocked_ns
-- scope: job
-- requires: cp_host_nodes, gpu_ops, host_time, sync
CREATE SCHEMA IF NOT EXISTS tf_internal;
SET search_path = 'main,tf_internal';

CREATE OR REPLACE TABLE sync_extra AS
WITH per AS (
    SELECT rank, step, name, count(*) AS n FROM sync WHERE step IS NOT NULL GROUP BY ALL
), grid AS (  -- every step of the rank, for every name the rank calls
    SELECT s.rank, s.step, nm.name, coalesce(p.n, 0) AS n
    FROM (SELECT DISTINCT rank, step FROM host_time) s
    JOIN (SELECT DISTINCT rank, name FROM per) nm USING (rank)
    LEFT JOIN per p USING (rank, step, name)
), extra AS (
    SELECT g.rank, g.step, g.name, g.n, b.usual, floor(g.n - b.usual)::BIGINT AS k
    FROM grid g JOIN (SELECT rank, name, median(n)::DOUBLE AS usual FROM grid GROUP BY ALL) b USING (rank, name)
    WHERE g.n - b.usual >= 1
), calls AS (  -- the calls of those names, each with the name of the GPU op it waited for ('' for none)
    SELECT s.rank, s.step, s.name, s.op_id, s.start_ns, s.end_ns, s.blocked_ns, coalesce(g.name, '') AS waited
    FROM sync s LEFT JOIN cp_host_nodes h ON h.node_op_id = s.op_id AND h.role = 'sync'
    LEFT JOIN gpu_ops g ON g.op_id = h.waited_op_id
    WHERE s.step IS NOT NULL AND (s.rank, s.name) IN (SELECT rank, name FROM extra)
), wgrid AS (  -- per step, the calls of each (name, waited op) (0 where none)
    SELECT s.rank, s.step, w.name, w.waited, count(c.op_id) AS n
    FROM (SELECT DISTINCT rank, step FROM host_time) s
    JOIN (SELECT DISTINCT rank, name, waited FROM calls) w USING (rank)
    LEFT JOIN calls c ON c.rank = s.rank AND c.step = s.step AND c.name = w.name AND c.waited = w.waited
    GROUP BY ALL
), wmore AS (  -- how many more of them the step holds than the rank's median step
    SELECT rank, step, name, waited, n - median(n) OVER (PARTITION BY rank, name, waited) AS more FROM wgrid
), ranked AS (
    SELECT c.rank, c.step, c.name, c.op_id, c.start_ns, c.end_ns, c.blocked_ns, e.n, e.usual, e.k,
           row_number() OVER (PARTITION BY c.rank, c.step, c.name ORDER BY m.more DESC, c.blocked_ns DESC, c.start_ns) AS i
    FROM calls c JOIN extra e USING (rank, step, name) JOIN wmore m USING (rank, step, name, waited)
)
SELECT r.rank, r.step, r.name, r.op_id, r.start_ns, r.end_ns, r.blocked_ns, r.n, r.usual, s.cause
FROM ranked r JOIN sync s USING (op_id) WHERE r.i <= r.k
ORDER BY r.rank, r.step, r.start_ns;

CREATE OR REPLACE TABLE sync_extra_peers AS
WITH steps AS (
    SELECT DISTINCT rank, step FROM host_time
), names AS (  -- a call name's cause on the rank: its pageable copy blocking longest where it makes one
    SELECT rank, name, coalesce(arg_max(cause, blocked_ns) FILTER (WHERE cause <> 'sync'), 'sync') AS cause
    FROM sync WHERE step IS NOT NULL GROUP BY ALL
), grid AS (  -- every step of every rank, for every call name any rank makes (0 where none)
    SELECT st.rank, st.step, nm.name, count(s.op_id) AS n, coalesce(sum(s.blocked_ns - s.startup_ns), 0) AS blocked_ns
    FROM steps st CROSS JOIN (SELECT DISTINCT name FROM names) nm
    LEFT JOIN sync s ON s.rank = st.rank AND s.step = st.step AND s.name = nm.name
    GROUP BY ALL
), per_rank AS (
    SELECT rank, name, count(*) AS steps, median(n)::DOUBLE AS per_step, median(blocked_ns)::BIGINT AS blocked_ns
    FROM grid GROUP BY ALL
), sorted AS (
    -- The median of the other ranks' values without joining every rank to every other (ranks x ranks
    -- rows, a quadratic share of the client's memory: +15 MiB at 256 ranks, +68 at 1,024): per name,
    -- its values in order, u[1..m]; a rank's own value at u[p] (p = its rank() in that order, any of
    -- equal values) left out, the others' k-th is u[k] for k < p, else u[k + 1]. Their median (n = m - 1
    -- values) is list_median of their lo-th and hi-th: DuckDB's median of the two middle ones (the
    -- same one twice for odd n), its interpolation exactly.
    SELECT name, count(*) - 1 AS n, (count(*) - 1 + 1) // 2 AS lo, (count(*) - 1) // 2 + 1 AS hi,
           list(per_step ORDER BY per_step) AS ps, list(blocked_ns ORDER BY blocked_ns) AS bs, list(rank ORDER BY rank) AS ranks
    FROM per_rank GROUP BY name HAVING count(*) >= 2  -- (a rank alone has no peers)
), middle AS (  -- the four values each median may need, per name (not the lists, per rank)
    SELECT name, n, lo, hi, ranks, ps[lo] AS ps_lo, ps[lo + 1] AS ps_lo1, ps[hi] AS ps_hi, ps[hi + 1] AS ps_hi1,
           bs[lo] AS bs_lo, bs[lo + 1] AS bs_lo1, bs[hi] AS bs_hi, bs[hi + 1] AS bs_hi1
    FROM sorted
), vs AS (
    SELECT r.rank, r.name, r.steps, r.per_step, r.blocked_ns,
           list_median([CASE WHEN m.lo < r.pp THEN m.ps_lo ELSE m.ps_lo1 END,
                        CASE WHEN m.hi < r.pp THEN m.ps_hi ELSE m.ps_hi1 END])::DOUBLE AS peers_per_step,
           list_median([CASE WHEN m.lo < r.pb THEN m.bs_lo ELSE m.bs_lo1 END,
                        CASE WHEN m.hi < r.pb THEN m.bs_hi ELSE m.bs_hi1 END])::BIGINT AS peers_blocked_ns
    FROM (SELECT *, rank() OVER (PARTITION BY name ORDER BY per_step) AS pp,
                 rank() OVER (PARTITION BY name ORDER BY blocked_ns) AS pb FROM per_rank) r
    JOIN middle m USING (name)
)
SELECT v.rank, v.name, coalesce(n.cause, 'sync') AS cause, v.steps,
       (SELECT count(*) FROM grid g WHERE g.rank = v.rank AND g.name = v.name AND g.n > v.peers_per_step) AS steps_with,
       v.per_step, v.peers_per_step, v.blocked_ns, v.peers_blocked_ns,
       -- the other ranks, for the rows kept only
       list_filter((SELECT m.ranks FROM middle m WHERE m.name = v.name), lambda x: x <> v.rank) AS peers
FROM vs v LEFT JOIN names n USING (rank, name)
WHERE v.per_step - v.peers_per_step >= 1
ORDER BY v.blocked_ns - v.peers_blocked_ns DESC, v.rank, v.name;
