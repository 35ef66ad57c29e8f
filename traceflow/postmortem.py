"""`traceflow postmortem`: ingest + report + annotate, for a job's epilogue."""
from __future__ import annotations

import os
from contextlib import contextmanager

from .errors import OutputError
from .job import Job
from .options import Options
from .options import of as options_of
from .outputs import check_output, os_problem, replaced_together

FILES = {"database": "job.duckdb", "report": "report.html", "perfetto": "job.perfetto-trace"}


def prepare(outdir: str, inputs, force: bool = False) -> str:
    """Checks the folder and the three outputs before any work (a run must not fail after a long
    ingest because the report cannot be written); creates the folder. Returns the database path."""
    if os.path.lexists(outdir) and not os.path.isdir(outdir):
        raise OutputError(outdir, "is a file, not a folder: postmortem -o names the folder for its three outputs")
    try:
        os.makedirs(outdir, exist_ok=True)
    except OSError as e:
        raise OutputError(outdir, f"cannot create the folder ({os_problem(e)})") from None
    for kind, name in FILES.items():
        check_output(os.path.join(outdir, name), kind, inputs, force)
    return os.path.join(outdir, FILES["database"])


@contextmanager
def output_folder(outdir: str, inputs, force: bool = False):
    """prepare(), yielding the database path; on any error (a bad input, Ctrl-C) the folder goes
    again if this run created it and nothing was written into it: a refused run left an empty
    folder behind."""
    created = not os.path.lexists(outdir)
    try:
        yield prepare(outdir, inputs, force)  # inside: a Ctrl-C while it checks the outputs left the folder
    except BaseException:
        if created:
            try:
                os.rmdir(outdir)  # only an empty folder: never anything written into it
            except OSError:
                pass
        raise


def finish(job: Job, outdir: str, force: bool = False, progress=None, explain: bool = False) -> dict:
    """The report, the Perfetto trace and the verdict of one Job: one connection, findings computed once."""
    phase = getattr(progress, "phase", lambda _: None)
    phase("writing the report")
    report = job.write_report(os.path.join(outdir, FILES["report"]), force=force)
    phase("writing the Perfetto trace")
    trace = job.write_perfetto(os.path.join(outdir, FILES["perfetto"]), force=force)
    return {"verdict": job.verdict(explain), "report": report, "trace": trace, "database": job.path}


def run(files, outdir: str = "postmortem", options: Options | None = None, *, explain: bool = False, progress=None,
        **settings) -> dict:
    """Ingest `files` into `outdir`/job.duckdb, then write the report and the Perfetto trace beside it,
    the three replaced together (`traceflow postmortem`, and traceflow.postmortem). The settings:
    `options` (an options.Options), or its fields as keywords, checked before any work. Returns
    {verdict (the 30-second form, or every sentence with `explain`), report, trace, database,
    warnings and skipped (the ingest's, for the user)}."""
    from .job import ingest, input_files
    options = options_of(options, **settings)
    paths = input_files(files)  # once: a folder's JSON files are sniffed, up to 1 MiB each
    with output_folder(outdir, paths, options.force) as db, replaced_together(), \
            ingest(paths, db, options, progress=progress) as job:
        return {**finish(job, outdir, options.force, progress, explain), "database": db,
                "warnings": job.warnings, "skipped": job.skipped}
