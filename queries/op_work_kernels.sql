-- @table op_work_kernels: the GPU ops that count as a CPU op's work, for op_work and critical_path.sql.
--
-- @column gpu_op_id  BIGINT   id:gpu_ops    the kernel's op_id (gpu_ops)
-- @column op_id      BIGINT   id:host_ops   the CPU op that launched it (host_ops.op_id)
-- @column rank       INTEGER  rank          the rank (process index in the job) the row belongs to
-- @column step       INTEGER  key           the training step (ProfilerStep#N, or the --step-pattern's number); NULL outside every
--     step
-- @column dur_ns     BIGINT   figure:ns     its run time (ns)
-- NCCL kernels are not op work. A view, one filter over gpu_ops: a table of it cost a write per ingest.
-- A module of its own: a cluster's workers compute op_work per rank, and the client still needs this
-- view (critical_path.sql reads it).
-- scope: rank
-- requires: gpu_ops
-- Helper tables live in schema tf_internal (out of a user's way in `.tables`); names resolve through the search path.
CREATE SCHEMA IF NOT EXISTS tf_internal;
SET search_path = 'main,tf_internal';
CREATE OR REPLACE VIEW tf_internal.op_work_kernels AS
SELECT op_id AS gpu_op_id, cpu_op_id AS op_id, rank, step, end_ns - start_ns AS dur_ns
FROM gpu_ops WHERE cpu_op_id IS NOT NULL AND category <> 'communication';
