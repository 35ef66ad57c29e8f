-- launches (view): host launch call <-> the GPU op it enqueued (same trace, same correlation id).
--   rank, stream, kind, step, op_id  of the GPU op
--   correlation_id  the id that links the call and the op
--   api_name        the launch call (cudaLaunchKernel, cudaMemcpyAsync, ...)
--   api_start_ns, api_end_ns  the launch call (ns since epoch)
--   gpu_start_ns, gpu_end_ns  the GPU op (ns since epoch)
--   name            the GPU op's name
-- requires: gpu_ops
-- Helper tables live in schema tf_internal (out of a user's way in `.tables`); names resolve through the search path.
CREATE SCHEMA IF NOT EXISTS tf_internal;
SET search_path = 'main,tf_internal';
CREATE OR REPLACE VIEW launches AS
SELECT rank, correlation_id, api_name, api_start_ns, api_end_ns,
       start_ns AS gpu_start_ns, end_ns AS gpu_end_ns, name, stream, kind, step, op_id
FROM gpu_ops WHERE api_start_ns IS NOT NULL;
