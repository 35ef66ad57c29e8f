"""`traceflow diff -o diff.html`: the diff as one self-contained page, in the report's style."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..text import printable
from .blocks import KIND_COLORS, Heading, Items, Note, Plots, Section, rows_table

if TYPE_CHECKING:
    from ..views import DiffView as Diff


def _frame(df, cols, headers, ms_cols=(), limit=None):
    df = df.select(cols) if limit is None else df.select(cols).head(limit)
    return rows_table(list(cols), df.rows(), headers, ms_cols)


def build(d: Diff) -> str:
    from .html import render
    P = Plots()
    sections = [Section("runs", "What differs between the runs", [
        *( [Items([printable(w) for w in d.warnings], "verdict")] if d.warnings else []),
        rows_table(["what", "a", "b", "same"], [tuple(r.values()) for r in d.comparability], ["", "run a", "run b", "same"]),
        Note(f"run a: {printable(d.a)}; run b: {printable(d.b)}; matched steps: "
             + ", ".join(f"{x}" if x == y else f"{x} → {y}" for x, y in d.pairs))])]
    path = d.tables["critical_path"]
    blocks: list = [Items([printable(s) for s in d.sentences], "verdict")]
    if not path.is_empty():
        import polars as pl
        agg = path.group_by("kind").agg(pl.col("delta_ns").sum()).sort("kind")
        blocks.append(P.add([{"type": "bar", "name": "change", "x": agg["kind"].to_list(),
                              "y": [round(v / 1e6, 3) for v in agg["delta_ns"].to_list()],
                              "marker": {"color": [KIND_COLORS.get(k, "#888") for k in agg["kind"].to_list()]}}],
                             "Change in critical-path time by kind, all matched steps", x="kind",
                             y="change, b − a (ms)", barmode="group"))
        blocks.append(_frame(path.filter(path["delta_ns"] != 0), ["step_a", "step_b", "kind", "rank", "a_ns", "b_ns", "delta_ns"],
                             ["step a", "step b", "kind", "rank", "a (ms)", "b (ms)", "change (ms)"],
                             ("a_ns", "b_ns", "delta_ns"), limit=20))
    sections.append(Section("why", "Why the step time changed, along the critical path", blocks))
    steps = d.tables["steps"]
    sections.append(Section("steps", "Step breakdown", [
        Note("Rank blank: the job (its wall is the step's window across ranks, other rows the mean over ranks). "
             "A change no larger than the runs' own step-to-step variation (noise) is marked."),
        _frame(steps, ["step_a", "step_b", "rank", "metric", "a_ns", "b_ns", "delta_ns", "delta_pct", "noise_ns", "noise"],
               ["step a", "step b", "rank", "metric", "a (ms)", "b (ms)", "change (ms)", "change %", "noise (ms)", "noise"],
               ("a_ns", "b_ns", "delta_ns", "noise_ns"))]))
    k = d.tables["kernels"]
    kcols = ["name", "status", "a_ns", "b_ns", "delta_ns", "a_count", "b_count", "a_mean_ns", "b_mean_ns", "noise"]
    kheads = ["kernel", "status", "a (ms)", "b (ms)", "change (ms)", "a count", "b count", "a mean (ms)", "b mean (ms)", "noise"]
    kms = ("a_ns", "b_ns", "delta_ns", "a_mean_ns", "b_mean_ns")
    oc = d.tables["op_classes"]
    sections.append(Section("kernels", "Kernels, per matched step", [
        Heading("By the class of op that launched them"),
        _frame(oc, ["op_class", "a_ns", "b_ns", "delta_ns", "kernels"], ["op class", "a (ms)", "b (ms)", "change (ms)", "kernel names"],
               ("a_ns", "b_ns", "delta_ns")),
        Heading("Slower or new"), _frame(k.filter(k["delta_ns"] > 0), kcols, kheads, kms, limit=15),
        Heading("Faster or vanished"), _frame(k.filter(k["delta_ns"] < 0), kcols, kheads, kms, limit=15)]))
    c = d.tables["collectives"]
    sections.append(Section("collectives", "Collectives by kind and size, per matched step", [
        _frame(c, ["op", "bytes", "a_count", "b_count", "a_transfer_ns", "b_transfer_ns", "a_wait_ns", "b_wait_ns", "delta_wait_ns",
                   "a_exposed_ns", "b_exposed_ns", "delta_exposed_ns"],
               ["collective", "bytes", "a count", "b count", "a transfer (ms)", "b transfer (ms)", "a wait (ms)", "b wait (ms)",
                "change in wait (ms)", "a exposed (ms)", "b exposed (ms)", "change in exposed (ms)"],
               ("a_transfer_ns", "b_transfer_ns", "a_wait_ns", "b_wait_ns", "delta_wait_ns", "a_exposed_ns", "b_exposed_ns",
                "delta_exposed_ns"), limit=20)]))
    i = d.tables["idle"]
    sections.append(Section("idle", "GPU idle by cause", [
        _frame(i, ["step_a", "step_b", "rank", "cause", "a_ns", "b_ns", "delta_ns", "a_gaps", "b_gaps"],
               ["step a", "step b", "rank", "cause", "a (ms)", "b (ms)", "change (ms)", "a gaps", "b gaps"],
               ("a_ns", "b_ns", "delta_ns"), limit=30)]))
    return render(title=printable("traceflow diff: " + " vs ".join(d.names)),
                  sections=sections, specs=P.script_json())


def write(d: Diff, output: str, force: bool = False) -> str:
    from .html import write_page
    return write_page(output, [d.a, d.b], lambda: build(d), force)
