"""Claims: the verdict's findings as rows that carry their fix, its replayed gain and how to redo the figure.

Every row of `findings` (queries/findings.sql: the facts) gets here, at ingest, the columns a
reader acts on (docs/findings.md "Claims"):

  fix             the change a user makes, worded for the cause the database records and the
                  program's stack (PyTorch / CUDA C / OpenACC ...); NULL where none fits or where
                  the replay gains nothing above its noise
  gain_ns         the replay's gain per affected step (traceflow/whatif.py)
  steps_affected  analysed steps where the cause recurs (1 for a one-off)
  recover_ns      gain over the capture: what the fixes are ranked by, one-off and recurring alike
  yardstick       a bound ("compute twice as fast"), never advice
  repro_sql       SQL over the database whose first row's `figure` is the claim's figure
  figure, unit    the figure the sentence states, in its unit; baseline: what it is set against
  scenario        the `traceflow whatif` flags that replay the fix

Why at ingest: the replays take 0.1-0.7 s per scenario on the bundled jobs (3 steps x 4 ranks),
and the terminal, the report, `traceflow query DB findings` and `job.findings()` must show the
same rows. Warm-up steps (findings_steps.warmup) are never replayed, so they drive no advice.

Size: each finding kind's fix, replay check and reproducing SQL beside the ranking they feed.
"""
from __future__ import annotations

import json
from dataclasses import replace

from . import sqlmodules
from .duck import sql_string
from .whatif import Scenario, StepGraph, abnormal_host_time, best_fixes

READS = frozenset({"claims_whatif", "critical_path", "findings_steps", "gpu_islands", "gpu_ops", "gpu_sharing", "host_ops", "host_time", "launch_overhead", "launch_overhead_summary", "metadata", "mfu", "program_stack",
                   "step_causes", "step_coverage", "step_windows", "steps", "stragglers", "sync", "sync_extra_peers", "traces"})  # the tables its SQL reads (tests/test_layers.py)

# a replayed gain counts only above the replay's own error on that step, and at least 0.1 % of the
# step (0.5 ms on the bundled ddp4 job's 531 ms steps, where rank 1's loss.item() gains 0.9-2.1 ms a step): the
# replay is deterministic, so its error on the unedited graph is its noise
NOISE_SHARE = 0.001
MAX_REPLAYED_STEPS = 12  # replays per scenario: the analysed steps, evenly thinned beyond this
CLAIM_COLUMNS = {"fix": "VARCHAR", "gain_ns": "BIGINT", "steps_affected": "INTEGER", "recover_ns": "BIGINT",
                 "yardstick": "BOOLEAN", "repro_sql": "VARCHAR", "figure": "DOUBLE", "unit": "VARCHAR",
                 "baseline": "DOUBLE", "scenario": "VARCHAR", "fix_short": "VARCHAR"}
DECLARED = sqlmodules.declared("""
-- @table claims_whatif: the what-if table of the verdict's fixes, as the report's section shows it (one row)
-- @column fixes VARCHAR text the fixes replayed, each with its predicted gain (JSON)
""", __file__)
DONE_KEY = "claims"  # tf_internal.metadata: the claims were built into `findings` at ingest


def stacks(con) -> dict[int, str]:
    """Each rank's program stack: claims-small's `program_stack` where the database has it, else
    pytorch for a Kineto rank and cuda for an Nsight Systems one."""
    have = con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = 'program_stack'").fetchone()[0]
    out = {r: ("cuda" if (fmt or "").startswith("nsys") else "pytorch")
           for r, fmt in con.execute("SELECT rank, any_value(source_format) FROM traces GROUP BY rank").fetchall()}
    if have:
        out.update({r: s for r, s in con.execute("SELECT rank, stack FROM program_stack").fetchall() if s != "unknown"})
    return out


def stack_of(con, ranks=None) -> str:
    """The program stack of these ranks (every rank: None), as the advice is worded for it."""
    return _stack(stacks(con), ranks)


def _stack(st: dict[int, str], ranks) -> str:
    found = {st.get(r, "pytorch") for r in (ranks or st.keys())}
    return found.pop() if len(found) == 1 else ("pytorch" if "pytorch" in found else "cuda")


# The fix for each cause, by stack: one place for the advice's words.
_FIX = {
    "pageable copy": {"pytorch": "pin the host buffer (tensor.pin_memory(), DataLoader(pin_memory=True)) and copy "
                                 "with non_blocking=True",
                      "cuda": "allocate the host buffer pinned (cudaMallocHost / cudaHostRegister) and copy with "
                              "cudaMemcpyAsync",
                      "openacc": "pin the host memory (-gpu=pinned) and copy asynchronously (async clauses)",
                      "jax": "put the data on the device once, ahead of the step (jax.device_put of the next batch "
                             "while this one runs), not a host array into every step"},
    "extra sync": {"pytorch": "remove that blocking call ({name}: a .item(), .cpu() or torch.cuda.synchronize() "
                              "its peers do not make)",
                   "cuda": "remove that {name} (its peers do not make it)",
                   "openacc": "remove that wait ({name}; its peers do not make it)",
                   "jax": "remove that blocking call ({name}: a block_until_ready(), jax.device_get() or float() of a "
                          "device array its peers do not make)"},
    "sync": {"pytorch": "remove the blocking calls from the step (.item(), .cpu(), torch.cuda.synchronize())",
             "jax": "remove the blocking calls from the step (block_until_ready(), jax.device_get(), float() or "
                    "np.asarray() of a device array)",
             "any": "remove the blocking synchronizations from the step (keep the host ahead of the GPU)"},
    "stall": {"any": "remove what rank {rank}'s host does there ({what}; py-spy or the NVTX ranges show it)"},
    # a stream sync right after each pageable host-to-device copy: PyTorch's blocking copy of a CPU tensor
    # (nsys-ai mfu_2gpu_after: 15 8-byte aten::to copies per step, each then cudaStreamSynchronize, 138-152 ms)
    "pageable sync": {"pytorch": "pin those host tensors and copy with non_blocking=True, or keep the values on the "
                                 "GPU: each blocking copy of a pageable tensor synchronizes the stream",
                      "cuda": "copy from pinned host memory (cudaMallocHost) with cudaMemcpyAsync and drop the "
                              "{name} after each copy",
                      "jax": "keep those values on the device (no float() or np.asarray() of a device array inside "
                             "the step): each host read of one waits for the stream"},
    # a blocking device-to-host copy each step (.item(), .cpu(), .tolist()): the host waits for the GPU
    # to drain before it launches more
    "read back": {"pytorch": "keep those values on the GPU, or copy them into a pinned buffer with non_blocking=True "
                             "and read them after an event (torch.cuda.Event) once the next work is launched",
                  "jax": "read device arrays back later (jax.device_get after the next step is dispatched)",
                  "any": "copy into pinned host memory asynchronously and wait on an event only where the values "
                         "are needed ({name} waits for the whole stream)"},
    # a device free per tensor, every step: PyTorch's caching allocator off (TraceLens' MI300X DDP
    # ResNet-18 "no memory pool": 1,360 hipFree a step, 3,346 ms); "keep it warm" does not fit
    "allocator off": {"pytorch": "turn the caching allocator back on (unset PYTORCH_NO_CUDA_MEMORY_CACHING; ROCm: "
                                 "PYTORCH_NO_HIP_MEMORY_CACHING) and call no torch.cuda.empty_cache() in the loop: "
                                 "{frees:,.0f} {name} calls per step free memory tensor by tensor",
                      "any": "allocate the buffers once, before the loop: {frees:,.0f} {name} calls per step free "
                             "device memory one buffer at a time"},
    "allocator stall": {"any": "warm up before profiling (run the step once first): {n} {name} call(s) took "
                               "{ms:.1f} ms, a one-off (a library's initialisation on first use, such as cuBLAS's in "
                               "the first matmul) that no allocator setting removes"},
    "allocator": {"pytorch": "keep the caching allocator warm (no empty_cache, stable shapes, "
                             "expandable_segments)",
                  "jax": "let XLA preallocate its memory pool (XLA_PYTHON_CLIENT_PREALLOCATE, on by default) and keep "
                         "shapes stable",
                  "any": "allocate the buffers once, before the loop (no malloc / free per step)"},
    "jit_compile": {"any": "warm up before the measured steps and cache the compiled kernels (a JIT compile or "
                           "module load is a one-off)"},
    "launch stall": {"any": "warm up: run a step before profiling (or profile a later step) and load the GPU code "
                            "eagerly (CUDA_MODULE_LOADING=EAGER; ROCm: HIP_ENABLE_DEFERRED_LOADING=0): {what} "
                            "(lazy module / code-object load) that graphs or fusion do not remove"},
    "launch": {"pytorch": "capture the step in a CUDA graph (torch.cuda.CUDAGraph) or fuse kernels (torch.compile)",
               "cuda": "capture the launches in a CUDA graph or fuse the kernels",
               "openacc": "fuse the loops (fewer, larger kernels) and launch asynchronously",
               "jax": "jit the whole step as one function (XLA fuses more and launches fewer kernels) and let XLA "
                      "replay it as a command buffer (--xla_gpu_enable_command_buffer)",
               "any": "fuse kernels or capture the launches in a CUDA graph"},
    # a CUDA graph cannot capture a step that blocks on the host (stream syncs): fusion only
    "launch fuse": {"pytorch": "fuse kernels (torch.compile) to launch fewer; a CUDA graph cannot capture the step "
                               "while it makes {syncs:g} blocking calls per step",
                    "jax": "jit larger functions so XLA fuses more kernels; a command buffer (graph) cannot "
                           "capture the step while it makes {syncs:g} blocking calls per step",
                    "any": "fuse kernels to launch fewer; a CUDA graph cannot capture the step while it makes "
                           "{syncs:g} blocking calls per step"},
    "cpu_op": {"pytorch": "cut the framework work between launches (CUDA graphs, torch.compile, fewer and larger ops)",
               "jax": "cut the dispatch work between launches: jit the whole step as one function, static shapes (no "
                      "retracing)",
               "any": "cut the host work between launches (fewer, larger kernels; a CUDA graph)"},
    "data_loading": {"pytorch": "more DataLoader workers, pinned memory and prefetching",
                     "jax": "prefetch the next batches to the device while the step runs (a prefetching iterator)",
                     "any": "load the next batch ahead of time (a loader thread, double buffering)"},
    "communication": {"pytorch": "overlap communication with compute (DDP bucketing, FSDP prefetch)",
                      "jax": "overlap the collectives with compute (XLA's async collectives, latency-hiding scheduler)",
                      "any": "overlap the collectives with compute (a stream of their own, issued earlier)"},
}


# The same fixes in a few words, for the headline (<= 200 characters in all)
_FIX_SHORT = {
    "pageable copy": {"pytorch": "pin the buffer + non_blocking=True", "jax": "device_put ahead of the step",
                      "any": "pinned host buffer + cudaMemcpyAsync"},
    "extra sync": {"any": "remove that {name}"},
    "sync": {"any": "remove the blocking calls"},
    "stall": {"any": "remove that host stall"},
    "pageable sync": {"pytorch": "pinned tensors + non_blocking=True", "jax": "no host reads of device arrays in the step",
                      "any": "pinned copies without a sync each"},
    "read back": {"pytorch": "non-blocking copies to pinned memory, read later", "any": "asynchronous read-backs"},
    "allocator off": {"pytorch": "caching allocator back on", "any": "allocate once, before the loop"},
    "allocator stall": {"any": "warm up before profiling"},
    "allocator": {"pytorch": "keep the caching allocator warm", "jax": "XLA's preallocated pool, stable shapes",
                  "any": "preallocate the buffers"},
    "jit_compile": {"any": "warm up / cache the compiled kernels"},
    "launch stall": {"any": "warm up before profiling; eager module loading"},
    "launch": {"jax": "one jitted step, XLA command buffers", "any": "CUDA graphs / kernel fusion"},
    "launch fuse": {"jax": "larger jitted functions (no graph: the step blocks)", "any": "kernel fusion (no CUDA graph: the step blocks)"},
    "cpu_op": {"pytorch": "CUDA graphs / torch.compile", "jax": "one jitted step, static shapes", "any": "fewer, larger kernels"},
    "data_loading": {"any": "load batches ahead"},
    "communication": {"any": "overlap communication with compute"},
}


# A HIP C++ program gets the CUDA C words in HIP's names
_HIP_NAMES = (("cudaMallocHost", "hipHostMalloc"), ("cudaHostRegister", "hipHostRegister"),
              ("cudaMemcpyAsync", "hipMemcpyAsync"), ("CUDA graph", "HIP graph"))


# The same advice on a ROCm rank: HIP's names for CUDA's (a PyTorch job on ROCm said "capture the step in
# a CUDA graph", "no CUDA graph: the step blocks": amd-hpc merged_all_events, MI-series DDP). PyTorch's own
# API keeps its names there (torch.cuda.CUDAGraph, torch.cuda.synchronize() are ROCm's too).
_ROCM_WORDS = _HIP_NAMES + (("CUDA / HIP graph", "HIP graph"), ("CUDA graphs", "HIP graphs"), ("NVTX ranges", "roctx ranges"),
                            ("cudaMalloc / cudaFree", "hipMalloc / hipFree"), ("other CUDA calls", "other HIP calls"),
                            ("CUDA_MODULE_LOADING=EAGER; ROCm: HIP_ENABLE_DEFERRED_LOADING=0", "HIP_ENABLE_DEFERRED_LOADING=0"),
                            ("PYTORCH_NO_CUDA_MEMORY_CACHING; ROCm: PYTORCH_NO_HIP_MEMORY_CACHING",
                             "PYTORCH_NO_HIP_MEMORY_CACHING or PYTORCH_NO_CUDA_MEMORY_CACHING"))
_CUDA_WORDS = (("CUDA_MODULE_LOADING=EAGER; ROCm: HIP_ENABLE_DEFERRED_LOADING=0", "CUDA_MODULE_LOADING=EAGER"),
               ("PYTORCH_NO_CUDA_MEMORY_CACHING; ROCm: PYTORCH_NO_HIP_MEMORY_CACHING", "PYTORCH_NO_CUDA_MEMORY_CACHING"))


def platforms(con) -> dict[int, str]:
    """Each rank's GPU platform as its runtime calls tell it: 'rocm' where they are HIP's (hip*), else
    'cuda' (the advice's words follow it: platform_words)."""
    rocm = {r for r, in con.execute("""SELECT DISTINCT rank FROM host_ops
                                       WHERE kind IN ('cuda_runtime', 'cuda_driver') AND starts_with(name, 'hip')""").fetchall()}
    return {r: "rocm" if r in rocm else "cuda" for r, in con.execute("SELECT DISTINCT rank FROM traces").fetchall()}


def platform_of(pf: dict[int, str], ranks) -> str:
    """'rocm' where every one of these ranks (None: every rank) runs on ROCm, else 'cuda'."""
    found = {pf.get(r, "cuda") for r in (ranks or pf.keys())}
    return "rocm" if found == {"rocm"} else "cuda"


def platform_words(text: str | None, platform: str) -> str | None:
    """Advice in the words of the ranks' platform: HIP graphs and hipMalloc on ROCm, CUDA's on CUDA."""
    for a, b in (_ROCM_WORDS if platform == "rocm" else _CUDA_WORDS):
        text = text.replace(a, b) if text else text
    return text


def fix_words(cause: str, stack: str, short: bool = False, **kw) -> str:
    by = (_FIX_SHORT if short else _FIX)[cause]
    words = by.get(stack) or (by.get("cuda") if stack == "hip" else None) or by.get("any") or by.get("cuda") or ""
    if stack == "hip":
        for a, b in _HIP_NAMES:
            words = words.replace(a, b)
    return words.format(**kw)


class _Replays:
    """Each scenario's gain per analysed step against its noise, replayed one step graph at a time.

    A step's graph holds every rank's ops of the step as Python lists (40 MiB at 256 ranks of
    bench/cluster.py's ddp2_flops copies, 54,016 ops): keeping each analysed step's graph for the
    whole of `build` held them all at once, growing with the ranks and the steps. So the claims ask
    first and replay after: `gains` answers what `settle` has replayed and notes the rest (answered
    as no gain meanwhile); `settle` then builds each step's graph once, replays on it every scenario
    asked of that step, and drops it before the next. `build` runs its pass over the rows again until
    a pass asks nothing new (two passes: the first asks every scenario the second can, since a
    replay's answer only takes asks away: `_host_syncs` asks only where no extra_sync row covers
    its ranks, and with no gains yet there is none)."""

    def __init__(self, con, steps: list[int]):
        self.con = con
        if len(steps) > MAX_REPLAYED_STEPS:  # evenly thinned; the gain over the capture is scaled back up
            k = len(steps) / MAX_REPLAYED_STEPS
            steps = [steps[int(i * k)] for i in range(MAX_REPLAYED_STEPS)]
        self.steps = steps
        self._done: dict[tuple[str, int], tuple[float, float] | None] = {}  # (scenario, step) -> (gain, noise); None: replay off
        self._asked: dict[tuple[str, int], Scenario] = {}

    def gains(self, sc: Scenario, steps: list[int] | None = None) -> list[tuple[int, float, float]]:
        """(step, gain ns, noise ns) per replayed step; a step whose unedited replay is off is left out.
        Not yet replayed: noted for `settle`, and left out meanwhile."""
        out = []
        for s in steps or self.steps:
            key = (repr(sc), s)
            if key not in self._done:
                self._asked[key] = sc
            elif (got := self._done[key]) is not None:
                out.append((s, *got))
        return out

    def settle(self) -> bool:
        """Replay what was asked and not answered, one step's graph at a time; False when nothing was."""
        if not self._asked:
            return False
        by_step: dict[int, list[tuple[str, Scenario]]] = {}
        for (name, s), sc in self._asked.items():
            by_step.setdefault(s, []).append((name, sc))
        for s in sorted(by_step):
            g = StepGraph(self.con, s)
            measured, _ = g.measured()
            replayed, _ = g.replay(Scenario())
            noise = max(abs(replayed - measured), NOISE_SHARE * measured)
            ok = measured and abs(replayed - measured) <= 0.02 * measured
            for name, sc in by_step[s]:
                self._done[(name, s)] = (float(replayed - g.replay(sc)[0]), noise) if ok else None
            del g  # before the next step's graph is built
        self._asked.clear()
        return True


def _flags(sc: Scenario, steps: list[int]) -> str:
    f = [f"--scale-kernels '{p}={x:g}'" for p, x in sc.scale_kernels]
    f += [f"--scale-kind {k}={x:g}" for k, x in sc.scale_kind.items()]
    f += [f"--remove-host-stall {r}" for r in sc.remove_host_stall]
    f += [n for n, on in (("--no-launch-overhead", sc.no_launch_overhead), ("--no-launch-stall", sc.no_launch_stall),
                          ("--no-allocator-calls", sc.no_allocator_calls),
                          ("--no-host-syncs", sc.no_host_syncs), ("--overlap-comm", sc.overlap_comm),
                          ("--no-stragglers", sc.no_stragglers)) if on]
    f += [f"--on-rank {r}" for r in sc.host_ranks]
    return " ".join(f + [f"--step {s}" for s in steps])


def _check(rep: _Replays, sc: Scenario, n_analysed: int, steps: list[int] | None = None) -> dict:
    """A scenario's replayed gain: per affected step (the median where it beats the noise), the steps
    where it recurs, and the gain over the capture (scaled from the replayed steps to the analysed ones)."""
    rows = rep.gains(sc, steps)
    hit = [(s, g) for s, g, noise in rows if g > noise]
    if not rows or not hit:
        return {"gain_ns": 0, "steps_affected": 0, "recover_ns": 0, "scenario": _flags(sc, [s for s, _, _ in rows])}
    scale = (n_analysed / len(rows)) if steps is None else 1.0
    affected = max(1, round(len(hit) * scale))
    recover = int(sum(g for _, g in hit) * scale)
    return {"gain_ns": recover // affected, "steps_affected": affected, "recover_ns": recover,
            "scenario": _flags(sc, [s for s, _ in hit])}


def _analysed(con) -> list[int]:
    return [s for s, in con.execute("SELECT step FROM tf_internal.findings_steps WHERE NOT warmup ORDER BY step").fetchall()]


_STEPS_SQL = "(SELECT step FROM tf_internal.findings_steps WHERE NOT warmup)"


def _per_step(total: str, table: str, where: str) -> str:
    """SQL of a figure per analysed step: `total` over `table`'s rows in those steps, divided by their count."""
    return (f"SELECT {total} / (SELECT count(*) FROM {_STEPS_SQL})::DOUBLE AS figure FROM {table} "
            f"WHERE {where} AND step IN {_STEPS_SQL}")


def _repro(r: dict) -> str | None:
    """SQL over the database reproducing the row's figure (column `figure`), from the packs it is made of.
    Names from a trace are quoted as literals (a kernel or call name may hold a quote)."""
    k = r["kind"]
    if k == "step_outlier":
        return (f"SELECT sum(path_ns)::DOUBLE AS figure FROM step_causes WHERE step = {r['step']} AND rank = {r['rank']} "
                f"AND class = {sql_string(r['class'])} AND cause = {sql_string(r['cause'])}")
    if k == "straggler":
        return (f"SELECT median(d)::DOUBLE AS figure FROM (SELECT s.step, coalesce(sum(x.last_by_ns), 0) AS d FROM {_STEPS_SQL} s "
                f"LEFT JOIN stragglers x ON x.step = s.step AND x.last_rank = {r['rank']} AND NOT x.sharing GROUP BY s.step)")
    if k == "dominant":
        return _per_step("sum(path_ns)", "step_causes", f"class = {sql_string(r['class'])}")
    if k == "coverage":
        return f"SELECT coverage_pct::DOUBLE AS figure FROM step_coverage WHERE rank = {r['rank']}"
    if k == "launch_names":
        return "SELECT sum(total_exposed_ns)::DOUBLE AS figure FROM launch_overhead_summary WHERE launch_bound"
    if k == "mfu":
        return f"SELECT median(mfu_pct)::DOUBLE AS figure FROM mfu WHERE step = {r['step']} AND mfu_pct IS NOT NULL"
    if k == "extra_sync":
        return _per_step("sum(blocked_ns - startup_ns)", "sync", f"rank = {r['rank']} AND name = {sql_string(r['evidence'])}")
    if k == "pageable_copy":
        return _per_step("sum(end_ns - start_ns)", "gpu_ops", "name ILIKE '%pageable%'")
    return None


def _figure(r: dict) -> tuple[float | None, str | None, float | None]:
    k = r["kind"]
    if k in ("step_outlier", "straggler", "dominant", "extra_sync", "pageable_copy", "host_syncs"):
        return r["value_ns"], "ns", r["baseline_ns"]
    if k == "coverage":
        return r["share_pct"], "%", 90.0
    if k == "launch_names":
        return r["value_ns"], "ns", r["baseline_ns"]
    if k == "mfu":
        return r["share_pct"], "%", None
    return None, None, None


# Device frees per step at which the allocator is freeing tensor by tensor: a caching allocator in
# steady state frees nothing (0 on the bundled jobs); with caching off, one per tensor (1,360 hipFree
# a step on TraceLens' MI300X DDP ResNet-18)
ALLOCATOR_OFF_FREES = 100
# An allocator call this long is no allocation: a driver or library start-up inside it (cudaFree's implicit
# context work; a caching allocator's own calls take microseconds, 261 us median with caching off)
ALLOCATOR_STALL_NS = 10_000_000
# device allocator calls (host_time.sql's allocator cause, device memory only)
_ALLOCATOR_CALLS = "(?i)^(cuda|hip)(Malloc|Free|MallocAsync|FreeAsync)(_v[0-9]+)?$|^cuMem(Alloc|Free)|^hipMem(Alloc|Free)|^hipExtMalloc"


def _allocator_words(con) -> tuple[str, dict]:
    """The allocator fix that fits: with a device free per tensor every step (caching off, or emptied),
    turning caching back on; else keeping the caching allocator warm. (cause, its words' arguments)"""
    row = con.execute("""
        SELECT arg_max(name, n), max(n / greatest(1, (SELECT count(DISTINCT step) FROM tf_internal.step_windows)))
        FROM (SELECT rank, regexp_replace(name, '_v[0-9]+$', '') AS name, count(*) AS n FROM host_ops
              WHERE regexp_matches(name, '(?i)^(cudaFree|hipFree|cuMemFree|hipMemFree)(_v[0-9]+)?$') GROUP BY ALL)""").fetchone()
    if row and row[1] and row[1] >= ALLOCATOR_OFF_FREES:
        return "allocator off", {"frees": row[1], "name": row[0]}
    # a few long calls in one analysed step holding most of the allocator time: a one-off, the first use
    # of a library or the driver (GPUPuzzlers vector_flops1, a cold script: two cudaFree of 225.8 and 258.4 ms
    # inside its first aten::mm, cuBLAS's initialisation, were told "keep the caching allocator warm")
    long = con.execute(f"""
        WITH a AS (SELECT h.rank, s.step, regexp_replace(h.name, '_v[0-9]+$', '') AS name, h.end_ns - h.start_ns AS ns
                   FROM host_ops h JOIN steps s ON s.rank = h.rank AND h.start_ns >= s.start_ns AND h.start_ns < s.end_ns
                   WHERE h.kind IN ('cuda_runtime', 'cuda_driver') AND regexp_matches(h.name, '{_ALLOCATOR_CALLS}')
                   AND s.step IN {_STEPS_SQL})
        SELECT count(*) FILTER (WHERE ns >= {ALLOCATOR_STALL_NS}), count(DISTINCT step) FILTER (WHERE ns >= {ALLOCATOR_STALL_NS}),
               sum(ns) FILTER (WHERE ns >= {ALLOCATOR_STALL_NS}), sum(ns), arg_max(name, ns)
        FROM a""").fetchone()
    if long and long[0] and long[0] <= 4 and long[1] == 1 and long[2] >= 0.8 * long[3]:
        return "allocator stall", {"n": long[0], "name": long[4], "ms": long[2] / 1e6}
    return "allocator", {}


# Findings of other causes that the fix of one of these scenarios would make (host_time causes)
_HOST_SCENARIO = {"sync": Scenario(no_host_syncs=True), "allocator": Scenario(no_allocator_calls=True),
                  "launch": Scenario(no_launch_overhead=True)}


# Per rank, one call name's calls and blocked time per analysed step: the mean over those steps, the
# statistic the extra_sync figure states and its repro_sql gives (a median over every step, warm-up
# included, said 431.2 ms where the repro gave 440.0 ms: h100 nsys ddp4_straggler rank 2's
# cudaDeviceSynchronize). Parameters: the name, the analysed step count twice.
_PER_STEP_SQL = f"""
    SELECT r.rank, count(s.op_id) / ?::DOUBLE AS calls, coalesce(sum(s.blocked_ns - s.startup_ns), 0) / ?::DOUBLE AS ns
    FROM (SELECT DISTINCT rank FROM host_time) r
    LEFT JOIN sync s ON s.rank = r.rank AND s.name = ? AND s.step IN {_STEPS_SQL}
    GROUP BY r.rank"""


def _extra_syncs(con, n: int) -> list[dict]:
    """Ranks that block in a call more often per step than their peers (sync_extra_peers, one place for
    that comparison): (rank, name, per-step count beyond the peers' median, blocked ns per step, peers'
    median blocked ns per step, steps), the longest-blocking such call per rank. The figures are means
    over the analysed steps (_PER_STEP_SQL), as the claim's repro_sql gives them."""
    import statistics
    if n == 0:
        return []
    rows = con.execute("""
        SELECT rank, name, steps FROM sync_extra_peers WHERE per_step - peers_per_step >= 1
        ORDER BY blocked_ns DESC, rank""").fetchall()
    best: dict[int, dict] = {}
    for rank, name, steps in rows:
        if rank in best:
            continue
        per = {r: (c, ns) for r, c, ns in con.execute(_PER_STEP_SQL, [n, n, name]).fetchall()}
        peers = [v for r, v in per.items() if r != rank]
        if rank not in per or not peers:
            continue
        extra = per[rank][0] - statistics.median(c for c, _ in peers)
        best[rank] = {"rank": rank, "name": name, "extra": extra, "ns": per[rank][1],
                      "base": statistics.median(ns for _, ns in peers), "steps": steps}
    # more calls that block no longer than the peers' fewer is no cause (nsys-ai mfu_2gpu_before rank 1: one
    # more cudaStreamSynchronize, 160.9 ms against 163.6 ms)
    return [b for b in best.values() if b["ns"] > (b["base"] or 0)]


def _overlapped(s, e, rank):
    """Kernels (sorted by start) whose span overlaps a kernel of another rank: on a time-sliced GPU no
    two contexts run at once, so such a span holds another rank's turn (a preempted kernel's span
    holds a whole one; one cut at either end, part of one)."""
    import numpy as np

    from .derive.gpu_sharing import against_other_ranks

    def overlaps(ms, me, os_, oe):
        reach = np.maximum.accumulate(oe)  # the latest end of the others' kernels started so far
        j = np.searchsorted(os_, me, side="left")  # others starting before my end
        hit = np.zeros(len(ms), dtype=bool)
        ok = j > 0
        hit[ok] = reach[j[ok] - 1] > ms[ok]
        return hit
    return against_other_ranks(s, e, rank, overlaps)


def own_kernel_ns(con, steps: list[int]) -> dict[tuple[int, int], int]:
    """Each rank's own compute-kernel time per step: its compute kernels launched in the step, their
    run times summed. Where it time-slices a GPU with other ranks (gpu_sharing), a kernel preempted at
    the end of its turn keeps its span while the others run (its span overlaps their kernels), so it counts for no more than the median run of the same kernel
    name that overlaps no other rank's kernel (h100 kineto ddp4_straggler rank 1: 54.1 ms of kernel spans in step 4,
    11.9 ms in step 5 whose kernels were never preempted; own time 11.9-12.2 ms every step)."""
    import numpy as np

    if not steps:
        return {}
    # summed in SQL; only the time-sliced groups' kernels come to Python, one group at a time (all
    # ranks' kernels fetched at once held ~1 MiB per rank of the claims' memory: +300 MiB at 256 ranks)
    base = {(r, st): int(ns) for r, st, ns in con.execute(
        """SELECT rank, coalesce(step, -1), sum(end_ns - start_ns) FILTER (WHERE category = 'compute')
           FROM gpu_ops WHERE kind = 'kernel' AND end_ns > start_ns GROUP BY ALL HAVING count(*) FILTER (WHERE category = 'compute') > 0""").fetchall()}
    ranks = sorted(r for r, in con.execute(
        "SELECT DISTINCT rank FROM gpu_ops WHERE kind = 'kernel' AND end_ns > start_ns").fetchall())
    cut: dict[tuple[int, int], tuple[int, int, int]] = {}  # preempted compute kernel -> (rank, step, ns taken off); a later group's word wins
    groups = [list(g) for g, in con.execute("SELECT ranks FROM gpu_sharing WHERE time_sliced").fetchall()]
    for g in groups:
        # every kernel of the group (NCCL's too: the other ranks' turns hold them); its compute ones counted
        k = con.execute(f"""SELECT rank, op_id, coalesce(step, -1) AS step, start_ns, end_ns, category = 'compute' AS compute, name
                           FROM gpu_ops WHERE kind = 'kernel' AND end_ns > start_ns AND rank IN ({", ".join(str(int(r)) for r in g)})
                           ORDER BY start_ns, end_ns""").fetchnumpy()
        rank, step = np.asarray(k["rank"], dtype=np.int64), np.asarray(k["step"], dtype=np.int64)
        s, e = np.asarray(k["start_ns"], dtype=np.int64), np.asarray(k["end_ns"], dtype=np.int64)
        compute, name, op = np.asarray(k["compute"], dtype=bool), np.asarray(k["name"], dtype=object), np.asarray(k["op_id"], dtype=np.int64)
        dur = e - s
        pre = np.flatnonzero(_overlapped(s, e, rank))
        if not len(pre):
            continue
        whole = np.setdiff1d(np.arange(len(s)), pre)
        runs: dict = {}
        for n, d in zip(name[whole].tolist(), dur[whole].tolist()):
            runs.setdefault(n, []).append(d)
        cap = {n: max(v) for n, v in runs.items()}
        for i, n, d in zip(pre.tolist(), name[pre].tolist(), dur[pre].tolist()):
            if compute[i]:
                cut[(int(rank[i]), int(op[i]))] = (int(rank[i]), int(step[i]), d - min(d, cap.get(n, d)))
    for r, st, less in cut.values():
        base[(r, st)] -= less
    return {(r, st): base.get((r, st), 0) for r in ranks for st in steps}


def _compute_straggler(con, r: dict, steps: list[int]):
    """A straggler said to compute more (findings.sql strag_why, from step_breakdown's kernel spans):
    the figure is its own extra kernel time per step against the other ranks' median (own_kernel_ns:
    the other ranks' turns taken out); where that is under half its delay, its GPU does not compute
    more: the cause is left unexplained ('late start'), never the shared GPU's turns called work."""
    import statistics
    own = own_kernel_ns(con, steps)
    ranks = sorted({q for q, _ in own})
    extra = [own[(r["rank"], st)] - statistics.median(own[(q, st)] for q in ranks if q != r["rank"])
             for st in steps if len(ranks) > 1 and (r["rank"], st) in own]
    more = statistics.median(extra) if extra else 0.0
    if more >= 0.5 * (r["value_ns"] or 0):
        r["evidence_ns"] = round(more)
    else:
        r["class"], r["cause"], r["evidence_ns"] = "peer wait", "late start", None


def build(con) -> tuple[list[dict], list[dict]]:
    """The claim rows (findings.sql's rows with their claim columns, and the claims this module adds:
    extra_sync, pageable_copy, yardstick), ranked, and the what-if table (best_fixes) they were
    checked against."""
    rel = con.execute("SELECT * FROM findings")
    cols = [d[0] for d in rel.description]
    rows = [dict(zip(cols, r)) for r in rel.fetchall()]
    steps = _analysed(con)
    if not steps:
        return rows, []
    warm = con.execute("SELECT min(step) FROM tf_internal.findings_steps WHERE warmup").fetchone()[0]
    table = best_fixes(con, skip_step=warm)
    rep = _Replays(con, steps)
    while True:  # a pass over the rows asks its replays; the next one has their answers (_Replays)
        done = _claim_rows(con, [dict(r) for r in rows], rep, steps, warm, table)
        if not rep.settle():
            return done


def _claim_rows(con, rows: list[dict], rep: _Replays, steps: list[int], warm, table: list[dict]) -> tuple[list[dict], list[dict]]:
    # Long because: each claim kind's columns filled in one pass over the rows, then ranked and numbered.
    """One pass of `build` over findings.sql's rows (copies: it fills them in), with the replays
    `rep` has answered so far."""
    n = len(steps)
    st = stacks(con)
    abnormal = {(a[0], a[1]): a for a in abnormal_host_time(con, warm)}
    strag_sync = set()
    stall_ns = 0  # the analysed steps' launch idle in a one-time launch stall (findings.sql launch_stall)
    alloc = _allocator_words(con)  # the allocator fix that fits: warm, or caching back on
    for r in rows:
        if r["kind"] == "straggler" and r["cause"] == "more compute":
            _compute_straggler(con, r, steps)
        r.update({c: None for c in CLAIM_COLUMNS})
        r["yardstick"] = False
        r["repro_sql"] = _repro(r)
        r["figure"], r["unit"], r["baseline"] = _figure(r)
        stack = _stack(st, [r["rank"]] if r.get("rank") is not None else r.get("ranks"))
        if r["kind"] == "step_outlier" and r["class"] == "host" and r["cause"] in _HOST_SCENARIO:
            # a one-off of a cause a replay edits: that edit, on that rank and step
            if r["cause"] == "launch" and not _launch_real(con, n, r["rank"], r["step"]):
                continue
            chk = _check(rep, replace(_HOST_SCENARIO[r["cause"]], host_ranks=[r["rank"]]), n, [r["step"]])
            words, kw = alloc if r["cause"] == "allocator" else (r["cause"], {})
            _set_fix(r, words, stack, chk, **kw)
        elif r["kind"] == "step_outlier" and r["class"] == "host" and (r["rank"], r["step"]) in abnormal:
            chk = _check(rep, Scenario(remove_host_stall=[r["rank"]]), n, [r["step"]])
            cause = r["cause"] or ""
            what = {"no_op": "no traced op: a sleep, I/O, the GIL", "data_loading": "data loading"}.get(cause, cause)
            if cause == "allocator":
                _set_fix(r, alloc[0], stack, chk, **alloc[1])
            else:  # the host's other causes: their own words
                _set_fix(r, cause if cause in ("jit_compile", "cpu_op", "data_loading") else "stall", stack, chk,
                         rank=r["rank"], what=what)
        elif r["kind"] == "straggler" and r["cause"] == "sync" and r["evidence"]:
            strag_sync.add(r["rank"])
            chk = _check(rep, Scenario(no_host_syncs=True, host_ranks=[r["rank"]]), n)
            _set_fix(r, "extra sync", stack, chk, name=r["evidence"])
        elif r["kind"] == "straggler":
            # no fix to name: what taking its lateness away would gain, so that the sentence says where
            # it sets no step's pace (amd-hpc merged_all_events rank 3: 11.6 ms/step of lateness, the
            # replay gains 0.0 ms: every rank's host takes as long)
            chk = _check(rep, Scenario(no_stragglers=True), n)
            r["scenario"], r["gain_ns"] = chk["scenario"], chk["gain_ns"]
            r["steps_affected"], r["recover_ns"] = chk["steps_affected"], chk["recover_ns"]
        elif r["kind"] == "dominant" and r["class"] == "host" and (r["note"] or "").startswith("launch stall"):
            # findings.sql launch_stall: a one-time stall inside launch calls, told apart from recurring
            # launch overhead (the launch_names row holds the rest); its replay shortens the stalled calls
            # to the rank's median call (the fix: a warm-up or eager loading), not every launch: "no launch
            # overhead" gained 0.6 ms on hta's mi250_minitoy, whose 6.5 ms stall it leaves in place
            stall_ns = (r["evidence_ns"] or 0) * n
            _set_fix(r, "launch stall", stack, _check(rep, Scenario(no_launch_stall=True), n), name=r["evidence"],
                     what=stall_words(r.get("steps"), r["evidence"]))
            # a warm-up removes the step's module load or compile too (its abnormal jit_compile host time):
            # where that replay gains more, it is the fix's (h100 nsys graphs step 4: cuLibraryLoadData 10.9 ms
            # before the 5.4 ms first launch; "warm up … 5.4 ms" beside a caveat calling the 7.7 ms removal of
            # that jit_compile time "no recorded cause")
            jit = [a for a in abnormal.values() if a[2] == "jit_compile" and a[1] in (r.get("steps") or [])]
            if jit:
                chk = _check(rep, Scenario(remove_host_stall=[jit[0][0]]), n, [jit[0][1]])
                if chk["recover_ns"] > (r["recover_ns"] or 0):
                    _set_fix(r, "launch stall", stack, chk, name=r["evidence"], what=stall_words(r.get("steps"), r["evidence"]))
        elif r["kind"] == "dominant" and r["class"] == "host" and r["cause"] in _HOST_SCENARIO:
            chk = _check(rep, _HOST_SCENARIO[r["cause"]], n)
            if r["cause"] != "launch" or _launch_real(con, n, stall_ns=stall_ns):
                words, kw = alloc if r["cause"] == "allocator" else (r["cause"], {})
                _set_fix(r, words, stack, chk, **kw)
        elif r["kind"] == "dominant" and r["class"] == "communication":
            _set_fix(r, "communication", stack, _check(rep, Scenario(overlap_comm=True), n))
        elif r["kind"] == "launch_names" and _launch_real(con, n, stall_ns=stall_ns):
            shape = launch_shape(con, n)
            chk = _check(rep, Scenario(no_launch_overhead=True), n)
            # a JAX program's copies (device_put of the inputs) lie outside any jitted function: neither
            # XLA's fusion nor its command buffers take them
            if (shape["copies_ns"] >= 0.5 * (r["value_ns"] or 0) and (shape["syncs"] >= 1 or stack == "jax") and
                    (r["evidence_ns"] or 0) < 0.5 * (r["value_ns"] or 0)) or shape["alloc_ns"] >= 0.5 * (r["value_ns"] or 0):
                # mostly before memsets and copies (fusion does not remove it) in a step that blocks
                # (no CUDA graph), or mostly inside allocator calls: no launch fix fits; the sentence
                # says why, the replay is kept
                r["scenario"], r["gain_ns"] = chk["scenario"], chk["gain_ns"]
                r["steps_affected"], r["recover_ns"] = chk["steps_affected"], chk["recover_ns"]
            else:
                _set_fix(r, "launch fuse" if shape["syncs"] >= 1 else "launch", stack, chk, syncs=shape["syncs"])
    for x in _extra_syncs(con, n):
        if x["rank"] in strag_sync:
            continue
        row = _new_row("extra_sync", rank=x["rank"], cls="host", cause="sync", value_ns=x["ns"], baseline_ns=x["base"],
                       evidence=x["name"], per_step=round(x["extra"], 2), n=x["steps"])
        chk = _check(rep, Scenario(no_host_syncs=True, host_ranks=[x["rank"]]), n)
        # the replay removes all the rank's blocking calls: its gain is this call's only where the call's
        # extra blocking per step covers most of it (mfu_2gpu_before rank 1: 0.02 ms more in
        # cudaMemcpyAsync than rank 0, a 10.6 ms gain that is its other syncs')
        if chk["recover_ns"] > 0 and x["ns"] - (x["base"] or 0) >= 0.5 * chk["gain_ns"]:
            _set_fix(row, "extra sync", _stack(st, [x["rank"]]), chk, name=x["name"])
            rows.append(row)
    covered = strag_sync | {r["rank"] for r in rows if r["kind"] == "extra_sync"}
    rows.extend(_host_syncs(con, rep, n, st, covered) or _blocking_copies(con, rep, n, st, covered))
    rows.extend(_pageable(con, rep, n, st))
    # pageable copies each followed by a sync (a host_syncs row after pageable copies) have one fix, the
    # syncs' row's: pinning them (or reading back less) removes the waits, which the copies-twice-as-fast
    # replay does not (GPUPuzzlers swimming_in_streams: 191.9 ms against 84.2 ms for one change)
    # The one change keeps the larger replayed gain: where the copies-twice-as-fast replay recovers more
    # (h100 launch_bound: a 256 MiB pageable copy a step, 87.6 ms, beside one sync after it, 0.9 ms), the
    # syncs' row goes, as before it counted the copy call's blocking.
    syncs = [r for r in rows if r["kind"] == "host_syncs" and r["activity"] and r.get("fix")]
    copies = [r for r in rows if r["kind"] == "pageable_copy" and r.get("fix")]
    for c in copies:
        same = [q for q in syncs if set(c["ranks"] or []) <= set(q["ranks"] or [])]
        if same and (same[0]["recover_ns"] or 0) >= (c["recover_ns"] or 0):
            c["fix"] = c["fix_short"] = c["scenario"] = None
            c["gain_ns"] = c["recover_ns"] = c["steps_affected"] = None
            c["note"], c["priority"] = "fix with the syncs", 3  # a fact now, after the dominant class
        elif same:
            rows.remove(same[0])
    rows.extend(_yardsticks(con, table))
    pf = platforms(con)
    for r in rows:  # the fix in the words of the ranks' platform (HIP graphs on ROCm)
        where = platform_of(pf, [r["rank"]] if r.get("rank") is not None else r.get("ranks"))
        r["fix"], r["fix_short"] = platform_words(r["fix"], where), platform_words(r["fix_short"], where)
    return _rank(rows), table


def stall_words(steps, name: str) -> str:
    """A launch stall by the analysed steps holding one (findings.sql launch_stall): every step named,
    not only the first."""
    steps = list(steps or [])
    if len(steps) <= 1:
        return f"a one-time stall in {name}" + (f" (step {steps[0]})" if steps else "")
    return f"stalls in {name} in {len(steps)} steps ({', '.join(map(str, steps))})"


def _launch_real(con, n: int, rank: int | None = None, step: int | None = None, stall_ns: float = 0) -> bool:
    """Launch advice only where launch idle really lies in the analysed steps (or the one rank and
    step of a one-off), and mostly before the launch calls returned: idle after they returned is the
    kernels queued behind other work (a shared GPU: 193 of 194.6 ms on the bundled ddp4 job; 27.7 of
    27.9 ms in rank 1's step 1 of the h100 nsys ddp4_straggler job), which no launch fix removes. A
    one-time launch stall's idle (stall_ns, over the analysed steps) is not launch overhead: left out."""
    where = f"step IN {_STEPS_SQL}" if step is None else f"step = {int(step)} AND rank = {int(rank or 0)}"
    exposed, queued, median = con.execute(f"""
        SELECT sum(exposed_ns), sum(exposed_queued_ns),
               (SELECT median(wall_ns) FROM tf_internal.findings_steps WHERE NOT warmup)
        FROM launch_overhead WHERE {where}""").fetchone()
    exposed = max(0, (exposed or 0) - (stall_ns if step is None else 0))
    per_step = exposed / (n if step is None else 1)
    return bool(exposed) and (queued or 0) < 0.5 * exposed and per_step >= 0.02 * (median or 0)


# ROCm's copy and fill blit kernels (hipMemcpy*Async / hipMemset run as kernels): copies, not compute
# (JAX GEMM on MI300X: 0.475 of 0.732 ms of launch idle before __amd_rocclr_copyBuffer.kd, device_put)
_BLIT = r"^__amd_rocclr_(copy|fill)(Buffer|Image)"


def launch_shape(con, n: int) -> dict:
    """What the launch-bound names' idle precedes in the analysed steps (copies_ns: memsets and copies,
    which no fusion removes; nsys-ai mfu_2gpu_after: 21.0 of 28.6 ms), its largest single launch where
    its call took over 50x its API's median call (outlier: (api name, idle ns, ratio); 5.75 ms in one
    cudaMemsetAsync, 690x its 8.3 us median) and the blocking calls per rank-step (syncs: a CUDA graph
    cannot capture a step that makes them)."""
    copies, outlier, ratio = con.execute(f"""
        WITH o AS (SELECT o.*, median(api_ns) OVER (PARTITION BY api_name) AS med FROM launch_overhead o)
        SELECT coalesce(sum(exposed_ns) FILTER (WHERE kind IN ('memset', 'memcpy') OR regexp_matches(name, '{_BLIT}')), 0),
               arg_max(api_name || chr(0) || exposed_ns::VARCHAR, exposed_ns) FILTER (WHERE api_ns > 50 * med),
               arg_max(api_ns / nullif(med, 0), exposed_ns) FILTER (WHERE api_ns > 50 * med)
        FROM o SEMI JOIN launch_overhead_summary s ON s.rank = o.rank AND s.name = o.name AND s.launch_bound
        WHERE o.step IN {_STEPS_SQL}""").fetchone()
    syncs = con.execute(f"""SELECT count(*) / greatest(1, (SELECT count(DISTINCT rank) FROM launch_overhead))::DOUBLE / {max(n, 1)}
                            FROM sync WHERE reason = 'synchronize' AND step IN {_STEPS_SQL}""").fetchone()[0] or 0
    # the part of that idle spent inside allocator calls on the rank (the idle ends at the op's start:
    # [start - exposed, start]); allocator time, which fusion does not remove (TraceLens' MI300X DDP
    # ResNet-18, caching off: 522.0 of 528.6 ms of one kernel name's launch idle inside hipFree / hipMalloc)
    alloc, alloc_name = con.execute(f"""
        WITH o AS (SELECT o.rank, g.start_ns - o.exposed_ns AS a, g.start_ns AS b FROM launch_overhead o
                   JOIN gpu_ops g USING (op_id)
                   SEMI JOIN launch_overhead_summary s ON s.rank = o.rank AND s.name = o.name AND s.launch_bound
                   WHERE o.step IN {_STEPS_SQL} AND o.exposed_ns > 0),
        m AS (SELECT rank, start_ns, end_ns, regexp_replace(name, '_v[0-9]+$', '') AS name FROM host_ops
              WHERE kind IN ('cuda_runtime', 'cuda_driver') AND regexp_matches(name, '{_ALLOCATOR_CALLS}'))
        SELECT coalesce(sum(least(m.end_ns, o.b) - greatest(m.start_ns, o.a)), 0),
               arg_max(m.name, least(m.end_ns, o.b) - greatest(m.start_ns, o.a))
        FROM o JOIN m ON m.rank = o.rank AND m.end_ns > o.a AND m.start_ns < o.b""").fetchone()
    out = {"copies_ns": int(copies or 0), "syncs": round(syncs, 1), "outlier": None, "alloc_ns": int(alloc or 0),
           "alloc_name": alloc_name}
    if outlier:
        name, ns = outlier.split(chr(0))
        out["outlier"] = (name, int(ns), float(ratio))
    return out


def _host_syncs(con, rep: _Replays, n: int, st: dict[int, str], covered: set) -> list[dict]:
    """Stream syncs every analysed step on every rank alike (no straggler, no extra_sync: none makes
    more than its peers), most of them right after a copy staged through pageable memory on the same
    thread, where the replay without syncs gains: the call blocking longest, per rank and step, and how
    many of them follow such a copy
    (PyTorch's blocking copy of a CPU tensor: nsys-ai mfu_2gpu_after, 15 per step after 8-byte aten::to
    copies, 138-152 ms; the what-if table's largest gain, 37.6 ms, which no claim made before)."""
    row = con.execute(f"""{PAIRS_SQL}
        SELECT name, count(*) / count(DISTINCT rank) / {n}, sum(blocked_ns + copy_ns) / count(DISTINCT rank) / {n},
               count(*) FILTER (WHERE after_pageable) / count(DISTINCT rank) / {n},
               list(DISTINCT rank ORDER BY rank), count(DISTINCT step),
               -- the copy holding the most of their blocking in all, not the longest one: its direction picks the fix
               (SELECT arg_max(c, t) FROM (SELECT copy AS c, sum(copy_ns) AS t FROM s x WHERE x.name = s.name AND x.after_pageable
                                           GROUP BY copy)),
               sum(startup_ns) / count(DISTINCT rank)
        FROM s GROUP BY name ORDER BY 3 DESC, name LIMIT 1""").fetchone()
    # only where most of them follow a pageable copy, which has a fix (pin it, non_blocking=True): a sync
    # every rank makes for no recorded reason is waiting (bundled ddp2_flops: 8 cudaEventSynchronize per
    # step on every rank, waiting for the collectives, "gained" 13.9 ms a step and led over the injected stall)
    if not row or not row[0] or row[5] < n or set(row[4]) & covered or row[3] < 0.5 * row[1]:
        return []
    name, per_step, ns, after, ranks, _, copy, startup = row
    r = _new_row("host_syncs", cls="host", cause="sync", value_ns=ns, evidence=name, per_step=round(per_step, 2),
                 n=round(after), ranks=ranks)
    r["activity"] = copy  # the pageable copy the calls follow (its GPU op's name)
    r["evidence_ns"] = int(startup or 0) or None  # their start-up blocking, once (sync.startup_ns), not in the figure
    r["repro_sql"] = (f"{PAIRS_SQL} SELECT sum(blocked_ns + copy_ns) / count(DISTINCT rank) / "
                      f"(SELECT count(*) FROM {_STEPS_SQL})::DOUBLE AS figure FROM s WHERE name = {sql_string(name)}")
    chk = _check(rep, Scenario(no_host_syncs=True), n)
    # the replay removes every blocking call: it is this call's gain only where the call blocks at least
    # half as long (tracelens owlv2: 1 hipDeviceSynchronize of 0.0 ms beside a 144.6 ms gain)
    if chk["recover_ns"] <= 0 or ns < 0.5 * chk["gain_ns"]:
        return []
    # the copies' blocking by direction, said where a second direction holds 5 % of it (swimming_in_streams:
    # DtoH 132.9 + HtoD 99.1 ms of copy calls before the syncs)
    dirs = con.execute(f"""{PAIRS_SQL}
        SELECT coalesce(nullif(regexp_extract(copy, '(HtoD|DtoH|DtoD|HtoH)'), ''), 'other'), sum(copy_ns) / count(DISTINCT rank) / {n}
        FROM s WHERE name = {sql_string(name)} AND after_pageable GROUP BY 1 ORDER BY 2 DESC, 1""").fetchall()
    total = sum(ns for _, ns in dirs) or 1
    if len([d for d, ns in dirs if ns >= 0.05 * total]) > 1:
        r["note"] = " + ".join(f"{d} {ns / 1e6:.1f} ms" for d, ns in dirs if ns >= 0.05 * total)
    # a device-to-host copy read at once (x[i].cpu() in a loop): non_blocking would read before it lands;
    # the fix is fewer reads (GPUPuzzlers addition_d2h_sync: 4,096 4-byte DtoH copies, each then a sync)
    words = "read back" if dirs and dirs[0][0] == "DtoH" and dirs[0][1] >= 0.9 * total else "pageable sync"
    _set_fix(r, words, _stack(st, ranks), chk, name=name)
    return [r]


# Each stream sync in the analysed steps with the blocking call right before it on its thread, where
# that call is a copy staged through pageable memory: its blocked time (copy_ns) is the pair's, the
# copy's host wait then the sync's. Counting the syncs alone left the claim out where the copy call holds
# the wait (GPUPuzzlers addition_d2h_sync: 4,097 cudaMemcpyAsync DtoH block 55.8 ms, the syncs after
# them 4.2 ms; the replay without host syncs gains 60.1 ms, which the verdict called "no recorded cause")
PAIRS_SQL = f"""
        WITH calls AS (SELECT op_id, lag(op_id) OVER (PARTITION BY rank, tid ORDER BY start_ns) AS prev
                       FROM host_ops WHERE kind IN ('cuda_runtime', 'cuda_driver')),
        s AS (SELECT y.rank, y.step, y.name, y.blocked_ns - y.startup_ns AS blocked_ns, y.startup_ns,
                     coalesce(p.reason = 'pageable memcpy', FALSE) AS after_pageable,
                     CASE WHEN p.reason = 'pageable memcpy' THEN p.blocked_ns - p.startup_ns ELSE 0 END AS copy_ns,
                     p.gpu_op AS copy
              FROM sync y JOIN calls c ON c.op_id = y.op_id LEFT JOIN sync p ON p.op_id = c.prev
              WHERE y.reason = 'synchronize' AND y.step IN {_STEPS_SQL})"""


# Per rank, a host_syncs row's blocking as its figure counts it, and its calls by copy direction (the
# verdict's range by rank and "8 HtoD, 2 DtoH": PARAM DLRM's "2.5 ms/step each" was a mean of 0.06-6.6
# ms; "10 right after a pageable HtoD" were 8 HtoD and 2 DtoH). $1: the call's name.
_PAIRS_PARTS_SQL = f"""{PAIRS_SQL}
    SELECT (SELECT list(ns ORDER BY rank) FROM (SELECT rank, sum(blocked_ns + copy_ns) AS ns FROM s WHERE name = $1 GROUP BY rank)),
           (SELECT list([d, n::VARCHAR] ORDER BY n DESC, d) FROM (
                SELECT regexp_extract(copy, '(HtoD|DtoH|DtoD|HtoH)') AS d, count(*) AS n FROM s
                WHERE name = $1 AND after_pageable GROUP BY d HAVING d <> ''))"""
_COPIES_PARTS_SQL = f"""
    WITH y AS (SELECT rank, blocked_ns - startup_ns AS ns, gpu_op FROM sync
               WHERE name = $1 AND reason = 'sync memcpy' AND step IN {_STEPS_SQL})
    SELECT (SELECT list(ns ORDER BY rank) FROM (SELECT rank, sum(ns) AS ns FROM y GROUP BY rank)),
           (SELECT list([d, n::VARCHAR] ORDER BY n DESC, d) FROM (
                SELECT regexp_extract(gpu_op, '(HtoD|DtoH|DtoD|HtoH)') AS d, count(*) AS n FROM y
                GROUP BY d HAVING d <> ''))"""


def sync_parts(con, name: str, pairs: bool) -> tuple[list | None, list | None]:
    """([blocked ns per rank over the analysed steps], [[direction, calls]]) of a host_syncs row's call:
    the syncs with the pageable copy call before each (pairs, _host_syncs) or the blocking copy calls
    (_blocking_copies), start-up out, as the row's figure."""
    return con.execute(_PAIRS_PARTS_SQL if pairs else _COPIES_PARTS_SQL, [name]).fetchone()


def _blocking_copies(con, rep: _Replays, n: int, st: dict[int, str], covered: set) -> list[dict]:
    """Blocking copy calls (sync.reason 'sync memcpy': cudaMemcpy, hipMemcpyWithStream) every analysed
    step, whose wait for the GPU the replay without syncs removes: the call blocking longest, per rank
    and step, and the direction of its copy. Without this row the what-if table's "no host syncs" gain
    was quoted with no fix (rocmprofiledata mytrace.rpd, vLLM: 22 hipMemcpyWithStream DtoH reads in
    aten::copy_ block 345.6 ms, the replay gains 24.8 ms)."""
    row = con.execute(f"""
        SELECT name, count(*) / count(DISTINCT rank) / {n}, sum(blocked_ns - startup_ns) / count(DISTINCT rank) / {n},
               list(DISTINCT rank ORDER BY rank), count(DISTINCT step),
               arg_max(regexp_extract(gpu_op, '(HtoD|DtoH|DtoD|HtoH)'), blocked_ns - startup_ns), sum(startup_ns) / count(DISTINCT rank)
        FROM sync WHERE reason = 'sync memcpy' AND step IN {_STEPS_SQL}
        GROUP BY name ORDER BY 3 DESC, name LIMIT 1""").fetchone()
    if not row or not row[0] or row[4] < n or set(row[3]) & covered:
        return []
    name, per_step, ns, ranks, _, direction, startup = row
    r = _new_row("host_syncs", cls="host", cause="sync", value_ns=ns, evidence=name, per_step=round(per_step, 2), ranks=ranks)
    r["activity"] = f"{direction} copy" if direction else None  # the copies they wait for, said with the calls
    # the blocking before the rank's first GPU op (runtime start-up) is once, not per step: out of the
    # figure, said apart (rocprof v1 vector add: 275.0 of 276.0 ms "per step" was the first call's start-up)
    r["evidence_ns"] = int(startup or 0) or None
    r["repro_sql"] = (f"SELECT sum(blocked_ns - startup_ns) / count(DISTINCT rank) / (SELECT count(*) FROM {_STEPS_SQL})::DOUBLE AS figure "
                      f"FROM sync WHERE name = {sql_string(name)} AND step IN {_STEPS_SQL}")
    chk = _check(rep, Scenario(no_host_syncs=True), n)
    # the replay removes every blocking call: it is these calls' gain only where they block at least half as long
    if chk["recover_ns"] <= 0 or ns < 0.5 * chk["gain_ns"]:
        return []
    # by direction over all the calls, not the longest one's (pipit saxpy-mpi-cuda: "DtoH copy" and the
    # read-back fix for 10 HtoD calls blocking 186.6 ms and 5 DtoH 187.8 ms)
    dirs = con.execute(f"""SELECT coalesce(nullif(regexp_extract(gpu_op, '(HtoD|DtoH|DtoD|HtoH)'), ''), 'other'),
                                  sum(blocked_ns - startup_ns) / count(DISTINCT rank) / {n}
                           FROM sync WHERE reason = 'sync memcpy' AND name = {sql_string(name)} AND step IN {_STEPS_SQL}
                           GROUP BY 1 ORDER BY 2 DESC, 1""").fetchall()
    total = sum(ns for _, ns in dirs) or 1
    both = [d for d, ns in dirs if ns >= 0.05 * total]
    if len(both) > 1:
        r["activity"] = " and ".join(both) + " copy"
        r["note"] = " + ".join(f"{d} {ns / 1e6:.1f} ms" for d, ns in dirs if ns >= 0.05 * total)
    read_back = bool(dirs) and dirs[0][0] == "DtoH" and dirs[0][1] >= 0.9 * total
    _set_fix(r, "read back" if read_back else "pageable copy", _stack(st, ranks), chk, name=name)
    return [r]


def _pageable(con, rep: _Replays, n: int, st: dict[int, str]) -> list[dict]:
    """A pageable copy every step: pinned, it runs at least twice as fast (the staging copy through a
    pinned bounce buffer goes; 6.4 GB/s pageable on the launch_bound H100 job) and its call returns at
    once, which the replay of the copy at half its time gives (its call waits for it: whatif.py)."""
    row = con.execute(f"""SELECT sum(end_ns - start_ns) / {n}, list(DISTINCT rank ORDER BY rank), count(DISTINCT step),
                                 arg_max(name, end_ns - start_ns), sum(bytes) / {n},
                                 arg_max(regexp_extract(name, '(HtoD|DtoH|DtoD|HtoH)'), end_ns - start_ns)
                          FROM gpu_ops WHERE name ILIKE '%pageable%' AND step IN {_STEPS_SQL}""").fetchone()
    if not row or not row[0]:
        return []
    # the cause as step_causes words it ('HtoD pageable'): the direction of the longest of them
    r = _new_row("pageable_copy", cls="memory copies", cause=f"{row[5] or 'copy'} pageable", value_ns=row[0],
                 ranks=row[1], evidence=row[3], n=row[2])
    r["bytes"] = row[4]
    chk = _check(rep, Scenario(scale_kernels=[("(?i)pageable", 0.5)]), n)
    if chk["recover_ns"] <= 0:
        return []
    _set_fix(r, "pageable copy", _stack(st, row[1]), chk)
    return [r]


# Host time on a step's critical path while the same rank's GPU was busy, per rank: the host waiting on
# running GPU work by a means the trace does not record as a sync (polling a counter the GPU writes,
# DeepEP's dispatch: 24.8 of the 25.0 ms of host time on deepseek train.json's path, its GPU idle
# 0.5 ms of 129.0 ms; a thread whose events were filtered out: 262 of 540 ms on the fused HTA pair).
# The replay holds that host time fixed, so a bound on faster kernels or copies (compute x0.5 "2.5 ms")
# is not one. Parameter: the step.
_HOST_WHILE_BUSY_SQL = """
    WITH h AS (SELECT rank, start_ns, end_ns FROM critical_path WHERE step = ? AND kind = 'host_cpu'),
    w AS (SELECT rank, min(start_ns) AS a, max(end_ns) AS b FROM tf_internal.step_windows WHERE step = ? GROUP BY rank),
    hb AS (SELECT h.rank, sum(h.end_ns - h.start_ns) AS host_ns,
                  sum((SELECT coalesce(sum(least(g.end_ns, h.end_ns) - greatest(g.start_ns, h.start_ns)), 0)
                       FROM tf_internal.gpu_islands g WHERE g.rank = h.rank AND g.end_ns > h.start_ns AND g.start_ns < h.end_ns)) AS busy_ns
           FROM h GROUP BY h.rank)
    SELECT hb.rank, hb.host_ns, hb.busy_ns, w.b - w.a AS wall_ns,
           (w.b - w.a) - (SELECT coalesce(sum(least(g.end_ns, w.b) - greatest(g.start_ns, w.a)), 0)
                          FROM tf_internal.gpu_islands g WHERE g.rank = w.rank AND g.end_ns > w.a AND g.start_ns < w.b) AS idle_ns
    FROM hb JOIN w USING (rank) ORDER BY hb.busy_ns DESC, hb.rank LIMIT 1"""


def _host_while_busy(con, step: int) -> tuple | None:
    """(rank, host ns on the path, of it while its GPU was busy, the rank's step window, its GPU idle in
    it) for the rank holding the most such time in the step, where it is material (over 1 ms and 5 % of
    the window) and the GPU idled under half the path's host time: a scaling bound's replay cannot be
    trusted there. A host-bound step's GPU runs its little work beside the host's (JAX conv on MI300X:
    4.2 of 27.3 ms, the GPU idle 23.4 ms): work off the path, no hidden wait."""
    row = con.execute(_HOST_WHILE_BUSY_SQL, [step, step]).fetchone()
    if not row or not row[2] or not row[3] or row[2] < max(1e6, 0.05 * row[3]) or row[4] >= 0.5 * row[1]:
        return None
    return row


def _yardsticks(con, table: list[dict]) -> list[dict]:
    """The replay's bounds (compute or copies twice as fast, no stragglers): what the step would gain,
    shown apart, never as the fix. A bound on faster GPU work is withheld, with why, where the host's
    time on the path ran while its GPU was busy (_host_while_busy)."""
    out = []
    for f in table:
        if (f.get("reference") or f["scenario"].startswith("no stragglers")) and f["gain_ns"] > 0:
            busy = _host_while_busy(con, f["step"]) if f.get("reference") else None
            if busy:
                rank, host, during, wall, idle = busy
                r = _new_row("bound_withheld", rank=rank, step=f["step"], value_ns=during, baseline_ns=host,
                             evidence=f["scenario"])
                r["priority"], r["evidence_ns"], r["n"] = 3, idle, wall  # n: the rank's step window (ns)
                r["figure"], r["unit"] = during, "ns"
                out.append(r)
                continue
            r = _new_row("yardstick", evidence=f["scenario"], value_ns=f["gain_ns"], step=f["step"], share_pct=f["gain_pct"])
            r["yardstick"], r["priority"] = True, 3  # a caveat on the fixes, not a finding
            r["gain_ns"] = f["gain_ns"]
            r["figure"], r["unit"] = f["gain_ns"], "ns"
            out.append(r)
    return out


def _new_row(kind: str, rank=None, cls=None, cause=None, value_ns=None, baseline_ns=None, evidence=None, per_step=None,
             n=None, ranks=None, step=None, share_pct=None) -> dict:
    r = {"priority": 1, "kind": kind, "rank": rank, "step": step, "class": cls, "cause": cause, "value_ns": value_ns,
         "baseline_ns": baseline_ns, "evidence": evidence, "per_step": per_step, "n": n, "ranks": ranks,
         "share_pct": share_pct}
    r.update({c: None for c in CLAIM_COLUMNS})
    r["yardstick"] = False
    r["repro_sql"] = _repro(r)
    r["figure"], r["unit"], r["baseline"] = _figure(r)
    return r


def _set_fix(r: dict, cause: str, stack: str, chk: dict, **kw):
    """The fix stands only where its replay gains above the noise; its gain is kept either way."""
    r["scenario"] = chk["scenario"]
    r["gain_ns"], r["steps_affected"], r["recover_ns"] = chk["gain_ns"], chk["steps_affected"], chk["recover_ns"]
    if chk["recover_ns"] > 0:
        r["fix"], r["fix_short"] = fix_words(cause, stack, **kw), fix_words(cause, stack, short=True, **kw)


def _rank(rows: list[dict]) -> list[dict]:
    """Fixes first, by what they recover over the capture; then the facts as findings.sql ordered them
    (priority, cost); yardsticks last. Ties are broken by the rows' own values (kind, ranks, then every
    column), not left in read order: four tied `sharing` findings of a 64-rank job took each other's
    claim numbers between the local and the cluster ingest."""
    def key(r):
        if r["yardstick"]:
            head: tuple = (2, 0, 0)
        elif r["fix"]:
            head = (0, -(r["recover_ns"] or 0), 0)
        else:
            head = (1, r["priority"] if r["priority"] is not None else 9, -(r.get("cost_ns") or 0))
        return head + (str(r.get("kind")), str(r.get("rank")), str(r.get("ranks")),
                       json.dumps(r, sort_keys=True, default=str))
    return sorted(rows, key=key)


def store(con):
    """Build the claims and write them over `findings` (its rows, ranked, with the claim columns), and
    the what-if table beside it (tf_internal.claims_whatif, for the report's section)."""
    import pyarrow as pa
    rows, table = build(con)
    types = {c: t for c, t in con.execute("SELECT column_name, data_type FROM information_schema.columns "
                                          "WHERE table_name = 'findings' AND table_schema = 'main'").fetchall() if c != "claim"}
    types.update(CLAIM_COLUMNS)
    names = list(types)
    data = {c: [r.get(c) for r in rows] for c in names}
    arrow = pa.table({c: pa.array(v, type=_arrow_type(types[c])) for c, v in data.items()})
    con.register("tf_claims_rows", arrow)
    try:
        con.execute("CREATE OR REPLACE TABLE findings AS SELECT " +
                    ", ".join(f'"{c}"::{types[c]} AS "{c}"' for c in names) +
                    " , row_number() OVER ()::INTEGER AS claim FROM tf_claims_rows")
    finally:
        con.unregister("tf_claims_rows")
    from . import comments
    comments.apply_docs(con, comments.docs_for(sqlmodules.text("queries", "findings"), ["findings"]))  # the table is new: its COMMENT ONs again
    con.execute(sqlmodules.create_table("claims_whatif", DECLARED["claims_whatif"], "tf_internal"))
    con.execute("INSERT INTO tf_internal.claims_whatif VALUES (?)", [json.dumps(table)])
    con.execute(f"INSERT OR REPLACE INTO tf_internal.metadata VALUES ('{DONE_KEY}', '1')")


def _arrow_type(t: str):
    import pyarrow as pa
    return {"INTEGER": pa.int64(), "BIGINT": pa.float64(), "DOUBLE": pa.float64(), "VARCHAR": pa.string(),
            "BOOLEAN": pa.bool_(), "INTEGER[]": pa.list_(pa.int64())}.get(t, pa.string())


def load(con) -> tuple[list[dict], list[dict]]:
    """The stored claims (ranked rows) and what-if table; built here, without writing, for a database
    whose ingest did not store them (a test that ran the packs alone)."""
    done = con.execute(f"SELECT count(*) FROM tf_internal.metadata WHERE key = '{DONE_KEY}'").fetchone()[0]
    if not done:
        return build(con)
    rel = con.execute("SELECT * FROM findings ORDER BY claim")
    cols = [d[0] for d in rel.description]
    rows = [dict(zip(cols, r)) for r in rel.fetchall()]
    fixes = con.execute("SELECT fixes FROM tf_internal.claims_whatif").fetchone()
    return rows, json.loads(fixes[0]) if fixes else []


