"""The `traceflow` command: a thin layer over the Python API.

Size: one click command per verb with its help text and examples (the help is most of it); tables
and progress are terminal.py.
"""
from __future__ import annotations

import os
import sys

from . import interrupts

# Ctrl-C or SIGTERM while the command is still importing: one line, never an import traceback. Only
# when this runs as the command (`traceflow`, `python -m traceflow[.cli]`); _Guard.main installs the
# handlers that clean up.
interrupts.starting(__name__ == "__main__" or os.path.basename(sys.argv[0]) == "traceflow"
                    or sys.argv[0].endswith(os.path.join("traceflow", "__main__.py")))

import json
import tempfile

import click

from .errors import InputError, MachineLimit, UsageError, one_line, out_of_memory
from .options import Options
from .outputs import disk_problem, os_problem
from .terminal import Progress, critical_path_lines, empty_message, plural, print_csv, print_frame, print_rows, print_table, say, say_line
from .text import printable

EXIT_INPUT = 3
# Paths are not checked by click: an unreadable input is bad input (one line naming it, exit 3), not a
# usage error with click's three-line message (exit 2).
_PATH = click.Path(readable=False)


def _fail(message, code: int = EXIT_INPUT):
    click.echo(f"traceflow: error: {printable(one_line(str(message), 500))}", err=True)
    sys.exit(code)


class _Guard(click.Group):
    """Turns every error into one line and an exit code, never a traceback (TRACEFLOW_DEBUG=1 shows it)."""

    def main(self, args=None, prog_name=None, **extra):
        # click's own handling would print "Aborted!" (exit 1) for a Ctrl-C outside a command.
        interrupts.install()  # from here, Ctrl-C and SIGTERM raise KeyboardInterrupt, which cleans up
        try:
            rv = super().main(args, prog_name, standalone_mode=False, **extra)
        except (KeyboardInterrupt, click.exceptions.Abort):
            interrupts.exit_interrupted()
        except click.ClickException as e:
            e.show()
            sys.exit(e.exit_code)
        except BrokenPipeError:  # `traceflow query ... | head`: the reader left; so do we, quietly
            sys.stdout = open(os.devnull, "w")
            sys.exit(141)
        interrupts.ignore()  # the work is done
        sys.exit(rv if isinstance(rv, int) else 0)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except (InputError, UsageError, MachineLimit) as e:
            _fail(e, e.exit_code)
        except KeyboardInterrupt:
            interrupts.exit_interrupted()
        except BrokenPipeError:
            raise
        except OSError as e:  # an output path or the scratch folder: the input side raises InputError
            where = e.filename or tempfile.gettempdir()
            _fail(f"{where}: {os_problem(e)}")
        except (click.exceptions.Exit, click.exceptions.ClickException, click.exceptions.Abort):
            raise
        except Exception as e:
            if interrupts.is_interrupt(e):
                interrupts.exit_interrupted()
            if type(e).__name__ == "PermissionException":  # a database whose view reads a file elsewhere (duck.lock_down)
                import re
                m = re.search(r'access (?:file|directory) "([^"]*)"', str(e))
                _fail(f"the database reaches for {m.group(1) if m else 'a file'} outside itself (a view over another "
                      "file): refused, traceflow reads only a database and its own shard folder")
            if (problem := disk_problem(e)) is not None:
                _fail(f"{tempfile.gettempdir()}: {problem} (while writing; set TMPDIR to a folder with room)")
            if out_of_memory(e):
                detail = ": ".join(filter(None, [type(e).__name__, one_line(str(e), 200)]))
                _fail(f"ran out of memory ({detail}){_memory_hint()}")
            if os.environ.get("TRACEFLOW_DEBUG"):
                raise
            _fail(f"internal error ({type(e).__name__}: {one_line(str(e), 200)}); "
                  "please report it with TRACEFLOW_DEBUG=1 set for the details", 1)


def _memory_hint() -> str:
    from .machine import address_space
    space = address_space()
    return (f"; the address-space limit (ulimit -v) is {space >> 20} MiB: raise it" if space is not None
            else "; free memory, or set TRACEFLOW_MEMORY_LIMIT lower")


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


def _ingest_options(f):
    f = click.option("--name", metavar="NAME", help="The job's name in titles (report, diff); default: its input folder, "
                     "or its first file. Kept in the database.")(f)
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
    # click lists the options last applied first: --peak-tflops, then the --peak-gbps that says "likewise"
    f = click.option("--peak-gbps", type=float, metavar="GBPS", help="The GPUs' peak memory bandwidth (GB/s), likewise.")(f)
    f = click.option("--peak-tflops", type=float, metavar="TFLOPS", help="The GPUs' dense peak (TFLOP/s) for the roofline "
                     "and MFU, for a device traceflow does not know (or to override its datasheet figure).")(f)
    f = click.option("--cluster", metavar="ADDRESS", help="Read and analyse each rank file as a Dask task: 'local:N' (N worker "
                     "processes here) or a scheduler, 'tcp://host:8786'. The tasks write Parquet shards into OUTPUT.parts-*/ "
                     "beside the database, which reads them in place: on storage the workers share, kept beside it. "
                     "Needs pip install 'traceflow[cluster]'.")(f)
    return f


def _options(**flags) -> Options:
    """The ingest flags as one Options, checked here, before any file is looked at (exit 2 or 3, one line)."""
    return Options(**flags)


def _said(warnings, skipped):
    """What the ingest had to say, on stderr."""
    for w in warnings:
        say_line(f"traceflow: warning: {w}", err=True)
    for s in skipped:
        say_line(f"traceflow: note: {s}", err=True)


@main.command()
@click.argument("files", nargs=-1, required=True, type=_PATH)
@click.option("-o", "--output", default="traceflow.duckdb", show_default=True, help="Database to write (replaced atomically).")
@_ingest_options
def ingest(files, output, **flags):
    """Read rank profiles into one DuckDB database.

    FILES are Nsight Systems SQLite exports (rank*.sqlite, also .gz/.xz), .nsys-rep reports
    (exported with nsys when it is installed) and PyTorch profiler traces (.json, .json.gz),
    mixed freely, and PyTorch Flight Recorder dumps (one per rank, alone or beside the traces:
    docs/hang-forensics.md); a folder stands for the trace files and dumps in it. Formats are
    detected from content. CUDA allocator snapshots (torch.cuda.memory._dump_snapshot, .pickle)
    join the trace of the rank in their file name (docs/memory.md).

    \b
    Examples:
      traceflow ingest runs/rank*.sqlite -o job.duckdb
      traceflow ingest traces/rank-*.pt.trace.json.gz -o job.duckdb
      traceflow ingest new/rank4.sqlite -o job.duckdb --append
      traceflow ingest traces/rank-*.json.gz snapshots/rank*_snapshot.pickle -o job.duckdb
      traceflow ingest node*/gpu*.sqlite --rank-pattern 'gpu(\\d+)'
      traceflow ingest /shared/runs/rank*.sqlite -o /shared/job.duckdb --cluster tcp://scheduler:8786
      traceflow ingest /tmp/nccl_trace_rank_* -o hang.duckdb      # Flight Recorder dumps: why it stopped
      traceflow ingest fr_dumps/ kineto/rank*.json -o hang.duckdb  # dumps beside the job's traces
    """
    from .job import ingest, input_files
    options = _options(**flags)
    paths = input_files(files)
    with Progress(len(paths), interrupts.raise_if_interrupted) as progress:
        job = ingest(paths, output, options, progress=progress)
    _said(job.warnings, job.skipped)
    with job:
        rows = job.rank_summary()
        dumps = job.dump_count()
    say(f"wrote {job.path}: {plural(len(rows), 'rank')}" + (f", {plural(dumps, 'Flight Recorder dump')}" if dumps else ""))
    for rank, fmt, n_gpu, n_steps, off in rows:
        say(f"  rank {rank:>3}  {fmt:<12} {n_gpu:>9,} GPU ops  {plural(n_steps, 'step'):>10}  clock offset {off / 1e6:+.3f} ms")


@main.command()
@click.argument("database", type=_PATH)
@click.argument("name", required=False)
@click.option("--list", "list_", is_flag=True, help="List the packs with a line on each.")
@click.option("--rank", type=int, help="Only this rank.")
@click.option("--step", type=int, help="Only this step.")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "csv"]), default="table", show_default=True)
@click.option("--limit", type=click.IntRange(min=0), default=50, show_default=True, help="Rows shown in table format (0: all).")
def query(database, name, list_, rank, step, fmt, limit):
    """Run a query pack (its result is a table in the database too).

    \b
    Examples:
      traceflow query job.duckdb --list
      traceflow query job.duckdb steps
      traceflow query job.duckdb idle-gaps --rank 3 --step 4
      traceflow query job.duckdb stragglers --format json
      traceflow query job.duckdb critical-path --step 4
      traceflow query job.duckdb memory --rank 1           (profile_memory=True: peaks per step)
      traceflow query job.duckdb memory-peak-allocations --rank 1 --step 2
      traceflow query job.duckdb memory-ranks
    """
    from .job import packs
    if list_ or not name:
        for p in packs():
            say(f"{p.name:<26} {p.description}")
        return
    from .job import open as open_job
    with open_job(database) as job:
        rel = job.relation(name, rank, step)
        hidden = None
        if name == "critical-path" and fmt == "table":
            rel, hidden = job.major_segments(rank, step)
        print_rows(rel, fmt, None if limit == 0 or fmt != "table" else limit, empty=empty_message(job.con, rank, step), pack=name)
        if fmt == "table" and (hint := job.why_empty(name)):
            say(hint)
        if hidden is not None:  # under the table, on a terminal or through a pipe alike (README)
            n, ns = hidden
            if n:
                say(f"{plural(n, 'segment')} shorter than {job.MINOR_SEGMENT_PCT}% of their step's path not shown "
                    f"({ns / 1e6:.1f} ms in all); --format csv or json lists every segment")
            for line in critical_path_lines(job.con, step):
                say(line)
        if name == "steps" and fmt == "table":
            for line in _coverage_lines(job, rank):
                say(line)


def _coverage_lines(job, rank) -> list[str]:
    """Under the steps table: how much of each rank's GPU time the step rows cover."""
    rows = job.query("step-coverage", rank).sort("rank").iter_rows(named=True)
    return [f"coverage: rank {r['rank']}: {r['coverage_pct'] or 0:.1f}% of its GPU time is inside steps "
            f"({r['before_ns'] / 1e6:.1f} ms before the first step's window, {r['after_ns'] / 1e6:.1f} ms after the last)"
            for r in rows]


@main.command("sql")
@click.argument("database", type=_PATH)
@click.argument("text")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "csv"]), default="table", show_default=True)
@click.option("--limit", type=click.IntRange(min=0), default=100, show_default=True, help="Rows shown in table format (0: all).")
def sql_cmd(database, text, fmt, limit):
    """Run any SQL against the database (read-only).

    \b
    Examples:
      traceflow sql job.duckdb "select rank, kind, count(*) from gpu_ops group by all order by all"
      traceflow sql job.duckdb "select * from idle_gaps where dur_ns > 1e6" --format csv
    """
    from .job import open as open_job
    if not text.strip(" \t\r\n;"):  # was an internal error (DuckDB runs nothing and returns None)
        raise UsageError("no SQL statement given; the second argument is the SQL to run (traceflow sql --help)")
    with open_job(database) as job:
        rel = job.execute(text)  # DB-API: any statement, rows fetched as plain tuples
        if rel is None:  # a text of comments only
            raise UsageError("no SQL statement in the text (comments only?)")
        if rel.description is not None:
            print_rows(rel, fmt, None if limit == 0 or fmt != "table" else limit)


@main.command()
@click.argument("database", type=_PATH)
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
        say(f"wrote {job.write_report(output, force=force)}")


@main.command()
@click.argument("database", type=_PATH)
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
        say(f"wrote {job.write_perfetto(output, ranks=list(ranks) or None, steps=list(steps) or None, force=force)}")


@main.command()
@click.argument("files", nargs=-1, required=True, type=_PATH)
@click.option("-o", "--output", "outdir", default="postmortem", show_default=True, help="Folder for job.duckdb, report.html, job.perfetto-trace.")
@click.option("--explain", is_flag=True, help="Every sentence of the verdict (the long form) instead of its 30-second form.")
@_ingest_options
def postmortem(files, outdir, explain, **flags):
    """Ingest, report and annotate in one go, then print the verdict. For a job's epilogue.

    \b
    Examples:
      traceflow postmortem runs/rank*.sqlite -o postmortem/
      traceflow postmortem /tmp/nccl_trace_rank_* traces/ -o why-it-stopped/   # Flight Recorder dumps
      traceflow postmortem runs/rank*.sqlite -o pm/ --name "llama-70b, 64 GPUs, before the fix"
    """
    from .job import input_files
    from .postmortem import run
    options = _options(**flags)
    paths = input_files(files)
    with Progress(len(paths), interrupts.raise_if_interrupted) as progress:
        out = run(paths, outdir, options, explain=explain, progress=progress)
    _said(out["warnings"], out["skipped"])
    for line in out["verdict"].splitlines():  # each line escaped (verdict.text escapes every line's trace text)
        say_line(line)
    say(f"report:   {out['report']}\nperfetto: {out['trace']}\ndatabase: {out['database']}")


@main.command("whatif")
@click.argument("database", type=_PATH)
@click.option("--step", "steps", type=int, multiple=True, help="The step(s) to replay (repeatable; default: all).")
@click.option("--scale-kernels", multiple=True, metavar="REGEX=FACTOR", help="Kernels whose name matches run FACTOR times as long.")
@click.option("--scale-kind", multiple=True, metavar="KIND=FACTOR", help="compute, comm or memory run FACTOR times as long.")
@click.option("--remove-host-stall", type=int, multiple=True, metavar="RANK",
              help="That rank's abnormal host time (beyond its median per step, by cause: docs/host-time.md) is removed.")
@click.option("--no-launch-overhead", is_flag=True, help="Launch calls take no host time and launched kernels no latency.")
@click.option("--no-launch-stall", is_flag=True,
              help="Stalled launch calls (over 50x the rank's median: a lazy module load) take the median call's time.")
@click.option("--no-allocator-calls", is_flag=True, help="cudaMalloc / cudaFree / hipFree ... take no host time.")
@click.option("--no-host-syncs", is_flag=True, help="Synchronizing calls neither wait nor take host time.")
@click.option("--on-rank", "host_ranks", type=int, multiple=True, metavar="RANK",
              help="Apply --no-launch-overhead / --no-launch-stall / --no-allocator-calls / --no-host-syncs on this rank "
                   "only (repeatable).")
@click.option("--overlap-comm", is_flag=True, help="Collectives no longer wait behind compute on their stream.")
@click.option("--no-stragglers", is_flag=True, help="Every rank's compute in a step scaled to the median rank's.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def whatif_cmd(database, steps, scale_kernels, scale_kind, remove_host_stall, no_launch_overhead, no_launch_stall,
               no_allocator_calls, no_host_syncs, host_ranks, overlap_comm, no_stragglers, fmt):
    """What would a fix gain? Replays each step's dependency graph across ranks (streams, launches,
    syncs, cross-stream waits, collectives) with edited durations and predicts the step time. The
    replay of the unedited graph is checked against the measured step first: beyond 2 % off, the
    prediction is refused.

    \b
    Examples:
      traceflow whatif job.duckdb --step 4 --remove-host-stall 3
      traceflow whatif job.duckdb --scale-kernels '.*flash.*=0.5' --scale-kind comm=0.8
      traceflow whatif job.duckdb --no-launch-overhead --format json
      traceflow whatif job.duckdb --no-allocator-calls --no-host-syncs
      traceflow whatif job.duckdb --no-host-syncs --on-rank 1
    """
    from .job import open as open_job
    from .job import parse_scenario
    scenario = parse_scenario(scale_kernels, scale_kind, remove_host_stall, no_launch_overhead, overlap_comm, no_stragglers,
                              no_allocator_calls, no_host_syncs, host_ranks, no_launch_stall)
    with open_job(database) as job:
        rows = job.whatif(list(steps) or None, scenario)
    if fmt == "json":
        click.echo(json.dumps(rows, indent=1))
        return
    say(f"scenario: {scenario.describe()}")
    table = [(r["step"], r["measured_ns"], r["replayed_ns"], r["replay_error_pct"], r["predicted_ns"], r["gain_ns"],
              None if r["gain_ns"] is None else round(100 * r["gain_ns"] / r["measured_ns"], 1)) for r in rows]
    print_table(["step", "measured_ns", "replayed_ns", "replay_error_pct", "predicted_ns", "gain_ns", "gain_pct"], table)
    for r in rows:
        if r["refused"]:
            say(f"step {r['step']}: no prediction: {r['refused']}")
        elif r["critical_path"]:
            parts = [f"{ns / 1e6:.1f} ms {kind}" for kind, ns in list(r["critical_path"]["by_kind_ns"].items())[:4]]
            say(f"step {r['step']}: predicted critical path: " + ", ".join(parts))


@main.command("diff")
@click.argument("a", type=_PATH)
@click.argument("b", type=_PATH)
@click.option("--step-a", type=int, help="The step of run a to compare (default: the steps both runs have).")
@click.option("--step-b", type=int, help="The step of run b to compare.")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "csv"]), default="table", show_default=True)
@click.option("--table", "which", type=click.Choice(["steps", "critical_path", "kernels", "op_classes", "collectives", "idle"]),
              default="steps", show_default=True, help="With --format csv: the comparison to write.")
@click.option("--limit", type=click.IntRange(min=0), default=12, show_default=True, help="Rows per table in table format (0: all).")
@click.option("-o", "--output", help="Also write the diff as one HTML page (e.g. diff.html).")
@click.option("--force", is_flag=True, help="Replace the output even if traceflow did not write it.")
@click.option("--fail-on-regression", "fail_pct", type=click.FloatRange(min=0), metavar="PCT",
              help="CI gate: exit 4 when B's step time grew by more than PCT percent of A's and by more than the "
                   "runs' own step-to-step noise; the line says which part of the critical path grew.")
@click.option("--summary", nargs=2, type=(click.Choice(["junit", "markdown"]), str), metavar="junit|markdown FILE",
              help="Also write the gate's decision (with --fail-on-regression; else at 0%) for a CI page.")
def diff_cmd(a, b, step_a, step_b, fmt, which, limit, output, force, fail_pct, summary):
    """What changed between two runs, and why: matched steps side by side, the change in step time
    split along the critical path, kernels, collectives and idle gaps, with changes inside the runs'
    own step-to-step variation marked as noise.

    A and B are traceflow databases, or trace files / folders (ingested first).

    \b
    Examples:
      traceflow diff before.duckdb after.duckdb
      traceflow diff before.duckdb after.duckdb --step-a 4 --step-b 7 -o diff.html
      traceflow diff runs/old/ runs/new/ --format json
      traceflow diff a.duckdb b.duckdb --format csv --table kernels > kernels.csv
      traceflow diff base.duckdb new.duckdb --fail-on-regression 5 --summary junit gate.xml   (CI: exit 4)
    """
    from .job import diff
    if output:
        from .outputs import check_output
        check_output(output, "report", inputs=[a, b], force=force)  # before the work
    if summary:
        from .outputs import check_output
        check_output(summary[1], "summary", inputs=[a, b], force=force)
    d = diff(a, b, step_a=step_a, step_b=step_b)
    gate = None if fail_pct is None and not summary else d.gate(fail_pct or 0.0, summary, force=force)
    if fmt == "json":
        click.echo(json.dumps(d.to_json(), default=str, indent=1))
    elif fmt == "csv":
        print_csv(d.tables[which].columns, d.tables[which].rows())
    else:
        _diff_tables(d, limit)
    if output:
        say(f"wrote {d.write_html(output, force=force)}")
    if gate is not None:
        say(gate.sentence(), err=fmt != "table")  # json / csv keep stdout for the machine
        return gate.exit_code if fail_pct is not None else 0
    return 0


def _diff_tables(d, limit):
    """`diff`'s table format: comparability, warnings, the sentences, then each comparison's table."""
    for r in d.comparability:
        say(f"{r['what']:<26} a: {r['a']:<40} b: {r['b']}" + ("" if r["same"] else "   (differs)"))
    for warning in d.warnings:
        say_line(f"traceflow: warning: {warning}", err=True)
    say("")
    for sentence in d.sentences:
        say_line(sentence)
    n = None if limit == 0 else limit
    steps = d.tables["steps"]
    shown = {
        "step breakdown (job rows, and rank rows that changed beyond noise)":
            steps.filter(steps["rank"].is_null() | ~steps["noise"]),
        "critical path: the change by kind and rank": d.tables["critical_path"].filter(d.tables["critical_path"]["delta_ns"] != 0),
        "kernels: the biggest changes per matched step": d.tables["kernels"],
        "kernels by the class of op that launched them": d.tables["op_classes"],
        "collectives by kind and size, per matched step": d.tables["collectives"],
        "GPU idle by cause": d.tables["idle"].filter(d.tables["idle"]["delta_ns"] != 0),
    }
    for title, t in shown.items():
        say(f"\n{title}")
        print_frame(t, n)


@main.command("scaling")
@click.argument("runs", nargs=-1, required=True, type=_PATH)
@click.option("--mode", type=click.Choice(["strong", "weak"]), default="strong", show_default=True,
              help="strong: the same global batch on more ranks; weak: the same batch per rank.")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "csv"]), default="table", show_default=True)
@click.option("-o", "--output", help="Also write the study as one HTML page (e.g. scaling.html).")
@click.option("--force", is_flag=True, help="Replace the output even if traceflow did not write it.")
def scaling_cmd(runs, mode, fmt, output, force):
    """How a job's step time scales with its rank count: runs of one model at several rank counts
    (databases, or trace folders), with speedup, parallel efficiency, the serial fraction by the
    Karp–Flatt metric, and how exposed communication and waits grow.

    \b
    Examples:
      traceflow scaling r8.duckdb r16.duckdb r32.duckdb r64.duckdb
      traceflow scaling r8.duckdb r16.duckdb --mode weak -o scaling.html
    """
    from .job import scaling
    if output:
        from .outputs import check_output
        check_output(output, "report", inputs=list(runs), force=force)
    s = scaling(list(runs), mode=mode)
    if fmt == "json":
        click.echo(json.dumps(s.to_json(), default=str, indent=1))
    elif fmt == "csv":
        print_csv(s.table.columns, s.table.rows())
    else:
        for warning in s.warnings:
            say_line(f"traceflow: warning: {warning}", err=True)
        print_frame(s.table.drop("run"), None)
        for sentence in s.sentences:
            say_line(sentence)
    if output:
        say(f"wrote {s.write_html(output, force=force)}")


@main.command("mcp")
@click.argument("inputs", nargs=-1, required=True, type=_PATH)
@click.option("-o", "--output", help="Keep the ingested database here (default: a temporary one, removed when the server ends).")
@click.option("--compare", "others", multiple=True, type=_PATH, metavar="RUN",
              help="A run (database, or trace files / folder) the diff tool may compare with (repeatable); no other path is opened.")
@click.option("--force", is_flag=True, help="Replace -o even if traceflow did not write it.")
def mcp_cmd(inputs, output, others, force):
    """Serve a job to an assistant: a Model Context Protocol server over stdio (docs/mcp.md).

    INPUTS: a traceflow database, or the trace files `postmortem` takes (ingested first, once).
    Read-only; every figure in a reply comes with the SQL that produced it.

    \b
    Examples:
      traceflow mcp job.duckdb
      traceflow mcp runs/rank-*.pt.trace.json.gz
      traceflow mcp after.duckdb --compare before.duckdb
    """
    try:
        import mcp  # noqa: F401 - the extra's SDK, imported by this command only
    except ImportError:
        _fail("traceflow mcp needs the MCP SDK: pip install 'traceflow[mcp]'", EXIT_INPUT)
    from .mcp_server import run
    run(list(inputs), output, list(others), force=force, warn=lambda line: say(line, err=True))


@main.command()
@click.argument("name")
@click.argument("files", nargs=-1, required=True, type=_PATH)
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
    from .job import recipe as load_recipe
    tables = load_recipe(name, list(files), database, nsys=nsys)
    for t, n in tables:
        say(f"  {t}: {n:,} rows")
    say(f"wrote {len(tables)} tables into {database}")


if __name__ == "__main__":
    main()
