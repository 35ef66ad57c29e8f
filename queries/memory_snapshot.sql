-- @table memory_snapshot: the CUDA caching allocator's state in each rank's snapshot
--     (torch.cuda.memory._dump_snapshot): what it reserved, what tensors used, and how fragmented the rest is.
--
--
-- One row per rank and GPU of a snapshot. Bytes.
-- @column rank                      INTEGER  rank          the rank (process index in the job) the row belongs to
-- @column device                    INTEGER  key           the GPU index
-- @column reserved_bytes            BIGINT   figure:bytes  their total size: what the allocator holds from the device
-- @column allocated_bytes           BIGINT   figure:bytes  bytes of it allocated to tensors
-- @column fragmentation_pct         DOUBLE   figure:percent  100 * (1 - largest_free_block_bytes / free_bytes): how much of the free
--     memory lies in pieces smaller than the largest one (0: one piece)
-- @column largest_free_block_bytes  BIGINT   figure:bytes  the largest free (inactive) block of any segment: the largest request the
--     allocator can serve without a new cudaMalloc
-- @column largest_request_bytes     BIGINT   figure:bytes  the largest allocation in the recorded history (alloc actions), else the
--     largest allocated block
-- @column largest_request_fits      BOOLEAN  flag          largest_free_block_bytes >= largest_request_bytes: the largest request seen
--     would be served from the cache as it stands
-- @column n_ooms                    BIGINT   figure:count  out-of-memory events in the recorded history
-- @column n_segments                BIGINT   figure:count  segments the allocator holds (each one cudaMalloc)
-- @column requested_bytes           BIGINT   figure:bytes  bytes those allocations asked for (allocated_bytes less the rounding)
-- @column free_bytes                BIGINT   figure:bytes  reserved_bytes - allocated_bytes: cached, not in use
-- @column largest_allocation_bytes  BIGINT   figure:bytes  the largest block allocated at the snapshot
-- @column device_memory_bytes       BIGINT   figure:bytes  the device's memory (devices; NULL: the rank's trace does not say)
-- @column headroom_bytes            BIGINT   figure:bytes  device_memory_bytes - reserved_bytes
-- memory_snapshot shows first: rank, device, reserved_bytes, allocated_bytes, fragmentation_pct, largest_free_block_bytes, largest_request_fits, n_ooms
-- scope: job
-- requires: devices, memory_segments, memory_snapshot_blocks, memory_snapshot_history
CREATE SCHEMA IF NOT EXISTS tf_internal;
SET search_path = 'main,tf_internal';
CREATE OR REPLACE TABLE memory_snapshot AS
WITH seg AS (
    SELECT rank, device, count(*) AS n_segments, sum(total_size)::BIGINT AS reserved_bytes,
           sum(allocated_size)::BIGINT AS allocated_bytes, sum(requested_size)::BIGINT AS requested_bytes,
           max(largest_free_block) AS largest_free_block_bytes
    FROM memory_segments GROUP BY ALL
), blk AS (
    SELECT rank, device, max(size) FILTER (WHERE state = 'active_allocated') AS largest_allocation_bytes
    FROM memory_snapshot_blocks GROUP BY ALL
), hist AS (
    SELECT rank, device, max(size) FILTER (WHERE action = 'alloc') AS largest_alloc,
           count(*) FILTER (WHERE action = 'oom') AS n_ooms
    FROM memory_snapshot_history GROUP BY ALL
)
SELECT s.rank, s.device, s.reserved_bytes, s.allocated_bytes,
       round(100.0 * (1 - s.largest_free_block_bytes / nullif(s.reserved_bytes - s.allocated_bytes, 0)), 2) AS fragmentation_pct,
       s.largest_free_block_bytes, coalesce(h.largest_alloc, b.largest_allocation_bytes) AS largest_request_bytes,
       s.largest_free_block_bytes >= coalesce(h.largest_alloc, b.largest_allocation_bytes) AS largest_request_fits,
       coalesce(h.n_ooms, 0) AS n_ooms, s.n_segments, s.requested_bytes,
       s.reserved_bytes - s.allocated_bytes AS free_bytes, b.largest_allocation_bytes,
       d.memory_bytes AS device_memory_bytes, d.memory_bytes - s.reserved_bytes AS headroom_bytes
FROM seg s LEFT JOIN blk b USING (rank, device) LEFT JOIN hist h USING (rank, device)
LEFT JOIN (SELECT rank, device, any_value(memory_bytes) AS memory_bytes FROM devices GROUP BY ALL) d USING (rank, device)
ORDER BY s.rank, s.device;
