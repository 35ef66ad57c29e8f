-- @table launches: host launch call <-> the GPU op it enqueued (same trace, same correlation id).
-- @column rank            INTEGER  rank          the rank that launched the op
-- @column correlation_id  BIGINT   key           the id that links the call and the op
-- @column api_name        VARCHAR  text          the launch call (cudaLaunchKernel, cudaMemcpyAsync, ...)
-- @column api_start_ns    BIGINT   time          when the launch call began (ns since epoch)
-- @column api_end_ns      BIGINT   time          when the launch call returned (ns since epoch)
-- @column gpu_start_ns    BIGINT   time          when the GPU op began (ns since epoch)
-- @column gpu_end_ns      BIGINT   time          when the GPU op ended (ns since epoch)
-- @column name            VARCHAR  text          the GPU op's name
-- @column stream          BIGINT   key           the GPU op's stream
-- @column kind            VARCHAR  text          the GPU op's kind (kernel, memcpy, memset)
-- @column step            INTEGER  key           the GPU op's step
-- @column op_id           BIGINT   id:gpu_ops    the GPU op (gpu_ops.op_id)
-- scope: job
-- requires: gpu_ops
-- Helper tables live in schema tf_internal (out of a user's way in `.tables`); names resolve through the search path.
CREATE SCHEMA IF NOT EXISTS tf_internal;
SET search_path = 'main,tf_internal';
CREATE OR REPLACE VIEW launches AS
SELECT rank, correlation_id, api_name, api_start_ns, api_end_ns,
       start_ns AS gpu_start_ns, end_ns AS gpu_end_ns, name, stream, kind, step, op_id
FROM gpu_ops WHERE api_start_ns IS NOT NULL;
