"""What a person sees on a terminal: tables sized to its width, the progress line, and the
one-line summaries; --format json/csv bypass all of it and keep raw values.

Size: the table is most of it (columns chosen by the pack's priority, headers folded, names
shortened, numbers as the query gave them); splitting it would scatter one layout over files.
"""
from __future__ import annotations

import json
import re
import sys
from contextlib import contextmanager

import click

from .text import decimal_text, is_identifier, is_name_column, is_percent, is_share, printable, short_names

READS = frozenset({"critical_path", "steps", "traces"})  # the tables its SQL reads (tests/test_layers.py)


def say(text, err: bool = False):
    """click.echo for anything that may hold text from a trace: control characters escaped, per line."""
    click.echo("\n".join(printable(line) for line in str(text).split("\n")), err=err)


def say_line(text, err: bool = False):
    """click.echo of one line that may hold text from a trace (a warning, a verdict's paragraph): its
    newlines escaped too, as every control character. A kernel name holding `\ntraceflow: error: ...`
    printed a forged line of traceflow's own shape in the warnings and the verdict."""
    click.echo(printable(text), err=err)


class Progress:
    """The progress line on a terminal (stderr): files read, then each phase by name, so that it
    never sits at "4/4 files" through the analyses, the report and the Perfetto trace.
    Called with a path when a file is read; .phase(name) when a phase starts. `check` runs first
    at each of these points (the command's: raise a Ctrl-C that an extension swallowed)."""

    def __init__(self, total: int, check=None):
        self.check = check or (lambda: None)
        self.prog = None
        if sys.stderr.isatty():
            from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
            # files read out of how many, when there are files to read: the report and the Perfetto
            # trace of `postmortem` (a display of their own) showed "0/0 files"
            counts = [BarColumn(), TextColumn("{task.completed}/{task.total} files")] if total else []
            self.prog = Progress(SpinnerColumn(), TextColumn("[bold]{task.description}"), *counts, TimeElapsedColumn(),
                                 transient=True)
            self.task = self.prog.add_task("reading", total=total)

    def __enter__(self):
        if self.prog:
            self.prog.start()
        return self

    def __exit__(self, *exc):
        self._stop()

    def _stop(self):
        """rich's stop() only asks its redraw thread to end: wait until it has (no thread left
        behind to run during a fork, or during the interpreter's exit)."""
        if self.prog:
            redraw = getattr(self.prog.live, "_refresh_thread", None)
            self.prog.stop()
            if redraw is not None:
                redraw.join(timeout=1)

    @contextmanager
    def paused(self):
        """The display's redraw thread stopped for a moment: reader workers are forked only from a
        process that runs no other thread (readers.pool.start_method)."""
        self._stop()
        try:
            yield
        finally:
            if self.prog:
                self.prog.start()

    def __call__(self, path=None):
        self.check()
        if self.prog and isinstance(path, str):
            self.prog.advance(self.task)

    def phase(self, name: str):
        self.check()
        if self.prog:
            self.prog.update(self.task, description=printable(name))
            self.prog.refresh()  # shown now, however short the phase


def cell(v, col: str, instant: bool, duration: bool) -> str:
    import datetime
    if v is None:
        return ""
    if isinstance(v, bool):  # not Python's `True`
        return "yes" if v else "no"
    if instant and isinstance(v, int):
        return datetime.datetime.fromtimestamp(v / 1e9, datetime.UTC).strftime("%H:%M:%S.%f")
    if duration and isinstance(v, (int, float)):
        return f"{v / 1e6:,.3f}"
    if isinstance(v, float):
        return decimal_text(v)
    if isinstance(v, int) and not isinstance(v, bool) and abs(v) >= 10000 and not is_identifier(col):
        return f"{v:,}"
    return printable(v)


def print_rows(rel, fmt: str, limit: int | None, empty: str = "no rows", pack: str | None = None):
    """A relation's rows as a table (a pack's: its `shows first` columns kept first), JSON or CSV."""
    cols = [d[0] for d in rel.description]
    rows = _fetch_rows(rel)
    if fmt == "json":
        click.echo(json.dumps([dict(zip(cols, r)) for r in rows], default=str, indent=1))
    elif fmt == "csv":
        print_csv(cols, rows)
    elif not rows:
        say(empty)
    else:
        from .packs import shows_first
        _table_up_to(cols, rows, limit, shows_first(pack) if pack else ())


def _fetch_rows(rel) -> list:
    """The rows as tuples. DuckDB builds TIMESTAMPTZ values (at any depth: a list or struct of them too)
    with pytz, which is no dependency of ours (`select to_timestamp(0)` ended in an internal error).
    Through Arrow, at a fixed UTC offset: a named zone needs zoneinfo or pytz and the zone database
    (TZ='' ended in an internal error; where pytz is installed the conversion printed a UserWarning
    before the table), a fixed offset needs neither. The values are the same instants, shown in UTC."""
    if not any("TIMESTAMP WITH TIME ZONE" in str(d[1]) for d in rel.description):
        return rel.fetchall()
    import warnings
    table = rel.to_arrow_table() if hasattr(rel, "to_arrow_table") else rel.fetch_arrow_table()
    table = table.cast(_at_utc(table.schema))
    with warnings.catch_warnings():  # a conversion's notice is never part of the output
        warnings.simplefilter("ignore")
        return [tuple(r.values()) for r in table.to_pylist()]


def _at_utc(t):
    """An Arrow type (or schema) with every zoned timestamp in it at the fixed offset +00:00."""
    import pyarrow as pa
    if isinstance(t, pa.Schema):
        return pa.schema([f.with_type(_at_utc(f.type)) for f in t])
    if pa.types.is_timestamp(t) and t.tz is not None:
        return pa.timestamp(t.unit, tz="+00:00")
    if pa.types.is_large_list(t):
        return pa.large_list(t.value_field.with_type(_at_utc(t.value_type)))
    if pa.types.is_fixed_size_list(t):
        return pa.list_(t.value_field.with_type(_at_utc(t.value_type)), t.list_size)
    if pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(_at_utc(t.value_type)))
    if pa.types.is_struct(t):
        return pa.struct([t.field(i).with_type(_at_utc(t.field(i).type)) for i in range(t.num_fields)])
    if pa.types.is_map(t):
        return pa.map_(t.key_field.with_type(_at_utc(t.key_type)), t.item_field.with_type(_at_utc(t.item_type)))
    return t


# A text cell a spreadsheet would run as a formula (`=cmd|' /C calc'!A0`, from a kernel or file name
# in a trace someone sent): written with a leading ' (OWASP's guard), which spreadsheets show as text.
# Numbers are numbers, never guarded.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(v):
    return "'" + v if isinstance(v, str) and v.startswith(_FORMULA_START) else v


def print_csv(cols: list[str], rows: list):
    import csv
    w = csv.writer(sys.stdout)
    tty = sys.stdout.isatty()  # to a file the values stay as they are; to a terminal, never raw (header too: a PIVOT names columns by values)

    def cell(v):
        v = csv_cell(v)
        return printable(v) if tty and isinstance(v, str) else v
    w.writerow([cell(c) for c in cols])
    w.writerows([cell(v) for v in r] for r in rows)


def print_frame(df, limit: int | None):
    """A polars DataFrame as a terminal table (at most `limit` rows, with a line for the rest)."""
    if df.is_empty():
        say("  (no rows)")
        return
    _table_up_to(list(df.columns), df.rows(), limit)


def _table_up_to(cols: list[str], rows: list, limit: int | None, first=()):
    print_table(cols, rows if limit is None else rows[:limit], first)
    if limit is not None and len(rows) > limit:
        say(f"({len(rows) - limit:,} more rows; --limit 0 shows all, --format csv/json for machines)")


def print_table(cols: list[str], rows: list[tuple], first: list[str] | tuple = ()):
    """For people: durations in ms, instants as UTC time of day (JSON and CSV keep integer ns);
    numbers right-aligned and never folded or cut; kernel names shortened; as many columns as the
    terminal's width holds (`first`: the columns kept first, from the pack's `shows first` line),
    and a line naming the ones left out."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text
    # instants (ns since epoch): a trace's start/end, a Flight Recorder entry's created/started/completed
    instant = [c.endswith(("start_ns", "end_ns", "created_ns", "started_ns", "completed_ns")) for c in cols]
    duration = [(c.endswith("_ns") or c == "ns") and not i for c, i in zip(cols, instant)]
    # percents in one format (`0.0`, `0.5`, `95.6`, not `0` beside `0.47`); a share (a fraction of 1)
    # shown as a percent, as the percent columns beside it are
    pct = [is_percent(c) for c in cols]
    share = [is_share(c) for c in cols]
    units = [" (UTC)" if i else " (ms)" if d else " (%)" if f else "" for i, d, f in zip(instant, duration, share)]
    names = ["time" if c == "ns" else c[:-3] if u and not f else c for c, u, f in zip(cols, units, share)]
    rows = [tuple(100 * v if share[k] and isinstance(v, (int, float)) and not isinstance(v, bool) else v
                  for k, v in enumerate(r)) for r in rows]
    # kernel names short, and distinct within a column (text.short_names); the full name: --format json / csv
    short = [short_names(v for r in rows if isinstance(v := r[k], str)) if is_name_column(c) else None
             for k, c in enumerate(cols)]
    # a column of whole doubles (a count computed as a double) prints as integers: `4`, not `4.00`
    whole = [not (pct[k] or share[k]) and all(not isinstance(v, float) or v.is_integer() for v in col)
             for k, col in enumerate(zip(*rows))]
    cells = [[f"{v:,.1f}" if (pct[k] or share[k]) and isinstance(v, (int, float)) and not isinstance(v, bool) else
              cell(m.get(v, v) if (m := short[k]) is not None and isinstance(v, str) else
                   int(v) if whole[k] and isinstance(v, float) and abs(v) < 1e15 else v, c, i, d)
              for k, (v, c, i, d) in enumerate(zip(r, cols, instant, duration))] for r in rows]
    numeric = [i or all(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) for v in col)
               for i, col in zip(instant, zip(*rows))]
    data = [max(len(r[k]) for r in cells) for k in range(len(cols))]
    width = output_width()
    # At a given width a header folds at its underscores, its unit on a line of its own, down to its
    # values' width (`exposed_comm_pct` over `12.5` is three short lines, not 16 characters).
    heads = [_fold(n, u, data[k]) if width else n + u for k, (n, u) in enumerate(zip(names, units))]
    natural = [max(data[k], *(len(x) for x in h.split("\n"))) for k, h in enumerate(heads)]
    # A text column may shrink to 16 characters (then ends in …); a number or a time never shrinks.
    least = [n if numeric[k] else min(n, 16) for k, n in enumerate(natural)]
    keep, size = _fit(cols, natural, least, numeric, first, width)
    t = Table(show_lines=False, header_style="bold")
    for k in keep:
        t.add_column(Text("\n".join(printable(x) for x in heads[k].split("\n"))), justify="right" if numeric[k] else "left", no_wrap=True,
                     overflow="ellipsis", width=size[k])
    for row in cells:  # Text, not str: a '[red]' in a kernel name is not markup
        t.add_row(*(Text(row[k]) for k in keep))
    # Through a pipe with no COLUMNS there is no width to follow: wide enough that nothing is cut.
    Console(width=width or sum(natural) + 3 * len(cols) + 1).print(t)
    if len(keep) < len(cols):
        left = ", ".join(cols[k] for k in range(len(cols)) if k not in keep)
        say(f"(not shown at this width: {left}; a wider terminal, COLUMNS=... or --format csv/json shows them)")


def _fit(cols, natural, least, numeric, first, width) -> tuple[list[int], dict[int, int]]:
    """The columns kept at `width` (those in `first` first, then in table order, while they fit at
    their `least`) and each one's width: numbers their own, text columns share what is left."""
    keep = list(range(len(cols)))
    if width:
        order = [cols.index(c) for c in first if c in cols]
        order += [k for k in range(len(cols)) if k not in order]
        used, chosen = 1, set()
        for k in order:
            if used + least[k] + 3 <= width:
                chosen.add(k)
                used += least[k] + 3
        keep = sorted(chosen)
    # Every column gets its width here (rich would squeeze some to nothing).
    size = {k: natural[k] for k in keep}
    if width:
        text = [k for k in keep if not numeric[k]]
        spare = width - 1 - sum(3 + (size[k] if numeric[k] else least[k]) for k in keep)
        for k in sorted(text, key=lambda k: natural[k]):  # narrow ones first take all they need
            size[k] = least[k] + min(natural[k] - least[k], spare // max(1, len(text)))
            spare -= size[k] - least[k]
            text.remove(k)
    return keep, size


def output_width() -> int:
    """The width tables fit: COLUMNS when set (a pipe or a script can ask for a width), else the
    terminal's, else 0 (a pipe: nothing cut)."""
    import os
    import shutil
    try:
        columns = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        columns = 0
    if columns > 0:
        return columns
    return shutil.get_terminal_size((0, 0)).columns if sys.stdout.isatty() else 0


def _fold(name: str, unit: str, room: int) -> str:
    """A header in lines no wider than `room` where it can be: its `_`-joined words packed greedily,
    its unit on a line of its own when the whole does not fit."""
    if len(name) + len(unit) <= room or not re.fullmatch(r"\w+", name):
        return name + unit  # an expression (`count_star()`, `sum(x)`) is not folded at its `_`
    words = name.split("_")
    lines = [words[0]]
    for w in words[1:]:
        if len(lines[-1]) + 1 + len(w) <= room:
            lines[-1] += "_" + w
        else:
            lines.append(w)
    lines = [line if k == len(lines) - 1 else line + "_" for k, line in enumerate(lines)]
    return "\n".join(lines + ([unit.strip()] if unit else []))


def plural(n: int, word: str) -> str:
    return f"{n:,} {word}" if n == 1 else f"{n:,} {word}s"


def span(values: list[int]) -> str:
    if not values:
        return "none"
    lo, hi = min(values), max(values)
    return f"{lo}" if lo == hi else f"{lo}–{hi}"


def empty_message(con, rank, step) -> str:
    """What the database holds, so an empty answer says why: `no rows for --rank 7 (ranks 0–3, steps 3–5)`."""
    ranks = [r[0] for r in con.execute("SELECT DISTINCT rank FROM traces").fetchall()]
    steps = [r[0] for r in con.execute("SELECT DISTINCT step FROM steps").fetchall()]
    asked = " ".join(f"--{k} {v}" for k, v in (("rank", rank), ("step", step)) if v is not None)
    return f"no rows{' for ' + asked if asked else ''} (ranks {span(ranks)}, steps {span(steps)})"


def critical_path_lines(con, step=None) -> list[str]:
    """One line per step: the biggest segments in words, for the terminal."""
    where = "" if step is None else f"WHERE step = {int(step)}"
    out = []
    found = con.execute(f"""
        WITH s AS (SELECT step, sum(end_ns - start_ns) AS wall FROM critical_path {where} GROUP BY step),
             k AS (SELECT step, rank, kind, coalesce(any_value(name), '') AS name, sum(end_ns - start_ns) AS d
                   FROM critical_path {where} GROUP BY step, rank, kind, name)
        SELECT s.step, s.wall, list(struct_pack(rank := k.rank, kind := k.kind, name := k.name, d := k.d) ORDER BY k.d DESC)[1:3]
        FROM s JOIN k USING (step) GROUP BY s.step, s.wall ORDER BY s.step""").fetchall()
    short = short_names(p["name"] for _, _, top in found for p in top)
    for st, wall, top in found:
        parts = [f"{p['d'] / 1e6:.1f} ms ({100 * p['d'] / wall:.0f}%) {p['kind']} on rank {p['rank']}"
                 + (f" ({_clip(short.get(p['name'], p['name']))})" if p['name'] else "") for p in top]
        out.append(f"step {st}: {wall / 1e6:.1f} ms; " + ", ".join(parts))
    return out


def _clip(name: str, n: int = 48) -> str:
    return name if len(name) <= n else name[: n - 1] + "…"
