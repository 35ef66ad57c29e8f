-- @table cp_edges: the critical path's dependency graph (cp_graph.sql) as edges, one row per edge,
-- @column kind       VARCHAR  text          what kind of op or segment this is
-- @column src_op_id  BIGINT   key           the edge's source: an op_id of gpu_ops or host_ops (host calls' ids are from 1e12 on)
-- @column src_point  VARCHAR  text          which end of the source op: 'start' | 'end'
-- @column dst_op_id  BIGINT   key           the edge's destination: an op_id of gpu_ops or host_ops
-- @column dst_point  VARCHAR  text          which end of the destination op: 'start' | 'end'
-- A view for reading: the walk reads cp_graph's tables. A module of its own: a cluster's workers make
-- cp_graph per rank, and the collective edges need every rank.
-- scope: job
-- requires: collectives, cp_gpu_preds, cp_host_nodes, gpu_ops
-- Helper tables live in schema tf_internal (out of a user's way in `.tables`); names resolve through the search path.
CREATE SCHEMA IF NOT EXISTS tf_internal;
SET search_path = 'main,tf_internal';
-- a view: it is as long as all the job's ops and calls together, and only people read it
CREATE OR REPLACE VIEW tf_internal.cp_edges AS
SELECT 'stream' AS kind, stream_prev AS src_op_id, 'end' AS src_point, op_id AS dst_op_id, 'start' AS dst_point
FROM cp_gpu_preds WHERE stream_prev IS NOT NULL
UNION ALL
SELECT 'event_wait', dep_op_id, 'end', op_id, 'start' FROM cp_gpu_preds WHERE dep_op_id IS NOT NULL
UNION ALL
SELECT 'launch', launch_op_id, 'start', op_id, 'start' FROM gpu_ops WHERE launch_op_id IS NOT NULL
UNION ALL
SELECT 'program', lag(node_op_id) OVER (PARTITION BY rank, tid ORDER BY start_ns, end_ns DESC), 'end', node_op_id, 'start'
FROM cp_host_nodes QUALIFY lag(node_op_id) OVER (PARTITION BY rank, tid ORDER BY start_ns, end_ns DESC) IS NOT NULL
UNION ALL
SELECT 'sync', waited_op_id, 'end', node_op_id, 'end' FROM cp_host_nodes WHERE waited_op_id IS NOT NULL
UNION ALL
SELECT 'collective', a.op_id, 'start', b.op_id, 'end'
FROM collectives a JOIN collectives b ON a.comm = b.comm AND a.step = b.step AND a.seq = b.seq AND a.rank <> b.rank;
