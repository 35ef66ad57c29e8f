"""GPU-sharing detection (traceflow/derive/gpu_sharing.py): the bound that spares `_groups` its exact
tests never changes a group. Inputs are the bundled jobs' kernels read from the raw Kineto files, a
rank moved by an edit here, and ranks derived here as bench/cluster.py's derive_ranks does (copy c
of rank r is rank r + c·k, its clock c µs late)."""
from __future__ import annotations

import functools
import gzip
import json

import numpy as np
import pytest
from conftest import ROOT

from traceflow.derive import gpu_sharing

JOBS = {"ddp4_sync_stall": ROOT / "fixtures" / "ddp4_sync_stall",  # 4 ranks on one H100
        "ddp2_flops": ROOT / "fixtures" / "ddp2_flops" / "clean"}  # 2 ranks on one H100


@functools.cache
def _kernels(job: str) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """{rank: (starts, ends)} of the job's compute kernels (not NCCL's), ns, from the raw files."""
    out = {}
    for p in sorted(JOBS[job].glob("rank-*.pt.trace.json.gz")):
        d = json.loads(gzip.decompress(p.read_bytes()))
        base = int(d.get("baseTimeNanoseconds", 0))
        ks = [(base + round(e["ts"] * 1000), base + round((e["ts"] + e["dur"]) * 1000)) for e in d["traceEvents"]
              if e.get("ph") == "X" and e.get("cat") == "kernel" and "nccl" not in e["name"].lower() and e["dur"] > 0]
        a = np.array(ks, dtype=np.int64)
        out[int(d["distributedInfo"]["rank"])] = (a[:, 0], a[:, 1])
    return out


def _device(job: str, copies: int = 1, moved: dict[int, int] | None = None):
    """One device's (starts, ends, ranks) in the device's order: the job's ranks, `copies` times
    (copy c of rank r: rank r + c·k, times + c µs), rank r's times + moved[r] ns."""
    ks = _kernels(job)
    k = len(ks)
    s, e, r = [], [], []
    for c in range(copies):
        for rank, (a, b) in ks.items():
            d = c * 1000 + (moved or {}).get(rank, 0)
            s.append(a + d)
            e.append(b + d)
            r.append(np.full(len(a), rank + c * k))
    s, e, r = (np.concatenate(x) for x in (s, e, r))
    order = np.lexsort((e, s))  # start, then end: the order the detection reads them in
    return s[order], e[order], r[order]


CASES = {  # the first case of each test runs in the quick suite, the others are slow (conftest.SWEEPS)
    "ddp2_flops derived to 32 ranks": ("ddp2_flops", 16, None),
    "bundled ddp2_flops": ("ddp2_flops", 1, None),
    "bundled ddp4_sync_stall": ("ddp4_sync_stall", 1, None),
    "ddp4_sync_stall, rank 3 moved +20 ms": ("ddp4_sync_stall", 1, {3: 20_000_000}),
    "ddp4_sync_stall derived to 16 ranks, ranks 1, 5, 9, 13 moved +3 ms": ("ddp4_sync_stall", 4, {1: 3_000_000}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_bounded_grouping_is_the_exhaustive_one(case):
    """The same groups (so the same gpu_sharing rows: `detect` makes them from the groups alone) with
    the bound as with every group tested exactly."""
    s, e, rank = _device(*CASES[case])
    assert gpu_sharing._groups(s, e, rank) == gpu_sharing._groups(s, e, rank, bound=False), case


@pytest.mark.parametrize("case", [c for c in CASES if "bundled" not in c])
def test_the_bound_rejects_only_pairs_the_exact_test_rejects(case):
    """Every pair of ranks: where `_Bound` rejects, the exact test (gpu_sharing.measure on the pair's
    kernels alone) rejects too; and the bound rejects nearly all the pairs whose kernels overlap (it
    does not bound the turns: pairs rejected for too few turns alone may pass it)."""
    s, e, rank = _device(*CASES[case])
    at = gpu_sharing._by_rank(rank)
    ranks = sorted(at)
    cut = gpu_sharing._Bound(s, e, at)
    for g, q in enumerate(ranks):  # each rank its own group: the bound of every pair
        cut.add(cut.rank_info(q), g)
    overlapping = caught = 0
    for i, r in enumerate(ranks):
        rej = cut.rejected(cut.rank_info(r), len(ranks))
        for j, q in enumerate(ranks[:i]):
            idx = gpu_sharing._positions(at, [q, r])
            overlap, turns, _ = gpu_sharing.measure(s[idx], e[idx], rank[idx])
            sliced = overlap < gpu_sharing.OVERLAP_MAX_PCT and turns >= gpu_sharing.MIN_TURNS
            assert not (rej[j] and sliced), (case, q, r, overlap, turns)
            overlapping += overlap >= gpu_sharing.OVERLAP_MAX_PCT
            caught += bool(rej[j]) and overlap >= gpu_sharing.OVERLAP_MAX_PCT
    assert overlapping and caught >= 0.95 * overlapping, (case, caught, overlapping)
