"""Records a small real 2-rank DDP job on one GPU with torch.profiler (shapes and FLOPs on), with and
without an injected host stall: the inputs for the roofline/MFU and what-if work (fixtures/).

Run on a GPU machine (never in CI):  python3 bench/record_job.py OUT_DIR
Writes OUT_DIR/{clean,stall}/rank-<R>.pt.trace.json.gz and truth-rank<R>.json (the fault's wall-clock
start and length, and the model FLOPs of one step counted by torch.utils.flop_counter).
Both ranks share the GPU; NCCL is told they are on different hosts (loopback sockets), as for the
h100 fixtures.
"""
from __future__ import annotations

import gzip
import json
import os
import shutil
import sys
import time

WORLD = 2
STEPS = 6            # wait 1, warmup 1, active 3 (+1 spare)
STALL_RANK, STALL_STEP, STALL_S = 1, 3, 0.040
D, LAYERS, HEADS, SEQ, BATCH, VOCAB = 512, 2, 8, 256, 8, 8192


def model():
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
            self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
            self.fc1, self.fc2 = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, HEADS, D // HEADS).permute(2, 0, 3, 1, 4)
            a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(b, t, D))
            return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(VOCAB, D)
            self.blocks = nn.Sequential(*[Block() for _ in range(LAYERS)])
            self.head = nn.Linear(D, VOCAB)

        def forward(self, idx):
            return self.head(self.blocks(self.emb(idx)))

    return GPT()


def worker(rank: int, out: str, variant: str):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29517", NCCL_HOSTID=f"host{rank}",
                      NCCL_SOCKET_IFNAME="lo", NCCL_P2P_DISABLE="1", NCCL_SHM_DISABLE="1")
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, schedule
    from torch.utils.flop_counter import FlopCounterMode

    dist.init_process_group("nccl", rank=rank, world_size=WORLD)
    torch.cuda.set_device(0)
    torch.manual_seed(0)
    net = torch.nn.parallel.DistributedDataParallel(model().cuda())
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
    x = torch.randint(0, VOCAB, (BATCH, SEQ), device="cuda")
    y = torch.randint(0, VOCAB, (BATCH, SEQ), device="cuda")

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(net(x).flatten(0, 1), y.flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    with FlopCounterMode(display=False) as fc:  # one step, outside the profile: the FLOPs truth
        step()
    truth = [{"rank": rank, "kind": "model_flops_per_step", "flops": fc.get_total_flops(),
              "by_op": {str(k): v for k, v in fc.get_flop_counts().get("Global", {}).items()},
              "model": dict(d=D, layers=LAYERS, heads=HEADS, seq=SEQ, batch=BATCH, vocab=VOCAB, dtype="bf16 autocast")}]
    torch.cuda.synchronize()
    d = os.path.join(out, variant)
    os.makedirs(d, exist_ok=True)
    tmp = os.path.join(d, f"rank-{rank}.pt.trace.json")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True, with_flops=True,
                 schedule=schedule(wait=1, warmup=1, active=3, repeat=1),
                 on_trace_ready=lambda p: p.export_chrome_trace(tmp)) as prof:
        for s in range(STEPS):
            if variant == "stall" and rank == STALL_RANK and s == STALL_STEP:
                torch.cuda.synchronize()
                t0 = time.time_ns()
                time.sleep(STALL_S)
                truth.append({"rank": rank, "step": s, "kind": "host_stall", "start_unix_ns": t0,
                              "dur_ns": time.time_ns() - t0, "note": "cuda.synchronize then time.sleep before forward"})
            step()
            prof.step()
    torch.cuda.synchronize()
    with open(tmp, "rb") as f, gzip.open(tmp + ".gz", "wb") as g:
        shutil.copyfileobj(f, g)
    os.remove(tmp)
    with open(os.path.join(d, f"truth-rank{rank}.json"), "w") as f:
        json.dump(truth, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    import torch.multiprocessing as mp
    out = sys.argv[1]
    for variant in ("clean", "stall"):
        mp.spawn(worker, args=(out, variant), nprocs=WORLD, join=True)
    print("recorded:", sorted(os.path.join(r, f) for r, _, fs in os.walk(out) for f in fs))
