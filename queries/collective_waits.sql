-- @table collective_waits: in each collective, how long each rank waited for
--     its peers and how long the transfer itself took.
--
--
-- One row per rank in a collective seen on at least two ranks. Times in ns.
-- @column comm           VARCHAR  key           the NCCL communicator (process group) of the collective
-- @column step           INTEGER  key           the training step (ProfilerStep#N, or the --step-pattern's number); NULL outside every
--     step
-- @column seq            INTEGER  key           the collective's sequence number within its communicator and step
-- @column op             VARCHAR  text          the collective (allreduce, allgather, reduce_scatter, broadcast, ...)
-- @column rank           INTEGER  rank          the rank (process index in the job) the row belongs to
-- @column start_ns       BIGINT   time          when the rank's NCCL kernel began (ns since epoch)
-- @column end_ns         BIGINT   time          when the rank's NCCL kernel ended (ns since epoch)
-- @column wait_ns        BIGINT   figure:ns     from the rank's own start until the last rank started the collective (waiting for
--     peers; capped at the kernel's length)
-- @column transfer_ns    BIGINT   figure:ns     the rest of the kernel: end_ns - start_ns - wait_ns
-- @column last_start_ns  BIGINT   time          when the last rank started (ns since epoch)
-- @column n_ranks        BIGINT   figure:count  ranks that recorded this collective
-- @column op_id          BIGINT   id:gpu_ops    gpu_ops.op_id of the rank's NCCL kernel
-- @column last_rank      INTEGER  key           the rank that started it last (ties: the lowest rank)
-- @column blamed_ns      BIGINT   figure:ns     the part of wait_ns charged to last_rank: what this rank waited after the
--     second-last rank started (0 for the last rank itself): before that it waited for
--     the second-last too, whose arrival the last rank could not have hastened
--     (bundled ddp4_sync_stall step 4: 139.4 ms waited in all, 45.8 ms after rank 3's
--     peers had all arrived, 3 x 15.3 ms)
-- @column sharing        BOOLEAN  flag          the last rank time-slices one GPU with the second-last (gpu_sharing) and its host
--     had issued the collective before the second-last started it: it was late by turns of
--     the shared device, not by anything it did (bundled ddp4_sync_stall: 18 of 21)
-- Point-to-point ops (SendRecv, Send, Recv) are matched only where the ranks' kernels run at one
-- moment (a send completes with its receive): on HTA's trace_filter pair 6 of 10 pairs matched by
-- order had one kernel end before the other began, which no send and receive can do; those are
-- left out (partial_capture counts them).
-- Where the profiler names no communicator (nsys without NCCL payloads: comm is the rank's n-th
-- communication stream) and a rank has two communication streams or more (TP and DP groups, say),
-- its collectives cannot be matched to the right peers by stream order: they are left out, and
-- partial_capture says so ('communicators unknown').
-- collective_waits shows first: comm, step, seq, op, rank, wait_ns, blamed_ns, transfer_ns, n_ranks
-- scope: job
-- requires: collectives, gpu_ops, gpu_sharing
-- Helper tables live in schema tf_internal (out of a user's way in `.tables`); names resolve through the search path.
CREATE SCHEMA IF NOT EXISTS tf_internal;
SET search_path = 'main,tf_internal';
CREATE OR REPLACE TABLE collective_waits AS
WITH ambiguous AS (
    -- ranks whose unnamed communicators cannot be told apart
    SELECT rank FROM collectives WHERE NOT comm_recorded GROUP BY rank HAVING count(DISTINCT comm) > 1
), c AS (
    SELECT c.*, o.api_start_ns,
           row_number() OVER (PARTITION BY c.comm, c.step, c.seq ORDER BY c.start_ns DESC, c.rank) AS k
    FROM collectives c LEFT JOIN gpu_ops o USING (rank, op_id)
), g AS (
    SELECT comm, step, seq, max(start_ns) AS last_start_ns, count(DISTINCT rank) AS n_ranks, mode(op) AS op,
           max(rank) FILTER (WHERE k = 1) AS last_rank, max(rank) FILTER (WHERE k = 2) AS second_rank,
           max(start_ns) FILTER (WHERE k = 2) AS second_start_ns,
           max(api_start_ns) FILTER (WHERE k = 1) AS last_issued_ns
    FROM c GROUP BY comm, step, seq
    HAVING count(DISTINCT rank) >= 2
       -- a send and its receive run at one moment: a point-to-point match whose kernels do not is wrong
       AND (mode(op) NOT IN ('SendRecv', 'Send', 'Recv') OR max(start_ns) < min(end_ns))
       AND (bool_and(comm_recorded) OR NOT bool_or(rank IN (SELECT rank FROM ambiguous)))
), gs AS (
    SELECT g.*, coalesce(g.last_issued_ns < g.second_start_ns AND EXISTS (
               SELECT 1 FROM gpu_sharing s WHERE s.time_sliced AND list_contains(s.ranks, g.last_rank)
                                              AND list_contains(s.ranks, g.second_rank)), false) AS sharing
    FROM g
)
SELECT c.comm, c.step, c.seq, g.op, c.rank, c.start_ns, c.end_ns,
       least(g.last_start_ns - c.start_ns, c.end_ns - c.start_ns)::BIGINT AS wait_ns,
       (c.end_ns - c.start_ns - least(g.last_start_ns - c.start_ns, c.end_ns - c.start_ns))::BIGINT AS transfer_ns,
       g.last_start_ns, g.n_ranks, c.op_id, g.last_rank,
       CASE WHEN c.rank = g.last_rank THEN 0
            ELSE greatest(0, least(g.last_start_ns - greatest(c.start_ns, g.second_start_ns), c.end_ns - c.start_ns)) END::BIGINT AS blamed_ns,
       g.sharing
FROM c JOIN gs g USING (comm, step, seq)
ORDER BY c.step, c.comm, c.seq, c.rank;

-- What `.read` of this file shows in the DuckDB shell (on a read-only database, this query alone):
SELECT * FROM collective_waits LIMIT 20;
