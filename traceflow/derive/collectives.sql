-- @table collectives: one row per communication op on one rank, keyed so that the same collective
--     has the same (comm, step, seq) on every rank.
-- @column rank           INTEGER  rank          the rank (process index in the job) the row belongs to
-- @column comm           VARCHAR  key           the process group / communicator: the profiler's name for it when recorded (Kineto
--     "Process Group Name"), else the rank's n-th communication stream ('stream#n', streams
--     ordered by their first communication op): NCCL keeps one stream per communicator.
-- @column step           INTEGER  key           the step in which the collective was launched (NULL when launched outside any step:
--     such ops are not matched, because ranks' traces cover different windows)
-- @column seq            INTEGER  key           ordinal of the collective within (rank, comm, step), in launch order
-- @column op             VARCHAR  text          the collective (allreduce, allgather, reduce_scatter, broadcast, ...)
-- @column bytes          BIGINT   figure:bytes  bytes moved (copies, memsets, collectives' messages)
-- @column start_ns       BIGINT   time          start, ns since the Unix epoch (after clock alignment)
-- @column end_ns         BIGINT   time          end, ns since the Unix epoch (after clock alignment)
-- @column op_id          BIGINT   id:gpu_ops    the collective's kernel (gpu_ops.op_id)
-- @column trace_id       INTEGER  trace         the input file (traces.trace_id) the row came from
-- @column stream         BIGINT   key           the CUDA stream
-- @column name           VARCHAR  text          the name of the op, kernel or call (kernels: the full demangled C++ name)
-- @column comm_recorded  BOOLEAN  flag          the profiler named the communicator (FALSE: 'stream#n'; then a rank with two
--     communication streams or more belongs to communicators that cannot be told apart across
--     ranks: collective_waits leaves them unmatched, partial_capture says why)
-- scope: job
-- requires: gpu_ops
-- Helper tables live in schema tf_internal (out of a user's way in `.tables`); names resolve through the search path.
CREATE SCHEMA IF NOT EXISTS tf_internal;
SET search_path = 'main,tf_internal';
CREATE OR REPLACE TABLE collectives AS
WITH comm_ops AS (
    SELECT * FROM gpu_ops WHERE category = 'communication'
), stream_order AS (
    SELECT rank, stream, 'stream#' || (row_number() OVER (PARTITION BY rank ORDER BY min(start_ns)) - 1) AS stream_comm
    FROM comm_ops GROUP BY rank, stream
)
SELECT o.rank, coalesce(o.comm, so.stream_comm) AS comm, o.step,
       (row_number() OVER (PARTITION BY o.rank, coalesce(o.comm, so.stream_comm), o.step
                           ORDER BY o.api_start_ns, o.start_ns) - 1)::INTEGER AS seq,
       o.collective AS op, o.bytes, o.start_ns, o.end_ns, o.op_id, o.trace_id, o.stream, o.name,
       o.comm IS NOT NULL AS comm_recorded
FROM comm_ops o JOIN stream_order so USING (rank, stream)
WHERE o.step IS NOT NULL;
