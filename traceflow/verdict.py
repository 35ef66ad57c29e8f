"""The verdict: the step time and the one or two biggest causes, in plain words with numbers."""
from __future__ import annotations

from typing import Any

from . import memory


def _ms(ns) -> str:
    return f"{(ns or 0) / 1e6:.1f} ms"


def _ranks(rs: list[int]) -> str:
    rs = sorted(rs)
    if len(rs) > 2 and rs == list(range(rs[0], rs[-1] + 1)):
        return f"ranks {rs[0]}–{rs[-1]}"
    return ("rank " if len(rs) == 1 else "ranks ") + ", ".join(map(str, rs))


def findings(con) -> dict:
    """Structured findings; `sentences` is the verdict in words."""
    # Long because: the verdict's sentences in the order a reader gets them, each a query and a sentence.
    out: dict[str, Any] = {"sentences": []}
    steps = con.execute("""SELECT step, max(end_ns) - min(start_ns) AS wall FROM step_windows GROUP BY step ORDER BY step""").fetchall()
    if not steps:
        out["sentences"].append("No GPU work was recorded: nothing to analyse on the GPU side.")
        out["sentences"].extend(memory.sentences(con))  # the memory finding (traceflow/memory.py)
        return out
    walls = sorted(w for _, w in steps)
    median = walls[len(walls) // 2]
    out["median_step_ns"] = median
    out["n_steps"] = len(steps)
    slow = max(steps, key=lambda s: s[1])
    out["sentences"].append(f"{len(steps)} step{'s' if len(steps) > 1 else ''} analysed; median step time "
                            f"{_ms(median)} (GPU window across ranks), slowest step {slow[0]} at {_ms(slow[1])}"
                            + (" (warm-up)" if len(steps) >= 3 and slow == steps[0] and slow[1] > 1.5 * median else "") + ".")
    # A first step much longer than the rest is warm-up (allocation, autotuning, compilation):
    # reported above, but not where we look for causes.
    first = steps[0]
    warmup = first[0] if len(steps) >= 3 and first[1] > 1.5 * median else None
    if warmup is not None:
        out["warmup_step"] = warmup
    # 1. The host stall that cost the job most: its idle gap plus the peer wait it caused in the
    #    next collective that rank started last.
    gap = con.execute("""
        WITH g AS (SELECT rank, step, start_ns, end_ns, dur_ns, host_activity FROM idle_gaps
                   WHERE cause = 'host_late' AND step IS NOT NULL AND step IS DISTINCT FROM ? ORDER BY dur_ns DESC LIMIT 20),
             w AS (SELECT g.rank, g.start_ns,
                          (SELECT struct_pack(op := s.op, wait := s.total_wait_ns,
                                              waiters := (SELECT list(cw.rank ORDER BY cw.rank) FROM collective_waits cw
                                                          WHERE cw.comm = s.comm AND cw.step = s.step AND cw.seq = s.seq AND cw.wait_ns > 0))
                           FROM stragglers s WHERE s.last_rank = g.rank AND s.start_ns >= g.end_ns
                           ORDER BY s.start_ns LIMIT 1) AS nxt
                   FROM g)
        SELECT g.*, w.nxt FROM g JOIN w USING (rank, start_ns)
        ORDER BY g.dur_ns + coalesce(least(w.nxt.wait, 3 * g.dur_ns), 0) DESC LIMIT 1""", [warmup]).fetchone()
    if gap and gap[4] >= max(1_000_000, 0.02 * median):
        rank, step, a, b, dur, act, nxt = gap
        out["stall"] = {"rank": rank, "step": step, "start_ns": a, "dur_ns": dur, "activity": act}
        s = f"Rank {rank} stalled {_ms(dur)} on the host{_in_step(step)}" + (f" ({act})" if act else "") + ", its GPU idle"
        if nxt and nxt["wait"] and nxt["wait"] > 0.5 * dur:
            s += f"; {_ranks(nxt['waiters'])} waited {_ms(nxt['wait'])} in total for it in the next {nxt['op'] or 'collective'}"
            out["stall"]["peer_wait_ns"] = nxt["wait"]
        out["sentences"].append(s + ".")
    # 2. The biggest straggler overall, when it is not the one above.
    st = con.execute("""SELECT last_rank, count(*), sum(total_wait_ns), arg_max(step, total_wait_ns) FROM stragglers
                        WHERE step IS DISTINCT FROM ? GROUP BY last_rank ORDER BY 3 DESC LIMIT 1""", [warmup]).fetchone()
    if st and st[2] > 0.05 * median and not (out.get("stall") and out["stall"]["rank"] == st[0]):
        out["sentences"].append(f"Rank {st[0]} was the last to start {st[1]} collectives, costing its peers "
                                f"{_ms(st[2])} of waiting" + (f" (worst in step {st[3]})." if st[3] is not None else "."))
    # 3. Launch-bound steps and exposed communication.
    lb = con.execute("""SELECT list(step ORDER BY step), max(launch_exposed_pct) FROM launch_bound_steps WHERE launch_bound""").fetchone()
    if lb and lb[0]:
        out["sentences"].append(f"Launch-bound: step{'s' if len(set(lb[0])) > 1 else ''} {', '.join(map(str, sorted(set(lb[0]))))} "
                                f"spent up to {lb[1]:.0f}% of the GPU window waiting for kernel launches.")
    sy = con.execute("""SELECT s.rank, s.step, s.name, s.reason, s.blocked_ns, g.bytes FROM sync s
                        LEFT JOIN host_ops h ON h.op_id = s.op_id
                        LEFT JOIN gpu_ops g ON g.trace_id = h.trace_id AND g.correlation_id = h.correlation_id
                        WHERE s.step IS DISTINCT FROM ? ORDER BY s.blocked_ns DESC LIMIT 1""", [warmup]).fetchone()
    if sy and sy[4] > 0.05 * median:
        size = f" of {sy[5] / 2**20:,.0f} MiB" if sy[5] else ""
        out["sentences"].append(f"The host blocked {_ms(sy[4])} in {sy[2]}{size} ({sy[3]}) on rank {sy[0]}{_in_step(sy[1])}.")
    # One definition with the report's table (launch_overhead_summary.launch_bound); said only when
    # the idle it costs is material (over 5% of a median step).
    lk = con.execute("""SELECT count(*), sum(total_exposed_ns), sum(total_gpu_ns) FROM launch_overhead_summary
                        WHERE launch_bound""").fetchone()
    if lk and lk[0] and lk[1] > 0.05 * median:
        out["sentences"].append(f"{lk[0]} kernel name{'s' if lk[0] > 1 else ''} cost more GPU idle in launching "
                                f"({_ms(lk[1])}) than running ({_ms(lk[2])}): fuse them or capture them in a CUDA graph.")
    xc = con.execute("""SELECT sum(exposed_comm_ns), sum(wall_ns) FROM step_breakdown WHERE part = 'step'""").fetchone()
    if xc and xc[1] and xc[0] / xc[1] > 0.2:
        out["sentences"].append(f"Communication not hidden by compute takes {100 * xc[0] / xc[1]:.0f}% of the GPU time.")
    cov = con.execute("""SELECT rank, coverage_pct, before_ns, after_ns FROM step_coverage
                         WHERE coverage_pct < 90 ORDER BY coverage_pct LIMIT 1""").fetchone()
    if cov:
        out["sentences"].append(f"Only {cov[1]:.0f}% of rank {cov[0]}'s GPU time lies inside steps ({_ms(cov[2])} before "
                                f"the first step, {_ms(cov[3])} after the last): per-step figures leave the rest out.")
    _mfu_sentence(con, out)
    _fix_sentence(con, out)
    out["sentences"].extend(memory.sentences(con))  # the memory finding (traceflow/memory.py)
    return out


def _fix_sentence(con, out: dict):
    """What the fix worth the most would gain, by replaying the slowest and the median step
    (traceflow/whatif.py); kept in out["fixes"] for the report's section."""
    from .whatif import best_fixes
    try:
        out["fixes"] = best_fixes(con, skip_step=out.get("warmup_step"))
    except Exception as e:  # noqa: BLE001 - a database without the graph tables: no prediction, said in the report
        out["fixes"], out["fixes_error"] = [], f"{type(e).__name__} ({e})"
        return
    if out["fixes"] and out["fixes"][0]["gain_pct"] >= 2:
        f = out["fixes"][0]
        out["sentences"].append(f"Worth the most, by replaying the slowest and the median step: {f['scenario']}, "
                                f"{f['gain_ns'] / 1e6:.1f} ms ({f['gain_pct']:.0f}%) per step (`traceflow whatif` for others).")


def _mfu_sentence(con, out: dict):
    """MFU of the median step (by time), where FLOPs and the device's peak are known."""
    try:
        m = con.execute("""SELECT step, median(mfu_pct), median(known_pct) FROM mfu WHERE mfu_pct IS NOT NULL
                           GROUP BY step ORDER BY median(wall_ns), step""").fetchall()
    except Exception:  # noqa: BLE001 - a database from before the mfu pack
        return
    if not m:
        if con.execute("SELECT count(*) FROM mfu").fetchone()[0]:
            flops = con.execute("SELECT count(*) FROM op_work WHERE flops IS NOT NULL").fetchone()[0]
            from .flops_coverage import why_no_flops
            out["sentences"].append("MFU and the roofline are empty: " + (
                why_no_flops(con) + "." if not flops else "the GPU's peak is unknown (--peak-tflops / --peak-gbps set it)."))
        return
    step, mfu, known = m[len(m) // 2]
    mem = con.execute("""SELECT 100.0 * sum(gpu_ns) FILTER (WHERE bound = 'memory') / nullif(sum(gpu_ns) FILTER (WHERE bound IS NOT NULL), 0),
                                (SELECT name FROM op_work WHERE step = $1 AND bound = 'memory'
                                 GROUP BY name ORDER BY sum(gpu_ns) DESC, name LIMIT 1)
                         FROM op_work WHERE step = $1""", [step]).fetchone()
    s = f"Step {step} reaches {mfu:.1f}% MFU"
    if known is not None and known < 90:
        s += f" (FLOPs known for {known:.0f}% of its compute time: a lower bound)"
    if mem and mem[0]:
        s += f"; {mem[0]:.0f}% of its op time with known work is memory-bound, led by {mem[1]}"
    out["mfu"] = {"step": step, "mfu_pct": mfu, "known_pct": known}
    out["sentences"].append(s + ".")


def _in_step(step) -> str:
    return "" if step is None else f" in step {step}"


def verdict(con) -> str:
    return " ".join(findings(con)["sentences"])
