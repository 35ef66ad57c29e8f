"""`traceflow postmortem`: ingest + report + annotate, for a job's epilogue."""
from __future__ import annotations

import os

from .errors import OutputError
from .job import Job
from .outputs import check_output, os_problem

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


def finish(job: Job, outdir: str, force: bool = False, progress=None) -> dict:
    """The report, the Perfetto trace and the verdict of one Job: one connection, findings computed once."""
    phase = getattr(progress, "phase", lambda _: None)
    phase("writing the report")
    report = job.write_report(os.path.join(outdir, FILES["report"]), force=force)
    phase("writing the Perfetto trace")
    trace = job.write_perfetto(os.path.join(outdir, FILES["perfetto"]), force=force)
    return {"verdict": job.verdict(), "report": report, "trace": trace, "database": job.path}


def run(files, outdir: str = "postmortem", **ingest_options) -> dict:
    from .pipeline import expand, ingest
    force = ingest_options.pop("force", False)
    db = prepare(outdir, expand(files), force)
    with ingest(files, db, force=force, **ingest_options) as job:
        return finish(job, outdir, force)
