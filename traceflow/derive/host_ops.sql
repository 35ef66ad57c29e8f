-- host_ops: give every host event a stable id (op ids are shared with gpu_ops, disjoint ranges).
-- Input: host_ops as read. Output: host_ops with op_id BIGINT (ids start at 1e12).
CREATE OR REPLACE TABLE host_ops AS
SELECT * EXCLUDE (op_id), 1000000000000 + row_number() OVER (ORDER BY trace_id, tid, start_ns, end_ns DESC) AS op_id
FROM host_ops;
