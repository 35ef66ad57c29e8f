"""traceflow: why is this multi-rank GPU job slow? Profiles in, one DuckDB database and a post-mortem out.

    import traceflow
    job = traceflow.ingest(["rank0.sqlite", "rank1.sqlite"], "job.duckdb")   # a Job
    job = traceflow.open("job.duckdb")                      # the verbs: job.query(...), job.write_report(...)
    traceflow.query("job.duckdb", "idle-gaps", rank=1)      # polars DataFrame
    con = traceflow.connect("job.duckdb")                   # DuckDB connection
    d = traceflow.diff("before.duckdb", "after.duckdb")     # what changed, and why
"""
from .errors import InputError, OutputError, UsageError

__all__ = ["InputError", "Job", "OutputError", "UsageError", "annotate", "connect", "diff", "ingest", "open", "postmortem",
           "query", "report", "scaling", "sql"]
__version__ = "0.1.0"


def __getattr__(name):
    # Imports wait for their first use: a reader process, which imports this package to unpickle
    # its task, never needs DuckDB, and `traceflow --help` needs neither DuckDB nor Arrow.
    if name in ("connect", "query", "sql"):
        from . import api
        return getattr(api, name)
    if name == "scaling":
        from .scaling_study import scaling
        return scaling
    if name == "diff":
        from .compare import diff
        return diff
    if name == "ingest":
        from .pipeline import ingest
        return ingest
    if name in ("open", "Job"):
        from . import job
        return getattr(job, name)
    raise AttributeError(f"module 'traceflow' has no attribute {name!r}")


def report(database: str, output: str = "report.html", force: bool = False) -> str:
    """`traceflow.open(database).write_report(output)`."""
    from .job import open as open_job
    with open_job(database) as job:
        return job.write_report(output, force=force)


def annotate(database: str, output: str = "job.perfetto-trace", ranks=None, steps=None, force: bool = False) -> str:
    """`traceflow.open(database).write_perfetto(output, ranks, steps)`."""
    from .job import open as open_job
    with open_job(database) as job:
        return job.write_perfetto(output, ranks=ranks, steps=steps, force=force)


def postmortem(files, outdir: str = "postmortem", **ingest_options):
    from .postmortem import run
    return run(files, outdir, **ingest_options)
