-- launches (view): host launch call <-> the GPU op it enqueued (same trace, same correlation id).
-- Columns: rank, correlation_id, api_name, api_start_ns, api_end_ns, gpu_start_ns, gpu_end_ns (ns),
--          name (GPU op), stream, kind, step, op_id.
-- Helper tables live in schema tf_internal (out of a user's way in `.tables`); names resolve through the search path.
CREATE SCHEMA IF NOT EXISTS tf_internal;
SET search_path = 'main,tf_internal';
CREATE OR REPLACE VIEW tf_internal.launches AS
SELECT rank, correlation_id, api_name, api_start_ns, api_end_ns,
       start_ns AS gpu_start_ns, end_ns AS gpu_end_ns, name, stream, kind, step, op_id
FROM gpu_ops WHERE api_start_ns IS NOT NULL;
