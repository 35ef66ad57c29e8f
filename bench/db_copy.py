"""A traceflow database opened as ingest opens it, on a throwaway copy: for the bench scripts that
time analyses on a database without changing it (time_packs.py, time_walk.py)."""
from __future__ import annotations

import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

import duckdb

from traceflow.duck import use_internal_schema
from traceflow.machine import db_config


@contextmanager
def writable_copy(database: str):
    """A connection to a copy of `database` in a temporary folder (gone afterwards), with ingest's
    settings: its memory limit and spill folder, the helper schema on the search path."""
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "copy.duckdb"
        shutil.copyfile(database, copy)
        con = duckdb.connect(str(copy), config=db_config(tmp))
        try:
            use_internal_schema(con, create=True)
            con.execute("SET enable_progress_bar = false")
            yield con
        finally:
            con.close()
