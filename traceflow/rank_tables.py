"""The per-rank tables and their keys, shared by the ingest's load, the runner (graph.py), a cluster's
per-rank task (rank_task.py) and the views over its shards (shard_views.py): which tables a worker
shards (which steps a worker runs is their scope, graph.py), their time columns (clock alignment moves them), their id columns (numbered per trace) and
the id ranges. Constants only: it imports nothing, so every layer may import it.
"""
from __future__ import annotations

# host_ops ids: a range of their own per trace (gpu_ops ids stay below HOST_OP_ID_BASE)
HOST_OP_ID_BASE = 10**12
HOST_OP_IDS_PER_TRACE = 10**10
SHARD_BITS = 20  # processes per file, at most (nsys exports hold one per process of the run)
# the per-rank tables a worker writes: table -> (its schema, the column that says whose rows; 'op_id':
# the table has neither rank nor trace, its rows are the GPU ops' own)
SHARDED = {"gpu_ops": ("main", "trace_id"), "host_ops": ("main", "trace_id"), "ranges": ("main", "trace_id"),
           "steps": ("main", "rank"), "step_windows": ("tf_internal", "rank"),
           "gpu_state": ("tf_internal", "rank"), "gpu_islands": ("tf_internal", "rank"),
           "idle_gaps": ("main", "rank"), "idle_gaps_summary": ("main", "rank"),
           "launch_overhead": ("main", "rank"), "launch_overhead_summary": ("main", "rank"), "op_flops": ("main", "rank"),
           "op_work": ("main", "rank"), "step_breakdown": ("main", "rank"), "sync": ("main", "rank"),
           "cp_host_nodes": ("tf_internal", "rank"), "cp_gpu_preds": ("tf_internal", "op_id"),
           "exposed_comm": ("main", "rank"), "exposed_comm_segments": ("tf_internal", "rank"),
           "kernels": ("main", "rank"), "launch_bound_steps": ("main", "rank"), "mfu": ("main", "rank"),
           "roofline": ("main", "rank"), "memory_events": ("main", "trace_id"), "devices": ("main", "trace_id")}
SHARDED.update({t: ("main", "trace_id") for t in ("memory_segments", "memory_snapshot_blocks", "memory_snapshot_history")})
# times (ns since the epoch): the views add the rank's clock offset
TIMES = {"gpu_ops": ("start_ns", "end_ns", "api_start_ns", "api_end_ns", "issue_start_ns"),
         "host_ops": ("start_ns", "end_ns"), "ranges": ("start_ns", "end_ns"), "steps": ("start_ns", "end_ns"),
         "step_windows": ("start_ns", "end_ns", "first_op_ns", "last_op_end_ns"), "gpu_state": ("start_ns", "end_ns"),
         "gpu_islands": ("start_ns", "end_ns"),
         "idle_gaps": ("start_ns", "end_ns", "next_api_start_ns", "next_issue_start_ns"),
         "launch_overhead": ("api_start_ns", "issue_start_ns"),
         "step_breakdown": ("start_ns", "end_ns", "host_start_ns", "host_end_ns"), "sync": ("start_ns", "end_ns"),
         "cp_host_nodes": ("start_ns", "end_ns"), "exposed_comm_segments": ("start_ns", "end_ns"), "memory_events": ("ts_ns",)}
# ids: stored from 1 within the process; the views add the base of the trace's GPU ops or host ops
IDS = {"gpu_ops": {"op_id": "gpu_op_base", "cpu_op_id": "host_op_base", "launch_op_id": "host_op_base"},
       "host_ops": {"op_id": "host_op_base"}, "gpu_islands": {"first_op_id": "gpu_op_base"},
       "idle_gaps": {"next_op_id": "gpu_op_base"}, "launch_overhead": {"op_id": "gpu_op_base"},
       "op_flops": {"op_id": "host_op_base"}, "op_work": {"op_id": "host_op_base"},
       "sync": {"op_id": "host_op_base"}, "cp_host_nodes": {"node_op_id": "host_op_base", "waited_op_id": "gpu_op_base"},
       "cp_gpu_preds": {"op_id": "gpu_op_base", "stream_prev": "gpu_op_base", "dep_op_id": "gpu_op_base"}}
