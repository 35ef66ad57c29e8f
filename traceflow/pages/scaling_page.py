"""`traceflow scaling -o scaling.html`: the scaling study as one self-contained page."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..text import printable
from .blocks import Items, Note, Plots, Section, rows_table

if TYPE_CHECKING:
    from ..views import ScalingView as Scaling


def build(s: Scaling) -> str:
    from .html import render
    P = Plots()
    t = s.table
    ranks = [str(r) for r in t["ranks"].to_list()]
    chart = P.add([
        {"type": "bar", "name": "compute", "x": ranks, "y": [v / 1e6 for v in t["compute_ns"].to_list()], "marker": {"color": "#4c78a8"}},
        {"type": "bar", "name": "exposed comm", "x": ranks, "y": [v / 1e6 for v in t["exposed_comm_ns"].to_list()], "marker": {"color": "#f58518"}},
        {"type": "bar", "name": "idle", "x": ranks, "y": [v / 1e6 for v in t["idle_ns"].to_list()], "marker": {"color": "#bab0ac"}},
        {"type": "scatter", "mode": "lines+markers", "name": "step time", "x": ranks, "y": [v / 1e6 for v in t["step_ns"].to_list()],
         "line": {"color": "#222"}}],
        "Step time and where it went, by rank count", x="ranks", y="time per step (ms)", xaxis={"type": "category"})
    eff = P.add([{"type": "scatter", "mode": "lines+markers", "name": "parallel efficiency", "x": ranks,
                  "y": t["efficiency_pct"].to_list()}],
                "Parallel efficiency", x="ranks", y="efficiency (%)", xaxis={"type": "category"}, barmode="group")
    cols = ["ranks", "path", "step_ns", "speedup", "efficiency_pct", "karp_flatt", "exposed_comm_pct", "wait_pct"]
    heads = ["ranks", "run", "step (ms)", "speedup", "efficiency %", "serial fraction (Karp–Flatt)", "exposed comm %",
             "waits for peers %"]
    sections = [Section("scaling", f"{s.mode.capitalize()} scaling", [
        *([Items([printable(w) for w in s.warnings], "verdict")] if s.warnings else []),
        Items([printable(x) for x in s.sentences], "verdict"), chart, eff,
        rows_table(cols, t.select(cols).rows(), heads, ("step_ns",)),
        Note("Base: the run with the fewest ranks. Karp–Flatt e = (1/ψ − 1/n) / (1 − 1/n), ψ the (scaled) speedup, "
             "n the rank ratio: a constant e is a serial part; a growing e is overhead that grows with ranks.")])]
    return render(title="traceflow scaling", sections=sections, specs=P.script_json())


def write(s: Scaling, output: str, force: bool = False) -> str:
    from .html import write_page
    return write_page(output, s.table["path"].to_list(), lambda: build(s), force)
