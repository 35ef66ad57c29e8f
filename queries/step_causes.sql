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
-- @column top_name      VARCHAR  text          the longest segment's op (kernel, call, or what the host was inside); for host time
--     split by host_time's causes, the op only where its own time fills most of the
--     piece, else (no_op) the named host range holding most of it, else NULL
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
    SELECT c.step, c.ordinal, c.rank, c.kind, c.name, c.dur_ns, c.op_id, c.start_ns, c.end_ns
    FROM critical_path c
), calls AS (  -- the host ops on the path
    SELECT op_id, kind, name, start_ns, end_ns FROM host_ops WHERE op_id IN (SELECT op_id FROM seg WHERE kind IN ('host_cpu', 'host_sync'))
), host_piece AS (
    -- a host_cpu stretch of the path split by what the rank's host timeline was doing (host_time):
    -- a 40 ms sleep inside a record_function range is no_op, a Python loop around tiny ops cpu_op
    SELECT h.step, h.rank, h.name, h.op_id, h.start_ns AS seg_start, t.cause, t.range_name,
           greatest(h.start_ns, t.start_ns) AS a, least(h.end_ns, t.end_ns) AS b
    FROM seg h JOIN host_time_spans t ON t.rank = h.rank AND t.start_ns < h.end_ns AND t.end_ns > h.start_ns
    WHERE h.kind = 'host_cpu'
), host_split AS (
    -- The stretch's op names a piece only where the op's own time fills most of it: a 1,439 ms
    -- stretch was credited to the cuEventRecord calls ending it, which took 0.92 ms; otherwise no_op
    -- time is named by the host range holding most of it (host_time_spans.range_name), else nothing.
    SELECT p.step, p.rank, p.name, p.cause, sum(p.b - p.a) AS ns,
           CASE WHEN 2 * sum(greatest(0, least(p.b, o.end_ns) - greatest(p.a, o.start_ns))) > sum(p.b - p.a) THEN p.name
                WHEN p.cause = 'no_op' THEN arg_max(p.range_name, p.b - p.a) END AS shown
    -- (the path's own calls, not host_ops: joined to host_ops the client built a hash table of every
    -- rank's host ops, +88 MiB of RSS at 256 ranks, growing with the ranks)
    FROM host_piece p LEFT JOIN calls o ON o.op_id = p.op_id
    GROUP BY p.step, p.rank, p.name, p.seg_start, p.cause
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
           CASE WHEN s.kind = 'gpu_memory' THEN m.bytes END AS bytes
    FROM seg s LEFT JOIN copies m ON m.op_id = s.op_id LEFT JOIN calls h ON h.op_id = s.op_id
    WHERE s.kind NOT IN ('host_cpu', 'gpu_comm')
    UNION ALL
    SELECT s.step, s.rank, coalesce(x.ns, 0), s.name, 'communication', 'NCCL kernels', NULL
    FROM seg s LEFT JOIN comm_exposed x USING (step, ordinal)
    WHERE s.kind = 'gpu_comm' AND (x.ns > 0 OR s.dur_ns = 0)
    UNION ALL
    -- the collective's time beside compute kernels: compute (their names are not on the path)
    SELECT s.step, s.rank, s.dur_ns - coalesce(x.ns, 0), NULL, 'compute', 'kernels', NULL
    FROM seg s LEFT JOIN comm_exposed x USING (step, ordinal)
    WHERE s.kind = 'gpu_comm' AND s.dur_ns > coalesce(x.ns, 0)
    UNION ALL
    SELECT step, rank, ns, shown, 'host', cause, NULL FROM host_split
    UNION ALL
    -- what host_time does not cover (outside the rank's step ranges): named by the call on the path
    SELECT s.step, s.rank, s.dur_ns - coalesce(c.ns, 0), s.name, 'host',
           CASE WHEN s.op_id IN (SELECT op_id FROM sync) THEN (SELECT y.cause FROM sync y WHERE y.op_id = s.op_id)
                WHEN regexp_matches(h.name, '(?i)^(cuda|hip)(Malloc|Free|HostAlloc|HostRegister|MallocHost|FreeHost)|^cuMem(Alloc|Free|HostAlloc|Create|Release|Map|Unmap)|^hipMem')
                     THEN 'allocator'
                WHEN h.kind IN ('cuda_runtime', 'cuda_driver') THEN 'cuda_other'
                ELSE 'unattributed' END, NULL
    FROM (SELECT step, rank, name, op_id, sum(dur_ns) AS dur_ns FROM seg WHERE kind = 'host_cpu' GROUP BY ALL) s
    LEFT JOIN host_covered c ON c.step = s.step AND c.rank = s.rank AND c.name IS NOT DISTINCT FROM s.name
    LEFT JOIN calls h ON h.op_id = s.op_id
    WHERE s.dur_ns > coalesce(c.ns, 0)
), walls AS (
    SELECT step, sum(dur_ns) AS wall FROM seg GROUP BY step
)
SELECT n.step, n.rank, n.class, n.cause, sum(n.dur_ns)::BIGINT AS path_ns, count(*)::BIGINT AS segments,
       arg_max(n.name, n.dur_ns) AS top_name, sum(n.bytes)::BIGINT AS bytes, any_value(w.wall)::BIGINT AS step_wall_ns,
       round(100.0 * sum(n.dur_ns) / nullif(any_value(w.wall), 0), 2) AS share_pct
FROM named n JOIN walls w USING (step)
GROUP BY n.step, n.rank, n.class, n.cause
ORDER BY n.step, path_ns DESC;

-- What `.read` of this file shows in the DuckDB shell (on a read-only database, this query alone):
SELECT * FROM step_causes LIMIT 20;
