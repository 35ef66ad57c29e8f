"""The page's building blocks: plain values (Heading, Note, Items, Table, Plot) that page.html.j2
lays out, and the helpers that fill them from SQL. Trace text is made printable here; the
template escapes HTML; plot labels lose the markup Plotly would read."""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from ..text import is_identifier, printable

KIND_COLORS = {"gpu_compute": "#4c78a8", "gpu_comm": "#f58518", "gpu_memory": "#54a24b", "peer_wait": "#e45756",
               "launch": "#b279a2", "host_cpu": "#9d755d", "host_sync": "#ff9da6", "idle": "#bab0ac"}
STATE_COLORS = {"compute": "#4c78a8", "exposed comm": "#f58518", "exposed memory": "#54a24b", "idle": "#bab0ac"}
CAUSE_COLORS = {"host_late": "#e45756", "dependency": "#72b7b2", "launch_latency": "#b279a2"}


def label(s, n=60) -> str:
    """A trace string made safe for a Plotly label (Plotly reads a few HTML tags in labels)."""
    s = "" if s is None else printable(s)
    s = s.replace("<", "‹").replace(">", "›").replace("&", "＆")
    return s if len(s) <= n else s[: n - 1] + "…"


# What the template lays out. A block is one of: Heading, Note, Items, Table, Plot.
@dataclass
class Heading:
    text: str
    kind: str = "heading"


@dataclass
class Note:
    text: str
    kind: str = "note"


@dataclass
class Items:
    items: list[str]
    cls: str
    kind: str = "items"


@dataclass
class Cell:
    text: str
    num: bool = False  # right-aligned, tabular figures


@dataclass
class Table:
    headers: list[str]
    rows: list[list[Cell]]
    kind: str = "table"


@dataclass
class Plot:
    id: str
    kind: str = "plot"


@dataclass
class Section:
    id: str
    title: str
    blocks: list = field(default_factory=list)


def _cell(v, col: str = "") -> str:
    """A value of column `col` as the page shows it; trace text with control characters shown as
    escapes (the template escapes HTML)."""
    if v is None:
        return ""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:,.2f}"
    if isinstance(v, int):
        return str(v) if is_identifier(col) else f"{v:,}"
    if isinstance(v, (list, tuple)):
        return printable(", ".join(map(str, v)))
    return printable(v)


def table(con, sql, params=None, headers=None, ms_cols=()) -> Table:
    rel = con.execute(sql, params or [])
    return rows_table([d[0] for d in rel.description], rel.fetchall(), headers, ms_cols)


def rows_table(cols: list[str], rows: list, headers=None, ms_cols=()) -> Table:
    """A Table from column names and rows (ns columns named in ms_cols shown in ms)."""
    cells = [[Cell(f"{v / 1e6:,.3f}", True) if c in ms_cols and v is not None
             else Cell(_cell(v, c), isinstance(v, (int, float)) and not isinstance(v, bool)) for c, v in zip(cols, r)]
            for r in rows]
    return Table([printable(h) for h in (headers or cols)], cells)


class Plots:
    def __init__(self):
        self.specs = []

    def add(self, data, title: str, x: str, y: str, **layout) -> Plot:
        """A chart: its title and both axis titles (with units) are required. Plotly.js 2+ reads a title
        only as {"text": ...}; the plain-string form that older versions took is silently ignored."""
        pid = f"plot{len(self.specs)}"
        base = {"margin": {"l": 70, "r": 20, "t": 50, "b": 60}, "height": 360, "barmode": "stack",
                "legend": {"orientation": "h", "y": -0.25}, "font": {"size": 12}, "title": {"text": title}}
        for axis, text in (("xaxis", x), ("yaxis", y)):
            base[axis] = {**layout.pop(axis, {}), "title": {"text": text}, "automargin": True}
        base.update(layout)
        self.specs.append({"id": pid, "data": data, "layout": base})
        return Plot(pid)

    def script_json(self) -> str:
        text = json.dumps(self.specs, default=str)
        return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def bars(rows, x_of, series, colors, value_of):
    xs = sorted({x_of(r) for r in rows}, key=lambda x: (len(str(x)), str(x)))
    data = []
    for s in series:
        vals = {x_of(r): value_of(r, s) for r in rows}
        data.append({"type": "bar", "name": s, "x": [str(x) for x in xs], "y": [round((vals.get(x) or 0) / 1e6, 3) for x in xs],
                     "marker": {"color": colors.get(s)}})
    return data
