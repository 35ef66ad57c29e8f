"""Flight Recorder dumps into the database: `fr_dumps` (one row per dump), `fr_entries`, `fr_groups`.

Dumps are a source of their own, beside the timing traces: a rank has one trace and one dump, so
dumps get their ranks apart from the traces (readers/ranks.assign, on the dumps alone) and never
enter `traces`, whose one row per rank every timing analysis relies on. The tables exist in every
database (empty without dumps), so the `desync` pack runs on any job.

The words for every column of the three tables (the shell's users read them) are schema.py's, with the other loaded tables'.
"""
from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc

from . import schema
from .errors import InputError
from .readers import ranks
from .readers.model import ProcessTrace
from .text import as_text

FORMATS = ("fr-pickle", "fr-json")
# Dumps of one job overlap in time: each buffer holds the last entries before the dump, and the
# ranks enqueued them together. Two dumps this far apart are of two jobs (as traces: pipeline.py).
MIXED_JOB_GAP_NS = 60 * 10**9



def create_tables(con):
    """The tables, documented: they exist in every database, dumps or not (the shell's users read them)."""
    con.execute(schema.FR_DUMPS_DDL.replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS"))
    for t in schema.FR_TABLES:
        con.execute(schema.fr_ddl(t).replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS"))
    from . import comments
    comments.apply_docs(con, schema.docs(tuple(schema.FR_TABLES) + ("fr_dumps",)))


def split(traces: list[ProcessTrace]) -> tuple[list[ProcessTrace], list[ProcessTrace]]:
    """(timing traces, Flight Recorder dumps)."""
    return [t for t in traces if t.source_format not in FORMATS], [t for t in traces if t.source_format in FORMATS]


def load(con, dumps: list[ProcessTrace], folder: str, rank_pattern: str | None, result) -> None:
    """Ranks, rows and the one-job checks for the dumps read into `folder` (Arrow IPC, IpcSink)."""
    create_tables(con)
    existing = {h for (h,) in con.execute("SELECT source_hash FROM fr_dumps").fetchall()}
    taken = dict(con.execute("SELECT rank, source_path FROM fr_dumps").fetchall())
    next_id = con.execute("SELECT coalesce(max(dump_id) + 1, 0) FROM fr_dumps").fetchone()[0]
    fresh, seen = [], set()
    for t in dumps:
        if t.source_hash in existing:
            result.skipped.append(f"{t.source_path}: already in the database (same content), skipped")
        elif t.source_hash in seen:
            result.skipped.append(f"{t.source_path}: same content as another input, read once")
        else:
            seen.add(t.source_hash)
            fresh.append(t)
    # One INSERT per table for all dumps: a statement per dump cost most of a 2,048-dump ingest.
    rows: dict[str, list] = {"fr_dumps": []}
    parts: dict[str, list[pa.Table]] = {t: [] for t in schema.FR_TABLES}
    for t, rank, src in ranks.assign(fresh, rank_pattern, taken):
        did = next_id
        next_id += 1
        rows["fr_dumps"].append((did, rank, t.world_size, as_text(os.path.abspath(t.source_path)), t.source_format, t.source_hash,
                                 t.profiler_version, src, t.counts.get("fr_entries", 0), t.warnings))
        for table in schema.FR_TABLES:
            path = Path(folder) / f"{t.key}.{table}.arrow"
            if path.exists():
                with pa.memory_map(str(path)) as source:
                    data = ipc.open_stream(source).read_all()
                n = data.num_rows
                parts[table].append(data.append_column("dump_id", pa.array([did] * n, pa.int32()))
                                        .append_column("rank", pa.array([rank] * n, pa.int32())))
        result.traces.append({"dump_id": did, "rank": rank, "file": t.source_path, "format": t.source_format,
                              "rank_source": src, **t.counts})
        result.warnings.extend(f"{t.source_path}: {w}" for w in t.warnings)
    if rows["fr_dumps"]:
        names = ["dump_id", "rank", "world_size", "source_path", "source_format", "source_hash", "version", "rank_source",
                 "n_entries", "warnings"]
        dumps_rows = pa.table({n: [r[i] for r in rows["fr_dumps"]] for i, n in enumerate(names)})  # noqa: F841 - read by DuckDB
        con.execute(f"INSERT INTO fr_dumps ({', '.join(names)}) SELECT {', '.join(names)} FROM dumps_rows")
    for table, tables in parts.items():
        if tables:
            # one chunk: DuckDB's Arrow scan of 2,048 one-dump chunks took 14 s, of one chunk well under 1 s
            incoming = pa.concat_tables(tables).combine_chunks()  # noqa: F841 - read by DuckDB's replacement scan
            cols = ", ".join(f.name for f in schema.FR_TABLES[table])
            con.execute(f"INSERT INTO {table} ({cols}) SELECT {cols} FROM incoming")
    check_one_job(con)


def check_one_job(con):
    """Dumps of two jobs in one database: different world sizes (also against the traces), a group
    whose members differ between dumps, or buffers far apart in time. InputError names the file."""
    sizes = con.execute("""SELECT world_size, any_value(source_path ORDER BY dump_id) FROM (
                               SELECT world_size, source_path, dump_id FROM fr_dumps WHERE world_size IS NOT NULL
                               UNION ALL SELECT world_size, source_path, NULL FROM traces WHERE world_size IS NOT NULL
                                   AND source_format NOT IN ('fr-pickle', 'fr-json'))
                           GROUP BY world_size ORDER BY count(*) DESC, world_size""").fetchall()
    if len(sizes) > 1:
        raise InputError(sizes[1][1], f"says world size {sizes[1][0]} but {sizes[0][1]} says {sizes[0][0]}: "
                         "dumps or traces from different jobs? ingest each job into its own database")
    groups = con.execute("""WITH g AS (SELECT pg, ranks, count(*) AS n, min(dump_id) AS d FROM fr_groups
                                       WHERE ranks IS NOT NULL GROUP BY pg, ranks)
                            SELECT g.pg, (SELECT source_path FROM fr_dumps WHERE dump_id = g.d), g.ranks
                            FROM g QUALIFY count(*) OVER (PARTITION BY pg) > 1
                            ORDER BY pg, n, d LIMIT 1""").fetchone()
    if groups:
        raise InputError(groups[1], f"says process group {groups[0]!r} has members {groups[2]}, unlike the other "
                         "dumps: dumps from different jobs? ingest each job into its own database")
    spans = con.execute("""SELECT d.source_path, min(e.created_ns), max(e.created_ns) FROM fr_entries e
                           JOIN fr_dumps d USING (dump_id) WHERE e.created_ns IS NOT NULL
                           GROUP BY d.source_path ORDER BY 2""").fetchall()
    reach, reach_path = None, None
    for path, lo, hi in spans:
        if reach is not None and lo > reach + MIXED_JOB_GAP_NS:
            raise InputError(path, f"holds calls made {(lo - reach) / 1e9:,.0f} s after the last of {reach_path}: "
                             "dumps from different jobs? ingest each job into its own database")
        if reach is None or hi > reach:
            reach, reach_path = hi, path
