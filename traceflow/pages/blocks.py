"""The page's building blocks: plain values (Heading, Note, Items, Table, Plot) that page.html.j2
lays out, and the helpers that fill them from SQL. Trace text is made printable here; the
template escapes HTML; plot labels lose the markup Plotly would read."""
from __future__ import annotations

import json
from contextvars import ContextVar
from dataclasses import dataclass, field

from ..text import decimal_text, is_identifier, is_name_column, is_percent, printable, short_names

KIND_COLORS = {"gpu_compute": "#4c78a8", "gpu_comm": "#f58518", "gpu_memory": "#54a24b", "peer_wait": "#e45756",
               "launch": "#b279a2", "host_cpu": "#9d755d", "host_sync": "#ff9da6", "idle": "#bab0ac"}
STATE_COLORS = {"compute": "#4c78a8", "exposed comm": "#f58518", "exposed memory": "#54a24b", "idle": "#bab0ac"}
CAUSE_COLORS = {"host_late": "#e45756", "dependency": "#72b7b2", "launch_latency": "#b279a2"}


def label(s, n=60, short: dict | None = None) -> str:
    """A trace string made safe for a Plotly label (Plotly reads a few HTML tags in labels); `short`:
    the short names to show instead (shortened)."""
    s = "" if s is None else printable(short.get(s, s) if short else s)
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
    title: str = ""  # on hover: the full name of a shortened one
    name: bool = False  # a kernel or op name: one line, cut with an ellipsis past its width (the full name on hover)


@dataclass
class Table:
    headers: list[str]
    rows: list[list[Cell]]
    kind: str = "table"
    more: int = 0  # rows left out (the page shows the first few)
    hint: str = ""  # the command that lists them all
    folded: str = ""  # shown closed (<details>) under this summary
    caption: str = ""  # its heading
    half: bool = False  # half the width: beside a chart or another half table on a wide screen


# The names the page being built shows (every kernel of the job): shortened together, so that a kernel
# has one short name on the whole page and two kernels never share one (html.build sets it).
PAGE_NAMES: ContextVar[tuple[str, ...]] = ContextVar("PAGE_NAMES", default=())


def shortened(names) -> dict[str, str]:
    """{full: short} for `names` shortened with the page's names (text.short_names)."""
    return short_names([*PAGE_NAMES.get(), *(n for n in names if isinstance(n, str))])


# Rows a table shows before "N more": the page of a 4-rank job reads in five screens (tests/test_report.py).
CAP = 5


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
    if isinstance(v, (int, float)) and is_percent(col):  # one format: `0.0` beside `0.5`, not `0` beside `0.47`
        return f"{v:,.1f}"
    if isinstance(v, float):
        return decimal_text(v)
    if isinstance(v, int):
        return str(v) if is_identifier(col) else f"{v:,}"
    if isinstance(v, (list, tuple)):
        return printable(", ".join(map(str, v)))
    return printable(v)


def table(con, sql, params=None, headers=None, ms_cols=(), cap: int | None = CAP, hint: str = "", folded: str = "",
          caption: str = "", half: bool = False) -> Table:
    """A Table of a query's first `cap` rows, with the count of the rest and `hint`, the command
    that lists them all (None: every row)."""
    rel = con.execute(sql if cap is None else f"SELECT * FROM ({sql}) LIMIT {int(cap) + 1}", params or [])
    cols = [d[0] for d in rel.description]
    rows = rel.fetchall()
    more = 0
    if cap is not None and len(rows) > cap:
        rows = rows[:cap]
        more = con.execute(f"SELECT count(*) FROM ({sql})", params or []).fetchone()[0] - cap
    t = rows_table(cols, rows, headers, ms_cols)
    t.more, t.hint, t.folded, t.caption, t.half = more, hint, folded, caption, half
    return t


def rows_table(cols: list[str], rows: list, headers=None, ms_cols=()) -> Table:
    """A Table from column names and rows (ns columns named in ms_cols shown in ms; kernel and op
    names short and distinct, text.short_names, the full name on hover)."""
    short = {k: shortened(r[k] for r in rows) for k, c in enumerate(cols) if is_name_column(c)}

    def one(k, c, v) -> Cell:
        if c in ms_cols and v is not None:
            return Cell(f"{v / 1e6:,.3f}", True)
        if k in short and isinstance(v, str):
            return Cell(printable(short[k].get(v, v)), title=printable(v), name=True)
        return Cell(_cell(v, c), isinstance(v, (int, float)) and not isinstance(v, bool))
    cells = [[one(k, c, v) for k, (c, v) in enumerate(zip(cols, r))] for r in rows]
    return Table([printable(h) for h in (headers or cols)], cells)


class Plots:
    """The page's charts; `db`: the database's name, for the commands a table's "N more" names."""

    def __init__(self, db: str = "job.duckdb"):
        self.specs: list[dict] = []
        self.db = db

    def hint(self, pack: str, *args) -> str:
        """The command that lists all of a pack's rows: `traceflow query job.duckdb idle-gaps --step 4`."""
        return " ".join(["traceflow query", self.db, pack, *map(str, args)])

    def add(self, data, title: str, x: str, y: str, **layout) -> Plot:
        """A chart: its title and both axis titles (with units) are required. Plotly.js 2+ reads a title
        only as {"text": ...}; the plain-string form that older versions took is silently ignored."""
        pid = f"plot{len(self.specs)}"
        # the legend on the right, clear of the x axis's title
        # The title at the left. Plotly's tool bar is off (page.html.j2: displayModeBar false): across the
        # top it covered a title's end, upright it covered the legend; dragging still zooms, a double
        # click resets.
        base = {"margin": {"l": 60, "r": 10, "t": 36, "b": 42}, "height": 270, "barmode": "stack",
                "font": {"size": 12}, "title": {"text": title, "x": 0.01, "xref": "container", "xanchor": "left"}}
        for axis, text in (("xaxis", x), ("yaxis", y)):
            given = layout.pop(axis, {})
            base[axis] = {**given, "title": {**given.get("title", {}), "text": text}, "automargin": True}
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
