"""traceflow: why is this multi-rank GPU job slow? Profiles in, one DuckDB database and a post-mortem out.

    import traceflow
    traceflow.ingest(["rank0.sqlite", "rank1.sqlite"], "job.duckdb")
    traceflow.query("job.duckdb", "idle-gaps", rank=1)      # polars DataFrame
    con = traceflow.connect("job.duckdb")                   # DuckDB connection
"""
from .errors import InputError, UsageError
from .ingest import ingest

__all__ = ["ingest", "query", "sql", "connect", "report", "annotate", "postmortem", "InputError", "UsageError"]
__version__ = "0.1.0"


def __getattr__(name):
    # The API's DuckDB import waits for its first use: a reader process, which imports this
    # package to unpickle its task, never needs DuckDB and starts 0.1 s sooner without it.
    if name in ("connect", "query", "sql"):
        from . import api
        return getattr(api, name)
    raise AttributeError(f"module 'traceflow' has no attribute {name!r}")


def report(database: str, output: str = "report.html") -> str:
    from .report.html import write_report
    return write_report(database, output)


def annotate(database: str, output: str = "job.perfetto-trace", ranks=None, steps=None) -> str:
    from .perfetto import write_trace
    return write_trace(database, output, ranks=ranks, steps=steps)


def postmortem(files, outdir: str = "postmortem", **ingest_options):
    from .postmortem import run
    return run(files, outdir, **ingest_options)
