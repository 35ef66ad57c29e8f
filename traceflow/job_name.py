"""A job's name, for titles: "traceflow post-mortem: ddp4_sync_stall", not "...: job.duckdb" (every
postmortem folder holds a job.duckdb). Taken from the inputs at ingest (`--name` overrides) and kept
in the database, in tf_internal.metadata (key 'name'), so that `report`, `diff` and the verdict say
it later; a database from before has none, and its name is worked out again from traces.source_path.
"""
from __future__ import annotations

import os

from .text import as_text

_SUFFIXES = (".gz", ".xz", ".json", ".sqlite", ".nsys-rep", ".pt.trace", ".trace")


def from_inputs(files) -> str:
    """The name of a job read from `files` (paths as given, folders allowed): a folder's name when the
    input is one folder, or when every file lies in one folder; otherwise the first file's name
    without its extensions."""
    paths = [os.path.abspath(str(f)) for f in files]
    if not paths:
        return "job"
    if len(paths) == 1 and os.path.isdir(paths[0]):
        return _folder_name(paths[0].rstrip(os.sep) or paths[0])
    folders = {p if os.path.isdir(p) else os.path.dirname(p) for p in paths}
    if len(paths) > 1:
        common = os.path.commonpath(sorted(folders))
        if common != os.sep:  # rank0/, rank1/ ... of one job folder too
            return _folder_name(common)
    return _stem(sorted(paths)[0])


# Folders named for the profiler or the format, not the job: `runs/llama_8b/kineto/rank*.json` is
# the job `llama_8b` (a report titled "traceflow post-mortem: kineto" named nothing).
_GENERIC = {"kineto", "nsys", "nsight", "nsight_systems", "traces", "trace", "profiles", "profile", "profiler",
            "pytorch_profiler", "torch_profiler", "json", "sqlite", "logs", "log", "tb", "tensorboard",
            "plugins", "fr", "fr_dumps", "dumps", "flight_recorder", "output", "outputs", "out"}


def _folder_name(folder: str) -> str:
    """The folder's name, or its parent's while the name is a profiler's or a format's (_GENERIC)."""
    while os.path.basename(folder).lower() in _GENERIC and os.path.dirname(folder) not in ("", folder, os.sep):
        folder = os.path.dirname(folder)
    return os.path.basename(folder) or folder


def _stem(path: str) -> str:
    name = os.path.basename(path)
    stripped = True
    while stripped:
        stripped = False
        for s in _SUFFIXES:
            if name.endswith(s) and len(name) > len(s):
                name, stripped = name[: -len(s)], True
    return name


def store(con, name: str | None, files, append: bool = False):
    """Keeps the job's name in the database being written: `name` when given, else (on an append, the
    name it had) the inputs' (from_inputs)."""
    from .db_format import ensure_metadata
    ensure_metadata(con)
    if name is None and append and read_stored(con) is not None:
        return
    # as_text: a file name that is not UTF-8 cannot enter DuckDB as it is (docs/bad-input.md)
    con.execute("INSERT OR REPLACE INTO tf_internal.metadata VALUES ('name', ?)", [as_text(name or from_inputs(files))])


def read_stored(con, catalog: str = "") -> str | None:
    at = f"{catalog}." if catalog else ""
    row = con.execute(f"SELECT value FROM {at}tf_internal.metadata WHERE key = 'name'").fetchone()
    return row[0] if row else None


def read(con, catalog: str = "") -> str:
    """The stored name, or one worked out from the files the database was read from (`catalog`: the
    name of an attached database)."""
    stored = read_stored(con, catalog)
    if stored:
        return stored
    at = f"{catalog}." if catalog else ""
    paths = [r[0] for r in con.execute(f"SELECT DISTINCT source_path FROM {at}traces ORDER BY 1").fetchall() if r[0]]
    return from_inputs(paths) if paths else "job"
