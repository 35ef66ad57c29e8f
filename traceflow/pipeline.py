"""`ingest`: rank files -> one DuckDB database (the readers per file in parallel, then the cross-rank phase).

Size: the ingest's phases in order, find the files (expand), read them in parallel (readers/pool.py,
or a cluster's tasks), load (load.py), then every later step (graph.py: derive, analyses, checks, claims), with the memory
settings and the one-job checks that sit between them.
"""
from __future__ import annotations

import os
import shutil
import stat
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from . import db_format
from .duck import connect as duck_connect
from .duck import use_internal_schema
from .errors import InputError, UsageError
from .load import TRACE_SPANS, create_tables, cut_long_names, load_all
from .machine import check_address_space, db_config
from .options import Options
from .options import of as options_of
from .outputs import PARTS, after_replace, atomic_output, scratch_folder
from .readers import ranks
from .readers.compressed import inflate_bound
from .readers.detect import identify
from .readers.pool import map_files, workers
from .text import as_text

SUFFIXES: tuple[str, ...] = (".sqlite", ".nsys-rep", ".qdrep", ".json", ".json.gz", ".sqlite.gz", ".sqlite.xz")
SUFFIXES += (".pickle",)  # torch.cuda.memory._dump_snapshot (readers/memory_snapshot.py)
# ROCm (readers/rocm.py, rocprof_csv.py): .rpd files and a rocprofv3 run's kernel traces (the rest of a
# CSV run is read with its kernel trace); a .db is taken when its tables are ROCm's (_looks_like_trace)
SUFFIXES += (".rpd", ".rpd.gz", "kernel_trace.csv")
SNAPSHOT = "torch-memory-snapshot"


@dataclass
class IngestInfo:
    """What one ingest did: the rank files it loaded and what it had to say about them."""
    traces: list[dict] = field(default_factory=list)   # per loaded trace: rank, file, format, rank source, row counts
    warnings: list[str] = field(default_factory=list)  # for the user: what was dropped or assumed, and why
    skipped: list[str] = field(default_factory=list)   # inputs read once or already in the database
    timings: dict = field(default_factory=dict)        # seconds per phase: read, load, derive, packs, critical_path



def _looks_like_trace(p: Path) -> bool:
    """In a folder, other JSON files (configs, notes) sit beside the traces: sniff before taking one.
    Flight Recorder dumps (nccl_trace_rank_3, host_3.json) are taken by their first bytes."""
    from .readers.flight_recorder import looks_like_dump
    if looks_like_dump(str(p)):
        return True
    if p.name.endswith(".pickle"):  # an allocator snapshot, not any pickle beside the traces (detect.py)
        try:
            return identify(str(p)).format == SNAPSHOT
        except InputError:
            return False
    if p.name.endswith(".db"):  # rocprofv3's <pid>_results.db, not any database beside the traces
        try:
            return identify(str(p)).format in ("rocpd-sqlite", "rpd-sqlite", "rocprof-sqlite")
        except InputError:
            return False
    if not p.name.endswith((".json", ".json.gz")):
        return p.name.endswith(SUFFIXES)
    try:
        from .readers.compressed import BoundedReader
        f = BoundedReader(str(p), "gzip") if p.name.endswith(".gz") else open(p, "rb")
        try:
            head = f.read(1 << 20)
        finally:
            f.close()
    except Exception:  # noqa: BLE001 - unreadable: let the reader say what is wrong with it
        return True
    return b'"traceEvents"' in head or b'"schemaVersion"' in head


def expand(files) -> list[str]:
    """Files as given; a folder stands for the trace files in it (its regular files with a trace's
    suffix: a pipe, device, socket, folder or broken link among them is passed over). A pipe, device
    or socket given by name is refused: reading it would block or never end."""
    out = []
    for f in files:
        p = Path(f)
        try:
            mode = os.stat(p).st_mode
        except OSError:
            mode = 0  # missing, a symlink loop, no permission: the reader names the problem
        if mode and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            raise InputError(p, "is not a regular file (a pipe, device or socket): traceflow reads only files")
        if stat.S_ISDIR(mode):
            found = sorted(str(x) for x in p.iterdir() if x.is_file() and _looks_like_trace(x))
            if not found and any(x.suffix in (".parquet", ".arrow") for x in p.iterdir()):
                from .readers.detect import NSYS_SQLITE_HINT
                raise InputError(p, "folder of Parquet / Arrow files (an nsys parquetdir / arrowdir export?): traceflow "
                                 f"does not read those; {NSYS_SQLITE_HINT}")
            if not found:
                raise InputError(p, "folder holds no .sqlite, .nsys-rep, .json[.gz], ROCm (.db, .rpd, kernel_trace.csv) trace files "
                               "nor Flight Recorder dumps")
            out.extend(found)
        else:
            out.append(str(p))
    if not out:
        raise UsageError("no input files given")
    return out


SMALL_LOAD_ROWS = 1_000_000


def ingest(files, output: str = "traceflow.duckdb", options: Options | None = None, *, progress=None,
           **settings) -> IngestInfo:
    # Long because: the phases in order (find, read, load, derive, analyse) with the checks between them.
    """Read rank files (nsys SQLite / .nsys-rep / Kineto JSON) into the DuckDB database `output`.

    The database is built in a temp file and renamed into place: on any error the existing
    `output` is left as it was. `output` may only name a traceflow database, or a new file
    (`force`: any regular file that is not an input). Raises InputError (exit 3) naming the bad file.
    The settings: `options` (an options.Options), or its fields as keywords (append, rank_pattern,
    align, nsys, jobs, step_pattern, force, max_inflate, memory_limit, peak_tflops, peak_gbps, cluster,
    name), checked before any work (UsageError, exit 2). `peak_tflops` / `peak_gbps` set the GPUs'
    peaks for the roofline and MFU (traceflow/hardware.py knows the common data-centre GPUs by name).
    `cluster` ('local:N', a Dask scheduler address, or a dask.distributed.Client) runs the per-rank
    work as Dask tasks (traceflow/cluster.py, rank_task.py), whose Parquet shards the database then
    reads in place from `output`.parts-*/ (shard_views.py). `name` names the job in titles (default:
    its input folder or first file; job_name.py).
    Returns what it did (IngestInfo); traceflow.ingest (job.ingest) opens the database as a Job.
    """
    options = options_of(options, **settings)
    cluster, append = options.cluster, options.append
    check_address_space()
    with inflate_bound(options.max_inflate):  # a folder's .json.gz files are sniffed here (_looks_like_trace)
        paths = expand(files)
    inputs = [identify(p) for p in paths]  # each file looked at once, before any output is touched
    if cluster is not None and (dump := next((i for i in inputs if i.format.startswith("fr-")), None)):
        raise UsageError(f"{dump.path} is a Flight Recorder dump: dumps are ingested without --cluster")
    progress = progress or (lambda *_: None)
    result = IngestInfo()
    with atomic_output(output, "database", inputs=paths, force=options.force, copy_existing=append) as tmp, \
            scratch_folder() as scratch, _parts_folder(output, cluster) as parts:
        t0 = time.perf_counter()
        traces = _read_job(inputs, scratch, parts, options, progress)
        result.timings["read"] = time.perf_counter() - t0
        phase = getattr(progress, "phase", lambda _: None)
        phase("loading into DuckDB")
        con = _connect(tmp, scratch, options.memory_limit)
        try:
            if append:
                _refuse_views(con, output)
                _refuse_older(con, output)
            _load_into(con, traces, scratch, parts, result, options)
            from .job_name import store
            store(con, options.name, files, append)
            # one transaction for the analyses: each statement's own commit (and its WAL write) was
            # most of the fixed cost of a small job's analyses
            con.execute("BEGIN TRANSACTION")
            from . import graph
            # every step after the load, in the graph's order (on a cluster's client: the job's steps over the shards)
            done = graph.run(con, options, scope="job" if parts is not None else None, timings=result.timings, phase=phase)
            result.warnings.extend(done.warnings)
            result.timings.pop("walk_batches", None)
            _commit_to_file(con)
            con.execute("CHECKPOINT")
        finally:
            con.close()
    after_replace(lambda: _drop_replaced_parts(output, parts))  # the old database reads them until replaced
    return result


def _connect(tmp, scratch: str, memory_limit: str | None):
    """The new database, open for the ingest."""
    con = duck_connect(tmp, config=db_config(scratch, memory_limit))
    con.execute("SET enable_progress_bar = false")  # ours is on stderr; DuckDB's would go to stdout
    # FSST string compression is tried on every text column and chosen for almost none: the
    # file has the same blocks without it (long4 Kineto 88, the bundled job 51, nsys-ai 40)
    # and its checkpoint takes 40 ms less (276 -> 231, 179 -> 140 ms)
    con.execute("SET disabled_compression_methods = 'fsst'")
    use_internal_schema(con, create=True)
    return con


def _read_job(inputs, scratch, parts, options: Options, progress):
    """The per-rank map: here (readers in threads or processes), or as a cluster's tasks; each
    reader, process or Dask worker gets `options`."""
    if options.cluster is None:
        return map_files(inputs, scratch, options, progress)
    from .cluster import client_for, read_all
    with client_for(options.cluster, scratch) as client:
        return read_all(client, inputs, parts, options, progress)


def _load_into(con, traces, scratch, parts, result, options: Options):
    """The readers' tables into the database; with a cluster's `parts`, views over its shards
    instead (shard_views). A job of few rows loads on this connection in one
    transaction, which then checkpoints: each INSERT's own commit wrote its rows to the WAL before
    the checkpoint wrote them again (long4 Kineto, 340k rows: 2.74 -> 2.62 s in all; the bundled job
    1.26 -> 1.22 s). More rows load on several connections at once, faster than on one (long4 nsys,
    3.1M rows, went 7.3 -> 8.0 s on one)."""
    t0 = time.perf_counter()
    if parts is not None:
        from . import shard_views
        from .derive import host_clock

        def as_views(loads):
            result.warnings.extend(host_clock.with_ranks(con, shard_views.create(con, parts, loads)))
            return shard_views.spans(loads)
        _build(con, traces, result, options, as_views)
        result.timings["load"] = time.perf_counter() - t0
        return
    small = sum(sum(t.counts.values()) for t in traces) <= SMALL_LOAD_ROWS
    if small:
        con.execute("BEGIN TRANSACTION")
    _build(con, traces, result, options,
           lambda loads: load_all(con, scratch, loads, 1 if small else workers(options.jobs, len(loads))), scratch)
    result.warnings.extend(cut_long_names(con))
    if small:
        _commit_to_file(con)
        con.execute("RESET checkpoint_threshold")
    result.timings["load"] = time.perf_counter() - t0


def _commit_to_file(con):
    """COMMIT that checkpoints at once: in a fresh database every row would go to the WAL and then
    again into the file (DuckDB skips the WAL for a commit that checkpoints)."""
    con.execute("SET checkpoint_threshold = '0B'")
    con.execute("COMMIT")


@contextmanager
def _parts_folder(output: str, cluster):
    """With a cluster, the folder the workers write their Parquet shards into, beside the output
    (which must be on storage every worker shares), and which the database's views then read. Until
    the database is complete the folder carries a locked marker: a failed run removes it, one that
    was killed leaves it to the next run's cleaning (scratch_folder)."""
    if cluster is None:
        yield None
        return
    out = Path(output).resolve()
    with scratch_folder(out.parent, f"{out.name}{PARTS}", keep=True) as folder:
        yield folder


def _drop_replaced_parts(output: str, keep: str | None):
    """The parts folders of the database this ingest replaced: complete (no marker), not the new one's."""
    from .outputs import SCRATCH_MARKER
    out = Path(output).resolve()
    for p in out.parent.glob(f"{out.name}{PARTS}*"):
        if keep and p == Path(keep).resolve():
            continue
        try:
            if p.is_symlink() or not p.is_dir() or (p / SCRATCH_MARKER).exists() or p.stat().st_uid != os.getuid():
                continue
        except OSError:
            continue
        shutil.rmtree(p, ignore_errors=True)


def _check_one_job(con, spans: list | None = None, warnings: list | None = None):
    """Files of two different jobs or runs in one ingest: conflicting world sizes, or windows that do not overlap.
    `spans` ((path, lo, hi) per trace): a cluster's workers' (shard_views.spans), else scanned here; what
    is read with a caveat is added to `warnings`."""
    sizes = con.execute("""SELECT world_size, any_value(source_path) FROM traces WHERE world_size IS NOT NULL
                           GROUP BY world_size ORDER BY world_size""").fetchall()
    if len(sizes) > 1:
        raise InputError(sizes[1][1], f"says world size {sizes[1][0]} but {sizes[0][1]} says {sizes[0][0]}: "
                         "files from different jobs? ingest each job into its own database")
    if spans is None:
        spans = con.execute(f"SELECT t.source_path, e.lo, e.hi FROM traces t JOIN ({TRACE_SPANS}) e USING (trace_id)").fetchall()
    _check_captures(con, spans, [] if warnings is None else warnings)
    # Ranks of one run are recorded at once: their windows overlap. A later file that starts after every
    # earlier one ended is another run, however close (Kineto of one run of ddp4_sync_stall and nsys of
    # the next: 8.0 s apart, the same world size, read as one job with a 12,902.6 ms median step).
    # (the processes of one file are one recording session: one window per file)
    by_file: dict = {}
    for path, lo, hi in spans:
        a, b = by_file.get(path, (lo, hi))
        by_file[path] = (min(a, lo), max(b, hi))
    reach, reach_path = None, None
    for path, (lo, hi) in sorted(by_file.items(), key=lambda x: x[1][0]):
        if reach is not None and lo > reach:
            gap = (lo - reach) / 1e9
            when = f"{gap:,.0f} s" if gap >= 10 else f"{gap:,.3g} s"
            raise InputError(path, f"was recorded {when} after {reach_path} ended (their windows do not overlap): "
                             "files from different jobs or runs? ingest each run into its own database")
        if reach is None or hi > reach:
            reach, reach_path = hi, path


def _check_captures(con, spans: list, warnings: list):
    """Separate XLA captures: several files whose clocks start at their capture (xla_trace.CAPTURE_RELATIVE_NS:
    no wall clock) and none of which holds a collective cannot be told to be ranks of one run, nor aligned:
    refused (two JAX programs profiled one after the other, jax08_attention + jax08_gemm, were read as
    one 2-rank job "sharing one GPU", their kernels "overlapping" because both clocks start at 0). A
    multi-process JAX job's captures hold its collectives: read as one job, with a warning that their
    clocks are capture-relative."""
    from .readers.xla_trace import CAPTURE_RELATIVE_NS, COLLECTIVE
    files = {p for p, _, _ in spans}
    if len(files) < 2:
        return
    first: dict = {}
    for p, lo, _ in spans:
        first[p] = min(lo, first.get(p, lo))
    fmts = con.execute("SELECT source_path, list(DISTINCT source_format) FROM traces GROUP BY 1 ORDER BY 1").fetchall()
    if len(fmts) < 2 or any(f != ["xla-json"] or first.get(p, 0) >= CAPTURE_RELATIVE_NS for p, f in fmts):
        return  # (the GPU ops are read only for such captures: a Kineto or nsys job's may be millions)
    rows = con.execute("""SELECT t.source_path, count(g.name) FROM traces t
                          LEFT JOIN gpu_ops g ON g.trace_id = t.trace_id AND regexp_matches(g.name, ?)
                          GROUP BY 1 ORDER BY 1""", [COLLECTIVE]).fetchall()
    if any(n for _, n in rows):
        warnings.append(f"{rows[0][0]} and {len(rows) - 1} more: times are relative to each capture's start (XLA trace "
                        "JSON records no wall clock): the files' times are comparable only through their collectives")
        return
    raise InputError(rows[1][0], f"has times relative to its capture's start, as {rows[0][0]} has (XLA trace JSON "
                     "records no wall clock), and no file holds a collective: separate captures, not ranks of one "
                     "run? ingest each capture into its own database")


def _refuse_older(con, output):
    """--append adds to a database of this format only (db_format): an older one lacks what the new
    rows' analyses read."""
    if con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'traces'").fetchone()[0]:
        db_format.check(con, output)


def _refuse_views(con, output):
    from . import shard_views
    if shard_views.folder_of(con) is not None:
        raise UsageError(f"{output} was made with --cluster (its tables are views over its shards): --append cannot "
                         "add to it; ingest all the rank files again")


def _build(con, traces, result, options: Options, load, scratch=None):
    """The traces table, with ranks and ids; `load(loads)` then brings their rows in ((trace, trace_id,
    rank) each): into tables (load.load_all, which returns None), or as views over a cluster's shards
    (shard_views, which returns the traces' spans for the one-job check)."""
    from . import fr_load
    append, rank_pattern = options.append, options.rank_pattern
    traces, dumps = fr_load.split(traces)
    existing, taken, next_id = set(), {}, 0
    if append and con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'traces'").fetchone()[0]:
        for tid, rank, path, h, pid, src in con.execute(
                "SELECT trace_id, rank, source_path, source_hash, pid, rank_source FROM traces").fetchall():
            existing.add((h, pid, rank if src == ranks.IN_FILE else None))
            taken[rank] = path
            next_id = max(next_id, tid + 1)
        # (a database of this format only, _refuse_older: it has every table and column already)
    else:
        for schema, name in con.execute("SELECT schema_name, view_name FROM duckdb_views() WHERE NOT internal").fetchall():
            con.execute(f'DROP VIEW IF EXISTS "{schema}"."{name}"')
        for schema, name in con.execute("SELECT schema_name, table_name FROM duckdb_tables()").fetchall():
            con.execute(f'DROP TABLE IF EXISTS "{schema}"."{name}"')
        create_tables(con)
        fr_load.create_tables(con)
    # The same bytes twice (a file given twice, or appended again) would duplicate every row. One
    # file's processes differ by pid, a fused file's ranks by the rank its events name (TraceFuse's
    # NCCL-only file has no host process: every rank's pid is None, and 3 of its 4 ranks were dropped).
    seen, fresh = set(), []
    for t in traces:
        k = (t.source_hash, t.pid, t.rank_hint if t.rank_hint_source == ranks.IN_FILE else None)
        if k in existing:
            result.skipped.append(f"{t.source_path}: already in the database (same content), skipped")
        elif k in seen:
            result.skipped.append(f"{t.source_path}: same content as another input, read once")
        else:
            seen.add(k)
            fresh.append(t)
    if not (fresh := [t for t in fresh if t.source_format != SNAPSHOT]) and not dumps and not append:  # snapshots: below
        raise UsageError("nothing to ingest" + (": a memory snapshot joins its rank's trace; ingest them together" * bool(traces)))
    assigned = ranks.assign(fresh, rank_pattern, taken)  # also drops world sizes a file got wrong
    world = max([t.world_size or 0 for t in fresh] + [0]) or None
    loads = []
    for trace, rank, src in assigned:
        tid = next_id
        next_id += 1
        con.execute("""INSERT INTO traces (trace_id, rank, world_size, source_path, source_format, source_hash,
                       profiler_version, hostname, pid, device_name, clock_offset_ns, rank_source, warnings,
                       unread_device_work)
                       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?, ?)""",
                    [tid, rank, trace.world_size or world, as_text(os.path.abspath(trace.source_path)), trace.source_format,
                     trace.source_hash, trace.profiler_version, trace.hostname, trace.pid, trace.device_name, src,
                     trace.warnings, trace.unread_device_work])
        loads.append((trace, tid, rank))
        result.traces.append({"trace_id": tid, "rank": rank, "file": trace.source_path, "format": trace.source_format,
                              "rank_source": src, **trace.counts})
        result.warnings.extend(f"{trace.source_path}: {w}" for w in trace.warnings)
    _check_one_job(con, load(loads + _snapshot_loads(con, traces, rank_pattern, result)), result.warnings)
    if dumps:
        fr_load.load(con, dumps, scratch, rank_pattern, result)
    n_ranks = con.execute("SELECT count(DISTINCT rank) FROM traces").fetchone()[0]
    con.execute("UPDATE traces SET world_size = ? WHERE world_size IS NULL", [n_ranks])


def _snapshot_loads(con, traces, rank_pattern, result) -> list:
    """Allocator snapshots (readers/memory_snapshot.py) hold no rank: each gets the rank in its file
    name (or the job's only rank) and the trace_id of that rank's trace, whose tables it joins."""
    if not (snapshots := [t for t in traces if t.source_format == SNAPSHOT]):
        return []
    of_rank = {r: tid for tid, r in con.execute("SELECT trace_id, rank FROM traces").fetchall()}
    seen = {h for (h,) in con.execute("SELECT DISTINCT source_hash FROM memory_segments").fetchall()}
    taken: set = set()
    out = []
    for s in snapshots:
        rank = ranks.rank_from_name(s.source_path, rank_pattern)
        if rank is None and len(of_rank) == 1:
            rank = next(iter(of_rank))
        if rank is None:
            raise InputError(s.source_path, f"a memory snapshot names no rank, and the job has {len(of_rank)}: "
                             "put the rank in its file name (rank3_snapshot.pickle) or use --rank-pattern")
        if rank not in of_rank:
            raise InputError(s.source_path, f"a memory snapshot of rank {rank}, but no trace of rank {rank} is in the job")
        if s.source_hash in taken:
            continue  # given twice: _build said so
        if s.source_hash in seen:
            result.skipped.append(f"{s.source_path}: already in the database (same content), skipped")
            continue
        taken.add(s.source_hash)
        out.append((s, of_rank[rank], rank))
        result.warnings.extend(f"{s.source_path}: {w}" for w in s.warnings)
    return out
