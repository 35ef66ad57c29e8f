"""`traceflow postmortem`: ingest + report + annotate, for a job's epilogue."""
from __future__ import annotations

import os

from .api import connect
from .ingest import ingest
from .perfetto import write_trace
from .report.html import write_report
from .verdict import verdict


def finish(database: str, outdir: str) -> dict:
    report = write_report(database, os.path.join(outdir, "report.html"))
    trace = write_trace(database, os.path.join(outdir, "job.perfetto-trace"))
    con = connect(database)
    try:
        text = verdict(con)
    finally:
        con.close()
    return {"verdict": text, "report": report, "trace": trace, "database": database}


def run(files, outdir: str = "postmortem", **ingest_options) -> dict:
    os.makedirs(outdir, exist_ok=True)
    db = os.path.join(outdir, "job.duckdb")
    ingest(files, db, **ingest_options)
    return finish(db, outdir)
