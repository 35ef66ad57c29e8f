"""The verdict: the findings pack's rows (queries/findings.sql) in plain words with numbers.

All the figures come from SQL; this module only turns each row into a sentence. A finding is a
row of a FINDING_TABLES table; rows are ordered by (priority, cost_ns descending): 0 the job
stopped, 1 a fault against its baseline, 2 the dominant cause of the typical step, 3 a caveat on
the figures, 4 a note (docs/findings.md).

Adding findings from another pack (hang forensics, memory): make a table with the columns of
`findings` (queries/findings.sql; NULL where a column means nothing), add its name to
FINDING_TABLES, and register a sentence for each new `kind` with `@sentence("kind")`. (Every
database of this format has every table: an older one is refused when it opens, db_format.py.)

Size: one short function per kind of finding and the words for each cause and its fix; the figures
are all in queries/findings.sql.
"""
from __future__ import annotations

import re
import statistics
from collections.abc import Callable
from typing import Any

from . import memory
from .claims import platform_of, platform_words, platforms, stall_words
from .hang import findings as hang_findings
from .text import printable, short_name, size

READS = frozenset({"findings", "findings_steps", "gpu_sharing", "host_ops", "launch_overhead", "launch_overhead_summary", "ranges",
                   "collective_waits", "critical_path", "gpu_ops", "step_breakdown", "step_causes", "traces",
                   "host_time_spans"})  # the tables its SQL reads (tests/test_layers.py)

# Tables whose rows are findings (same columns as `findings`), gathered and ordered together.
FINDING_TABLES: list[str] = ["findings"]
_SENTENCES: dict[str, Callable[[dict, Any], str | None]] = {}


def sentence(kind: str):
    """Register the function that words a finding of this kind: fn(row, con) -> the sentence, or
    None to leave it unsaid."""
    def register(fn: Callable[[dict, Any], str | None]):
        _SENTENCES[kind] = fn
        return fn
    return register


FINDING_TABLES.append(memory.FINDINGS_TABLE)  # the memory packs' findings (traceflow/memory.py)
_SENTENCES.update(memory.SENTENCES)


def _ms(ns) -> str:
    return f"{(ns or 0) / 1e6:.1f} ms"


def _pct(x) -> str:
    return f"{x:.0f}%" if x is not None and x >= 10 else f"{x or 0:.1f}%"


def _ranks(rs) -> str:
    rs = sorted(rs or [])
    if len(rs) > 2 and rs == list(range(rs[0], rs[-1] + 1)):
        return f"ranks {rs[0]}–{rs[-1]}"
    return ("rank " if len(rs) == 1 else "ranks ") + ", ".join(map(str, rs))


def rows(con, tables: list[str] | None = None) -> list[dict]:
    """Every finding of every FINDING_TABLES table (or of `tables`), most important first."""
    tables = FINDING_TABLES if tables is None else tables
    if not tables:
        return []
    union = " UNION ALL BY NAME ".join(f"SELECT * FROM {t}" for t in tables)
    rel = con.execute(f"SELECT * FROM ({union}) ORDER BY priority, cost_ns DESC NULLS LAST, kind, rank, step")
    cols = [d[0] for d in rel.description]
    return [dict(zip(cols, r)) for r in rel.fetchall()]


def findings(con) -> dict:
    """Structured findings: `findings` (rows, each with its `sentence`), `sentences` (the verdict in
    words: why a stopped job stopped, the steps analysed, then one sentence per finding)."""
    # Long because: the verdict's one order of parts (stop, steps, findings, caveats) read from their
    # tables in one place, so the terminal, the report and the JSON show the same rows
    out: dict[str, Any] = {"sentences": [], "findings": []}
    if (hang := hang_findings(con)) is not None:  # a stopped job: why it stopped comes first
        out["hang"] = hang
        out["sentences"].append(hang["sentence"])
    steps = con.execute("SELECT step, wall_ns, warmup FROM tf_internal.findings_steps ORDER BY step").fetchall()
    if not steps:
        unread = con.execute("""SELECT unread_device_work FROM traces WHERE unread_device_work IS NOT NULL
                                ORDER BY trace_id LIMIT 1""").fetchone()
        if unread:  # an accelerator ran whose events are not read (MTIA): not "no GPU work"
            listed = unread[0]
            out["sentences"].append(f"No GPU work of the kinds traceflow reads was recorded: events of other categories "
                                    f"were not read: {listed}, so there is nothing to analyse on the device side.")
        else:
            out["sentences"].append("No GPU work was recorded: nothing to analyse on the GPU side.")
        out["sentences"].extend(memory.sentences(con))  # no GPU steps (a CPU job): the memory findings all the same
        out.update(headline=_fit(out["sentences"][0], HEADLINE_MAX), lines=[_fit(x, LINE_MAX) for x in out["sentences"][1:6]],
                   caveats=[], fixes=[])
        return out
    # the findings' median step (findings.sql `ref`): over the steps compared, the warm-up left out,
    # the mean of the middle two for an even count (DuckDB's median) - an upper median printed the
    # slowest of two steps as the median (hta-2rank: 631.3 ms where the findings use 616.1 ms)
    median = round(statistics.median([w for _, w, warm in steps if not warm] or [w for _, w, _ in steps]))
    slow = max(steps, key=lambda s: s[1])
    out.update(median_step_ns=median, n_steps=len(steps))
    warm = [s for s, _, w in steps if w]
    if warm:
        out["warmup_step"] = warm[0]
    out["sentences"].append(f"{len(steps)} step{'s' if len(steps) > 1 else ''} analysed; median step time "
                            f"{_ms(median)} (GPU window across ranks), slowest step {slow[0]} at {_ms(slow[1])}"
                            + (" (warm-up, left out of the comparisons below)" if slow[2] else "") + ".")
    from .claims import load
    claimed, out["fixes"] = load(con)
    others = rows(con, [t for t in FINDING_TABLES if t != "findings"])
    first = [r for r in others if r["priority"] == 0]  # the job stopped: before any fix
    _fold_sharing(claimed)
    pf = platforms(con)
    out["platform"] = platform_of(pf, None)
    for row in first + claimed + [r for r in others if r["priority"] != 0]:
        if row.get("folded"):  # a time-slicing row, said in its shared_gpu row's sentence
            out["findings"].append(row)
            continue
        words = platform_words(_SENTENCES.get(row["kind"], _generic)(row, con),
                               platform_of(pf, [row["rank"]] if row.get("rank") is not None else row.get("ranks")))
        if words:
            row["sentence"] = words
            out["findings"].append(row)
            out["sentences"].append(words)
    _one_cannot_sentence(out)
    for row in out["findings"]:
        if row["kind"] == "step_outlier" and row["class"] == "host" and "stall" not in out:
            out["stall"] = {"rank": row["rank"], "step": row["step"], "dur_ns": row["evidence_ns"], "excess_ns": row["cost_ns"]}
        if row["kind"] == "mfu":
            out["mfu"] = {"step": row["step"], "mfu_pct": row["share_pct"], "known_pct": row["low_pct"]}
    _fix_sentence(con, out)
    _short_form(out)
    for row in claimed:  # the folding's working keys: the rows stay the table's columns (+ sentence)
        for k in ("turns", "short_sentence", "folded", "host_parts", "copy_parts", "sync_parts"):
            row.pop(k, None)
    return out


def _generic(r: dict, con) -> str:
    return f"{r['kind']}: " + ", ".join(f"{k} {v}" for k, v in r.items() if v is not None and k not in ("kind", "priority"))


# What the time of a class (and cause) is, in words; and what shortens it.
_HOST_CAUSE = {  # host_time's causes (docs/host-time.md)
    "jit_compile": "compiling or loading GPU code at run time (NVRTC, a module load)",
    "launch": "launching GPU work (the launch API calls)",
    "sync": "blocking calls waiting for the GPU (synchronize, .item(), a copy to pageable memory)",
    "allocator": "allocator calls (cudaMalloc / cudaFree: the caching allocator going to the driver)",
    "cuda_other": "other CUDA calls",
    "data_loading": "data loading",
    "cpu_op": "framework CPU work inside ops (ATen / Python ops between launches)",
    "no_op": "host time in no traced op (a sleep, I/O, the GIL, Python between ops)",
    "unattributed": "host work outside the steps' host ranges",
}
_ADVICE = {
    "jit_compile": "compile once before the measured steps (warm up) or cache the compiled code",
    "compute": "faster kernels (fusion, lower precision, better shapes) are what shortens the step",
    "communication": "overlap it with compute (DDP bucketing, FSDP prefetch) or move fewer bytes",
    "peer wait": "the ranks whose traces are missing set the pace",
    "idle": "the GPU waits with nothing on the path: check the missing ranks or threads",
    "launch": "capture the launches in a CUDA graph or fuse kernels (torch.compile)",
    "sync": "remove the blocking calls (.item(), .cpu(), torch.cuda.synchronize()) from the step",
    "allocator": "keep the caching allocator warm (no empty_cache, stable shapes, expandable segments)",
    "data_loading": "more DataLoader workers, pinned memory and prefetching",
    "cpu_op": "cut the framework work between launches (torch.compile, CUDA graphs, fewer and larger ops)",
    "no_op": "find what the host does outside any op on that rank (a sleep, I/O, the GIL; py-spy shows it)",
}


# The same causes told in the words of a program that is not PyTorch (claims.stacks): a JAX job's host
# is not in ATen ops nor blocked in .item() (JAX conv on MI300X: "ATen / Python ops between launches")
_HOST_CAUSE_BY_STACK = {
    "jax": {"sync": "blocking calls waiting for the GPU (block_until_ready, a host read of a device array)",
            "cpu_op": "framework CPU work inside ops (the XLA runtime and Python dispatch between launches)",
            "allocator": "allocator calls (XLA's allocator going to the driver)",
            "data_loading": "loading the input data"},
    "native": {"sync": "blocking calls waiting for the GPU (a device or stream synchronize, a copy to pageable memory)",
               "cpu_op": "host work inside the traced ranges",
               "allocator": "allocator calls (device malloc / free going to the driver)"},
}


def _host_cause(cause: str | None, stack: str = "pytorch") -> str:
    by = _HOST_CAUSE_BY_STACK.get("native" if stack in ("cuda", "hip", "openacc", "openmp") else stack, {})
    return by.get(cause or "") or _HOST_CAUSE.get(cause or "", "host work")


def _row_stack(r: dict, con) -> str:
    from .claims import stack_of
    return stack_of(con, [r["rank"]] if r.get("rank") is not None else r.get("ranks"))


def _what(cls: str | None, cause: str | None, stack: str = "pytorch") -> str:
    if cls == "host" and cause and cause.endswith(" pageable"):  # sync.cause: a copy staged through pageable memory
        return f"blocking in {cause} copies (the driver stages pageable host memory)"
    if cls == "host":
        return _host_cause(cause, stack)
    if cls == "memory copies" and cause == "um_migration":  # step_causes.sql: not a copy a call issued
        return "unified-memory page migrations (the driver moving managed pages on demand; no call launches them)"
    if cls == "memory copies":
        return f"{cause} memory copies" if cause and cause != "memset" else "memsets"
    if cls == "idle" and cause == "unrecorded work":  # step_causes.sql: launch calls without their GPU op
        return "GPU idle that may be GPU work the trace did not record"
    return {"compute": "GPU compute", "communication": "communication (collective kernels not hidden by compute)",
            "peer wait": "waiting for a peer whose trace is missing", "idle": "GPU idle with nothing else on the path"
            }.get(cls or "", cls or "?")


def _advice(cls: str | None, cause: str | None) -> str:
    if cls in ("memory copies", "host") and cause and "pageable" in cause:
        return "pin the host buffers (pin_memory=True) and copy with non_blocking=True"
    if cls == "memory copies" and cause == "um_migration":
        return "prefetch the managed memory where it is used next (cudaMemPrefetchAsync) or keep it on one side"
    if cls == "memory copies":
        return "keep the data on the GPU or overlap the copies with compute"
    if cls == "host":
        return _ADVICE.get(cause or "", "cut the host work between launches (torch.compile, CUDA graphs)")
    return _ADVICE.get(cls or "", "")


@sentence("step_outlier")
def _step_outlier(r: dict, con) -> str:
    s = (f"Rank {r['rank']} held up step {r['step']} with {_what(r['class'], r['cause'], _row_stack(r, con))}: {_ms(r['value_ns'])} of "
         f"the critical path against {_ms(r['baseline_ns'])} in the other steps (median), {_ms(r['cost_ns'])} more")
    if r["class"] == "host" and r["evidence_ns"]:
        # a Kineto step range as the host's activity says only that no op was running
        inside = r["activity"] and not r["activity"].startswith("ProfilerStep#")
        s += f"; its GPU sat idle {_ms(r['evidence_ns'])} waiting for it" + (f" (the host in {short_name(r['activity'])})" if inside else "")
        if r["note"]:  # sync_extra: a blocking call made in this step only emptied the GPU's queue first
            calls = " and ".join(f"an extra {n}" for n in r["note"].split(", "))
            s += (f"; it made {calls} in that step (beyond its usual count), which empties the GPU's queue: the host "
                  "time after it idles the GPU")
    elif r["evidence"]:
        s += f" (longest: {short_name(r['evidence'])})"
    if r["peer_wait_ns"] and r["peers"]:
        s += f"; {_ranks(r['peers'])} waited {_ms(r['peer_wait_ns'])} in total for it in the collectives it started last"
    return s + _fix_clause(r, "") + "."


@sentence("straggler")
def _straggler(r: dict, con) -> str:
    s = (f"Rank {r['rank']} was the last to start {r['n']} collectives, {_ms(r['value_ns'])} per step later than the "
         f"next rank (summed over the collectives of a step it started last, median over the steps; the other ranks: "
         f"{_ms(r['baseline_ns'])}), {_ms(r['cost_ns'])} over the steps analysed")
    if r["evidence"]:
        s += (f": it makes {r['per_step']:g} more blocking call{'' if r['per_step'] == 1 else 's'} per step than the "
              f"other ranks ({r['evidence']}), so it launches its next work late")
    elif r["cause"] == "more compute":
        s += (f": its kernels run {_ms(r['evidence_ns'])} more per step than the other ranks' (median; kernel time "
              "only, a shared GPU's turns left out) — balance the "
              "work across ranks (uneven shards, pipeline stages) or check that GPU (clocks, thermals)")
    elif r["cause"] == "late step start":
        s += (f": it began each step {_ms(r['evidence_ns'])} after the other ranks (median, on its GPU; its host was late "
              "too), so what delays it happens before the step starts (data loading, logging, checkpointing between steps)")
    elif r["cause"] == "gpu behind":
        s += (f": its GPU was running its own earlier work for most of that lateness (idle {_ms(r['evidence_ns'])} "
              "of it per step), so no host call held it back: the GPU work before them ends late")
    if r["peer_wait_ns"] and r["peers"]:
        s += f"; {_ranks(r['peers'])} waited {_ms(r['peer_wait_ns'])} in total for it"
    if not r.get("fix") and "--no-stragglers" in (r.get("scenario") or ""):
        return s + _no_pace(r) + "."
    return s + _fix_clause(r, _advice("host", "sync") if r["evidence"] else "") + "."


def _no_pace(r: dict) -> str:
    """A straggler with no fix: what the replay without its lateness gains (claims.py)."""
    if r.get("recover_ns"):
        return f"; without that lateness the what-if replay gains {_ms(r['recover_ns'])} over the capture"
    return ("; without that lateness the what-if replay gains nothing above noise (`traceflow whatif DB --no-stragglers`):"
            " it sets no step's pace")


_BOUND = {"compute": "Compute-bound", "communication": "Communication-bound", "memory copies": "Copy-bound",
          "host": "Host-bound", "peer wait": "Waiting on missing peers", "idle": "Idle"}


# Copy time on the analysed steps' critical paths by cause (direction, host memory), per step: the
# dominant row names only its biggest cause (sc23's OpenMP tutorial: 13,380.2 ms HtoD + 12,827.3 ms DtoH
# pageable per step was told as 26,207.5 ms of HtoD pageable copies).
_COPY_SPLIT_SQL = """SELECT cause, sum(path_ns) / (SELECT count(*) FROM tf_internal.findings_steps WHERE NOT warmup) AS ns
                     FROM step_causes WHERE class = 'memory copies'
                     AND step IN (SELECT step FROM tf_internal.findings_steps WHERE NOT warmup)
                     GROUP BY cause ORDER BY ns DESC, cause"""


def _copy_split(con, total_ns) -> str | None:
    """The copy time per step by cause ("HtoD pageable 13380.2 ms + DtoH pageable 12827.3 ms"), where a
    second cause holds at least 5 % of it; else None (the row's one cause says it)."""
    rows = [(c, ns) for c, ns in con.execute(_COPY_SPLIT_SQL).fetchall() if ns and total_ns and ns >= 0.05 * total_ns]
    return " + ".join(f"{c} {_ms(ns)}" for c, ns in rows) if len(rows) > 1 else None


# Pageable copy time of the analysed steps by direction, per step, as claims._pageable sums it: the
# sentence named the longest copy's direction for both (GPUPuzzlers swimming_in_streams: "Memcpy DtoH
# (Device -> Pageable) 242.5 ms" = HtoD 163.7 + DtoH 78.8 ms).
_PAGEABLE_SPLIT_SQL = """SELECT coalesce(nullif(regexp_extract(name, '(HtoD|DtoH|DtoD|HtoH)'), ''), 'other') AS dir,
                                sum(end_ns - start_ns) / (SELECT count(*) FROM tf_internal.findings_steps WHERE NOT warmup) AS ns
                         FROM gpu_ops WHERE name ILIKE '%pageable%'
                         AND step IN (SELECT step FROM tf_internal.findings_steps WHERE NOT warmup)
                         GROUP BY dir ORDER BY ns DESC, dir"""


def _pageable_split(con, total_ns) -> str | None:
    """The pageable copy time per step by direction ("HtoD 163.7 ms + DtoH 78.8 ms"), where a second
    direction holds at least 5 % of it; else None (the longest copy's name says it)."""
    rows = [(d, ns) for d, ns in con.execute(_PAGEABLE_SPLIT_SQL).fetchall() if ns and total_ns and ns >= 0.05 * total_ns]
    return " + ".join(f"{d} {_ms(ns)}" for d, ns in rows) if len(rows) > 1 else None


# Host time on the analysed steps' critical paths by cause, per step, with the range or op holding most
# of each (step_causes.top_name): the dominant row names only its biggest cause, and the class's whole
# time was given to it (fused hta trace_filter: "542.8 ms/step host time in no traced op" where no_op is
# 281.9 ms inside `## backward ##` and cpu_op 248.0 ms in `Optimizer.step#Shampoo.step`)
_HOST_SPLIT_SQL = """SELECT cause, sum(path_ns) / (SELECT count(*) FROM tf_internal.findings_steps WHERE NOT warmup) AS ns,
                            arg_max(top_name, path_ns) FILTER (WHERE top_name IS NOT NULL) AS top
                     FROM step_causes WHERE class = 'host'
                     AND step IN (SELECT step FROM tf_internal.findings_steps WHERE NOT warmup)
                     GROUP BY cause ORDER BY ns DESC, cause"""
_HOST_PART = {"no_op": "in no traced op", "cpu_op": "framework CPU work in ops", "launch": "launching",
              "sync": "blocking in syncs", "allocator": "allocator calls", "jit_compile": "JIT compile / module load",
              "cuda_other": "other CUDA calls", "data_loading": "data loading", "unattributed": "outside the steps' host ranges"}


# The host time on the analysed steps' critical paths that lies inside a range or op of that name on
# the same rank and thread, per step: the most of a host cause's path time the name can hold.
# Parameter: the name twice.
_NAME_ON_PATH_SQL = """
    WITH p AS (SELECT rank, tid, start_ns, end_ns FROM critical_path WHERE kind IN ('host_cpu', 'host_sync', 'launch')
               AND step IN (SELECT step FROM tf_internal.findings_steps WHERE NOT warmup)),
    iv AS (SELECT rank, tid, start_ns, end_ns FROM host_ops WHERE name = ?
           UNION ALL SELECT rank, tid, start_ns, end_ns FROM ranges WHERE name = ?)
    SELECT coalesce(sum(least(p.end_ns, iv.end_ns) - greatest(p.start_ns, iv.start_ns)), 0)
           / (SELECT count(*) FROM tf_internal.findings_steps WHERE NOT warmup)
    FROM p JOIN iv ON iv.rank = p.rank AND iv.tid = p.tid AND iv.end_ns > p.start_ns AND iv.start_ns < p.end_ns"""


# The same for one host_time cause (cpu_op, no_op): the path's host stretches of that cause only, inside
# the name on the same thread. Any path time inside the name let a name through for a cause it does not
# hold (GPUPuzzlers addition_d2h_sync: "119.1 ms framework CPU work in ops (aten::add_)", 31.5 ms of it in
# aten::add_; "75.4 ms inside aten::add_ with no op traced", none of it: launch time inside add_ counted).
# Parameters: the cause, the name twice.
_CAUSE_IN_NAME_SQL = """
    WITH p AS (SELECT rank, tid, start_ns, end_ns FROM critical_path WHERE kind = 'host_cpu'
               AND step IN (SELECT step FROM tf_internal.findings_steps WHERE NOT warmup)),
    t AS (SELECT p.rank, p.tid, greatest(p.start_ns, t.start_ns) AS a, least(p.end_ns, t.end_ns) AS b
          FROM p JOIN host_time_spans t ON t.rank = p.rank AND t.start_ns < p.end_ns AND t.end_ns > p.start_ns
          WHERE t.cause = ?),
    iv AS (SELECT rank, tid, start_ns, end_ns FROM host_ops WHERE name = ?
           UNION ALL SELECT rank, tid, start_ns, end_ns FROM ranges WHERE name = ?)
    SELECT coalesce(sum(least(t.b, iv.end_ns) - greatest(t.a, iv.start_ns)), 0)
           / (SELECT count(*) FROM tf_internal.findings_steps WHERE NOT warmup)
    FROM t JOIN iv ON iv.rank = t.rank AND iv.tid = t.tid AND iv.end_ns > t.a AND iv.start_ns < t.b"""


def _held(con, cause: str, top: str) -> float:
    """The path's host time of `cause` per step that lies inside ops or ranges named `top`."""
    if cause in ("cpu_op", "no_op"):
        return con.execute(_CAUSE_IN_NAME_SQL, [cause, top, top]).fetchone()[0] or 0
    return con.execute(_NAME_ON_PATH_SQL, [top, top]).fetchone()[0] or 0


def host_split(con, total_ns) -> list[tuple[str, float, str | None]]:
    """(cause, ns per step, the range or op holding most of it) for each host cause holding at least 5 %
    of the host class's path time, at most three, where two or more do; else [] (the row's cause says it).
    A name is given only where the path's host time inside it is at least half the cause's time per
    step (amd-hpc merged_all_events: "20.5 ms framework CPU work in ops (Optimizer.step#Adam.step)" and
    "9.2 ms inside Optimizer.step#Adam.step", a range open 2.4-3.0 ms a step on each rank)."""
    rows = [(c, ns, top) for c, ns, top in con.execute(_HOST_SPLIT_SQL).fetchall()
            if ns and total_ns and ns >= 0.05 * total_ns]
    rows = [(c, ns, top if top and _held(con, c, top) >= 0.5 * ns else None) for c, ns, top in rows]
    return rows[:3] if len(rows) > 1 else []


# No-op host time on the analysed steps' critical paths by the named host range it lies in
# (host_time_spans.range_name, the pieces step_causes names), per step
_NO_OP_RANGES_SQL = """
    SELECT t.range_name, sum(least(p.end_ns, t.end_ns) - greatest(p.start_ns, t.start_ns))
                         / (SELECT count(*) FROM tf_internal.findings_steps WHERE NOT warmup) AS ns
    FROM critical_path p JOIN host_time_spans t ON t.rank = p.rank AND t.start_ns < p.end_ns AND t.end_ns > p.start_ns
    WHERE p.kind = 'host_cpu' AND t.cause = 'no_op' AND t.range_name IS NOT NULL
      AND p.step IN (SELECT step FROM tf_internal.findings_steps WHERE NOT warmup)
    GROUP BY t.range_name ORDER BY ns DESC, t.range_name LIMIT 3"""


def _no_op_in_ranges(con, part, total_ns) -> list[tuple[str, float, str | None]]:
    """A no_op part that no one name holds, split into the named ranges holding at least 5 % of the
    host time and the rest: host time inside a named range is that range's (docs/host-time.md). On
    pipit's MPI saxpy "723.7 ms in no traced op" held 88.9 ms inside MPI_Send and 84.7 ms inside MPI_Recv."""
    cause, ns, top = part
    if cause != "no_op" or top:
        return [part]
    ranges = [(name, r_ns) for name, r_ns in con.execute(_NO_OP_RANGES_SQL).fetchall() if r_ns >= 0.05 * total_ns]
    rest = ns - sum(r_ns for _, r_ns in ranges)
    return [("no_op", r_ns, name) for name, r_ns in ranges] + ([("no_op", rest, None)] if rest >= 0.05 * total_ns else [])


def _host_parts_of(con, total_ns, parts) -> list[tuple[str, float, str | None]]:
    """host_split's parts (or, where it gives none, the lone host cause) with a no_op part no one name
    holds split by the named ranges holding it; [] where no range does (the parts stand as they are)."""
    if not parts:
        parts = [(c, ns, top) for c, ns, top in con.execute(_HOST_SPLIT_SQL).fetchall()
                 if ns and total_ns and ns >= 0.05 * total_ns][:1]
    out = [p for part in parts for p in _no_op_in_ranges(con, part, total_ns)]
    return out[:4] if len(out) > 1 and out != list(parts) else []


def _host_parts(parts, compact: bool = False) -> str:
    """Each host cause with its own figure; compact (the headline): "281.9 ms in ## backward ## (no op
    traced)", the range or op first, so that every part fits in 200 characters (the fused HTA pair's
    headline named only the first of its two parts, cut at the limit)."""
    def one(c, ns, top):
        if c == "no_op" and top:  # host time inside a named range is that range's (docs/host-time.md)
            return f"{_ms(ns)} in {short_name(top)} (no op traced)" if compact else \
                f"{_ms(ns)} inside {short_name(top)} with no op traced"
        if compact and top and c not in ("launch", "sync"):
            return f"{_ms(ns)} in {short_name(top)}"
        return f"{_ms(ns)} {_HOST_PART.get(c, f'blocking in {c} copies')}" + (
            f" ({short_name(top)})" if top and c not in ("launch", "sync") else "")
    return ", ".join(one(*p) for p in parts)


@sentence("dominant")
def _dominant(r: dict, con) -> str:
    what = _what(r["class"], r["cause"]) if r["class"] != "host" else f"the host, mostly {_what('host', r['cause'], _row_stack(r, con))}"
    if r["class"] == "memory copies" and (split := _copy_split(con, r["value_ns"])):
        what, r["copy_parts"] = f"memory copies ({split})", split
    if r["class"] == "host" and (hs := host_split(con, r["value_ns"])):
        what, r["host_parts"] = f"host time ({_host_parts(hs)})", hs
    if r["class"] == "host" and (hs := _host_parts_of(con, r["value_ns"], r.get("host_parts"))):  # no_op by range
        what, r["host_parts"] = f"host time ({_host_parts(hs)})", hs
    s = f"{_BOUND.get(r['class'], r['class'])}: {_pct(r['share_pct'])} of the critical path"
    if r["low_pct"] is not None and r["high_pct"] is not None and r["high_pct"] - r["low_pct"] >= 1:
        s += f" ({_pct(r['low_pct'])}–{_pct(r['high_pct'])} per step)"
    s += f" is {what}, {_ms(r['value_ns'])} per step"
    if r["class"] == "memory copies" and r["bytes"]:
        s += f", {size(r['bytes'])} copied"
    if r["evidence"] and r["class"] in ("compute", "communication", "memory copies"):
        # findings.sql dominant_op: the op name with the most run time in the class, not the longest call
        what = "copy" if r["class"] == "memory copies" else "kernel"
        s += f"; the {what} taking the most time: {short_name(r['evidence'])}, {_ms(r['evidence_ns'])} per step"
        s += " and rank" if con.execute("SELECT count(DISTINCT rank) FROM gpu_ops").fetchone()[0] > 1 else ""
    elif r["evidence"] and r["class"] == "host":
        s += f"; the longest stretch in {short_name(r['evidence'])}"
    return s + _fix_clause(r, _advice(r["class"], r["cause"])) + "."


def _sharing_words(r: dict, con, short: bool = False) -> str:
    """One sentence for ranks on one GPU (a shared_gpu row, with the sharing row of the same ranks
    folded in by _fold_sharing): what was proven from the kernels (gpu_sharing: they never overlap and
    take turns) or only suspected (the same device index), and what sharing does to every cross-rank
    figure. Said once: the two rows told it twice, the proven one as "may share" (h100 kineto
    ddp4_straggler: Kineto records no host or GPU id, yet 96 turns of 2.08 ms, 0.00 % overlap)."""
    who = _ranks(r["ranks"]).capitalize()
    turns = r.get("turns")
    certain = bool(r["note"]) and "no host" not in r["note"]
    if turns is not None:
        late = (f"; {turns['n']} collectives late by whole turns ({_ms(turns['value_ns'])}) are sharing, not a "
                "straggler, and are left out of stragglers and peer waits") if turns["n"] else ""
        if short:
            return (f"{who} time-slice one GPU (turns of {_ms(turns['evidence_ns'])} seen, their kernels never overlap): "
                    f"cross-rank waits, idle, exposed communication and MFU include the other ranks' turns{late}.")
        return (f"{who} time-slice one GPU ({r['note']}; their kernels never overlap and take turns of "
                f"{_ms(turns['evidence_ns'])}, proven from the trace): every cross-rank figure includes the other ranks' "
                "turns: each rank's idle and exposed-communication time read higher than on a GPU of its own, and each "
                f"rank's MFU divides by the whole GPU's peak, so the GPU's own MFU is up to their sum{late}.")
    seen = con.execute("SELECT max(overlap_pct), sum(turns) FROM gpu_sharing WHERE NOT time_sliced AND "
                       "list_has_all(ranks, ?::INTEGER[])", [list(r["ranks"] or [])]).fetchone()
    overlap = seen[0] if seen else None
    evidence = (f"their kernels overlap ({overlap:.1f} % of their kernel time), no turns" if overlap is not None and overlap > 0
                else "too few hand-overs in their kernels to tell turns" if overlap is not None else
                "no kernels to tell turns from")
    effect = "cross-rank waits, idle, exposed communication and MFU include the other ranks' work"
    if certain:
        return f"{who} share one GPU ({r['note']}; {evidence}): {effect}."
    if short:
        return f"{who} may share one GPU (same device index, no host or GPU id; {evidence}, so not proven): if so, {effect}."
    return (f"{who} ran on the same device index and their traces record neither host nor GPU id, so they may share one "
            f"GPU (not proven: {evidence}): if they do, each rank's MFU divides by the whole GPU's peak and each rank's idle "
            "and exposed-communication time include time the GPU ran the other ranks' kernels.")


def _fold_sharing(rows: list[dict]):
    """The time-slicing row (kind sharing) of ranks that a shared_gpu row names goes into that row
    (`turns`): one sentence says what sharing is and does."""
    shared = [r for r in rows if r["kind"] == "shared_gpu"]
    for s in [r for r in rows if r["kind"] == "sharing"]:
        home = next((r for r in shared if set(s["ranks"] or []) <= set(r["ranks"] or [])), None)
        if home is not None:
            home["turns"], s["folded"] = s, True


@sentence("shared_gpu")
def _shared_gpu(r: dict, con) -> str:
    r["short_sentence"] = _sharing_words(r, con, short=True)  # the caveat's words (_short has no connection)
    return _sharing_words(r, con)


@sentence("sharing")
def _sharing(r: dict, con) -> str:
    s = f"{_ranks(r['ranks']).capitalize()} took turns on one GPU (slices of {_ms(r['evidence_ns'])})"
    if r["n"]:
        s += (f": {r['n']} collectives started late by those turns ({_ms(r['value_ns'])}) are sharing, not a "
              "straggler, and are left out of stragglers and peer waits")
    return s + "."


@sentence("partial_capture")
def _partial_capture(r: dict, con) -> str:
    return f"No cross-rank claim (stragglers, peer waits) is made: {r['note']}."


@sentence("unrecorded_work")
def _unrecorded_work(r: dict, con) -> str:
    # unrecorded_work.sql: the kernel trace does not cover the API trace (two rocprofv3 CSVs sampled
    # apart), or the trace holds only the collectives (a filtered capture)
    if r.get("cause") == "communication kernels only":
        return (f"The trace of {_ranks(r['ranks'])} holds only communication kernels and no host call (a filtered "
                "capture): the GPU idle between them may be compute the trace left out, and no host cause can be named.")
    return (f"{r['n']:,} launch calls ({_pct(r['share_pct'])} of them) have no GPU op in the trace: "
            "the GPU idle and \"nothing else on the path\" may be GPU work the trace did not record.")


@sentence("coverage")
def _coverage(r: dict, con) -> str:
    before = r["evidence_ns"] or 0
    return (f"Only {r['share_pct']:.0f}% of rank {r['rank']}'s GPU time lies inside steps ({_ms(before)} before the "
            f"first step, {_ms((r['value_ns'] or 0) - before)} after the last): per-step figures leave the rest out.")


# What each figure of queries/cannot_answer.sql is to a reader of the verdict.
_CANNOT = {
    "launch dispatch": "launch dispatch and the per-CPU-op figures (op work, FLOPs, MFU)",
    "launch latency": "launch latency",
    "per-step figures": "per-step figures",
    "cross-rank timing": "cross-rank timing (stragglers, which rank waited for which)",
    "MFU": "MFU",
}


@sentence("cannot_answer")
def _cannot_answer(r: dict, con) -> str:
    """One clause: the figure, for how many GPU ops, on which ranks, and why (queries/cannot_answer.sql)."""
    n_ranks = con.execute("SELECT count(DISTINCT rank) FROM traces").fetchone()[0]
    ranks = r["ranks"] or []
    s = _CANNOT.get(r["evidence"], r["evidence"] or "?")
    if r["n"] is not None:
        s += f" for {r['n']:,} GPU op{'s' if r['n'] != 1 else ''} ({_pct(r['share_pct'])})"
    if n_ranks > 1:
        s += " on every rank" if len(ranks) == n_ranks else f" on {_ranks(ranks)}"
    return f"{s} — {r['note']}"


def _one_cannot_sentence(out: dict):
    """The cannot_answer clauses as one sentence, where the first of them stood: what the trace
    cannot give is said once, not once per figure or rank."""
    clauses = [f["sentence"] for f in out["findings"] if f["kind"] == "cannot_answer"]
    if not clauses:
        return
    at = out["sentences"].index(clauses[0])
    rest = [x for x in out["sentences"][at:] if x not in clauses]
    out["sentences"][at:] = ["Not computable from these traces: " + "; ".join(clauses) + ".", *rest]


@sentence("launch_bound_steps")
def _launch_bound_steps(r: dict, con) -> str:
    steps = r["steps"] or []
    head = f"Launch-bound: step{'s' if len(steps) > 1 else ''} {', '.join(map(str, steps))} spent up to {r['share_pct']:.0f}% of the GPU window"
    # the launch idle of those steps split as launch_names splits it: after the launch calls had
    # returned, the kernels were queued, not waiting for a launch (fused hta trace_filter: 392.1 of
    # rank 0's 399.5 ms)
    exposed, queued = con.execute(f"""SELECT sum(exposed_ns), sum(exposed_queued_ns) FROM launch_overhead
                                      WHERE step IN ({', '.join(str(int(x)) for x in steps) or 'NULL'})""").fetchone()
    if exposed and (queued or 0) >= 0.5 * exposed:
        return (f"{head} idle before launched work started, but {_pct(100 * queued / exposed)} of that idle came after the "
                "launch calls had returned (work queued, not launch cost).")
    # idle inside allocator calls is allocator time, as the launch finding says (GPUPuzzlers vector_flops1:
    # "up to 100% … waiting for kernel launches" where 484.4 of 490.2 ms lies inside two cudaFree)
    from .claims import launch_shape
    n = con.execute("SELECT count(*) FROM tf_internal.findings_steps WHERE NOT warmup").fetchone()[0]
    shape = launch_shape(con, n)
    if exposed and shape["alloc_ns"] >= 0.5 * exposed:
        return (f"{head} idle before launched work started, but {_ms(shape['alloc_ns'])} of that idle lies inside allocator "
                f"calls ({shape['alloc_name']}): allocator time, not launch cost.")
    return f"{head} waiting for kernel launches."


@sentence("launch_names")
def _launch_names(r: dict, con) -> str:
    kinds = dict(con.execute("""SELECT kind IN ('memset', 'memcpy') OR regexp_matches(name, '^__amd_rocclr_(copy|fill)(Buffer|Image)'),
                                       count(DISTINCT name) FROM launch_overhead o
                                SEMI JOIN launch_overhead_summary s ON s.rank = o.rank AND s.name = o.name AND s.launch_bound
                                GROUP BY ALL""").fetchall())
    names = (f"{r['n']} GPU op names ({kinds.get(False, 0)} kernel name{'s' if kinds.get(False, 0) != 1 else ''}, "
             f"{kinds[True]} memset/copy)" if kinds.get(True) else f"{r['n']} kernel name{'s' if r['n'] > 1 else ''}")
    s = f"{names} cost more GPU idle in launching ({_ms(r['value_ns'])}) than running ({_ms(r['baseline_ns'])})"
    if "fix" in r and (r["evidence_ns"] or 0) < 0.5 * r["value_ns"]:  # not queued work (below): launch idle
        from .claims import launch_shape
        n = con.execute("SELECT count(*) FROM tf_internal.findings_steps WHERE NOT warmup").fetchone()[0]
        shape = launch_shape(con, n)
        # what the idle precedes and a single outlier call, said before the advice that fits them
        # (nsys-ai mfu_2gpu_after: 21.0 of 28.6 ms before memsets and copies, 5.75 ms after one
        # cudaMemsetAsync call, 15 stream syncs per step: "CUDA graphs / fusion" fitted none of it)
        copies = (f"{_ms(shape['copies_ns'])} of it is before memsets and copies (fusion does not remove it)"
                  if shape["copies_ns"] >= 0.05 * r["value_ns"] else "")
        one = ""
        told = con.execute("SELECT count(*) FROM findings WHERE kind = 'dominant' AND note LIKE 'launch stall%'").fetchone()[0]
        if shape["outlier"] and shape["outlier"][1] >= 0.05 * r["value_ns"] and not told:  # a launch stall says it below
            name, ns, x = shape["outlier"]
            one = f"; {_ms(ns)} of it after one {name} call of {x:.0f}x its median (a one-off)"
        if not r["fix"] and r.get("scenario") and shape["alloc_ns"] >= 0.5 * r["value_ns"]:
            return s + (f", and no launch fix fits: {_ms(shape['alloc_ns'])} of it lies inside allocator calls "
                        f"({shape['alloc_name']}), allocator time that fusion or graphs do not remove{one}.")
        if not r["fix"] and r.get("scenario") and shape["syncs"] < 1 and shape["copies_ns"] >= 0.5 * r["value_ns"] \
                and _row_stack(r, con) == "jax":
            return s + (f", and no launch fix fits: {_ms(shape['copies_ns'])} of it is before copies to the device "
                        f"(jax.device_put, outside the jitted step), which neither fusion nor command buffers take{one}.")
        if not r["fix"] and r.get("scenario") and shape["syncs"] >= 1 and shape["copies_ns"] >= 0.5 * r["value_ns"]:
            return s + (f", and no launch fix fits: {copies}, and a CUDA graph cannot capture a step making "
                        f"{shape['syncs']:g} blocking calls per rank and step{one}.")
        s += (f"; {copies}" if copies else "") + one
    stall = con.execute("SELECT sum(evidence_ns) FROM findings WHERE kind = 'dominant' AND note LIKE 'launch stall%'").fetchone()[0]
    if stall:  # findings.sql launch_stall: the one-time stall is told apart; graphs and fusion act on the rest
        s += f", {_ms(stall)} of it in launch stalls, {_ms(max(0, r['value_ns'] - stall))} recurring"
    queued = r["evidence_ns"] or 0
    if queued >= 0.5 * r["value_ns"]:
        # most of the idle came after the launch call returned, which no launch fix removes. With
        # ranks on one GPU, the device ran their kernels; without, the trace does not say what held
        # the kernels: a single-rank benchmark on its own GPU (HTA's execution_trace simple_add:
        # 2.4-5.8 ms per kernel) or a kernel behind a cross-stream wait (TraceLens sglang decode:
        # 463 ms) is not "a device busy with other work"
        shared = con.execute("SELECT count(*), bool_and(note LIKE 'the same device index%') FROM findings "
                             "WHERE kind = 'shared_gpu'").fetchone()
        sliced = con.execute("SELECT count(*) FROM gpu_sharing WHERE time_sliced").fetchone()[0]
        why = ("the device was busy with the other ranks' turns on its time-sliced GPU" if sliced else
               "the device was most likely busy with the other ranks that may share its GPU" if shared[0] and shared[1] else
               "the device was busy with the other ranks on its shared GPU" if shared[0] else
               "the trace does not show what held them (another process on the GPU, a wait on work the trace "
               "does not hold, the GPU's clock read against the host's)")
        return s + (f", but {_ms(queued)} of that idle came after the launch calls had returned, the kernels "
                    f"enqueued and not started: {why}, not launch cost.")
    if "fix" in r:  # a claim: advice only where the replay of no launch overhead gains in the analysed steps
        return s + (_fix_clause(r, "") + "." if r["fix"] else ": in the analysed steps no launch fix gains above noise.")
    return s + ": fuse them or capture them in a CUDA graph."


@sentence("exposed_comm")
def _exposed_comm(r: dict, con) -> str:
    # a share of the steps' GPU windows (wall), not of the GPU's busy time (param-dlrm8: 41 % of the
    # windows, 84 % of the busy time)
    s = f"Communication not hidden by compute takes {r['share_pct']:.0f}% of the steps' GPU window (wall time)"
    wait = min(r["value_ns"] or 0, con.execute(_EXPOSED_WAIT_SQL).fetchone()[0] or 0)
    if wait >= 0.25 * (r["value_ns"] or 0) and wait > 0:
        s += f"; {_ms(wait)} of it is ranks waiting inside collectives for the last rank to start them, not transfer"
    return s + "."


# The waiting part of the collectives (collective_waits: from a rank's start until the last rank
# started) on no compute kernel of the rank, over the steps exposed_comm counts: exposed communication
# that is a wait for a late rank (amd-hpc merged_all_events: 118 of 122 ms on ranks 0-2 waiting for
# rank 3, "22 % of the GPU window" said as communication cost)
_EXPOSED_WAIT_SQL = """
    WITH c AS (SELECT rank, start_ns, end_ns FROM gpu_ops WHERE kind = 'kernel' AND category = 'compute' AND end_ns > start_ns),
    o AS (SELECT *, max(end_ns) OVER (PARTITION BY rank ORDER BY start_ns, end_ns ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev FROM c),
    g AS (SELECT *, sum(CASE WHEN prev IS NULL OR start_ns > prev THEN 1 ELSE 0 END)
                    OVER (PARTITION BY rank ORDER BY start_ns, end_ns ROWS UNBOUNDED PRECEDING) AS k FROM o),
    isl AS (SELECT rank, min(start_ns) AS a, max(end_ns) AS b FROM g GROUP BY rank, k),
    w AS (SELECT rank, start_ns AS a, least(last_start_ns, end_ns) AS b FROM collective_waits
          WHERE step IN (SELECT step FROM step_breakdown WHERE part = 'step') AND rank <> last_rank AND last_start_ns > start_ns)
    SELECT sum(b - a) - coalesce((SELECT sum(least(i.b, x.b) - greatest(i.a, x.a)) FROM w x JOIN isl i
                                  ON i.rank = x.rank AND i.b > x.a AND i.a < x.b), 0) FROM w"""


@sentence("mfu")
def _mfu(r: dict, con) -> str:
    s = f"Step {r['step']} reaches {r['share_pct']:.1f}% MFU"
    if r["note"] and r["note"].startswith("lower bound: "):  # findings.sql: FLOP-carrying ops of unknown FLOPs
        s += f" ({r['note'][len('lower bound: '):]}: a lower bound)"
    elif r["note"] == "lower bound":  # a database of the earlier rule (known_pct < 90)
        s += f" (FLOPs known for {r['low_pct']:.0f}% of its compute time: a lower bound)"
    if r["high_pct"]:
        s += f"; {r['high_pct']:.0f}% of its op time with known work is memory-bound, led by {r['evidence']}"
    return s + "."


@sentence("mfu_empty")
def _mfu_empty(r: dict, con) -> str:
    from .flops_coverage import why_no_flops
    return "MFU and the roofline are empty: " + (
        why_no_flops(con) + "." if not r["n"] else "the GPU's peak is unknown (--peak-tflops / --peak-gbps set it).")


def _gain_words(r: dict) -> str:
    if (r.get("steps_affected") or 0) <= 1:
        return f"the what-if replay gains {_ms(r['gain_ns'])} on that step"
    return (f"the what-if replay gains {_ms(r['gain_ns'])} per step in {r['steps_affected']} steps, "
            f"{_ms(r['recover_ns'])} over the capture")


def _fix_clause(r: dict, default: str) -> str:
    """The fix of a claim row, with its replayed gain; a row of no claim (another pack's) keeps the
    cause's usual advice. A claim whose fix's replay gains nothing above noise advises nothing."""
    if "fix" not in r:
        return f" — {default}" if default else ""
    if r["fix"]:
        return f" — {r['fix']}: {_gain_words(r)}"
    if r.get("scenario"):
        return f" (the replay of its fix, `traceflow whatif DB {r['scenario']}`, gains nothing above noise)"
    return ""


@sentence("extra_sync")
def _extra_sync(r: dict, con) -> str:
    return (f"Rank {r['rank']} blocks {_ms(r['value_ns'])} per step in {r['evidence']}, {r['per_step']:g} more call"
            f"{'' if r['per_step'] == 1 else 's'} per step than its peers (who block {_ms(r['baseline_ns'])})"
            + _waited(r) + _fix_clause(r, "") + ".")


def _waited(r: dict, steps: int | None = None) -> str:
    """Where removing the calls recovers under half the time they block (beyond the peers'), that time
    mostly stays: the wait for GPU work already queued, or a runtime's start-up (amd-hpc
    merged_all_events rank 0: 7.4 ms more a step in two .item(), waiting for an all-reduce that waits
    for rank 3, the replay gains 0.5 ms; rocprof v1's vector add: 276.0 ms in hipMemcpyWithStream, 275
    of it the first call's runtime start-up, 1.2 ms recovered)."""
    blocked = (r["value_ns"] or 0) - (r["baseline_ns"] or 0)
    recovered = (r.get("recover_ns") or 0) / max(1, steps or r.get("n") or 1)
    if not r.get("fix") or blocked <= 0 or recovered >= 0.5 * blocked:
        return ""
    return "; most of that blocking would stay without the calls (a wait for GPU work already queued, or start-up)"


# The host_syncs row's calls by rank and by copy direction, per analysed step: its figure is a mean
# over the ranks and its copy the longest one's (PARAM DLRM's 8 ranks: "2.5 ms/step each" was the mean of
# 0.06-6.6 ms; "10 right after a pageable HtoD" were 8 after an HtoD and 2 after a DtoH copy; pipit saxpy's
# 15 blocking cudaMemcpy, "DtoH copy", were 10 HtoD and 5 DtoH). Parameters: the call's name, twice.
def _sync_parts(con, r: dict) -> dict:
    """{'lo', 'hi': the least and most a rank blocks per step, as the row's figure counts it (claims:
    a sync's blocking with the pageable copy call before it, start-up out); 'dirs': [(direction, calls
    per rank and step)] of the copies the calls follow (or are)} for a host_syncs row."""
    from .claims import sync_parts  # the row's own definition of what it counts, not a second one
    per_rank, dirs = sync_parts(con, r["evidence"], pairs=bool(r["n"] and r["activity"]))
    n = con.execute("SELECT count(*) FROM tf_internal.findings_steps WHERE NOT warmup").fetchone()[0]
    n_ranks, n = max(1, len(r["ranks"] or ())), max(1, n or 1)
    per_rank = [ns / n for ns in per_rank or ()] + [0.0] * (n_ranks - len(per_rank or ()))
    return {"lo": min(per_rank), "hi": max(per_rank),
            "dirs": [(d, int(c) / n_ranks / n) for d, c in dirs or ()]}


def _sync_blocked(r: dict, parts: dict) -> str:
    """'6.6 ms/step' (one rank), 'X ms/step each' (the ranks within 10 % of their mean), else the
    mean with the ranks' range."""
    if len(r["ranks"]) == 1:
        return f"{_ms(r['value_ns'])} per step"
    if parts["hi"] - parts["lo"] <= 0.1 * (r["value_ns"] or 0):
        return f"{_ms(r['value_ns'])} per step each"
    return f"{_ms(r['value_ns'])} per step on average ({_ms(parts['lo'])}–{_ms(parts['hi'])} by rank)"


def _sync_dirs(parts: dict) -> str:
    """'8 HtoD, 2 DtoH' (calls per rank and step by copy direction)."""
    return ", ".join(f"{c:g} {d}" for d, c in parts["dirs"])


@sentence("host_syncs")
def _host_syncs(r: dict, con) -> str:
    r["sync_parts"] = parts = _sync_parts(con, r)
    s = (f"{_ranks(r['ranks']).capitalize()} block{'s' if len(r['ranks']) == 1 else ''} {_sync_blocked(r, parts)} in "
         f"{r['per_step']:g} {r['evidence']} calls, every analysed step")
    if r["n"] and r["activity"]:  # claims._host_syncs: most right after a copy staged through pageable memory
        s += (f", {r['n']:g} of them right after a pageable copy ({_sync_dirs(parts)}), whose call's blocking is counted "
              "with them: a blocking copy of a pageable buffer, then a wait for the whole stream")
    elif r["activity"]:  # claims._blocking_copies: the calls are blocking copies
        s += f": blocking copy calls ({_sync_dirs(parts)}), each waiting for the GPU's queue to drain"
    steps = con.execute("SELECT count(*) FROM tf_internal.findings_steps WHERE NOT warmup").fetchone()[0]
    return s + _startup(r) + _waited(r, steps) + _fix_clause(r, "") + "."


def _startup(r: dict) -> str:
    """The calls' blocking before the rank's first GPU op (sync.startup_ns): once, not in the per-step
    figure (rocprof v1's vector add: 275.0 ms of the first hipMemcpyWithStream is runtime start-up)."""
    if not r.get("evidence_ns") or r["evidence_ns"] < max(1e6, 0.05 * (r["value_ns"] or 0)):
        return ""  # under a millisecond and 5 % of the figure: not worth a clause
    each = "" if len(r["ranks"] or []) <= 1 else " per rank"
    return (f"; {_ms(r['evidence_ns'])} more{each} once, before the first GPU op "
            "(runtime start-up, not a per-step cost)")


@sentence("pageable_copy")
def _pageable_copy(r: dict, con) -> str:
    r["copy_parts"] = _pageable_split(con, r["value_ns"])  # both directions: each its own figure
    what = f"({r['copy_parts']})" if r["copy_parts"] else f"({short_name(r['evidence'])})"
    s = (f"Copies to or from pageable host memory {what} take {_ms(r['value_ns'])} of GPU time "
         f"per step on {_ranks(r['ranks'])} ({size(r['bytes'] or 0)} copied per step, in {r['n']} steps); the call "
         "waits while the driver stages them")
    if r.get("note") == "fix with the syncs":  # claims._claim_rows: the syncs' row after these copies holds the fix
        return s + ("; the fix is the blocking-call finding's (its replay removes the waits on these copies; "
                    "copies twice as fast alone gain less).")
    return s + _fix_clause(r, "") + "."


@sentence("bound_withheld")
def _bound_withheld(r: dict, con) -> str:
    # claims._host_while_busy: the host's time on the path overlaps its GPU's work, a wait the replay
    # cannot model (deepseek train.json: "compute x0.5 would gain 2.5 ms" with the GPU idle 0.5 of 129 ms)
    return (f"No {r['evidence']} bound: step {r['step']}'s path holds {_ms(r['baseline_ns'])} of rank {r['rank']}'s host "
            f"time, {_ms(r['value_ns'])} of it while its GPU was busy (idle {_ms(r['evidence_ns'])} of {_ms(r['n'])}): "
            "a wait on the GPU the trace does not record (polling, filtered events), which the replay holds fixed.")


@sentence("yardstick")
def _yardstick(r: dict, con) -> str:
    return (f"A bound, not a fix: {r['evidence']} would gain {_ms(r['gain_ns'])} ({r['share_pct']:.0f}%) "
            f"on step {r['step']}.")


# The what-if scenario each kind of replayed fix is (whatif.Scenario.describe's words)
_SCENARIO_WORDS = (("--remove-host-stall", "no host stall"), ("--no-host-syncs", "no host syncs"),
                   ("--no-launch-overhead", "no launch overhead"), ("--no-launch-stall", "no launch stall"),
                   ("--overlap-comm", "comm overlapped"),
                   ("--no-allocator-calls", "no allocator calls"), ("pageable", "pageable"))


def _same_fix(table_fix: dict, claim: dict) -> bool:
    flags = claim.get("scenario") or ""
    return any(flag in flags and table_fix["scenario"].startswith(words) for flag, words in _SCENARIO_WORDS)


def _fix_sentence(con, out: dict):
    """The fix worth the most over the capture (claims.py ranked them by recover_ns), and where the
    what-if table (whatif.best_fixes: the largest gain on one step; the report's section) leads with
    another change, why."""
    top = next((r for r in out["findings"] if r.get("fix")), None)
    if top:
        out["sentences"].append(f"Worth the most over the capture: {top['fix']} ({_gain_words(top)}).")
    # a row whose gain is mostly the stall above (whatif._same_fault_after_stall; its share: ddp4's
    # "no host syncs", 15.3 of 17.2 ms from rank 3's stalled step) says so itself; one whose gain is
    # mostly elsewhere (amd-hpc's "no launch overhead", 2.7 of 8.3 ms) competes on its whole gain
    table = [f for f in out["fixes"] if not f.get("reference") and not f["scenario"].startswith("no stragglers")
             and f["gain_pct"] >= 2 and not (f.get("same_fault") and (f.get("fault") or {}).get("share", 0) >= 0.5)]
    if not table:
        return
    # the largest gain, not the table's first row: best_fixes puts a host stall ahead of a fix that
    # shares its rank and step, whatever its gain (amd-hpc merged_all_events: "no host stall … 2.7 ms"
    # was called the largest beside "no launch overhead", 8.3 ms)
    t = max(table, key=lambda f: f["gain_ns"])
    if top and _same_fix(t, top):
        return
    first = f"The what-if table's largest gain on one step is {t['scenario']}, {_ms(t['gain_ns'])} on step {t['step']}"
    match = next((r for r in out["findings"] if r.get("scenario") and _same_fix(t, r)), None)
    if match and match.get("fix") and top:
        why = f"over the capture it recovers {_ms(match['recover_ns'])}, less than the fix above ({_ms(top['recover_ns'])})"
    elif match and match.get("scenario") and not match.get("fix") and match["kind"] == "launch_names":
        why = "not advised: no launch fix fits where the idle is (see the launch finding)"
    elif "launch" in t["scenario"]:
        why = ("not advised: in the analysed steps the launch idle is small or mostly kernels queued behind other "
               "work, which no launch fix removes")
    elif top and (top["recover_ns"] or 0) >= t["gain_ns"]:
        why = f"over the capture the fix above recovers more ({_ms(top['recover_ns'])})"
    else:
        why = "no recorded cause on a rank matches it above the replay's noise, so it is not advised"
    out["whatif_note"] = f"{first}; {why}."
    out["sentences"].append(out["whatif_note"])


_CAVEATS = ("shared_gpu", "sharing", "partial_capture", "coverage", "cannot_answer", "yardstick", "bound_withheld",
            "unrecorded_work")
HEADLINE_MAX, LINE_MAX, LINES_MAX = 200, 300, 5


def _fit(s: str, limit: int) -> str:
    """At most `limit` characters: long asides in parentheses dropped, last first, then cut at the last
    clause boundary that fits."""
    while len(s) > limit and (asides := [m for m in re.finditer(r" \([^()]{30,}\)", s)]):
        s = s[:asides[-1].start()] + s[asides[-1].end():]
    if len(s) <= limit:
        return s
    # the last "; " or ", " that fits with its parentheses closed: a cut inside one left "(another
    # process on the GPU, a wait on work the trace does not hold…" (fused hta trace_filter)
    cuts = [i for i in range(limit // 2, limit - 1) if s.startswith(("; ", ", "), i) and s.count("(", 0, i) == s.count(")", 0, i)]
    return (s[:cuts[-1]] if cuts else s[:limit - 1].rstrip()) + "…"


def _headline(r: dict) -> str:
    k = r["kind"]
    what = {"step_outlier": lambda: f"rank {r['rank']} stalled step {r['step']} ({_ms(r['value_ns'])} on the path)",
            "straggler": lambda: f"rank {r['rank']} blocks in {r['evidence']} every step, its peers wait",
            "extra_sync": lambda: f"rank {r['rank']} blocks {_ms(r['value_ns'])}/step in {r['evidence']}",
            "pageable_copy": lambda: f"pageable copies take {_ms(r['value_ns'])}/step",
            "host_syncs": lambda: f"{r['per_step']:g} {r['evidence']}/step block {_ms(r['value_ns'])} per rank"
                                  + (" after pageable copies" if r["n"] and r["activity"] else
                                     f" (copies {_sync_dirs(r['sync_parts'])})" if r["activity"] and r.get("sync_parts")
                                     else f" ({r['activity']})" if r["activity"] else ""),
            "launch_names": lambda: "launch overhead idles the GPU",
            "dominant": lambda: (stall_words(r.get("steps"), r["evidence"])
                                 if (r.get("note") or "").startswith("launch stall")
                                 else f"{_BOUND.get(r['class'], r['class']).lower()}, {_ms(r['value_ns'])}/step"),
            }.get(k, lambda: k.replace("_", " "))()
    steps = "once" if (r["steps_affected"] or 0) <= 1 else f"over {r['steps_affected']} steps"
    return _fit(f"Top problem: {what}. Fix: {r['fix_short'] or r['fix']}. Recovers {_ms(r['recover_ns'])} {steps} "
                "(what-if replay).", HEADLINE_MAX)


def _short(r: dict) -> str:
    """One finding in at most LINE_MAX characters: the fact, its figure against its baseline, the fix and gain."""
    # Long because: one short form per claim kind, side by side so their words stay alike
    k = r["kind"]
    if k == "step_outlier":
        s = (f"Rank {r['rank']}, step {r['step']}: {_ms(r['value_ns'])} of {_what(r['class'], r['cause']).split(' (')[0]} "
             f"on the critical path (other steps: {_ms(r['baseline_ns'])})")
    elif k == "straggler":
        s = (f"Rank {r['rank']} started {r['n']} collectives last, {_ms(r['value_ns'])}/step behind the next rank "
             f"in all (other ranks: {_ms(r['baseline_ns'])})")
        if not r.get("fix") and "--no-stragglers" in (r.get("scenario") or "") and not r.get("recover_ns"):
            s += "; the replay without it gains nothing: it sets no step's pace"
        if r["evidence"]:
            s += f"; {r['per_step']:g} more {r['evidence']} per step than its peers"
        elif r["cause"] == "gpu behind":
            s += f"; its GPU busy with its own earlier work (idle {_ms(r['evidence_ns'])}/step of it)"
    elif k == "extra_sync":
        s = (f"Rank {r['rank']} blocks {_ms(r['value_ns'])}/step in {r['evidence']} ({r['per_step']:g} more calls/step "
             f"than its peers, who block {_ms(r['baseline_ns'])})" + ("; mostly a wait that stays" if _waited(r) else ""))
    elif k == "host_syncs":
        parts = r.get("sync_parts")
        blocked = _sync_blocked(r, parts).replace(" per step", "/step") if parts else f"{_ms(r['value_ns'])}/step"
        s = f"{_ranks(r['ranks']).capitalize()} block{'s' if len(r['ranks']) == 1 else ''} {blocked} in {r['per_step']:g} {r['evidence']}" + (
            f", {r['n']:g} right after a pageable copy ({_sync_dirs(parts)})" if r["n"] and r["activity"] and parts else
            f", blocking copy calls ({_sync_dirs(parts)})" if r["activity"] and parts else "") + _startup(r)
        # the replay recovers under half of it: say so in the line too (nsys-ai mfu_2gpu_before: 162.3 ms
        # blocked a rank, 98.7 % of it its GPU's own queued kernels, the replay 25.2 ms)
        s += "; mostly a wait for GPU work already queued, which stays" if _waited(r, r.get("steps_affected") or 1) else ""
    elif k == "pageable_copy":
        s = (f"Pageable copies take {_ms(r['value_ns'])}/step ({r['copy_parts']}) of GPU time on {_ranks(r['ranks'])}"
             if r.get("copy_parts") else
             f"Pageable copies ({short_name(r['evidence'])}) take {_ms(r['value_ns'])}/step of GPU time on {_ranks(r['ranks'])}")
        if r.get("note") == "fix with the syncs":
            s += "; their fix is the blocking calls' above"
    elif k == "dominant":
        s = (f"{_BOUND.get(r['class'], r['class'])}: {_pct(r['share_pct'])} of the critical path is "
             f"{_what(r['class'], r['cause']).split(' (')[0]}, {_ms(r['value_ns'])}/step")
        if r.get("copy_parts"):  # each copy cause its own figure (_copy_split)
            s = (f"Copy-bound: {_pct(r['share_pct'])} of the critical path is memory copies, {_ms(r['value_ns'])}/step: "
                 f"{r['copy_parts']}")
        if r["class"] == "host" and r.get("host_parts"):  # each host cause its own figure (host_split)
            s = (f"Host-bound: {_pct(r['share_pct'])} of the critical path is host time, {_ms(r['value_ns'])}/step: "
                 f"{_host_parts(r['host_parts'])}")
        elif r["class"] == "host" and r["cause"] == "no_op" and r["evidence"]:  # a name holding most of it (step_causes)
            s = (f"{_BOUND['host']}: {_pct(r['share_pct'])} of the critical path is host time with no op traced, mostly "
                 f"inside {short_name(r['evidence'])}, {_ms(r['value_ns'])}/step")
    elif k == "launch_names" and r.get("fix"):  # the finding and what its idle precedes; the fix's tail below
        s = r["sentence"].split(" — ")[0]
    elif k == "shared_gpu":
        return _fit(r["short_sentence"], LINE_MAX)
    elif k == "coverage":
        s = f"Only {r['share_pct']:.0f}% of rank {r['rank']}'s GPU time lies inside steps: per-step figures leave the rest out"
    elif k == "yardstick":
        s = f"Bound, not a fix: {r['evidence'].split(' (')[0]} would gain {_ms(r['gain_ns'])} on step {r['step']}"
    else:
        return _fit(r["sentence"], LINE_MAX)
    if r.get("fix"):
        gain = (f"{_ms(r['gain_ns'])} once" if (r["steps_affected"] or 0) <= 1 else
                f"{_ms(r['gain_ns'])}/step x {r['steps_affected']} steps = {_ms(r['recover_ns'])}")
        tail = f". Fix: {r['fix']}. Replay: {gain}."
        if len(s) + len(tail) > LINE_MAX:
            tail = f". Fix: {r['fix_short']}. Replay: {gain}."
        return _fit(s, LINE_MAX - len(tail)) + tail
    return _fit(s + ".", LINE_MAX)


def _short_form(out: dict):
    """The verdict read in 30 seconds: a headline (<= 200 characters: the top problem, its fix, what it
    recovers), at most five findings (<= 300 characters each), the caveats in a block of their own."""
    rows = out["findings"]
    fixes = [r for r in rows if r.get("fix")]
    facts = [r for r in rows if not r.get("fix") and r["kind"] not in _CAVEATS]
    if out.get("hang"):
        head = _fit(out["hang"]["sentence"], HEADLINE_MAX)
        body = fixes + facts
    elif fixes:
        head, body = _headline(fixes[0]), [fixes[0], *fixes[1:], *facts]
    else:
        first = next((r for r in facts if (r["priority"] or 9) <= 2), None)
        said = _short(first)[0].lower() + _short(first)[1:] if first else "no fault found"
        if first and first["kind"] == "dominant" and first.get("host_parts"):  # every host cause named, not the first only
            said = f"host-bound {_pct(first['share_pct'])} of the path, per step: {_host_parts(first['host_parts'], compact=True)}."
        head = _fit("No change the what-if replay confirms; " + said, HEADLINE_MAX)
        body = facts
    # the job's platform words (claims.platform_words: never longer than CUDA's, so the limits hold)
    pf = out.get("platform", "cuda")
    out["headline"] = platform_words(head, pf)
    out["lines"] = [platform_words(_short(r), pf) for r in body[:LINES_MAX]]
    steps = next((x for x in out["sentences"] if " analysed; median step time " in x), None)
    caveats = ([steps] if steps else []) + [_fit(r["sentence"], LINE_MAX) for r in rows if r["kind"] == "partial_capture"]
    caveats += [_short(r) for r in rows if r["kind"] in ("shared_gpu", "coverage")]
    caveats += [_fit(r["sentence"], LINE_MAX) for r in rows if r["kind"] == "sharing" and not r.get("folded")]
    cannot = [r["sentence"] for r in rows if r["kind"] == "cannot_answer"]
    if cannot:
        caveats.append(_fit("Not computable: " + "; ".join(cannot), LINE_MAX))
    bounds = [r for r in rows if r["kind"] == "yardstick"]
    if bounds:
        caveats.append(_fit("Bounds, not fixes: " + "; ".join(
            f"{b['evidence'].split(' (')[0]} would gain {_ms(b['gain_ns'])} on step {b['step']}" for b in bounds), LINE_MAX))
    caveats += [_fit(r["sentence"], LINE_MAX) for r in rows if r["kind"] in ("bound_withheld", "unrecorded_work")]
    if out.get("whatif_note"):
        caveats.append(_fit(out["whatif_note"], LINE_MAX))
    out["caveats"] = [platform_words(c, pf) for c in caveats]


def verdict(con, explain: bool = False) -> str:
    return text(findings(con), explain)


def text(f: dict, explain: bool = False) -> str:
    """The verdict to read in 30 seconds: the headline, at most five findings, the caveats apart; or
    (explain) every sentence, the long form."""
    if explain:
        return printable(" ".join(f["sentences"]))
    # each line escaped on its own: a name from a trace holding a newline never forges a line of ours
    out = [printable(f["headline"])] + [f"- {printable(x)}" for x in f["lines"]]
    if f["caveats"]:
        out += ["Caveats:"] + [f"- {printable(x)}" for x in f["caveats"]]
    return "\n".join(out)
