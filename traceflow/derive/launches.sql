-- launches (view): host launch call <-> the GPU op it enqueued (same trace, same correlation id).
--   rank            the rank that launched the op
--   stream          the GPU op's stream
--   kind            the GPU op's kind (kernel, memcpy, memset)
--   step            the GPU op's step
--   op_id           the GPU op (gpu_ops.op_id)
--   correlation_id  the id that links the call and the op
--   api_name        the launch call (cudaLaunchKernel, cudaMemcpyAsync, ...)
--   api_start_ns    when the launch call began (ns since epoch)
--   api_end_ns      when the launch call returned (ns since epoch)
--   gpu_start_ns    when the GPU op began (ns since epoch)
--   gpu_end_ns      when the GPU op ended (ns since epoch)
--   name            the GPU op's name
-- requires: gpu_ops
-- Helper tables live in schema tf_internal (out of a user's way in `.tables`); names resolve through the search path.
CREATE SCHEMA IF NOT EXISTS tf_internal;
SET search_path = 'main,tf_internal';
CREATE OR REPLACE VIEW launches AS
SELECT rank, correlation_id, api_name, api_start_ns, api_end_ns,
       start_ns AS gpu_start_ns, end_ns AS gpu_end_ns, name, stream, kind, step, op_id
FROM gpu_ops WHERE api_start_ns IS NOT NULL;
