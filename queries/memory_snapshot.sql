-- memory_snapshot (pack `memory-snapshot`): the CUDA caching allocator's state in each rank's snapshot
-- (torch.cuda.memory._dump_snapshot): what it reserved, what tensors used, and how fragmented the rest is.
--
-- Inputs: memory_segments, memory_snapshot_blocks, memory_snapshot_history (ingest of the .pickle), devices.
--
-- One row per rank and GPU of a snapshot. Bytes.
--   rank
--   device                   INTEGER  the GPU index
--   n_segments               BIGINT  segments the allocator holds (each one cudaMalloc)
--   reserved_bytes           BIGINT  their total size: what the allocator holds from the device
--   allocated_bytes          BIGINT  bytes of it allocated to tensors
--   requested_bytes          BIGINT  bytes those allocations asked for (allocated_bytes less the rounding)
--   free_bytes               BIGINT  reserved_bytes - allocated_bytes: cached, not in use
--   largest_free_block_bytes  BIGINT  the largest free (inactive) block of any segment: the largest request the
--                                    allocator can serve without a new cudaMalloc
--   fragmentation_pct        DOUBLE  100 * (1 - largest_free_block_bytes / free_bytes): how much of the free
--                                    memory lies in pieces smaller than the largest one (0: one piece)
--   largest_allocation_bytes  BIGINT  the largest block allocated at the snapshot
--   largest_request_bytes    BIGINT  the largest allocation in the recorded history (alloc actions), else the
--                                    largest allocated block
--   largest_request_fits     BOOLEAN largest_free_block_bytes >= largest_request_bytes: the largest request seen
--                                    would be served from the cache as it stands
--   n_ooms                   BIGINT  out-of-memory events in the recorded history
--   device_memory_bytes      BIGINT  the device's memory (devices; NULL: the rank's trace does not say)
--   headroom_bytes           BIGINT  device_memory_bytes - reserved_bytes
-- memory_snapshot shows first: rank, device, reserved_bytes, allocated_bytes, fragmentation_pct, largest_free_block_bytes, largest_request_fits, n_ooms
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
