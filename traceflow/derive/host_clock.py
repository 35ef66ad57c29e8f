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

External ids can lie: in some public traces a runtime call's External id is its own correlation id
and names an unrelated CPU op (seen on a CNN benchmark and a replay tool's inputs). The pairs then
agree on no offset although there is one clock. Before calling the clocks inconsistent, the trace
is asked the other way: do the launch calls lie inside CPU ops of their own thread as they stand?
If at least NEST_SHARE of them do, there is one clock and only the External ids are wrong; the
launches are then linked by nesting (gpu_ops.sql).
"""
from __future__ import annotations

TOLERANCE_NS = 10_000   # clock noise allowed at either edge of a CPU op
AGREE_SHARE = 0.99      # share of linked pairs an offset must satisfy
# Share of launch calls inside a CPU op of their thread, at offset 0, that proves one clock when the
# External ids disagree. Two clocks days apart nest none (0 of 3,853 calls on a trace moved by days);
# one clock nests most: 0.98 on the public CNN benchmark whose External ids collide.
NEST_SHARE = 0.8

_BOUNDS = """
WITH p AS (
    SELECT r.trace_id, r.start_ns - c.start_ns AS lo, c.end_ns - r.end_ns AS hi
    FROM host_ops r JOIN host_ops c ON c.trace_id = r.trace_id AND c.external_id = r.external_id AND c.kind = 'cpu_op'
         AND c.tid = r.tid
    WHERE r.kind IN ('cuda_runtime', 'cuda_driver') AND r.external_id IS NOT NULL AND c.external_id IS NOT NULL
      AND r.trace_id IN (SELECT trace_id FROM traces WHERE source_format = 'kineto-json')
)
-- the offset must be >= -hi and <= lo for (nearly) every pair
SELECT p.trace_id, count(*) AS n,
       quantile_disc(-p.hi, {share}) AS lower, quantile_disc(p.lo, 1 - {share}) AS upper
FROM p JOIN traces t USING (trace_id) GROUP BY p.trace_id ORDER BY p.trace_id
"""

_NESTED_AT_ZERO = """
WITH calls AS (
    SELECT op_id, tid, start_ns, end_ns FROM host_ops
    WHERE trace_id = $tid AND kind IN ('cuda_runtime', 'cuda_driver')
      AND correlation_id IN (SELECT correlation_id FROM gpu_ops WHERE trace_id = $tid)
), inside AS (
    SELECT DISTINCT r.op_id FROM calls r JOIN host_ops c
      ON c.trace_id = $tid AND c.kind = 'cpu_op' AND c.tid = r.tid
     AND c.start_ns <= r.start_ns + $tol AND c.end_ns + $tol >= r.end_ns
)
SELECT (SELECT count(*) FROM calls), (SELECT count(*) FROM inside)
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
            calls, inside = con.execute(_NESTED_AT_ZERO, {"tid": trace_id, "tol": TOLERANCE_NS}).fetchone()
            if calls and inside >= NEST_SHARE * calls:
                warnings.append((trace_id, f"External ids do not link runtime calls to the CPU ops around them (no one "
                                f"clock offset fits {n} links, yet {inside} of {calls} launch calls lie inside a CPU op of "
                                "their thread as recorded): one clock; GPU ops are linked to CPU ops by nesting on the "
                                "launching thread"))
                continue
            con.execute("UPDATE traces SET cpu_clock_consistent = FALSE WHERE trace_id = ?", [trace_id])
            warnings.append((trace_id, "CPU ops and CUDA runtime calls are on clocks with no consistent offset (no "
                            f"one offset puts {100 * AGREE_SHARE:.0f}% of {n} runtime calls inside the CPU op that issued "
                            "them): dispatch and exposed launch figures from CPU ops are left out (NULL)"))
    return warnings


def with_ranks(con, notes: list[tuple[int, str]]) -> list[str]:
    """reconcile's notes as the user reads them: 'rank N: ...'."""
    rank = dict(con.execute("SELECT trace_id, rank FROM traces").fetchall()) if notes else {}
    return [f"rank {rank[tid]}: {text}" for tid, text in notes]
