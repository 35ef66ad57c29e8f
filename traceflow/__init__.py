"""traceflow: why is this multi-rank GPU job slow? Profiles in, one DuckDB database and a post-mortem out.

    import traceflow
    job = traceflow.ingest(["rank0.sqlite", "rank1.sqlite"], "job.duckdb")   # a Job
    job = traceflow.open("job.duckdb")                      # the verbs: job.query(...), job.write_report(...)
    traceflow.query("job.duckdb", "idle-gaps", rank=1)      # polars DataFrame
    con = traceflow.connect("job.duckdb")                   # DuckDB connection
    d = traceflow.diff("before.duckdb", "after.duckdb")     # what changed, and why
"""
from .errors import InputError, OutputError, UsageError

__all__ = ["InputError", "Job", "Options", "OutputError", "UsageError", "annotate", "connect", "diff", "ingest", "open", "postmortem",
           "query", "report", "scaling", "sql"]
__version__ = "0.1.0"


def __getattr__(name):
    # Imports wait for their first use: a reader process, which imports this package to unpickle
    # its task, never needs DuckDB, and `traceflow --help` needs neither DuckDB nor Arrow.
    if name in ("open", "Job", "ingest", "connect", "diff", "scaling"):
        from . import job
        return getattr(job, name)
    if name == "Options":  # every setting of an ingest, checked once (options.py)
        from .options import Options
        return Options
    raise AttributeError(f"module 'traceflow' has no attribute {name!r}")


def query(database: str, name: str, rank=None, step=None):
    """`traceflow.open(database).query(name, rank, step)`: rows of a query pack as a polars DataFrame."""
    from .job import open as open_job
    with open_job(database) as job:
        return job.query(name, rank, step)


def sql(database: str, text: str):
    """`traceflow.open(database).sql(text)`: any read-only SQL, as a polars DataFrame."""
    from .job import open as open_job
    with open_job(database) as job:
        return job.sql(text)


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


def postmortem(files, outdir: str = "postmortem", options=None, **settings):
    """Ingest, report and annotate in one go (`traceflow postmortem`): postmortem.run."""
    from .postmortem import run
    return run(files, outdir, options, **settings)
