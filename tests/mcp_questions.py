"""The question set of `traceflow mcp` (tests/test_mcp.py::test_question_set): questions an engineer
asks an assistant about a job, each with the tool calls that answer it and the oracle that computes
the answer from the raw trace files (tests/test_mcp.py ORACLES, plain Python over the JSON).

A job: where its files are ("bundled": fixtures/, "shared": ../shared/fixtures, "wild": the wild
corpus), and its folder or files. A question: its words, the calls (tool, arguments), and the oracle
(name, arguments) whose answer the replies must contain.
"""
from __future__ import annotations

JOBS = {
    "ddp4": ("bundled", ["ddp4_sync_stall"]),
    "ddp2-clean": ("bundled", ["ddp2_flops/clean"]),
    "ddp2-stall": ("bundled", ["ddp2_flops/stall"]),
    "straggler": ("shared", ["h100/kineto/ddp4_straggler"]),
    "graphs": ("shared", ["h100/kineto/graphs"]),
    "launch-bound": ("shared", ["h100/kineto/launch_bound"]),
    "nsys-ddp4": ("shared", ["h100/nsys/ddp4_sync_stall"]),
    "hta-sampled": ("wild", ["hta/trace_filter/sampled_rank-0.json.gz", "hta/trace_filter/sampled_rank-1.json.gz"]),
    "qwen": ("wild", ["tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"]),
}


def _q(job, question, calls, oracle, **args):
    return {"job": job, "question": question, "calls": calls, "oracle": oracle, "args": args}


_GLANCE = [("job_at_a_glance", {})]
_FINDINGS = [("findings", {})]


def _exposed(rank, step):
    return [("run_analysis", {"name": "exposed-comm", "rank": rank, "step": step})]


def _top_kernel(rank):
    return [("run_analysis", {"name": "kernels", "rank": rank, "limit": 1})]


def _copy_time(rank):
    return [("sql", {"query": f"SELECT sum(end_ns - start_ns) AS copy_ns FROM gpu_ops WHERE rank = {rank} AND kind = 'memcpy'"})]


QUESTIONS = [
    # the bundled job (the demo's): rank 3 stalls 40 ms in step 4, rank 1 syncs after every micro-step
    _q("ddp4", "which ranks does this job have?", _GLANCE, "ranks"),
    _q("ddp4", "how many GPU ops did rank 2 run?", _GLANCE, "gpu_ops", rank=2),
    _q("ddp4", "how long was step 4?", _GLANCE, "step_time", step=4),
    _q("ddp4", "which rank held up step 4 and why?", _FINDINGS, "held_up", step=4),
    _q("ddp4", "how much of step 3 was exposed communication on rank 2?", _exposed(2, 3), "exposed_comm", rank=2, step=3),
    _q("ddp4", "which kernel took most of rank 0's GPU time?", _top_kernel(0), "top_kernel", rank=0),
    _q("ddp4", "how much GPU time went to memory copies on rank 1?", _copy_time(1), "copy_time", rank=1),
    _q("ddp4", "what would pinning the copies gain in step 4?",
       [("whatif", {"steps": [4], "scale_kind": ["memory=0.5"]})], "copies_gain", step=4),
    _q("ddp4", "what is the longest GPU idle gap of rank 3 in step 4?",
       [("run_analysis", {"name": "idle-gaps", "rank": 3, "step": 4, "limit": 1})], "longest_gap", rank=3, step=4),
    # the bundled two-rank runs, clean and with a 40 ms stall on rank 1 in step 3
    _q("ddp2-clean", "which ranks does this job have?", _GLANCE, "ranks"),
    _q("ddp2-clean", "how long was step 3?", _GLANCE, "step_time", step=3),
    _q("ddp2-clean", "how much of step 3 was exposed communication on rank 1?", _exposed(1, 3), "exposed_comm", rank=1, step=3),
    _q("ddp2-clean", "which kernel took most of rank 1's GPU time?", _top_kernel(1), "top_kernel", rank=1),
    _q("ddp2-clean", "how many GPU ops did rank 0 run?", _GLANCE, "gpu_ops", rank=0),
    _q("ddp2-stall", "which rank held up step 3 and why?", _FINDINGS, "held_up", step=3),
    _q("ddp2-stall", "how long was step 3?", _GLANCE, "step_time", step=3),
    _q("ddp2-stall", "what would pinning the copies gain in step 3?",
       [("whatif", {"steps": [3], "scale_kind": ["memory=0.5"]})], "copies_gain", step=3),
    _q("ddp2-stall", "what is the longest GPU idle gap of rank 1 in step 3?",
       [("run_analysis", {"name": "idle-gaps", "rank": 1, "step": 3, "limit": 1})], "longest_gap", rank=1, step=3),
    # shared H100 jobs: a straggler, CUDA graphs, a launch-bound loop
    _q("straggler", "which ranks does this job have?", _GLANCE, "ranks"),
    _q("straggler", "how long was step 4?", _GLANCE, "step_time", step=4),
    _q("straggler", "how much of step 4 was exposed communication on rank 0?", _exposed(0, 4), "exposed_comm", rank=0, step=4),
    _q("straggler", "how many GPU ops did rank 1 run?", _GLANCE, "gpu_ops", rank=1),
    _q("straggler", "which kernel took most of rank 2's GPU time?", _top_kernel(2), "top_kernel", rank=2),
    _q("graphs", "how long was step 5?", _GLANCE, "step_time", step=5),
    _q("graphs", "how many GPU ops did rank 0 run?", _GLANCE, "gpu_ops", rank=0),
    _q("graphs", "which kernel took most of the GPU time?", _top_kernel(0), "top_kernel", rank=0),
    _q("launch-bound", "how long was step 4?", _GLANCE, "step_time", step=4),
    _q("launch-bound", "what is the longest GPU idle gap in step 4?",
       [("run_analysis", {"name": "idle-gaps", "rank": 0, "step": 4, "limit": 1})], "longest_gap", rank=0, step=4),
    _q("launch-bound", "how much GPU time went to memory copies?", _copy_time(0), "copy_time", rank=0),
    # the same 4-rank job recorded by Nsight Systems (the oracle reads its SQLite exports)
    _q("nsys-ddp4", "which ranks does this job have?", _GLANCE, "ranks"),
    _q("nsys-ddp4", "how many GPU ops did rank 2 run?", _GLANCE, "gpu_ops", rank=2),
    _q("nsys-ddp4", "how much GPU time went to memory copies on rank 1?", _copy_time(1), "copy_time", rank=1),
    # the wild corpus: public traces
    _q("hta-sampled", "which ranks does this job have?", _GLANCE, "ranks"),
    _q("hta-sampled", "how many GPU ops did rank 1 run?", _GLANCE, "gpu_ops", rank=1),
    _q("hta-sampled", "which kernel took most of rank 0's GPU time?", _top_kernel(0), "top_kernel", rank=0),
    _q("qwen", "how many GPU ops did the trace record?", _GLANCE, "gpu_ops", rank=0),
    _q("qwen", "which kernel took most of the GPU time?", _top_kernel(0), "top_kernel", rank=0),
    _q("qwen", "how much GPU time went to memory copies?", _copy_time(0), "copy_time", rank=0),
]
