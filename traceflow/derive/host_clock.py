"""Two clocks in one Kineto trace: CPU ops on one, CUDA runtime calls and GPU work on another.

Real traces do this (seen in public Kineto traces: CPU ops and ProfilerStep ranges in days since
boot, runtime calls and kernels on the Unix epoch). Nothing then lands in any step and launch
latencies run to days. The trace itself says how the clocks relate: a runtime call lies inside the
CPU op that issued it (they share an External id). For each such pair the CPU clock's offset must
lie in [runtime end - op end, runtime start - op start]. The offsets that satisfy 99% of the pairs
form an interval; its midpoint is applied to the CPU-side events (CPU ops, Python functions,
annotations), and half its width is the uncertainty stated in the warning (a few us: the slack
between a CPU op's edges and its runtime calls). Where no single offset fits, nothing is moved and the
launch figures that mix the two clocks (dispatch time, exposed launch overhead from the CPU op)
are left out: `gpu_ops.issue_start_ns` falls back to the runtime call's start.
"""
from __future__ import annotations

TOLERANCE_NS = 10_000   # clock noise allowed at either edge of a CPU op
AGREE_SHARE = 0.99      # share of linked pairs an offset must satisfy

_BOUNDS = """
WITH p AS (
    SELECT r.trace_id, r.start_ns - c.start_ns AS lo, c.end_ns - r.end_ns AS hi
    FROM host_ops r JOIN host_ops c ON c.trace_id = r.trace_id AND c.external_id = r.external_id AND c.kind = 'cpu_op'
    WHERE r.kind IN ('cuda_runtime', 'cuda_driver') AND r.external_id IS NOT NULL AND c.external_id IS NOT NULL
      AND r.trace_id IN (SELECT trace_id FROM traces WHERE source_format = 'kineto-json')
)
-- the offset must be >= -hi and <= lo for (nearly) every pair
SELECT p.trace_id, count(*) AS n,
       quantile_disc(-p.hi, {share}) AS lower, quantile_disc(p.lo, 1 - {share}) AS upper
FROM p JOIN traces t USING (trace_id) GROUP BY p.trace_id ORDER BY p.trace_id
"""


def reconcile(con) -> list[tuple[int, str]]:
    """Moves CPU-side events onto the runtime calls' clock where the links show a constant offset.
    Returns (trace_id, what was done) for the user (with_ranks says it of ranks): a cluster's worker
    runs this on its rank file before the job's ranks are known."""
    warnings = []
    for trace_id, n, lower, upper in con.execute(_BOUNDS.format(share=AGREE_SHARE)).fetchall():
        if lower - TOLERANCE_NS <= 0 <= upper + TOLERANCE_NS:
            continue  # one clock
        if lower <= upper + TOLERANCE_NS:
            delta = (lower + upper) // 2
            con.execute("UPDATE host_ops SET start_ns = start_ns + ?, end_ns = end_ns + ? "
                        "WHERE trace_id = ? AND kind IN ('cpu_op', 'python')", [delta, delta, trace_id])
            con.execute("UPDATE ranges SET start_ns = start_ns + ?, end_ns = end_ns + ? WHERE trace_id = ? AND NOT on_gpu",
                        [delta, delta, trace_id])
            con.execute("UPDATE memory_events SET ts_ns = ts_ns + ? WHERE trace_id = ?", [delta, trace_id])  # CPU-side too
            con.execute("UPDATE traces SET cpu_clock_offset_ns = ?, cpu_clock_consistent = TRUE WHERE trace_id = ?",
                        [delta, trace_id])
            warnings.append((trace_id, "CPU ops are on another clock than the CUDA runtime calls and GPU work; moved by "
                            f"{delta / 1e9:+.6f} s (+/- {max(0, upper - lower) / 2e3:.1f} us: the offsets at which the runtime "
                            f"calls lie inside the CPU ops that issued them, {n} links)"))
        else:
            con.execute("UPDATE traces SET cpu_clock_consistent = FALSE WHERE trace_id = ?", [trace_id])
            warnings.append((trace_id, "CPU ops and CUDA runtime calls are on clocks with no consistent offset (no "
                            f"one offset puts {100 * AGREE_SHARE:.0f}% of {n} runtime calls inside the CPU op that issued "
                            "them): dispatch and exposed launch figures from CPU ops are left out (NULL)"))
    return warnings


def with_ranks(con, notes: list[tuple[int, str]]) -> list[str]:
    """reconcile's notes as the user reads them: 'rank N: ...'."""
    rank = dict(con.execute("SELECT trace_id, rank FROM traces").fetchall()) if notes else {}
    return [f"rank {rank[tid]}: {text}" for tid, text in notes]
