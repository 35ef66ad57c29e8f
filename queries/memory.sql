-- @table memory: each rank's memory peak in each step, per device, from the PyTorch
--     profiler's [memory] events (profile_memory=True); definitions in docs/memory.md.
--
--
-- One row per rank, step and device that rank recorded memory events on. A step is its host range
-- (steps.sql); an event belongs to the step whose range holds its time. Total Allocated / Total
-- Reserved are the allocator's own totals just after each event, so they include what was allocated
-- before the capture began (weights, optimizer state) while the events themselves do not. Bytes; ns.
-- @column rank                       INTEGER  rank          the rank (process index in the job) the row belongs to
-- @column step                       INTEGER  key           the training step (ProfilerStep#N, or the --step-pattern's number); NULL outside every
--     step
-- @column device_type                VARCHAR  text          cpu | cuda | ... as recorded (c10 DeviceType)
-- @column device                     INTEGER  key           the device index as recorded (the CPU: -1)
-- @column peak_allocated_bytes       BIGINT   figure:bytes  the highest allocated total in the step (the start's, when no event in the
--     step went higher)
-- @column peak_reserved_bytes        BIGINT   figure:bytes  the highest reserved total in the step (CUDA caching allocator); NULL on the
--     CPU, whose allocator caches nothing (Kineto writes 0)
-- @column headroom_pct               DOUBLE   figure:percent  headroom_bytes in percent of device_memory_bytes
-- @column allocated_bytes            BIGINT   figure:bytes  bytes allocated in the step (sum of the allocations)
-- @column freed_bytes                BIGINT   figure:bytes  bytes freed in the step (sum of the frees, positive)
-- @column peak_ns                    BIGINT   time          when the step first reached it (ns since epoch; the step's start when carried in)
-- @column start_ns                   BIGINT   time          the start of the step's host range (ns since epoch)
-- @column end_ns                     BIGINT   time          the end of the step's host range (ns since epoch)
-- @column start_allocated_bytes      BIGINT   figure:bytes  allocated when the step began: the total after the last event before it
--     (NULL: no event before the step)
-- @column reserved_at_peak_bytes     BIGINT   figure:bytes  the reserved total at peak_ns (NULL on the CPU)
-- @column cached_free_at_peak_bytes  BIGINT   figure:bytes  reserved_at_peak_bytes - peak_allocated_bytes: memory the caching allocator
--     held at the peak that no tensor used (its cache and fragmentation; NULL on the CPU)
-- @column n_allocs                   BIGINT   figure:count  how many allocations the step made
-- @column n_frees                    BIGINT   figure:count  how many frees the step made
-- @column tracked_at_peak_bytes      BIGINT   figure:bytes  bytes of the recorded allocations live at peak_ns (memory_peak_allocations lists them)
-- @column untracked_at_peak_bytes    BIGINT   figure:bytes  peak_allocated_bytes - tracked_at_peak_bytes: live at the peak but allocated
--     before the capture began (or its allocation was not recorded)
-- @column device_memory_bytes        BIGINT   figure:bytes  the device's memory (devices.memory_bytes); NULL: the trace does not say
--     (the CPU; a trace without deviceProperties)
-- @column headroom_bytes             BIGINT   figure:bytes  device_memory_bytes - peak_reserved_bytes: what the allocator could still take
--     (the CUDA context's own few hundred MiB are outside both)
-- @column near_device_limit          BOOLEAN  flag          peak_reserved_bytes within tf_memory_limit_pct of the device's memory [10 %];
--     NULL when the device's memory is unknown
-- memory shows first: rank, step, peak_allocated_bytes, peak_reserved_bytes, headroom_pct, near_device_limit, device
-- @table memory_blocks: each recorded allocation with its free (the next event at its address).
-- @column rank         INTEGER  rank          the rank (process index in the job) the row belongs to
-- @column device_type  VARCHAR  text          cpu | cuda | ... as recorded (c10 DeviceType)
-- @column device       INTEGER  key           the device index as recorded (the CPU: -1)
-- @column pid          BIGINT   key           the process id
-- @column tid          BIGINT   key           the host thread id
-- @column addr         BIGINT   key           the block's address
-- @column alloc_ns     BIGINT   time          when it was allocated (ns since epoch, on the CPU ops' clock)
-- @column free_ns      BIGINT   time          when it was freed (ns since epoch; NULL: not within the trace)
-- @column bytes        BIGINT   figure:bytes  its size
-- scope: job
-- requires: devices, memory_events, steps
-- Helper tables live in schema tf_internal (out of a user's way in `.tables`); names resolve through the search path.
CREATE SCHEMA IF NOT EXISTS tf_internal;
SET search_path = 'main,tf_internal';
SET asof_loop_join_threshold = 0;

-- Each allocation with its free: the next event on the same address of the same device (NULL: still
-- live when the capture ended). An allocation sorts before a free at the same ns.
--   alloc_ns BIGINT  when it was allocated (ns); free_ns BIGINT  when it was freed (ns; NULL: not in the capture)
CREATE OR REPLACE TABLE tf_internal.memory_blocks AS
SELECT rank, device_type, device, pid, tid, addr, ts_ns AS alloc_ns,
       CASE WHEN addr IS NOT NULL THEN next_ns END AS free_ns, bytes
FROM (SELECT rank, device_type, device, pid, tid, addr, ts_ns, bytes,
             lead(ts_ns) OVER (PARTITION BY rank, device_type, device, addr ORDER BY ts_ns, bytes < 0) AS next_ns
      FROM memory_events)
WHERE bytes > 0;

CREATE OR REPLACE TABLE memory AS
WITH devs AS (
    SELECT DISTINCT rank, device_type, device FROM memory_events
), sd AS (
    SELECT s.rank, s.step, s.start_ns, s.end_ns, d.device_type, d.device FROM steps s JOIN devs d USING (rank)
), carried AS (
    -- the totals just before the step began
    SELECT sd.*, e.total_allocated AS start_allocated_bytes, e.total_reserved AS start_reserved_bytes
    FROM sd ASOF LEFT JOIN memory_events e
      ON sd.rank = e.rank AND sd.device_type = e.device_type AND sd.device = e.device AND sd.start_ns > e.ts_ns
), ev AS (
    SELECT e.rank, s.step, e.device_type, e.device, e.ts_ns, e.bytes, e.total_allocated, e.total_reserved,
           max(e.total_allocated) OVER (PARTITION BY e.rank, s.step, e.device_type, e.device) AS top
    FROM memory_events e ASOF JOIN steps s ON e.rank = s.rank AND e.ts_ns >= s.start_ns
    WHERE e.ts_ns <= s.end_ns
), agg AS (
    SELECT rank, step, device_type, device, max(total_allocated) AS top_allocated, max(total_reserved) AS top_reserved,
           min(ts_ns) FILTER (WHERE total_allocated = top) AS top_ns,
           arg_min(total_reserved, ts_ns) FILTER (WHERE total_allocated = top) AS reserved_at_top,
           coalesce(sum(bytes) FILTER (WHERE bytes > 0), 0)::BIGINT AS allocated_bytes,
           coalesce(-sum(bytes) FILTER (WHERE bytes < 0), 0)::BIGINT AS freed_bytes,
           count(*) FILTER (WHERE bytes > 0) AS n_allocs, count(*) FILTER (WHERE bytes < 0) AS n_frees
    FROM ev GROUP BY ALL
), peaks AS (
    SELECT c.rank, c.step, c.device_type, c.device, c.start_ns, c.end_ns, c.start_allocated_bytes,
           (a.top_allocated IS NULL OR coalesce(c.start_allocated_bytes > a.top_allocated, FALSE)) AS carried_in,
           CASE WHEN carried_in THEN c.start_allocated_bytes ELSE a.top_allocated END AS peak_allocated_bytes,
           CASE WHEN carried_in THEN c.start_ns ELSE a.top_ns END AS peak_ns,
           CASE WHEN c.device_type <> 'cpu' THEN greatest(coalesce(a.top_reserved, c.start_reserved_bytes),
                                                          coalesce(c.start_reserved_bytes, a.top_reserved)) END AS peak_reserved_bytes,
           CASE WHEN c.device_type <> 'cpu' THEN CASE WHEN carried_in THEN c.start_reserved_bytes ELSE a.reserved_at_top END
                END AS reserved_at_peak_bytes,
           coalesce(a.allocated_bytes, 0) AS allocated_bytes, coalesce(a.freed_bytes, 0) AS freed_bytes,
           coalesce(a.n_allocs, 0) AS n_allocs, coalesce(a.n_frees, 0) AS n_frees
    FROM carried c LEFT JOIN agg a USING (rank, step, device_type, device)
    WHERE a.rank IS NOT NULL OR c.start_allocated_bytes IS NOT NULL
), tracked AS (
    SELECT p.rank, p.step, p.device_type, p.device, sum(b.bytes)::BIGINT AS tracked
    FROM peaks p JOIN memory_blocks b
      ON b.rank = p.rank AND b.device_type = p.device_type AND b.device = p.device
     AND b.alloc_ns <= p.peak_ns AND (b.free_ns IS NULL OR b.free_ns > p.peak_ns)
    GROUP BY ALL
)
-- the figures a reader looks for first come first (a narrow terminal shows the leftmost columns)
SELECT p.rank, p.step, p.device_type, p.device, p.peak_allocated_bytes, p.peak_reserved_bytes,
       round(100.0 * (d.memory_bytes - p.peak_reserved_bytes) / nullif(d.memory_bytes, 0), 2) AS headroom_pct,
       p.allocated_bytes, p.freed_bytes, p.peak_ns, p.start_ns, p.end_ns, p.start_allocated_bytes,
       p.reserved_at_peak_bytes, p.reserved_at_peak_bytes - p.peak_allocated_bytes AS cached_free_at_peak_bytes,
       p.n_allocs, p.n_frees,
       coalesce(t.tracked, 0) AS tracked_at_peak_bytes,
       p.peak_allocated_bytes - coalesce(t.tracked, 0) AS untracked_at_peak_bytes,
       d.memory_bytes AS device_memory_bytes,
       d.memory_bytes - p.peak_reserved_bytes AS headroom_bytes,
       p.peak_reserved_bytes >= (1 - coalesce(getvariable('tf_memory_limit_pct'), 10) / 100.0) * d.memory_bytes AS near_device_limit
FROM peaks p LEFT JOIN tracked t USING (rank, step, device_type, device)
LEFT JOIN (SELECT rank, device, any_value(memory_bytes) AS memory_bytes FROM devices GROUP BY ALL) d
       ON d.rank = p.rank AND d.device = p.device AND p.device_type <> 'cpu'
ORDER BY p.rank, p.step, p.device_type, p.device;
