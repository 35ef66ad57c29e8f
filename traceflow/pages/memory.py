"""The report's memory section: per rank, allocated and reserved over its peak step with the peak
marked and its top allocations named; the ranks side by side (queries/memory*.sql, docs/memory.md)."""
from __future__ import annotations

from ..memory import has_memory, mib
from .blocks import Heading, Note, Plots, Section, label, rows_table, table

# the tables its SQL reads (tests/test_layers.py)
READS = frozenset({"memory", "memory_events", "memory_peak_allocations", "memory_ranks", "memory_snapshot"})

MAX_RANKS_CHARTED = 8   # the ranks with the highest peaks are charted
MAX_RANKS_LISTED = 32   # and listed (`traceflow query DB memory-ranks` lists every rank)
TOP_PER_PEAK = 3        # allocations listed per rank's peak
POINTS = 1500           # per chart: events are bucketed, each bucket keeps its highest total (the peak survives)


def section(con, P: Plots) -> Section | None:
    """None when the job recorded no memory events (the profiler ran without profile_memory=True) and
    no allocator snapshot."""
    events, snapshots = has_memory(con), has_memory(con, "memory_snapshot")
    if not events and not snapshots:
        return None
    blocks: list = _events(con, P) if events else []
    if snapshots:
        blocks += [Heading("Allocator snapshots: cache and fragmentation"), table(con, """
            SELECT rank, device, n_segments, round(reserved_bytes / 1048576.0, 1), round(allocated_bytes / 1048576.0, 1),
                   round(free_bytes / 1048576.0, 1), round(largest_free_block_bytes / 1048576.0, 1), fragmentation_pct,
                   round(largest_request_bytes / 1048576.0, 1), largest_request_fits, n_ooms,
                   coalesce(printf('%.1f', headroom_bytes / 1048576.0), 'unknown')
            FROM memory_snapshot ORDER BY rank, device""",
            headers=["rank", "GPU", "segments", "reserved (MiB)", "allocated (MiB)", "cached free (MiB)",
                     "largest free block (MiB)", "fragmentation %", "largest request (MiB)", "it fits", "OOMs",
                     "headroom (MiB)"], hint=P.hint("memory-snapshot")),
                   Note("Fragmentation: the share of the cached free memory outside its largest free block. A request "
                        "larger than that block needs a new cudaMalloc (or, with no room left, fails).")]
    return Section("memory", "Memory: peaks per rank, what held them, headroom", blocks)


def _events(con, P: Plots) -> list:
    # a rank whose events carry no allocated total (Kineto of 2021: only each event's own bytes) has no
    # peak to chart (its row says so below)
    ranks = con.execute(f"""SELECT rank, device_type, device, step, peak_allocated_bytes, peak_ns FROM memory_ranks
                            WHERE peak_allocated_bytes IS NOT NULL
                            QUALIFY row_number() OVER (PARTITION BY rank ORDER BY device_type = 'cpu', device_type) = 1
                            ORDER BY peak_allocated_bytes DESC, rank LIMIT {MAX_RANKS_CHARTED}""").fetchall()
    blocks: list = []
    for rank, dtype, dev, step, peak, peak_ns in sorted(ranks):
        blocks.append(_chart(con, P, rank, dtype, dev, step, peak, peak_ns))
    rows = con.execute(f"""SELECT rank, device_type || ':' || device AS device, step, peak_allocated_bytes, peak_reserved_bytes,
                                 device_memory_bytes, headroom_pct, top_op, top_op_bytes, peers_median_bytes, above_peers_pct
                          FROM memory_ranks ORDER BY device_type = 'cpu', peak_allocated_bytes DESC, rank
                          LIMIT {MAX_RANKS_LISTED}""").fetchall()
    shown = [[r[0], r[1], r[2], mib(r[3]), mib(r[4]) if r[4] is not None else "n/a (CPU)" if r[1].startswith("cpu") else "unknown",
              mib(r[5]), f"{r[6]:.1f}%" if r[6] is not None else "unknown", r[7], mib(r[8]) if r[8] is not None else "",
              mib(r[9]) if r[9] is not None else "", f"{r[10]:+.1f}%" if r[10] is not None else ""] for r in rows]
    t1 = rows_table(["rank", "device", "step", "peak", "peak reserved", "device memory", "headroom", "op holding most",
                     "its bytes", "peers' median peak", "vs peers"], shown)
    # the top allocations at the highest peaks first: the table shows its first rows (blocks.CAP) and says how many more
    t2 = table(con, f"""SELECT rank, step, device_type || ':' || device AS device, pos, round(bytes / 1048576.0, 3) AS mib,
                               share_pct, op_name, module, python_frame, annotation
                        FROM memory_peak_allocations a JOIN memory_ranks r USING (rank, step, device_type, device)
                        WHERE pos <= {TOP_PER_PEAK} ORDER BY device_type = 'cpu', r.peak_allocated_bytes DESC, rank, device, pos""",
               headers=["rank", "step", "device", "#", "MiB", "% of peak", "CPU op that allocated it", "module",
                        "Python frame", "annotation"], cap=TOP_PER_PEAK * MAX_RANKS_CHARTED,
               hint=P.hint("memory-peak-allocations"))
    return [*blocks,
            Note("Allocated: the bytes live tensors hold (the profiler's Total Allocated). Reserved: what the caching "
                 "allocator holds from the device (CUDA only; from Nsight Systems, the CUDA allocations the process holds). Headroom: the device's memory minus the peak reserved; "
                 "'unknown' when the trace does not state the device's memory. Definitions: docs/memory.md."),
            Heading("Each rank's highest peak"), t1, Heading("Largest allocations live at each rank's peak"), t2]


def _chart(con, P: Plots, rank, dtype, dev, step, peak, peak_ns):
    lo, hi = con.execute("SELECT start_ns, end_ns FROM memory WHERE rank = ? AND step = ? AND device_type = ? AND device = ?",
                         [rank, step, dtype, dev]).fetchone()
    span = max(1, hi - lo)
    pts = con.execute(f"""SELECT min(ts_ns) AS t, max(total_allocated) AS a, max(total_reserved) AS r FROM memory_events
                          WHERE rank = ? AND device_type = ? AND device = ? AND ts_ns BETWEEN ? AND ?
                          GROUP BY (ts_ns - ?) * {POINTS} // ? ORDER BY t""",
                      [rank, dtype, dev, lo, hi, lo, span]).fetchall()
    xs = [round((t - lo) / 1e6, 4) for t, _, _ in pts]
    data: list[dict] = [{"type": "scatter", "mode": "lines", "line": {"shape": "hv", "color": "#4c78a8"}, "name": "allocated",
                         "x": xs, "y": [None if a is None else round(a / 2**20, 4) for _, a, _ in pts]}]  # None: a gap
    if dtype != "cpu":
        data.append({"type": "scatter", "mode": "lines", "line": {"shape": "hv", "color": "#f58518"}, "name": "reserved",
                     "x": xs, "y": [round((r or 0) / 2**20, 4) for _, _, r in pts]})
    top = con.execute("""SELECT bytes, op_name FROM memory_peak_allocations WHERE rank = ? AND step = ? AND device_type = ?
                         AND device = ? AND pos <= 3 ORDER BY pos""", [rank, step, dtype, dev]).fetchall()
    text = "peak " + mib(peak) + "".join(f"<br>{mib(b)} {label(op or 'no CPU op', 40)}" for b, op in top)
    data.append({"type": "scatter", "mode": "markers", "name": "peak", "marker": {"color": "#e45756", "size": 11},
                 "x": [round((peak_ns - lo) / 1e6, 4)], "y": [round(peak / 2**20, 4)], "text": [text],
                 "hovertemplate": "%{text}<extra></extra>"})
    return P.add(data, f"Rank {rank}, {dtype}:{dev}, step {step}: memory over the step",
                 x="time since the step began (ms)", y="memory (MiB)",
                 annotations=[{"x": round((peak_ns - lo) / 1e6, 4), "y": round(peak / 2**20, 4), "text": text,
                               "showarrow": True, "arrowhead": 2, "ax": 60, "ay": 30, "align": "left",
                               "bgcolor": "rgba(255,255,255,0.85)", "font": {"size": 11}}])
