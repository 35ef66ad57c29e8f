"""The regression gate for CI: `traceflow diff BASE NEW --fail-on-regression PCT` exits EXIT_REGRESSION
when the new run's step time grew by more than PCT percent of the base's AND by more than the runs'
own step-to-step noise (queries/diff/steps.sql), and names the parts of the critical path that grew;
`--summary junit|markdown FILE` writes the decision for a CI page (docs/compare-runs.md).

Both conditions, because either alone misleads: a threshold alone alarms on a run whose steps swing
by more than it (the bundled job's step windows span 506-543 ms, 7 %); the noise alone alarms on a
small, real but irrelevant change of a quiet run.
"""
from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .outputs import atomic_output

if TYPE_CHECKING:
    from .views import DiffView as Diff

# 0 no regression, 1 internal error, 2 usage, 3 bad input (docs/bad-input.md): 4 is the gate's alone.
EXIT_REGRESSION = 4
MARK = "traceflow regression gate"


@dataclass
class Gate:
    threshold_pct: float
    base_ns: float | None       # the median over the matched steps of the base run's step window (job row)
    new_ns: float | None
    delta_ns: float | None      # the median over the matched step pairs of new - base
    noise_ns: float | None      # the runs' own step-to-step variation (diff_steps' job wall noise)
    grew: list[tuple[str, int, float]] = field(default_factory=list)  # (kind, rank, ns per step) that grew most
    pairs: int = 0

    @property
    def delta_pct(self) -> float | None:
        return None if not self.base_ns or self.delta_ns is None else 100 * self.delta_ns / self.base_ns

    @property
    def regressed(self) -> bool:
        return (self.delta_ns is not None and self.delta_pct is not None and self.delta_pct > self.threshold_pct
                and self.delta_ns > (self.noise_ns or 0))

    @property
    def exit_code(self) -> int:
        return EXIT_REGRESSION if self.regressed else 0

    def sentence(self) -> str:
        if self.delta_ns is None or self.base_ns is None or self.new_ns is None:
            return "regression gate: no step both runs analysed; nothing to compare (passes)"
        figures = (f"step time {self.base_ns / 1e6:.1f} → {self.new_ns / 1e6:.1f} ms ({self.delta_ns / 1e6:+.1f} ms, "
                   f"{self.delta_pct:+.1f}%; threshold {self.threshold_pct:g}%, noise ±{(self.noise_ns or 0) / 1e6:.1f} ms; "
                   f"median of {self.pairs} matched step{'s' if self.pairs != 1 else ''})")
        if not self.regressed:
            why = ("within the runs' own step-to-step variation" if self.delta_ns <= (self.noise_ns or 0)
                   else "below the threshold")
            return f"regression gate: passed: {figures}, {why}"
        parts = ", ".join(f"{kind.replace('_', ' ')} on rank {rank} {ns / 1e6:+.1f} ms" for kind, rank, ns in self.grew)
        return f"regression gate: REGRESSION: {figures}" + (f"; the critical path grew in {parts} (per step)" if parts else "")


def decide(d: Diff, threshold_pct: float) -> Gate:
    """The gate over a diff's matched steps: medians over the pairs, so one odd step does not decide."""
    import statistics
    steps, path = d.tables["steps"], d.tables["critical_path"]
    wall = steps.filter(steps["rank"].is_null() & (steps["metric"] == "wall"))
    if wall.is_empty():
        return Gate(threshold_pct, None, None, None, None)
    a, b = wall["a_ns"].to_list(), wall["b_ns"].to_list()
    delta = statistics.median(y - x for x, y in zip(a, b))
    grew: list[tuple[str, int, float]] = []
    if not path.is_empty():
        import polars as pl
        per = path.group_by(["kind", "rank"]).agg(pl.col("delta_ns").sum().alias("ns"))
        n = len(wall)
        grew = [(r["kind"], r["rank"], r["ns"] / n) for r in per.sort("ns", descending=True).iter_rows(named=True)
                if r["ns"] > 0][:3]
    noise = [v for v in wall["noise_ns"].to_list() if v is not None]  # one figure for the job's wall, on every pair
    return Gate(threshold_pct, statistics.median(a), statistics.median(b), delta, max(noise, default=0.0), grew, len(wall))


def write_summary(gate: Gate, d: Diff, fmt: str, path: str, force: bool = False) -> str:
    """The decision as a JUnit XML report (one test case, failed on a regression) or Markdown."""
    text = _junit(gate, d) if fmt == "junit" else _markdown(gate, d)
    with atomic_output(path, "summary", inputs=[d.a, d.b], force=force) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return path


def _junit(gate: Gate, d: Diff) -> str:
    e = html.escape
    failure = (f'<failure message="{e(gate.sentence())}" type="regression">{e(gate.sentence())}</failure>'
               if gate.regressed else "")
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<!-- {MARK} -->\n'
            f'<testsuites><testsuite name="{MARK}" tests="1" failures="{int(gate.regressed)}" errors="0">'
            f'<testcase classname="traceflow.diff" name="{e(d.names[1])} against {e(d.names[0])}">{failure}'
            f'<system-out>{e(chr(10).join([gate.sentence(), *d.sentences]))}</system-out></testcase>'
            f'</testsuite></testsuites>\n')


def _markdown(gate: Gate, d: Diff) -> str:
    def cell(v) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")
    head = "REGRESSION" if gate.regressed else "passed"
    lines = [f"<!-- {MARK} -->", f"### {head}: {cell(d.names[1])} against {cell(d.names[0])}", "", cell(gate.sentence()), ""]
    if gate.base_ns is not None and gate.new_ns is not None and gate.delta_ns is not None:
        lines += ["| | base | new | change |", "|---|---:|---:|---:|",
                  f"| step time (ms) | {gate.base_ns / 1e6:.1f} | {gate.new_ns / 1e6:.1f} | {gate.delta_ns / 1e6:+.1f} |"]
        lines += [f"| {cell(kind.replace('_', ' '))}, rank {rank} (ms per step) | | | {ns / 1e6:+.1f} |" for kind, rank, ns in gate.grew]
        lines.append("")
    lines += [f"- {cell(s)}" for s in d.sentences]
    return "\n".join(lines) + "\n"
