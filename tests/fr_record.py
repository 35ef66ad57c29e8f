"""Records real PyTorch Flight Recorder dumps of real hangs and mismatches (gloo on CPU, loopback).

Run by tests/test_flight_recorder.py (a session fixture) as `python tests/fr_record.py OUT [names]`.
One parent imports torch once and forks each scenario's ranks (a fresh interpreter per rank cost
~1.5 s of CPU each on this machine: 20 ranks would be 30 s; forked, the whole set takes a few).
Each rank runs a few all_reduces of a small training-like loop, then its scenario's fault; every
rank dumps its Flight Recorder buffer (`torch._C._distributed_c10d._dump_fr_trace`, the same
pickle the NCCL watchdog writes to TORCH_FR_DUMP_TEMP_FILE) from a timer thread shortly after its
fault point, while the peers still wait, as a watchdog would. The collective timeout is short, so
the waiters then fail and every process exits; the parent reaps them all (a rank that outlives
its deadline is killed) and writes truth.json: what each scenario did, for the tests to check.

Scenarios (world size, fault):
  skip      4 ranks; rank 2 skips the all_reduce of step 3 (a rank-dependent branch), so at the end
            ranks 0, 1, 3 wait in all_reduce #6 that rank 2 never calls (it went on to save_checkpoint)
  size      3 ranks; rank 2 sends 500 elements in all_reduce #4 where the others send 1000
  dtype     3 ranks; rank 1 sends float64 in all_reduce #4 where the others send float32
  op        3 ranks; rank 0 calls broadcast as #4 where the others call all_reduce
  stall     3 ranks, recorded with torch.profiler (Kineto) too; rank 1 is stuck on the host in
            load_batch (a sleep) before all_reduce #4
  json      the size scenario's dumps written by `_dump_fr_trace_json` as well
"""
from __future__ import annotations

import datetime
import json
import os
import signal
import socket
import sys
import threading
import time

STEPS = 6
TIMEOUT_S = 4.0     # the collective timeout: the waiters fail after this, and exit
DUMP_AFTER_S = 1.0  # the dump, after the rank's fault point (the peers are waiting by then)
N = 1000

SCENARIOS = {
    "skip": {"world": 4, "name": "nccl_trace_rank_{rank}", "fault_rank": 2, "seq": 6, "kind": "missing"},
    "size": {"world": 3, "name": "fr-node-a_{rank}", "fault_rank": 2, "seq": 4, "kind": "size_mismatch"},
    "dtype": {"world": 3, "name": "dump_rank{rank}.pkl", "fault_rank": 1, "seq": 4, "kind": "dtype_mismatch"},
    "op": {"world": 3, "name": "trainer-host-7_{rank}", "fault_rank": 0, "seq": 4, "kind": "op_mismatch"},
    "stall": {"world": 3, "name": "fr_rank{rank}", "fault_rank": 1, "seq": 4, "kind": "missing", "kineto": True},
}


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def load_batch(seconds):
    from torch.profiler import record_function
    with record_function("load_batch"):  # as a DataLoader's __next__ shows in a profile
        time.sleep(seconds)  # the host is stuck here (a data loader, a file system, a lock)


def save_checkpoint(seconds):
    time.sleep(seconds)


def train_step(x, rank, step, scenario, dump):
    """One step: some host work, then the gradient all_reduce. At the scenario's step every rank that
    calls the collective dumps its buffer right after enqueueing it (async_op: a mismatched peer's
    data makes gloo abort the receiving process, so waiting for a watchdog would lose the dump); the
    faulty rank calls last, after the others have dumped."""
    import torch
    import torch.distributed as dist
    spec = SCENARIOS[scenario]
    y = x * 2.0  # some host work
    if scenario == "skip" and rank == 2 and step == 3:
        return y  # the bug: a rank-dependent branch skips this step's gradient all_reduce
    if step != spec["seq"] or (scenario == "skip" and rank == 2):
        dist.all_reduce(y)
        return y
    if rank == spec["fault_rank"]:
        time.sleep(DUMP_AFTER_S)  # the peers enqueue and dump first
        if scenario == "size":
            y = torch.ones(2 * N)  # larger: the peers, not this rank, get more bytes than they expect
        elif scenario == "dtype":
            y = y.to(torch.float64)
        elif scenario == "stall":
            load_batch(TIMEOUT_S + 1.5)
            return y
    if scenario == "op" and rank == spec["fault_rank"]:
        work = dist.broadcast(y, src=0, async_op=True)
    else:
        work = dist.all_reduce(y, async_op=True)
    dump()
    work.wait()
    return y


def child(scenario: str, rank: int, port: int, out: str):
    import torch
    import torch.distributed as dist
    spec = SCENARIOS[scenario]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    # connecting may be slow on a loaded machine: a long timeout to connect, then the short one
    dist.init_process_group("gloo", rank=rank, world_size=spec["world"], timeout=datetime.timedelta(seconds=60))
    from torch.distributed.distributed_c10d import _set_pg_timeout
    _set_pg_timeout(datetime.timedelta(seconds=TIMEOUT_S))
    folder = os.path.join(out, scenario)
    fc = torch._C._distributed_c10d

    def dump():
        # With gloo, symbolizing the stacks waits until the collective in flight ends (2.5 s of a 3 s
        # wait, measured): in the size and dtype scenarios the peers of the mismatched rank are
        # aborted by gloo by then, so those dumps are taken without stacks.
        stacks = scenario not in ("size", "dtype")
        data = fc._dump_fr_trace(includeCollectives=True, includeStackTraces=stacks, onlyActive=False)
        with open(os.path.join(folder, spec["name"].format(rank=rank)), "wb") as f:
            f.write(data)
        if scenario == "size":  # the JSON variant of the same buffer
            os.makedirs(os.path.join(out, "json"), exist_ok=True)
            with open(os.path.join(out, "json", f"fr-node-a_{rank}.json"), "wb") as f:
                text = fc._dump_fr_trace_json(includeCollectives=True, onlyActive=False)
                f.write(text if isinstance(text, bytes) else text.encode())

    timer = None
    prof = None
    if spec.get("kineto"):
        from torch.profiler import ProfilerActivity, profile, record_function
        prof = profile(activities=[ProfilerActivity.CPU], record_shapes=True)
        prof.__enter__()
    else:
        record_function = None
    x = torch.ones(N)
    try:
        for step in range(1, STEPS + 1):
            if (scenario == "stall" and rank == spec["fault_rank"] and step == spec["seq"]) or \
                    (scenario == "skip" and rank == 2 and step == STEPS):
                timer = threading.Timer(2 * DUMP_AFTER_S, dump)  # the rank that never calls: dumped while away
                timer.start()
            if record_function is not None:
                with record_function(f"train_step#{step}"):
                    train_step(x, rank, step, scenario, dump)
            else:
                train_step(x, rank, step, scenario, dump)
            if step >= spec["seq"] and scenario != "skip":
                break  # the collective after the fault: the job stops here
        if scenario == "skip" and rank == 2:
            save_checkpoint(TIMEOUT_S + 1.5)  # went on to the end of training, the peers still in #6
    except Exception as e:  # the collective timed out or a peer left: expected
        print(f"{scenario} rank {rank}: {type(e).__name__}: {str(e)[:120]}", flush=True)
    if timer is not None:
        timer.join()
    if prof is not None:
        prof.__exit__(None, None, None)
        prof.export_chrome_trace(os.path.join(folder, f"kineto_rank{rank}.json"))


def main(out: str, names: list[str]):
    import torch  # noqa: F401 - imported once here, before forking the ranks
    os.environ.setdefault("TORCH_FR_BUFFER_SIZE", "2000")
    pids = {}
    for scenario in names:
        os.makedirs(os.path.join(out, scenario), exist_ok=True)
        port = _free_port()
        for rank in range(SCENARIOS[scenario]["world"]):
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    child(scenario, rank, port, out)
                    code = 0
                finally:
                    sys.stdout.flush()
                    os._exit(code)
            pids[pid] = (scenario, rank)
    deadline = time.monotonic() + 90
    while pids:
        pid, _ = os.waitpid(-1, os.WNOHANG)
        if pid:
            pids.pop(pid, None)
            continue
        if time.monotonic() > deadline:
            for p in pids:
                os.kill(p, signal.SIGKILL)
            for p in list(pids):
                os.waitpid(p, 0)
            raise SystemExit(f"ranks left running past the deadline, killed: {sorted(pids.values())}")
        time.sleep(0.05)
    truth = {s: {**SCENARIOS[s], "steps": STEPS, "elements": N} for s in names}
    with open(os.path.join(out, "truth.json"), "w") as f:
        json.dump(truth, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:] or list(SCENARIOS))
