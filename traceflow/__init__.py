"""traceflow: why is this multi-rank GPU job slow? Profiles in, one DuckDB database and a post-mortem out.

    import traceflow
    traceflow.ingest(["rank0.sqlite", "rank1.sqlite"], "job.duckdb")
    traceflow.query("job.duckdb", "idle-gaps", rank=1)      # polars DataFrame
    con = traceflow.connect("job.duckdb")                   # DuckDB connection
"""
from .errors import InputError, OutputError, UsageError

__all__ = ["InputError", "OutputError", "UsageError", "annotate", "connect", "ingest", "postmortem", "query", "report", "sql"]
__version__ = "0.1.0"


def __getattr__(name):
    # Imports wait for their first use: a reader process, which imports this package to unpickle
    # its task, never needs DuckDB, and `traceflow --help` needs neither DuckDB nor Arrow.
    if name in ("connect", "query", "sql"):
        from . import api
        return getattr(api, name)
    if name == "ingest":
        from .pipeline import ingest
        return ingest
    raise AttributeError(f"module 'traceflow' has no attribute {name!r}")


def report(database: str, output: str = "report.html", force: bool = False) -> str:
    from .report.html import write_report
    return write_report(database, output, force=force)


def annotate(database: str, output: str = "job.perfetto-trace", ranks=None, steps=None, force: bool = False) -> str:
    from .perfetto import write_trace
    return write_trace(database, output, ranks=ranks, steps=steps, force=force)


def postmortem(files, outdir: str = "postmortem", **ingest_options):
    from .postmortem import run
    return run(files, outdir, **ingest_options)
