-- @table step_causes: each step's critical path split by cause, per rank
--     (docs/findings.md). The critical path already routes a wait for a late peer through that peer's
--     own work (its host, its kernels), so the time a rank's fault cost its peers is charged to that
--     rank and that cause here, not to the waiting ranks.
--
--
-- A collective on the path is communication only where no compute kernel runs beside it on its
-- rank's GPU (exposed_comm_segments): where one does, that time is compute, the precedence of
-- step_breakdown (compute + exposed comm + exposed memory + idle = wall). The walk follows the
-- collective when it ends last, so on TraceLens' MI300 ResNet (an all-reduce on its own stream
-- beside the backward kernels) the path ran 84 % in collectives of which 62 points had no compute
-- beside them: "communication-bound" is said with the 62 %, what shorter collectives could gain.
--
-- One row per step, rank and cause on the path:
-- @column step          INTEGER  key           the step
-- @column rank          INTEGER  rank          the rank whose segment it is
-- @column class         VARCHAR  text          compute | communication | memory copies | host | peer wait | idle (the kind of fix)
-- @column cause         VARCHAR  text          within the class: compute kernels; NCCL kernels; HtoD pageable | HtoD pinned |
--     DtoH pageable | DtoH pinned | DtoD | memset | ... (copies by direction and host
--     memory; um_migration: unified-memory page migrations, not copies); for the host, the path's launch and sync segments, and its other host
--     stretches split by host_time's causes (docs/host-time.md): jit_compile | launch |
--     sync | allocator | cuda_other | data_loading | cpu_op | no_op, or unattributed where
--     they fall outside the rank's steps; a sync segment that is an async copy staged
--     through pageable memory is that copy's cause (`HtoD pageable`, sync.cause: pin it);
--     missing peer (peer wait); nothing recorded (idle), or unrecorded work (idle on a rank of
--     unrecorded_work: its trace leaves GPU work out)
-- @column path_ns       BIGINT   figure:ns     time on the step's critical path (ns)
-- @column segments      BIGINT   figure:count  how many path segments; a collective's stretch beside compute is a segment of
--     compute too (its name NULL: the kernels beside it are not on the path)
-- @column top_name      VARCHAR  text          the longest segment's op (kernel, copy); for host rows the call, CPU op or range whose
--     pieces fill over half of the row, else NULL: a piece of a host stretch is named by the stretch's call
--     where the call's own time fills most of the piece, else a cpu_op piece by its innermost CPU op,
--     a no_op piece by the named host range holding most of it, else the Python function or OS call it lies in
-- @column bytes         BIGINT   figure:bytes  bytes moved by the copies on the path (memory copies only; NULL otherwise)
-- @column step_wall_ns  BIGINT   figure:ns     the step's critical path length: its span across ranks (ns)
-- @column share_pct     DOUBLE   figure:percent  path_ns / step_wall_ns (percent)
--
-- step_causes shows first: step, rank, class, cause, path_ns, share_pct, top_name, segments
-- scope: job
-- requires: critical_path, exposed_comm_segments, gpu_ops, host_ops, host_time_spans, sync, unrecorded_work
-- Helper tables live in schema tf_internal (out of a user's way in `.tables`); names resolve through the search path.
CREATE SCHEMA IF NOT EXISTS tf_internal;
SET search_path = 'main,tf_internal';

CREATE OR REPLACE TABLE step_causes AS
WITH seg AS (
    SELECT c.step, c.ordinal, c.rank, c.kind, c.name, c.dur_ns, c.op_id, c.start_ns, c.end_ns, c.tid
    FROM critical_path c
), calls AS (  -- the host ops on the path
    SELECT op_id, kind, name, start_ns, end_ns FROM host_ops WHERE op_id IN (SELECT op_id FROM seg WHERE kind IN ('host_cpu', 'host_sync'))
), host_piece AS (
    -- a host_cpu stretch of the path split by what the rank's host timeline was doing (host_time):
    -- a 40 ms sleep inside a record_function range is no_op, a Python loop around tiny ops cpu_op
    SELECT h.step, h.rank, h.tid, h.name, h.op_id, h.start_ns AS seg_start, t.cause, t.range_name,
           greatest(h.start_ns, t.start_ns) AS a, least(h.end_ns, t.end_ns) AS b
    FROM seg h JOIN host_time_spans t ON t.rank = h.rank AND t.start_ns < h.end_ns AND t.end_ns > h.start_ns
    WHERE h.kind = 'host_cpu'
), piece_ops AS (
    -- (a no_op piece's own name: the Python function or OS call it lies in, innermost, as critical_path
    -- names an unnamed stretch; GPUPuzzlers cuda-queue: 2.7 of 2.9 ms of no_op in `<built-in function sleep>`)
    SELECT rank, tid, CASE kind WHEN 'cpu_op' THEN 'cpu_op' ELSE 'other' END AS kind, start_ns, end_ns, op_id FROM host_ops
    WHERE kind IN ('cpu_op', 'python', 'osrt') AND (rank, tid) IN (SELECT DISTINCT rank, tid FROM host_piece WHERE cause IN ('cpu_op', 'no_op'))
), op_piece AS (
    -- a cpu_op piece is the own time of the innermost CPU op at its midpoint (the latest-starting op
    -- before it, if it still runs there), not of the op at its stretch's midpoint: on GPUPuzzlers'
    -- addition trace one stretch name, aten::add_, was given 119.1 ms of which add_'s own time is 31 %.
    -- A no_op piece outside every named range is the Python function or OS call it lies in, if any
    -- (ISC25-ICON's stdpar export: 65.6 ms in pwrite64, writing the output, after the last kernel)
    SELECT p.step, p.rank, p.seg_start, p.a, CASE WHEN o.end_ns >= (p.a + p.b) // 2 THEN o.op_id END AS piece_op_id
    FROM (SELECT *, CASE cause WHEN 'cpu_op' THEN 'cpu_op' ELSE 'other' END AS op_kind FROM host_piece
          WHERE cause = 'cpu_op' OR (cause = 'no_op' AND range_name IS NULL)) p
    ASOF LEFT JOIN piece_ops o ON o.rank = p.rank AND o.tid = p.tid AND o.kind = p.op_kind AND o.start_ns <= (p.a + p.b) // 2
), piece_names AS (
    SELECT op_id, name FROM host_ops WHERE op_id IN (SELECT piece_op_id FROM op_piece)
), piece_named AS (
    -- The stretch's call names a piece only where the call's own time fills most of the stretch's time
    -- of that cause: a 1,439 ms stretch was credited to the cuEventRecord calls ending it, which took
    -- 0.92 ms (a stretch with no call fills none of it: DuckDB's least / greatest skip the NULL of a
    -- missing call, which gave every piece the stretch's name, "75.4 ms inside aten::add_ with no op
    -- traced"). Otherwise each piece keeps its own name: a cpu_op piece its innermost CPU op, a no_op
    -- piece the named host range it lies in (host_time_spans.range_name), else the Python function or OS
    -- call, else none.
    SELECT p.step, p.rank, p.name, p.seg_start, p.cause, p.b - p.a AS ns,
           2 * sum(CASE WHEN o.op_id IS NULL THEN 0 ELSE greatest(0, least(p.b, o.end_ns) - greatest(p.a, o.start_ns)) END)
               OVER w > sum(p.b - p.a) OVER w AS call_fills,
           CASE p.cause WHEN 'cpu_op' THEN n.name WHEN 'no_op' THEN coalesce(p.range_name, n.name) END AS piece_name
    -- (the path's own calls, not host_ops: joined to host_ops the client built a hash table of every
    -- rank's host ops, +88 MiB of RSS at 256 ranks, growing with the ranks)
    FROM host_piece p LEFT JOIN calls o ON o.op_id = p.op_id
    LEFT JOIN op_piece c ON c.step = p.step AND c.rank = p.rank AND c.seg_start = p.seg_start AND c.a = p.a
    LEFT JOIN piece_names n ON n.op_id = c.piece_op_id
    WINDOW w AS (PARTITION BY p.step, p.rank, p.seg_start, p.cause)
), host_split AS (
    -- (seg_n: a stretch whose pieces carry several names is still one segment)
    SELECT step, rank, name, cause, sum(ns) AS ns, CASE WHEN call_fills THEN name ELSE piece_name END AS shown,
           (row_number() OVER (PARTITION BY step, rank, seg_start, cause) = 1)::INTEGER AS seg_n
    FROM piece_named GROUP BY step, rank, name, seg_start, cause, call_fills, piece_name
), host_covered AS (
    SELECT step, rank, name, sum(ns) AS ns FROM host_split GROUP BY step, rank, name
), comm_exposed AS (
    -- each collective segment's time with no compute beside it on its rank's GPU
    SELECT s.step, s.ordinal, sum(least(s.end_ns, e.end_ns) - greatest(s.start_ns, e.start_ns)) AS ns
    FROM seg s JOIN exposed_comm_segments e ON e.rank = s.rank AND e.start_ns < s.end_ns AND e.end_ns > s.start_ns
    WHERE s.kind = 'gpu_comm'
    GROUP BY s.step, s.ordinal
), copies AS (
    SELECT op_id, kind, copy_kind, bytes, name ILIKE '%pageable%' AS pageable, name ILIKE '%pinned%' AS pinned
    FROM gpu_ops WHERE kind IN ('memcpy', 'memset', 'um_migration') AND op_id IN (SELECT op_id FROM seg WHERE kind = 'gpu_memory')
), named AS (
    SELECT s.step, s.rank, s.dur_ns, s.name,
           CASE s.kind WHEN 'gpu_compute' THEN 'compute'
                       WHEN 'gpu_memory' THEN 'memory copies' WHEN 'peer_wait' THEN 'peer wait'
                       WHEN 'idle' THEN 'idle' ELSE 'host' END AS class,
           CASE WHEN s.kind = 'gpu_compute' THEN 'kernels'
                WHEN s.kind = 'gpu_memory' AND m.kind = 'memset' THEN 'memset'
                WHEN s.kind = 'gpu_memory' AND m.kind = 'um_migration' THEN 'um_migration'  -- not a copy
                WHEN s.kind = 'gpu_memory' THEN coalesce(m.copy_kind, 'copy')
                     || CASE WHEN m.pageable THEN ' pageable' WHEN m.pinned THEN ' pinned' ELSE '' END
                WHEN s.kind = 'launch' THEN 'launch'
                -- a copy staged through pageable memory is its own cause (pin it), not a sync
                WHEN s.kind = 'host_sync' OR s.op_id IN (SELECT op_id FROM sync)
                     THEN coalesce((SELECT y.cause FROM sync y WHERE y.op_id = s.op_id), 'sync')
                WHEN s.kind = 'peer_wait' THEN 'missing peer'
                WHEN s.kind = 'idle' AND s.rank IN (SELECT rank FROM tf_internal.unrecorded_work) THEN 'unrecorded work'
                ELSE 'nothing recorded' END AS cause,
           CASE WHEN s.kind = 'gpu_memory' THEN m.bytes END AS bytes, 1 AS seg_n
    FROM seg s LEFT JOIN copies m ON m.op_id = s.op_id LEFT JOIN calls h ON h.op_id = s.op_id
    WHERE s.kind NOT IN ('host_cpu', 'gpu_comm')
    UNION ALL
    SELECT s.step, s.rank, coalesce(x.ns, 0), s.name, 'communication', 'NCCL kernels', NULL, 1
    FROM seg s LEFT JOIN comm_exposed x USING (step, ordinal)
    WHERE s.kind = 'gpu_comm' AND (x.ns > 0 OR s.dur_ns = 0)
    UNION ALL
    -- the collective's time beside compute kernels: compute (their names are not on the path)
    SELECT s.step, s.rank, s.dur_ns - coalesce(x.ns, 0), NULL, 'compute', 'kernels', NULL, 1
    FROM seg s LEFT JOIN comm_exposed x USING (step, ordinal)
    WHERE s.kind = 'gpu_comm' AND s.dur_ns > coalesce(x.ns, 0)
    UNION ALL
    SELECT step, rank, ns, shown, 'host', cause, NULL, seg_n FROM host_split
    UNION ALL
    -- what host_time does not cover (outside the rank's step ranges): named by the call on the path
    SELECT s.step, s.rank, s.dur_ns - coalesce(c.ns, 0), s.name, 'host',
           CASE WHEN s.op_id IN (SELECT op_id FROM sync) THEN (SELECT y.cause FROM sync y WHERE y.op_id = s.op_id)
                WHEN regexp_matches(h.name, '(?i)^(cuda|hip)(Malloc|Free|HostAlloc|HostRegister|MallocHost|FreeHost)|^cuMem(Alloc|Free|HostAlloc|Create|Release|Map|Unmap)|^hipMem')
                     THEN 'allocator'
                WHEN h.kind IN ('cuda_runtime', 'cuda_driver') THEN 'cuda_other'
                ELSE 'unattributed' END, NULL, 1
    FROM (SELECT step, rank, name, op_id, sum(dur_ns) AS dur_ns FROM seg WHERE kind = 'host_cpu' GROUP BY ALL) s
    LEFT JOIN host_covered c ON c.step = s.step AND c.rank = s.rank AND c.name IS NOT DISTINCT FROM s.name
    LEFT JOIN calls h ON h.op_id = s.op_id
    WHERE s.dur_ns > coalesce(c.ns, 0)
), walls AS (
    SELECT step, sum(dur_ns) AS wall FROM seg GROUP BY step
), host_names AS (
    -- a host row is named by an op or range only where that name's pieces fill over half of the row
    -- (docs/findings.md): the longest piece's name alone named 119.1 ms of cpu_op for aten::add_,
    -- whose own time was 31 % of it
    SELECT step, rank, class, cause, arg_max(name, ns) AS name, max(ns) AS ns
    FROM (SELECT step, rank, class, cause, name, sum(dur_ns) AS ns FROM named
          WHERE class = 'host' AND name IS NOT NULL GROUP BY ALL)
    GROUP BY ALL
)
SELECT n.step, n.rank, n.class, n.cause, sum(n.dur_ns)::BIGINT AS path_ns, sum(n.seg_n)::BIGINT AS segments,
       CASE WHEN n.class <> 'host' THEN arg_max(n.name, n.dur_ns)
            WHEN 2 * any_value(h.ns) > sum(n.dur_ns) THEN any_value(h.name) END AS top_name,
       sum(n.bytes)::BIGINT AS bytes, any_value(w.wall)::BIGINT AS step_wall_ns,
       round(100.0 * sum(n.dur_ns) / nullif(any_value(w.wall), 0), 2) AS share_pct
FROM named n JOIN walls w USING (step)
LEFT JOIN host_names h ON h.step = n.step AND h.rank = n.rank AND h.class = n.class AND h.cause = n.cause
GROUP BY n.step, n.rank, n.class, n.cause
ORDER BY n.step, path_ns DESC;

-- What `.read` of this file shows in the DuckDB shell (on a read-only database, this query alone):
SELECT * FROM step_causes LIMIT 20;
