"""`traceflow report`: the post-mortem as one self-contained HTML file.

This module gathers what the page shows into plain values (sections of headings, notes, tables
and plots); page.html.j2 lays them out, rendered by Jinja2 with autoescape. Tables are plain
HTML (readable without JavaScript); plots are Plotly, whose library is inlined, so the page opens
offline. Every string that comes from a trace is escaped: table cells and text by the template,
plot data inside a JSON block whose '<', '>' and '&' are \\u-escaped, and plot labels stripped
of markup Plotly would otherwise interpret.

Size: one function per section of the page, each a few queries; the layout is page.html.j2.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ..outputs import atomic_output, check_output
from ..text import printable
from . import memory, roofline, whatif
from .blocks import CAUSE_COLORS, KIND_COLORS, PAGE_NAMES, STATE_COLORS, Cell, Items, Note, Plots, Section, Table, bars, label, shortened, table

if TYPE_CHECKING:
    from ..views import JobView

READS = frozenset({"critical_path", "critical_path_summary", "gpu_ops", "idle_gaps", "idle_gaps_summary", "kernels",
                   "launch_bound_steps", "launch_overhead_summary", "step_breakdown", "step_coverage", "stragglers",
                   "stragglers_by_rank", "sync", "traces"})  # the tables its SQL reads (tests/test_layers.py)


def build(job: JobView) -> str:
    """The page's HTML for a job (its connection and its findings, computed once)."""
    return _build(job.con, job.path, job.findings(), job.name)


def _coverage(con) -> list:
    """Per rank: what share of the capture's GPU time lies inside steps (one line)."""
    rows = con.execute("SELECT rank, coverage_pct, before_ns, after_ns FROM step_coverage ORDER BY rank").fetchall()
    items = [f"rank {r} {f'{c:.1f}' if c is not None else 'n/a'}% ({b / 1e6:.1f} ms before, {a / 1e6:.1f} ms after)"
             for r, c, b, a in rows]
    return [Note("GPU time inside steps: " + "; ".join(items) + ".")]


def _build(con, database: str, f: dict, name: str) -> str:
    P = Plots(os.path.basename(database))
    names = PAGE_NAMES.set(tuple(r[0] for r in con.execute("SELECT DISTINCT name FROM gpu_ops WHERE name IS NOT NULL").fetchall()))
    try:
        return _page(con, name, f, P)
    finally:
        PAGE_NAMES.reset(names)


def _page(con, name: str, f: dict, P: Plots) -> str:
    from . import hang
    # the first screen: the verdict read in 30 seconds (the terminal's), then the caveats, then every sentence
    first: list[Items | Table] = [Items([printable(x) for x in [f["headline"], *f["lines"]]], "verdict")]
    if f.get("caveats"):
        first.append(Items([printable("Caveats: " + x) for x in f["caveats"]], "verdict"))
    # the long form (`traceflow postmortem --explain`), folded under the first screen
    first.append(Table(["sentence"], [[Cell(printable(s))] for s in f["sentences"]],
                       folded="The verdict in full (every sentence, as `traceflow postmortem --explain` prints it)"))
    sections = [Section("verdict", "Verdict", first),
                *filter(None, [hang.section(con, f)]), _steps(con, P), _critical_path(con, P), whatif.section(f, P), roofline.section(con, P), _waits(con, P), _launch(con, P),
                *filter(None, [memory.section(con, P)]), _inputs(con, P)]  # memory: when the job recorded memory events
    return render(title=printable(f"traceflow post-mortem: {name}"), sections=sections,
                  specs=P.script_json())


def _steps(con, P: Plots) -> Section:
    """Per-rank, per-step breakdown."""
    rows = con.execute("""SELECT rank, step, compute_ns, exposed_comm_ns, exposed_memory_ns, idle_ns FROM step_breakdown
                          WHERE part = 'step' ORDER BY rank, step""").fetchall()
    key = {"compute": 2, "exposed comm": 3, "exposed memory": 4, "idle": 5}
    plot = P.add(bars(rows, lambda r: f"r{r[0]} s{r[1]}", list(key), STATE_COLORS, lambda r, s: r[key[s]]),
                 "GPU window per rank and step", x="rank r, step s", y="GPU time (ms)")
    tbl = table(con, """SELECT rank, coalesce(step::VARCHAR, part || ' steps') AS step, wall_ns, compute_ns, exposed_comm_ns,
                               exposed_memory_ns, idle_ns, idle_pct
                        FROM step_breakdown ORDER BY idle_ns DESC, rank, start_ns""", hint=P.hint("steps"),
                caption="Most idle first", half=True,
                headers=["rank", "step", "wall (ms)", "compute (ms)", "exposed comm (ms)", "exposed memcpy (ms)", "idle (ms)", "idle %"],
                ms_cols=("wall_ns", "compute_ns", "exposed_comm_ns", "exposed_memory_ns", "idle_ns"))
    return Section("steps", "Where each rank's GPU time went, per step", [
        plot, tbl, Note("compute + exposed comm + exposed memcpy + idle = the step's GPU window, exactly; windows never overlap "
                        "(each runs from the end of the previous step's GPU work to the last end of its own ops), so every "
                        'nanosecond of GPU time is counted once; "before steps" / "after steps" rows hold the GPU work outside them.'),
        *_coverage(con)])


def _critical_path(con, P: Plots) -> Section:
    """Critical path."""
    rows = con.execute("SELECT step, kind, sum(total_ns) FROM critical_path_summary GROUP BY step, kind").fetchall()
    kinds = [k for k in KIND_COLORS if any(r[1] == k for r in rows)]
    p1 = P.add(bars(rows, lambda r: r[0], kinds, KIND_COLORS, lambda r, s: dict(((r2[0], r2[1]), r2[2]) for r2 in rows).get((r[0], s))),
               "Critical path per step, by kind", x="step", y="time on the critical path (ms)", xaxis={"type": "category"})
    rows = con.execute("SELECT step, rank, sum(total_ns) FROM critical_path_summary GROUP BY step, rank").fetchall()
    ranks = sorted({r[1] for r in rows})
    lookup = {(r[0], r[1]): r[2] for r in rows}
    data = [{"type": "bar", "name": f"rank {k}", "x": [str(s) for s in sorted({r[0] for r in rows})],
             "y": [round((lookup.get((s, k)) or 0) / 1e6, 3) for s in sorted({r[0] for r in rows})]} for k in ranks]
    p2 = P.add(data, "Critical path per step, by rank", x="step", y="time on the critical path (ms)", xaxis={"type": "category"})
    tbl = table(con, """SELECT step, rank, kind, name, dur_ns FROM critical_path ORDER BY dur_ns DESC, step, ordinal""",
                headers=["step", "rank", "kind", "what", "length (ms)"], ms_cols=("dur_ns",), hint=P.hint("critical-path"),
                caption="Longest segments")
    return Section("critical-path", "Critical path: what set each step's length",
                            [p1, p2, tbl])


def _waits(con, P: Plots) -> Section:
    """Stragglers, collective waits, idle gaps."""
    rows = con.execute("SELECT rank, wait_caused_ns FROM stragglers_by_rank ORDER BY rank").fetchall()
    p1 = P.add([{"type": "bar", "name": "peer wait caused", "x": [f"rank {r}" for r, _ in rows], "y": [round(w / 1e6, 3) for _, w in rows],
                 "marker": {"color": "#e45756"}}], "Peer wait each rank caused by starting collectives last",
               x="rank", y="peer wait caused (ms)")
    t1 = table(con, """SELECT comm, step, seq, op, last_rank, last_by_ns, total_wait_ns FROM stragglers ORDER BY total_wait_ns DESC""",
               hint=P.hint("stragglers"), caption="Collectives with the most peer wait", half=True,
               headers=["communicator", "step", "seq", "collective", "last rank", "last by (ms)", "total peer wait (ms)"],
               ms_cols=("last_by_ns", "total_wait_ns"))
    rows = con.execute("SELECT rank, cause, sum(total_ns) FROM idle_gaps_summary WHERE step IS NOT NULL GROUP BY rank, cause").fetchall()
    causes = [c for c in CAUSE_COLORS if any(r[1] == c for r in rows)]
    lk = {(r[0], r[1]): r[2] for r in rows}
    p2 = P.add(bars(rows, lambda r: f"rank {r[0]}", causes, CAUSE_COLORS, lambda r, s: lk.get((r[0], s))),
               "GPU idle time by cause, all steps", x="rank", y="GPU idle (ms)")
    t2 = table(con, """SELECT rank, step, dur_ns, cause, host_activity, next_op FROM idle_gaps WHERE step IS NOT NULL
                        ORDER BY dur_ns DESC""", hint=P.hint("idle-gaps"), caption="Longest idle gaps", half=True,
               headers=["rank", "step", "idle (ms)", "cause", "host was doing", "GPU op that ended it"], ms_cols=("dur_ns",))
    return Section("waits", "Stragglers, collective waits and idle gaps",
                            [p1, p2, t1, t2])


def _launch(con, P: Plots) -> Section:
    """Launch overhead, syncs, kernels."""
    t1 = table(con, """SELECT rank, step, launches, launch_exposed_ns, launch_exposed_pct, launch_bound FROM launch_bound_steps
                       ORDER BY launch_exposed_pct DESC NULLS LAST""", hint=P.hint("launch-bound-steps"),
               caption="Steps by GPU idle time spent waiting for launches", half=True,
               headers=["rank", "step", "launches", "GPU idle while launching (ms)", "% of window", "launch-bound"],
               ms_cols=("launch_exposed_ns",))
    t2 = table(con, """SELECT rank, name, count, mean_api_ns, mean_queue_ns, total_exposed_ns, total_gpu_ns, launch_bound
                       FROM launch_overhead_summary ORDER BY total_exposed_ns DESC""", hint=P.hint("launch-overhead-summary"),
               caption="Launch overhead per kernel",
               headers=["rank", "kernel", "launches", "mean launch call (ms)", "mean queued behind earlier work (ms)",
                        "GPU idle while issuing (ms)", "kernel time (ms)", "launch-bound"],
               ms_cols=("mean_api_ns", "mean_queue_ns", "total_exposed_ns", "total_gpu_ns"))
    n2 = Note("A kernel is launch-bound when the GPU sat idle longer while it was being issued than the kernel "
              "ran (GPU idle while issuing > kernel time). Queueing behind earlier work (a running NCCL kernel, "
              "say) is waiting, not launch cost.")
    t3 = table(con, """SELECT rank, step, name, reason, blocked_ns, gpu_op FROM sync ORDER BY blocked_ns DESC""", hint=P.hint("sync"),
               caption="Blocking host calls", half=True,
               headers=["rank", "step", "call", "why it blocks", "host blocked (ms)", "GPU op"], ms_cols=("blocked_ns",))
    rows = con.execute("""SELECT name, sum(total_ns) t FROM kernels GROUP BY name ORDER BY t DESC LIMIT 10""").fetchall()
    short = shortened(n for n, _ in rows)
    p1 = P.add([{"type": "bar", "orientation": "h", "name": "total", "y": [label(n, 48, short) for n, _ in rows][::-1],
                 "x": [round(t / 1e6, 3) for _, t in rows][::-1], "marker": {"color": "#4c78a8"},
                 "customdata": [label(n, 400) for n, _ in rows][::-1], "hovertemplate": "%{customdata}: %{x} ms<extra></extra>"}],
               "Top kernels, all ranks", x="total GPU time (ms)", y="kernel")
    # the share in percent, as every other share on the page (a fraction beside percents read as 100x less)
    t4 = table(con, """SELECT rank, name, category, count, total_ns, mean_ns, round(100 * busy_share, 1) AS busy_pct
                       FROM kernels ORDER BY total_ns DESC, rank""",
               hint=P.hint("kernels"), caption="Top kernels",
               headers=["rank", "kernel", "category", "count", "total (ms)", "mean (ms)", "share of busy (%)"], ms_cols=("total_ns", "mean_ns"))
    return Section("launch", "Launch overhead, host syncs and top kernels", [
        t1, t3, t2, n2, p1, t4])


def _inputs(con, P: Plots) -> Section:
    """Inputs."""
    t1 = table(con, """SELECT rank, source_path, source_format, profiler_version, rank_source, hostname, device_name,
                              clock_offset_ns, clock_spread_ns FROM traces ORDER BY rank""",
               headers=["rank", "file", "format", "profiler", "rank from", "host", "device", "clock offset (ms)", "clock spread (ms)"],
               ms_cols=("clock_offset_ns", "clock_spread_ns"), cap=None, folded="The files read, one per rank")
    n = con.execute("SELECT count(*) FROM (SELECT unnest(warnings) FROM traces)").fetchone()[0]
    t2 = table(con, """SELECT rank, unnest(warnings) AS warning FROM traces WHERE len(warnings) > 0 ORDER BY rank""",
               hint="traceflow sql " + P.db + " \"select rank, unnest(warnings) from traces\"", folded=f"Warnings from the readers ({n})")
    # the clock decisions beside the readers' warnings: "Warnings from ingest: none" under a clock
    # warning read as if ingest had nothing to say
    n = con.execute("SELECT count(*) FROM traces WHERE clock_note IS NOT NULL").fetchone()[0]
    t3 = table(con, """SELECT rank, clock_note FROM traces WHERE clock_note IS NOT NULL ORDER BY rank""",
               headers=["rank", "clock alignment (docs/clock-alignment.md)"], folded=f"Clock alignment ({n})", cap=None)
    return Section("inputs", "Inputs", [t1, t2, t3])


def render(**values) -> str:
    """page.html.j2 with autoescape; `specs` (JSON, already \\u-escaped) and Plotly's own code go in as they are."""
    import jinja2
    import plotly.offline
    from markupsafe import Markup
    env = jinja2.Environment(loader=jinja2.PackageLoader(__package__, "."), autoescape=True,
                             trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined)
    values["specs"] = Markup(values["specs"])
    values["plotly"] = Markup(plotly.offline.get_plotlyjs().replace("</script", "<\\/script"))
    return env.get_template("page.html.j2").render(**values)


def write_report(job: JobView, output: str = "report.html", force: bool = False) -> str:
    return write_page(output, [job.path], lambda: build(job), force)


def write_page(output: str, inputs: list, build_page, force: bool = False) -> str:
    """One page of traceflow's (the report, a diff, a scaling study) written as any output of ours:
    checked before the work, then atomically."""
    check_output(output, "report", inputs=inputs, force=force)
    page = build_page()
    with atomic_output(output, "report", inputs=inputs, force=force) as tmp:
        tmp.write_text(page, encoding="utf-8")
    return output
