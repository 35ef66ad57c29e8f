-- op_work_kernels (view): the GPU ops that count as a CPU op's work, for op_work and critical_path.sql.
--
-- Inputs: gpu_ops (cpu_op_id: the CPU op that launched each kernel).
--   gpu_op_id  the kernel's op_id (gpu_ops)
--   op_id      the CPU op that launched it (host_ops.op_id)
--   rank, step
--   dur_ns     its run time (ns)
-- NCCL kernels are not op work. A view, one filter over gpu_ops: a table of it cost a write per ingest.
-- A module of its own: a cluster's workers compute op_work per rank, and the client still needs this
-- view (critical_path.sql reads it).
-- requires: gpu_ops
-- Helper tables live in schema tf_internal (out of a user's way in `.tables`); names resolve through the search path.
CREATE SCHEMA IF NOT EXISTS tf_internal;
SET search_path = 'main,tf_internal';
CREATE OR REPLACE VIEW tf_internal.op_work_kernels AS
SELECT op_id AS gpu_op_id, cpu_op_id AS op_id, rank, step, end_ns - start_ns AS dur_ns
FROM gpu_ops WHERE cpu_op_id IS NOT NULL AND category <> 'communication';
