-- @table memory_peak_allocations: the recorded allocations live at each memory
--     peak (memory.sql), largest first, each attributed to the CPU op that made it.
--
--
-- One row per allocation live at a peak of a rank, step and device: allocated at or before peak_ns
-- and freed after it (or never, within the capture). What was allocated before the capture is not
-- here: memory.untracked_at_peak_bytes says how much that is. The op, Python frame, module and
-- annotation are the innermost ones of their kind running on the allocating thread at the allocation:
-- the latest-starting one whose range holds it. Bytes; ns since epoch.
-- @column rank          INTEGER  rank          the rank (process index in the job) the row belongs to
-- @column step          INTEGER  key           the training step (ProfilerStep#N, or the --step-pattern's number); NULL outside every
--     step
-- @column device_type   VARCHAR  text          as in memory: cpu | cuda | ... (c10 DeviceType)
-- @column device        INTEGER  key           as in memory: the device index (the CPU: -1)
-- @column pos           BIGINT   key           1 = the largest allocation live at this peak, 2 the next, ... (ties: the earlier first)
-- @column bytes         BIGINT   figure:bytes  the allocation's size
-- @column op_name       VARCHAR  text          that op's name (aten::empty, aten::mm, ...)
-- @column share_pct     DOUBLE   figure:percent  bytes in percent of the peak's peak_allocated_bytes
-- @column python_frame  VARCHAR  text          the innermost Python function of a source file running (with_stack=True), e.g.
--     `train.py(42): step`: built-in methods, modules and torch's own files (torch/...) are
--     skipped, to name the code that called torch
-- @column module        VARCHAR  text          the innermost nn.Module running (with_stack / with_modules: `nn.Module: Linear_0`)
-- @column annotation    VARCHAR  text          the innermost user annotation (record_function) or NVTX range running
-- @column alloc_ns      BIGINT   time          when it was allocated
-- @column free_ns       BIGINT   time          when it was freed (NULL: still live when the capture ended)
-- @column addr          BIGINT   key           its address
-- @column tid           BIGINT   key           the allocating thread
-- @column op_id         BIGINT   id:host_ops   host_ops.op_id of the CPU op that allocated it (NULL: no CPU op was running)
-- memory_peak_allocations shows first: rank, step, pos, bytes, share_pct, op_name, python_frame, module
-- scope: job
-- requires: host_ops, memory, memory_blocks, ranges
-- Helper tables live in schema tf_internal (out of a user's way in `.tables`); names resolve through the search path.
CREATE SCHEMA IF NOT EXISTS tf_internal;
SET search_path = 'main,tf_internal';
SET asof_loop_join_threshold = 0;
CREATE OR REPLACE TABLE memory_peak_allocations AS
WITH live AS (
    SELECT p.rank, p.step, p.device_type, p.device, p.peak_allocated_bytes, b.pid, b.tid, b.addr, b.alloc_ns,
           b.free_ns, b.bytes
    FROM memory p JOIN memory_blocks b
      ON b.rank = p.rank AND b.device_type = p.device_type AND b.device = p.device
     AND b.alloc_ns <= p.peak_ns AND (b.free_ns IS NULL OR b.free_ns > p.peak_ns)
), threads AS (
    SELECT DISTINCT rank, tid FROM live
), spans AS (
    -- what may hold an allocation, on the allocating threads only (a job without memory events
    -- reads nothing here): CPU ops, Python frames, modules, annotations
    SELECT h.rank, h.tid, CASE WHEN h.kind = 'cpu_op' THEN 'op' WHEN starts_with(h.name, 'nn.Module: ') THEN 'module'
                               ELSE 'frame' END AS what, h.op_id, h.name, h.start_ns, h.end_ns
    FROM host_ops h SEMI JOIN threads t ON h.rank = t.rank AND h.tid = t.tid
    WHERE h.kind = 'cpu_op' OR (h.kind = 'python' AND NOT starts_with(h.name, '<built-in')
                                AND NOT starts_with(h.name, 'torch/'))
    UNION ALL
    SELECT r.rank, r.tid, 'range', NULL, r.name, r.start_ns, r.end_ns
    FROM ranges r SEMI JOIN threads t ON r.rank = t.rank AND r.tid = t.tid WHERE NOT r.on_gpu
), points AS (
    SELECT DISTINCT l.rank, l.tid, l.alloc_ns, w.what FROM live l,
           (VALUES ('op'), ('frame'), ('module'), ('range')) w(what)
), nearest AS (
    -- the latest-starting span at or before the allocation: it holds it unless it ended before
    SELECT p.*, s.op_id, s.name, s.end_ns FROM points p ASOF LEFT JOIN spans s
      ON p.rank = s.rank AND p.tid = s.tid AND p.what = s.what AND p.alloc_ns >= s.start_ns
), outer_hold AS (
    -- the rest (a parent op allocating after a child of its own ended): the latest-starting span that holds it
    SELECT n.rank, n.tid, n.alloc_ns, n.what, arg_max(s.op_id, s.start_ns) AS op_id, arg_max(s.name, s.start_ns) AS name
    FROM nearest n JOIN spans s
      ON s.rank = n.rank AND s.tid = n.tid AND s.what = n.what AND s.start_ns <= n.alloc_ns AND s.end_ns >= n.alloc_ns
    WHERE n.end_ns < n.alloc_ns
    GROUP BY ALL
), held AS (
    SELECT n.rank, n.tid, n.alloc_ns, n.what,
           CASE WHEN n.end_ns >= n.alloc_ns THEN n.op_id ELSE o.op_id END AS op_id,
           CASE WHEN n.end_ns >= n.alloc_ns THEN n.name ELSE o.name END AS name
    FROM nearest n LEFT JOIN outer_hold o USING (rank, tid, alloc_ns, what)
), named AS (
    SELECT rank, tid, alloc_ns,
           any_value(op_id) FILTER (WHERE what = 'op') AS op_id, any_value(name) FILTER (WHERE what = 'op') AS op_name,
           any_value(name) FILTER (WHERE what = 'frame') AS python_frame,
           any_value(name) FILTER (WHERE what = 'module') AS module,
           any_value(name) FILTER (WHERE what = 'range') AS annotation
    FROM held GROUP BY ALL
)
SELECT l.rank, l.step, l.device_type, l.device,
       row_number() OVER (PARTITION BY l.rank, l.step, l.device_type, l.device ORDER BY l.bytes DESC, l.alloc_ns, l.addr) AS pos,
       l.bytes, n.op_name, round(100.0 * l.bytes / nullif(l.peak_allocated_bytes, 0), 2) AS share_pct,
       n.python_frame, n.module, n.annotation, l.alloc_ns, l.free_ns, l.addr, l.tid, n.op_id
FROM live l LEFT JOIN named n ON n.rank = l.rank AND n.tid IS NOT DISTINCT FROM l.tid AND n.alloc_ns = l.alloc_ns
ORDER BY l.rank, l.step, l.device_type, l.device, pos;
