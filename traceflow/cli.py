"""The `traceflow` command: a thin layer over the Python API."""
from __future__ import annotations

import os
import signal
import sys


def _interrupted_while_starting(signum, frame):
    os.write(2, b"traceflow: interrupted\n")
    os._exit(130)


# Ctrl-C while the command is still importing (nothing to clean up yet): one line, exit 130, never an
# import traceback. Only when this runs as the command; _Guard.main hands SIGINT back to Python.
_AS_COMMAND = __name__ == "__main__" or os.path.basename(sys.argv[0]) == "traceflow"
if _AS_COMMAND:
    signal.signal(signal.SIGINT, _interrupted_while_starting)

import json
import tempfile

import click

from .errors import InputError, UsageError, one_line
from .outputs import disk_problem, os_problem
from .text import printable, short_name

EXIT_INPUT = 3


def _say(text, err: bool = False):
    """click.echo for anything that may hold text from a trace: control characters escaped, per line."""
    click.echo("\n".join(printable(line) for line in str(text).split("\n")), err=err)


def _fail(message, code: int = EXIT_INPUT):
    click.echo(f"traceflow: error: {printable(one_line(str(message), 500))}", err=True)
    sys.exit(code)


def _interrupted():
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _say("traceflow: interrupted", err=True)
    sys.exit(130)  # SIGINT ignored from here: a late one in interpreter shutdown showed as a death by SIGINT (-2)


def _is_interrupt(e: BaseException) -> bool:
    """DuckDB turns Ctrl-C during a query into its own exception ("Query interrupted")."""
    return type(e).__name__ == "InterruptException" or "Query interrupted" in str(e)


class _Guard(click.Group):
    """Turns every error into one line and an exit code, never a traceback (TRACEFLOW_DEBUG=1 shows it)."""

    def main(self, args=None, prog_name=None, **extra):
        # click's own handling would print "Aborted!" (exit 1) for a Ctrl-C outside a command.
        signal.signal(signal.SIGINT, signal.default_int_handler)  # from here, KeyboardInterrupt cleans up
        try:
            rv = super().main(args, prog_name, standalone_mode=False, **extra)
        except (KeyboardInterrupt, click.exceptions.Abort):
            _interrupted()
        except click.ClickException as e:
            e.show()
            sys.exit(e.exit_code)
        except BrokenPipeError:  # `traceflow query ... | head`: the reader left; so do we, quietly
            sys.stdout = open(os.devnull, "w")
            sys.exit(141)
        # The work is done: a Ctrl-C from here on (interpreter shutdown) must not turn a finished run
        # into a death by SIGINT (seen as exit -2 when it landed just after the command returned).
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        sys.exit(rv if isinstance(rv, int) else 0)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except (InputError, UsageError) as e:
            _fail(e, e.exit_code)
        except KeyboardInterrupt:
            _interrupted()
        except BrokenPipeError:
            raise
        except OSError as e:  # an output path or the scratch folder: the input side raises InputError
            where = e.filename or tempfile.gettempdir()
            _fail(f"{where}: {os_problem(e)}")
        except (click.exceptions.Exit, click.exceptions.ClickException, click.exceptions.Abort):
            raise
        except Exception as e:
            if _is_interrupt(e):
                _interrupted()
            if (problem := disk_problem(e)) is not None:
                _fail(f"{tempfile.gettempdir()}: {problem} (while writing; set TMPDIR to a folder with room)")
            if os.environ.get("TRACEFLOW_DEBUG"):
                raise
            _fail(f"internal error ({type(e).__name__}: {one_line(str(e), 200)}); "
                  "please report it with TRACEFLOW_DEBUG=1 set for the details", 1)


@click.group(cls=_Guard, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="traceflow")
def main():
    """Why is this multi-rank GPU job slow?

    Ingest per-rank profiles (Nsight Systems SQLite / .nsys-rep, PyTorch profiler JSON) into one
    DuckDB database, then ask: idle gaps and their causes, launch overhead, exposed NCCL time,
    stragglers, the critical path across ranks.

    \b
    Examples:
      traceflow ingest runs/rank*.sqlite -o job.duckdb
      traceflow query job.duckdb --list
      traceflow query job.duckdb idle-gaps --rank 3 --step 4
      traceflow sql job.duckdb "select rank, kind, count(*) from gpu_ops group by all"
      traceflow postmortem runs/rank*.sqlite -o postmortem/
    """


class _Progress:
    """The progress line on a terminal (stderr): files read, then each phase by name, so that it
    never sits at "4/4 files" through the analyses, the report and the Perfetto trace.
    Called with a path when a file is read; .phase(name) when a phase starts."""

    def __init__(self, total: int):
        self.prog = None
        if sys.stderr.isatty():
            from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
            self.prog = Progress(SpinnerColumn(), TextColumn("[bold]{task.description}"), BarColumn(),
                                 TextColumn("{task.completed}/{task.total} files"), TimeElapsedColumn(), transient=True)
            self.task = self.prog.add_task("reading", total=total)

    def __enter__(self):
        if self.prog:
            self.prog.start()
        return self

    def __exit__(self, *exc):
        if self.prog:
            self.prog.stop()

    def __call__(self, path=None):
        if self.prog and isinstance(path, str):
            self.prog.advance(self.task)

    def phase(self, name: str):
        if self.prog:
            self.prog.update(self.task, description=printable(name))
            self.prog.refresh()  # shown now, however short the phase


def _ingest_options(f):
    f = click.option("--append", is_flag=True, help="Add these files to an existing database (ranks already there are kept; identical files are skipped).")(f)
    f = click.option("--rank-pattern", metavar="REGEX", help=r"Take each file's rank from its name with this regex (first group), e.g. 'node\d+-gpu(\d+)'.")(f)
    f = click.option("--align", type=click.Choice(["off", "auto", "collectives"]), default="auto", show_default=True,
                     help="Clock alignment between hosts: auto applies estimated offsets larger than the residual spread.")(f)
    f = click.option("--nsys", metavar="PATH", help="nsys executable, for .nsys-rep inputs (default: nsys on PATH).")(f)
    f = click.option("--step-pattern", metavar="REGEX", help="Regex with one group (the step number) for step ranges; default matches 'step N', 'iteration N', 'ProfilerStep#N'.")(f)
    f = click.option("-j", "--jobs", type=click.IntRange(1, 1024), help="Reader processes (default: one per core).")(f)
    f = click.option("--max-inflate", metavar="SIZE", help="Refuse a .gz/.xz input that inflates past this: '100x' (times "
                     "its size, the default, at least 256MB) or a size such as '4GB'. Also TRACEFLOW_MAX_INFLATE.")(f)
    f = click.option("--force", is_flag=True, help="Replace an existing output file even if traceflow did not write it "
                     "(never an input, never a device or folder).")(f)
    return f


def _do_ingest(files, output, append, rank_pattern, align, nsys, step_pattern, jobs, max_inflate, force):
    from .pipeline import expand, ingest
    paths = expand(files)
    with _Progress(len(paths)) as progress:
        res = ingest(paths, output, append=append, rank_pattern=rank_pattern, align=align, nsys=nsys,
                     step_pattern=step_pattern, jobs=jobs, progress=progress, force=force, max_inflate=max_inflate)
    for w in res.warnings:
        _say(f"traceflow: warning: {w}", err=True)
    for s in res.skipped:
        _say(f"traceflow: note: {s}", err=True)
    return res


@main.command()
@click.argument("files", nargs=-1, required=True, type=click.Path())
@click.option("-o", "--output", default="traceflow.duckdb", show_default=True, help="Database to write (replaced atomically).")
@_ingest_options
def ingest(files, output, append, rank_pattern, align, nsys, step_pattern, jobs, max_inflate, force):
    """Read rank profiles into one DuckDB database.

    FILES are Nsight Systems SQLite exports (rank*.sqlite, also .gz/.xz), .nsys-rep reports
    (exported with nsys when it is installed) and PyTorch profiler traces (.json, .json.gz),
    mixed freely; a folder stands for the trace files in it. Formats are detected from content.

    \b
    Examples:
      traceflow ingest runs/rank*.sqlite -o job.duckdb
      traceflow ingest traces/rank-*.pt.trace.json.gz -o job.duckdb
      traceflow ingest new/rank4.sqlite -o job.duckdb --append
      traceflow ingest node*/gpu*.sqlite --rank-pattern 'gpu(\\d+)'
    """
    with _do_ingest(files, output, append, rank_pattern, align, nsys, step_pattern, jobs, max_inflate, force) as job:
        rows = job.rank_summary()
    _say(f"wrote {job.path}: {_plural(len(rows), 'rank')}")
    for rank, fmt, n_gpu, n_steps, off in rows:
        _say(f"  rank {rank:>3}  {fmt:<12} {n_gpu:>9,} GPU ops  {_plural(n_steps, 'step'):>10}  clock offset {off / 1e6:+.3f} ms")


def _cell(v, col: str, instant: bool, duration: bool) -> str:
    import datetime
    if v is None:
        return ""
    if instant and isinstance(v, int):
        return datetime.datetime.fromtimestamp(v / 1e9, datetime.UTC).strftime("%H:%M:%S.%f")
    if duration and isinstance(v, (int, float)):
        return f"{v / 1e6:,.3f}"
    if isinstance(v, float):
        return f"{v:,.2f}"
    if isinstance(v, int) and not isinstance(v, bool) and abs(v) >= 10000:
        return f"{v:,}"
    if isinstance(v, str) and col.endswith(_NAME_COLUMNS):
        v = short_name(v)  # the full name: --format json / csv
    return printable(v)


# Columns holding kernel or call names: shown short on a terminal (text.short_name).
_NAME_COLUMNS = ("name", "_op", "kernel", "what")


def _print_rows(rel, fmt: str, limit: int | None, empty: str = "no rows"):
    cols = [d[0] for d in rel.description]
    rows = rel.fetchall()
    if fmt == "json":
        click.echo(json.dumps([dict(zip(cols, r)) for r in rows], default=str, indent=1))
    elif fmt == "csv":
        import csv
        w = csv.writer(sys.stdout)
        w.writerow(cols)
        if sys.stdout.isatty():  # to a file the values stay as they are; to a terminal, never raw
            rows = [[printable(v) if isinstance(v, str) else v for v in r] for r in rows]
        w.writerows(rows)
    elif not rows:
        _say(empty)
    else:
        _print_table(cols, rows if limit is None else rows[:limit])
        if limit is not None and len(rows) > limit:
            _say(f"({len(rows) - limit:,} more rows; --limit 0 shows all, --format csv/json for machines)")


def _print_table(cols: list[str], rows: list[tuple]):
    """For people: durations in ms, instants as UTC time of day (JSON and CSV keep integer ns);
    numbers right-aligned and never folded or cut; kernel names shortened; as many columns as the
    terminal's width holds, and a line naming the ones left out."""
    import shutil

    from rich.console import Console
    from rich.table import Table
    from rich.text import Text
    instant = [c.endswith(("start_ns", "end_ns")) for c in cols]
    duration = [c.endswith("_ns") and not i for c, i in zip(cols, instant)]
    heads = [f"{c[:-3]} (UTC)" if i else f"{c[:-3]} (ms)" if d else c for c, i, d in zip(cols, instant, duration)]
    cells = [[_cell(v, c, i, d) for v, c, i, d in zip(r, cols, instant, duration)] for r in rows]
    numeric = [i or all(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) for v in col)
               for i, col in zip(instant, zip(*rows))]
    natural = [max(len(h), *(len(r[k]) for r in cells)) for k, h in enumerate(heads)]
    # A text column may shrink to 16 characters (then ends in …); a number or a time never shrinks.
    least = [n if numeric[k] else min(n, 16) for k, n in enumerate(natural)]
    width = shutil.get_terminal_size((0, 0)).columns if sys.stdout.isatty() else 0
    keep = list(range(len(cols)))
    if width:
        used, keep = 1, []
        for k in range(len(cols)):
            if used + least[k] + 3 <= width:
                keep.append(k)
                used += least[k] + 3
    # Every column gets its width here (rich would squeeze some to nothing): numbers their own,
    # text columns share what is left, each at least its `least`.
    size = {k: natural[k] for k in keep}
    if width:
        text = [k for k in keep if not numeric[k]]
        spare = width - 1 - sum(3 + (size[k] if numeric[k] else least[k]) for k in keep)
        for k in sorted(text, key=lambda k: natural[k]):  # narrow ones first take all they need
            size[k] = least[k] + min(natural[k] - least[k], spare // max(1, len(text)))
            spare -= size[k] - least[k]
            text.remove(k)
    t = Table(show_lines=False, header_style="bold")
    for k in keep:
        t.add_column(Text(printable(heads[k])), justify="right" if numeric[k] else "left", no_wrap=True,
                     overflow="ellipsis", width=size[k])
    for row in cells:  # Text, not str: a '[red]' in a kernel name is not markup
        t.add_row(*(Text(row[k]) for k in keep))
    # Through a pipe there is no width to follow: wide enough that nothing is cut.
    Console(width=width or sum(natural) + 3 * len(cols) + 1).print(t)
    if len(keep) < len(cols):
        left = ", ".join(cols[k] for k in range(len(cols)) if k not in keep)
        _say(f"(not shown at this terminal's width: {left}; a wider terminal or --format csv/json shows them)")


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}" if n == 1 else f"{n:,} {word}s"


def _span(values: list[int]) -> str:
    if not values:
        return "none"
    lo, hi = min(values), max(values)
    return f"{lo}" if lo == hi else f"{lo}–{hi}"


def _empty_message(con, rank, step) -> str:
    """What the database holds, so an empty answer says why: `no rows for --rank 7 (ranks 0–3, steps 3–5)`."""
    ranks = [r[0] for r in con.execute("SELECT DISTINCT rank FROM traces").fetchall()]
    try:
        steps = [r[0] for r in con.execute("SELECT DISTINCT step FROM steps").fetchall()]
    except Exception:  # noqa: BLE001 - an older database without steps
        steps = []
    asked = " ".join(f"--{k} {v}" for k, v in (("rank", rank), ("step", step)) if v is not None)
    return f"no rows{' for ' + asked if asked else ''} (ranks {_span(ranks)}, steps {_span(steps)})"


@main.command()
@click.argument("database", type=click.Path())
@click.argument("name", required=False)
@click.option("--list", "list_", is_flag=True, help="List the packs with a line on each.")
@click.option("--rank", type=int, help="Only this rank.")
@click.option("--step", type=int, help="Only this step.")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "csv"]), default="table", show_default=True)
@click.option("--limit", type=int, default=50, show_default=True, help="Rows shown in table format (0: all).")
def query(database, name, list_, rank, step, fmt, limit):
    """Run a query pack (its result is a table in the database too).

    \b
    Examples:
      traceflow query job.duckdb --list
      traceflow query job.duckdb steps
      traceflow query job.duckdb idle-gaps --rank 3 --step 4
      traceflow query job.duckdb stragglers --format json
      traceflow query job.duckdb critical-path --step 4
    """
    from . import packs
    if list_ or not name:
        for p in packs.listing():
            _say(f"{p.name:<26} {p.description}")
        return
    from .job import open as open_job
    with open_job(database) as job:
        rel = job.relation(name, rank, step)
        if name == "critical-path" and fmt == "table" and sys.stdout.isatty():
            from .critical_path import summary_lines
            for line in summary_lines(job.con, step):
                _say(line)
        _print_rows(rel, fmt, None if limit == 0 or fmt != "table" else limit, empty=_empty_message(job.con, rank, step))
        if name == "steps" and fmt == "table":
            for line in _coverage_lines(job, rank):
                _say(line)


def _coverage_lines(job, rank) -> list[str]:
    """Under the steps table: how much of each rank's GPU time the step rows cover."""
    try:
        rows = job.query("step-coverage", rank).sort("rank").iter_rows(named=True)
    except UsageError:  # a database from before step_coverage existed
        return []
    return [f"coverage: rank {r['rank']}: {r['coverage_pct'] or 0:.1f}% of its GPU time is inside steps "
            f"({r['before_ns'] / 1e6:.1f} ms before the first step's window, {r['after_ns'] / 1e6:.1f} ms after the last)"
            for r in rows]


@main.command("sql")
@click.argument("database", type=click.Path())
@click.argument("text")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "csv"]), default="table", show_default=True)
@click.option("--limit", type=int, default=100, show_default=True, help="Rows shown in table format (0: all).")
def sql_cmd(database, text, fmt, limit):
    """Run any SQL against the database (read-only).

    \b
    Examples:
      traceflow sql job.duckdb "select rank, kind, count(*) from gpu_ops group by all order by all"
      traceflow sql job.duckdb "select * from idle_gaps where dur_ns > 1e6" --format csv
    """
    import duckdb

    from .job import open as open_job
    with open_job(database) as job:
        try:
            rel = job.con.execute(text)  # DB-API: any statement, rows fetched as plain tuples
        except duckdb.Error as e:
            raise UsageError(f"SQL error: {one_line(e)}") from None
        if rel.description is not None:
            _print_rows(rel, fmt, None if limit == 0 or fmt != "table" else limit)


@main.command()
@click.argument("database", type=click.Path())
@click.option("-o", "--output", default="report.html", show_default=True)
@click.option("--force", is_flag=True, help="Replace the output even if traceflow did not write it.")
def report(database, output, force):
    """Write the post-mortem HTML page (one self-contained file, opens offline).

    \b
    Example:
      traceflow report job.duckdb -o report.html
    """
    from .job import open as open_job
    with open_job(database) as job:
        _say(f"wrote {job.write_report(output, force=force)}")


@main.command()
@click.argument("database", type=click.Path())
@click.option("-o", "--output", default="job.perfetto-trace", show_default=True)
@click.option("--rank", "ranks", type=int, multiple=True, help="Keep only these ranks (repeatable).")
@click.option("--step", "steps", type=int, multiple=True, help="Keep only these steps (repeatable).")
@click.option("--force", is_flag=True, help="Replace the output even if traceflow did not write it.")
def annotate(database, output, ranks, steps, force):
    """Write a Perfetto trace of the job with traceflow's findings as extra tracks.

    Open it at https://ui.perfetto.dev. For big jobs keep it small with --rank / --step.

    \b
    Examples:
      traceflow annotate job.duckdb -o job.perfetto-trace
      traceflow annotate job.duckdb --step 4 --rank 0 --rank 3
    """
    from .job import open as open_job
    with open_job(database) as job:
        _say(f"wrote {job.write_perfetto(output, ranks=list(ranks) or None, steps=list(steps) or None, force=force)}")


@main.command()
@click.argument("files", nargs=-1, required=True, type=click.Path())
@click.option("-o", "--output", "outdir", default="postmortem", show_default=True, help="Folder for job.duckdb, report.html, job.perfetto-trace.")
@_ingest_options
def postmortem(files, outdir, append, rank_pattern, align, nsys, step_pattern, jobs, max_inflate, force):
    """Ingest, report and annotate in one go, then print the verdict. For a job's epilogue.

    \b
    Example:
      traceflow postmortem runs/rank*.sqlite -o postmortem/
    """
    from .pipeline import expand
    from .postmortem import finish, prepare
    db = prepare(outdir, expand(files), force=force)
    with _do_ingest(files, db, append, rank_pattern, align, nsys, step_pattern, jobs, max_inflate, force) as job, \
            _Progress(0) as progress:
        out = finish(job, outdir, force=force, progress=progress)
    _say(out["verdict"])
    _say(f"report:   {out['report']}\nperfetto: {out['trace']}\ndatabase: {db}")


@main.command()
@click.argument("name")
@click.argument("files", nargs=-1, required=True, type=click.Path())
@click.option("-o", "--output", "database", default="traceflow.duckdb", show_default=True, help="Database to add the recipe's tables to.")
@click.option("--nsys", metavar="PATH", help="nsys executable (default: nsys on PATH).")
def recipe(name, files, database, nsys):
    """Run an Nsight Systems recipe and load its Parquet outputs as recipe_<name>_<table>.

    Needs the nsys command line. Puts NVIDIA's numbers next to traceflow's in SQL.

    \b
    Examples:
      traceflow recipe cuda_gpu_kern_sum runs/rank*.nsys-rep -o job.duckdb
      traceflow recipe nccl_gpu_overlap_trace runs/rank*.nsys-rep -o job.duckdb
    """
    from .recipes import load_recipe
    tables = load_recipe(name, list(files), database, nsys=nsys)
    for t, n in tables:
        _say(f"  {t}: {n:,} rows")
    _say(f"wrote {len(tables)} tables into {database}")


if __name__ == "__main__":
    main()
