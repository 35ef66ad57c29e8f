"""The report's section on how far the compute ran from the hardware: the roofline chart, MFU per
step and rank, and the MFU loss waterfall (queries/op_work.sql, roofline.sql, mfu.sql,
mfu_waterfall.sql; definitions in docs/roofline.md)."""
from __future__ import annotations

import math

from .blocks import Note, Plots, Section, label, table

# the tables its SQL reads (tests/test_layers.py)
READS = frozenset({"gpu_ops", "mfu", "mfu_waterfall", "op_work", "roofline"})

WATERFALL = (("mfu_pct", "MFU", "#4c78a8"), ("below_roof_pts", "kernels below their roof", "#9ecae9"),
             ("no_flops_compute_pts", "compute with no known FLOPs", "#bab0ac"), ("idle_pts", "GPU idle", "#e45756"),
             ("straggler_wait_pts", "waiting for stragglers", "#ff9da6"),
             ("exposed_transfer_pts", "exposed comm transfer", "#f58518"), ("exposed_memory_pts", "exposed memcpy", "#54a24b"))


def section(con, P: Plots) -> Section:
    known = con.execute("""SELECT sum(gpu_ns) FILTER (WHERE flops IS NOT NULL), sum(gpu_ns),
                                  (SELECT sum(end_ns - start_ns) FROM gpu_ops WHERE category = 'compute')
                           FROM op_work""").fetchone()
    title = "How far from the hardware: roofline and MFU"
    if not known or not known[0]:
        from ..flops_coverage import why_no_flops
        reason = why_no_flops(con)
        return Section("roofline", title, [Note(f"The roofline and MFU are empty: {reason}.")])
    blocks: list = [Note(f"FLOPs are known for {100 * known[0] / known[2]:.0f}% of the compute-kernel time "
                         f"({known[0] / 1e6:,.1f} of {known[2] / 1e6:,.1f} ms); other kernels are left out of the "
                         "roofline and count as compute with no known FLOPs below.")]
    blocks += _roofline_chart(con, P)
    rows = con.execute(f"SELECT rank, step, {', '.join(c for c, _, _ in WATERFALL)} FROM mfu_waterfall "
                       "WHERE mfu_pct IS NOT NULL ORDER BY rank, step").fetchall()
    if rows:
        xs = [f"r{r[0]} s{r[1]}" for r in rows]
        data = [{"type": "bar", "name": name, "x": xs, "y": [r[2 + k] for r in rows], "marker": {"color": color}}
                for k, (_, name, color) in enumerate(WATERFALL)]
        blocks.append(P.add(data, "Where each step's time went, in MFU points", x="rank r, step s",
                            y="share of the step's GPU window (%)"))
        blocks.append(Note("The bars add up to 100: the MFU the step reached, then what kept it from the peak. "
                           "Critical-path time per rank and kind is in the table below (path_*)."))
    blocks.append(table(con, """SELECT m.rank, m.step, m.dtype, m.peak_tflops, m.mfu_pct, m.busy_hfu_pct, m.known_pct,
                                       w.path_ns, w.path_idle_ns, w.path_comm_ns, w.path_host_ns
                                FROM mfu m LEFT JOIN mfu_waterfall w USING (rank, step) ORDER BY m.rank, m.step""",
                        headers=["rank", "step", "dtype", "peak (TFLOP/s)", "MFU %", "over busy time %", "FLOPs known %",
                                 "critical path on rank (ms)", "of it idle (ms)", "comm and waits (ms)", "host (ms)"],
                        ms_cols=("path_ns", "path_idle_ns", "path_comm_ns", "path_host_ns"), folded="MFU per rank and step",
                        hint=P.hint("mfu")))
    blocks.append(table(con, """SELECT op_class, op, sum(ops)::BIGINT AS ops, sum(gpu_ns)::BIGINT AS gpu_ns,
                                       round(median(median_intensity), 1) AS intensity, round(avg(achieved_tflops), 1) AS tflops,
                                       round(avg(achieved_gbps), 0) AS gbps, sum(headroom_ns)::BIGINT AS headroom_ns, any_value(bound) AS bound
                                FROM roofline GROUP BY op_class, op ORDER BY gpu_ns DESC""", hint=P.hint("roofline"),
                        caption="Op classes by time, with the time they would save at the roof",
                        headers=["class", "op", "ops", "GPU time (ms)", "FLOP/byte", "TFLOP/s", "GB/s", "headroom (ms)", "bound"],
                        ms_cols=("gpu_ns", "headroom_ns")))
    return Section("roofline", title, blocks)


def _roofline_chart(con, P: Plots) -> list:
    """Log–log: one point per op class (all ranks), sized by time; the device's roofs and ridge point."""
    pts = con.execute("""SELECT op_class, sum(flops) / sum(bytes) AS intensity, sum(flops) / sum(gpu_ns) / 1e3 AS tflops,
                                sum(gpu_ns) AS ns
                         FROM op_work WHERE flops IS NOT NULL AND bytes > 0 GROUP BY op_class ORDER BY ns DESC""").fetchall()
    roof = con.execute("""SELECT any_value(peak_tflops), any_value(peak_gbps), any_value(dtype) FROM (
                              SELECT peak_tflops, peak_gbps, dtype, sum(flops) f FROM op_work
                              WHERE flops IS NOT NULL AND peak_tflops IS NOT NULL GROUP BY ALL ORDER BY f DESC LIMIT 1)""").fetchone()
    if not pts:
        return []
    biggest = max(p[3] for p in pts)
    data = [{"type": "scatter", "mode": "markers+text", "name": label(c), "x": [i], "y": [t], "text": [label(c)],
             "textposition": "top center", "marker": {"size": 8 + 40 * math.sqrt(ns / biggest)},
             "hovertemplate": f"{label(c)}: %{{x:.1f}} FLOP/B, %{{y:.1f}} TFLOP/s, {ns / 1e6:.2f} ms<extra></extra>"}
            for c, i, t, ns in pts]
    if roof and roof[0] and roof[1]:
        peak, gbps, dtype = roof
        ridge = peak * 1e3 / gbps
        lo, hi = min(min(p[1] for p in pts), ridge) / 10, max(max(p[1] for p in pts), ridge) * 10
        data.append({"type": "scatter", "mode": "lines", "name": f"roof ({dtype} {peak:g} TFLOP/s, {gbps:g} GB/s)",
                     "x": [lo, ridge, hi], "y": [lo * gbps / 1e3, peak, peak], "line": {"color": "#222"}})
        data.append({"type": "scatter", "mode": "markers", "name": f"ridge point {ridge:.0f} FLOP/B", "x": [ridge], "y": [peak],
                     "marker": {"symbol": "x", "size": 10, "color": "#222"}})
    return [P.add(data, "Roofline: op classes against the device's roofs", x="arithmetic intensity (FLOP/byte)",
                  y="achieved (TFLOP/s)", xaxis={"type": "log"}, yaxis={"type": "log"})]
