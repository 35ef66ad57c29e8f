"""`traceflow.torch.profile`: torch.profiler with the settings traceflow reads best.

    import traceflow.torch
    with traceflow.torch.profile("traces/") as prof:
        for step, batch in enumerate(loader):
            train_step(batch)
            prof.step()
    # -> traces/rank-<R>.pt.trace.json.gz, one per rank; then: traceflow ingest traces/

CPU and CUDA activities, input shapes, a wait/warmup/active schedule (so the profiled steps
are `ProfilerStep#N`), and one gzip'd file per rank named from torch.distributed.
"""
from __future__ import annotations

import gzip
import os
import shutil


def _rank() -> int:
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return int(os.environ.get("RANK", 0))


def profile(out_dir: str = "traces", *, wait: int = 1, warmup: int = 1, active: int = 3, repeat: int = 1,
            record_shapes: bool = True, with_stack: bool = False, **kwargs):
    """A configured `torch.profiler.profile`; call `.step()` once per training step."""
    import torch
    from torch.profiler import ProfilerActivity, schedule

    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    os.makedirs(out_dir, exist_ok=True)

    def on_ready(prof):
        rank = _rank()
        plain = os.path.join(out_dir, f"rank-{rank}.pt.trace.json")
        prof.export_chrome_trace(plain)
        with open(plain, "rb") as src, gzip.open(plain + ".gz", "wb", compresslevel=6) as dst:
            shutil.copyfileobj(src, dst)
        os.unlink(plain)

    return torch.profiler.profile(
        activities=kwargs.pop("activities", activities),
        schedule=kwargs.pop("schedule", schedule(wait=wait, warmup=warmup, active=active, repeat=repeat)),
        on_trace_ready=kwargs.pop("on_trace_ready", on_ready),
        record_shapes=record_shapes, with_stack=with_stack, **kwargs)
