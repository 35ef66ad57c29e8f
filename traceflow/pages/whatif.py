"""The report's "what if" section: the three fixes worth the most, predicted by replaying the
slowest step, the median step and the step of the largest abnormal host time with a fixed set of
scenarios (traceflow/whatif.py, docs/whatif.md)."""
from __future__ import annotations

from .blocks import Note, Plots, Section, rows_table


def wrap(text: str, width: int) -> str:
    """`text` in lines of about `width` characters, joined by Plotly's <br> (words never cut)."""
    import textwrap
    return "<br>".join(textwrap.wrap(text, width, break_long_words=False)) or text


def _is_bound(fix: dict) -> bool:
    """A yardstick (faster GPU work, no stragglers): a bound on what the step could gain, not a change a
    user can make (claims._yardsticks, the verdict's rule: shown apart, never as a fix)."""
    return bool(fix.get("reference")) or fix["scenario"].startswith("no stragglers")


def section(f: dict, P: Plots) -> Section:
    """From the findings (verdict.findings computed the fixes once for the verdict and this page). The
    fixes are charted; the bounds are listed apart, and a bound the verdict withholds (bound_withheld:
    the replay cannot be trusted there) is shown withheld with the verdict's reason, never its gain
    (deepseek train.json: the chart showed "compute x0.5: 2.5 ms" beside the verdict's "No compute x0.5
    bound")."""
    title = "What if: the fixes worth the most"
    fixes = f.get("fixes", [])
    if not fixes:
        return Section("whatif", title, [Note("No prediction: no step could be replayed within 2 % of its measured time.")])
    withheld = {r["evidence"]: r["sentence"] for r in f.get("findings", []) if r["kind"] == "bound_withheld"}

    def row(x: dict) -> tuple:
        return (x["scenario"], x["gain_ns"], x["gain_pct"],
                ", ".join(f"step {r['step']}: {r['measured_ns'] / 1e6:.1f} → {r['predicted_ns'] / 1e6:.1f} ms" for r in x["steps"]),
                max(r["replay_error_pct"] for r in x["steps"]))
    rows = [row(x) for x in fixes if not _is_bound(x)]
    bounds = [row(x) for x in fixes if _is_bound(x) and x["scenario"] not in withheld]
    blocks: list = []
    if rows:
        # The fixes named as the y axis's labels, wrapped (Plotly wraps nothing itself): named on their bars
        # they were clipped where a bar was short ("no host stall on r"); the gain on the bar.
        labels = [wrap(r[0], 40) for r in rows][::-1]
        blocks.append(P.add([{"type": "bar", "orientation": "h", "name": "predicted gain", "y": labels,
                              "x": [round(r[1] / 1e6, 3) for r in rows][::-1], "marker": {"color": "#54a24b"},
                              "text": [f"{r[1] / 1e6:.1f} ms" for r in rows][::-1], "textposition": "auto", "textangle": 0,
                              "hovertext": [r[0] for r in rows][::-1], "hoverinfo": "text+x"}],
                            "Predicted gain on the step where each fix gains most", x="step time saved (ms)", y="fix",
                            yaxis={"showticklabels": True, "title": {"standoff": 8}},
                            height=max(270, 60 + 16 * sum(2 + lab.count("<br>") for lab in labels))))
        blocks.append(rows_table(["fix", "gain", "gain_pct", "steps", "err"], rows,
                                 ["fix", "gain on its best step (ms)", "gain %", "predicted", "replay error %"], ("gain",)))
    else:
        blocks.append(Note("No fix of the fixed set gains on a replayed step."))
    if bounds:
        blocks.append(Note("Bounds, not fixes: what the step would gain were its GPU work faster or no rank late; "
                           "no change a user can make, never advice."))
        blocks.append(rows_table(["bound", "gain", "gain_pct", "steps", "err"], bounds,
                                 ["bound", "gain on its best step (ms)", "gain %", "predicted", "replay error %"], ("gain",)))
    blocks += [Note(why) for why in withheld.values()]
    blocks.append(
        Note("Each step's dependency graph across ranks (streams, launches, syncs, cross-stream waits, collectives) "
             "is replayed with the fix applied; the replay of the unedited graph reproduces the measured step "
             "within the error shown. Each fix removes exactly its own cause of host time (docs/host-time.md). "
             "Scenarios: the largest abnormal host time removed (its rank, step and cause named), no launch overhead, "
             "no allocator calls, no host syncs, communication overlapped; no stragglers and compute twice as fast are "
             "yardsticks, listed apart as bounds (withheld, with why, where the verdict withholds them). "
             "A fix is worth its gain on the step where it gains most. `traceflow whatif` runs any other."))
    return Section("whatif", title, blocks)
