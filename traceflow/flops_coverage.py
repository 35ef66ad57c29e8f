"""Why a job has no FLOPs: what its traces lack, per profiler, and how to record it (the verdict
and the report's roofline section say the same words)."""
from __future__ import annotations

READS = frozenset({"host_ops", "traces", "gpu_ops", "program_stack"})  # the tables its SQL reads (tests/test_layers.py)


_PROFILER = {"xla": "XLA (JAX) profiler", "rpd": "ROCm (rpd)", "rocprof": "ROCm profiler", "autograd": "legacy autograd profiler",
             "perfetto": "Perfetto"}


def why_no_flops(con) -> str:
    """Why no op has known FLOPs, per profiler: what the traces lack, and how to record it."""
    # a program whose GPU only copied (GPUPuzzlers p2p_copy: 30 device-to-device copies, no kernel) has no
    # FLOPs to count, whatever the traces record: shapes would not give it any
    kernels, gpu = con.execute("SELECT count(*) FILTER (WHERE kind = 'kernel'), count(*) FROM gpu_ops").fetchone()
    if gpu and not kernels:
        return f"the GPU ran no kernel, only {gpu:,} copies and memsets: no computation, so no FLOPs to count"
    # per profiler: whether any CPU op has recorded arguments, and how many CPU ops there are
    seen = {fmt: (args, n) for fmt, args, n in con.execute("""
        SELECT t.source_format, count(h.input_dims) > 0 OR count(h.flops) > 0, count(h.op_id)
        FROM traces t LEFT JOIN host_ops h ON h.trace_id = t.trace_id AND h.kind = 'cpu_op' GROUP BY ALL""").fetchall()}
    have = {fmt: args for fmt, (args, _) in seen.items()}
    ops = {fmt: n for fmt, (_, n) in seen.items()}
    # a trace with no compute kernel at all (GPUPuzzlers p2p_copy: peer copies only) has no FLOPs to count:
    # no recording option would give it an MFU
    why = []
    if not con.execute("SELECT count(*) FROM gpu_ops WHERE kind = 'kernel' AND category = 'compute'").fetchone()[0]:
        hold = "hold no CPU ops and no compute kernel" if not any(ops.values()) else "hold no compute kernel"
        return f"the traces {hold} (only copies, memsets or collectives): MFU does not apply"
    # a program not written in PyTorch gets no PyTorch recording advice (isc25-icon's C++ stdpar port, pipit's
    # CUDA C + MPI saxpy were told to record under torch.autograd.profiler.emit_nvtx)
    native = {s for s, in con.execute("""SELECT DISTINCT stack FROM program_stack""").fetchall()} \
        if con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = 'program_stack'").fetchone()[0] else set()
    if native and native <= {"cuda", "hip", "openacc", "openmp"} and not any(have.values()):
        label = " / ".join(sorted({"cuda": "CUDA C/C++", "hip": "HIP C++", "openacc": "OpenACC", "openmp": "OpenMP offload"}[x]
                                   for x in native))
        return ("no op in the traces has known FLOPs, because the program is " + label +
                ": its kernels carry no op with a FLOP formula (FLOPs come from framework ops with their shapes)")
    if have.get("kineto-json") is False:
        # a file holding no CPU op at all (TraceFuse's NCCL-only output) lacks more than shapes
        why.append("the PyTorch profiler traces have no input shapes (record_shapes=True records them)"
                   if ops.get("kineto-json") else "the PyTorch profiler traces hold no CPU ops (events filtered out)")
    if have.get("nsys-sqlite") is False:
        why.append("the Nsight Systems traces' emit_nvtx ranges carry no sizes (emit_nvtx(record_shapes=True) "
                   "records them)" if ops.get("nsys-sqlite") else
                   "the Nsight Systems traces have no PyTorch op ranges (record under "
                   "torch.autograd.profiler.emit_nvtx(record_shapes=True))")
    # any other profiler whose ops record no operand shapes: that is the reason, not a missing FLOP
    # formula (JAX's conv on MI300X, an XLA `cudnn-conv` op; vLLM's aten::_scaled_mm in a ROCm rpd file)
    for fmt in sorted(f for f, args in have.items() if args is False and f not in ("kineto-json", "nsys-sqlite")):
        label = _PROFILER.get(fmt.split("-")[0], fmt)
        why.append(f"the {label} traces record no operand shapes for their ops" if ops.get(fmt) else
                   f"the {label} traces record no CPU ops, nor operand shapes")
    # "because", not a colon: the verdict puts this after its own "MFU and the roofline are empty: "
    return "no op in the traces has known FLOPs, because " + ("; and ".join(why) if why else
        "no op that launched GPU work is of a kind with a FLOP formula (docs/roofline.md)")
