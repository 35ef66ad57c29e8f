"""`Job`: one traceflow database and the verbs on it, for the CLI and for Python alike.

    job = traceflow.open("job.duckdb")
    job.query("idle-gaps", rank=3, step=4)     # a polars DataFrame
    job.findings()["sentences"]                # the verdict, computed once per Job
    job.write_report("report.html"); job.write_perfetto("job.perfetto-trace", steps=[4])

The connection is opened read-only at first use and held until `close()` (or the end of a `with`
block), so a report, a Perfetto trace and the verdict of one post-mortem share it.

Size: the one public surface (docs/architecture.md): the Job's verbs, and the verbs of no single
database (ingest, diff, scaling, recipe) as functions beside it, each a call into the layer below.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from . import db_format
from .duck import LOGGING_FUNCTIONS, check_read_only, costly_view, lock_down, relation, shadowing_macros, sql_string, unbounded_view, use_internal_schema
from .duck import connect as duck_connect
from .errors import InputError, UsageError, one_line
from .outputs import is_duckdb_file, is_utf8_name, os_problem, parts_folders

if TYPE_CHECKING:
    import polars as pl

    from .compare import Diff
    from .options import Options
    from .packs import PackInfo
    from .pipeline import IngestInfo
    from .scaling_study import Scaling
    from .views import JobView
    from .whatif import Scenario

READS = frozenset({"critical_path", "findings", "findings_steps", "gpu_devices", "gpu_ops", "step_breakdown", "step_windows",
                   "steps", "traces"})  # the tables its SQL reads (tests/test_layers.py)


# What DuckDB raises when traceflow's own SQL meets a table or view that is not as traceflow wrote it
# (a column dropped, a view redefined with other columns or types): the database is damaged.
DAMAGE = ("BinderException", "CatalogException", "ConversionException")


def damaged(path: str, exc: BaseException | None) -> None:
    """Raises InputError naming the database when `exc` is DuckDB's error at reading a traceflow table
    (was exit 1, "internal error (BinderException: ...)"). A user's own SQL (`traceflow sql`) is
    turned into its own error before it gets here."""
    from .interrupts import is_interrupt
    if exc is None or type(exc).__name__ not in DAMAGE or is_interrupt(exc):
        return
    from .errors import InputError, one_line
    raise InputError(path, f"damaged: its tables are not as traceflow wrote them ({type(exc).__name__}: "
                           f"{one_line(exc, 160)}); ingest the traces again") from exc


class Job:
    """A traceflow database. `ingest` (traceflow.ingest) fills `ingest_info`; `open` leaves it None."""

    def __init__(self, path: str, ingest_info: IngestInfo | None = None, source: str | None = None):
        self.path = str(path)
        # where the connection reads, when not yet at `path`: a postmortem's new database, still in
        # its temp file until the report and trace are written too (outputs.replaced_together)
        self._source = source
        self.ingest_info = ingest_info
        self._con: duckdb.DuckDBPyConnection | None = None
        self._findings: dict | None = None

    # what an ingest reported (kept as attributes: `traceflow.ingest(...).warnings`)
    @property
    def warnings(self) -> list[str]:
        return self.ingest_info.warnings if self.ingest_info else []

    @property
    def skipped(self) -> list[str]:
        return self.ingest_info.skipped if self.ingest_info else []

    @property
    def timings(self) -> dict:
        return self.ingest_info.timings if self.ingest_info else {}

    # the connection
    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        """The read-only DuckDB connection (opened at first use), locked down: it reads this database
        and its own shard folder and no other file, writes none, and its settings cannot change."""
        if self._con is None:
            self._con = connect(self._source or self.path, parts_of=self.path)
        return self._con

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None

    def __enter__(self) -> Job:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.close()
        damaged(self.path, exc)

    def __repr__(self) -> str:
        return f"Job({self.path!r})"

    def _repr_html_(self) -> str:
        """How a notebook shows a Job: its name, the verdict's headline (its first two sentences: the steps
        analysed, then the finding that leads) and the
        step table: per step, the GPU window across ranks and its parts (mean over ranks, % of each
        rank's window), as step_breakdown holds them."""
        import html
        e = html.escape
        sentences = self.findings()["sentences"]
        rows = self.con.execute("""
            SELECT w.step, w.wall_ns, b.compute_pct, b.exposed_comm_pct, b.exposed_memory_pct, b.idle_pct, b.ranks
            FROM (SELECT step, max(end_ns) - min(start_ns) AS wall_ns FROM tf_internal.step_windows GROUP BY step) w
            JOIN (SELECT step, avg(compute_pct) AS compute_pct, avg(exposed_comm_pct) AS exposed_comm_pct,
                         avg(exposed_memory_pct) AS exposed_memory_pct, avg(idle_pct) AS idle_pct, count(*) AS ranks
                  FROM step_breakdown WHERE part = 'step' GROUP BY step) b USING (step)
            ORDER BY w.step""").fetchall()
        head = ("<tr><th>step</th><th>step time (ms)</th><th>compute %</th><th>exposed comm %</th>"
                "<th>exposed memory %</th><th>idle %</th><th>ranks</th></tr>")
        body = "".join(f"<tr><td>{st}</td><td>{wall / 1e6:,.1f}</td>" + "".join(f"<td>{v:.1f}</td>" for v in (c, m, x, i))
                       + f"<td>{n}</td></tr>" for st, wall, c, m, x, i, n in rows)
        return (f"<div class=\"traceflow-job\"><b>traceflow: {e(self.name)}</b> <code>{e(self.path)}</code>"
                f"<p>{e(' '.join(sentences[:2])) if sentences else 'no verdict: no step was analysed'}</p>"
                f"<table><thead>{head}</thead><tbody>{body}</tbody></table>"
                f"<p><small>job.verdict() for the whole verdict; job.write_report(...) for the report</small></p></div>")

    # the verbs
    def relation(self, pack: str, rank: int | None = None, step: int | None = None) -> duckdb.DuckDBPyRelation:
        """A query pack's table, filtered by rank / step, as a lazy DuckDB relation."""
        return relation(self.con, self.pack_sql(pack, rank, step))

    def pack_sql(self, pack: str, rank: int | None = None, step: int | None = None) -> str:
        """The SELECT that `relation` runs for a pack: the query behind its rows, to re-run through `sql`."""
        from . import packs
        table = packs.table_of(pack)
        if table is None:
            raise UsageError(f"no query pack named {pack!r}; `traceflow query DB --list` lists them")
        cols = [r[0] for r in self.con.execute(f"DESCRIBE {table}").fetchall()]
        where = _filters(rank, step, cols)
        order = packs.default_order(table)
        return f"SELECT * FROM {table}{where}" + (f" ORDER BY {order}" if order else "")

    def query(self, pack: str, rank: int | None = None, step: int | None = None) -> pl.DataFrame:
        """A query pack's table as a polars DataFrame (`traceflow query DB --list` names the packs)."""
        return self.relation(pack, rank, step).pl()

    def sql(self, text: str) -> pl.DataFrame | None:
        """Any read-only SQL; None for a statement without rows. A statement that writes (COPY,
        EXPORT, ATTACH, INSTALL, ...) raises UsageError; the connection itself refuses files."""
        _check_sql(self.con, text)
        rel = relation(self.con, text)
        return None if rel is None else rel.pl()

    def execute(self, text: str) -> duckdb.DuckDBPyConnection:
        """Any read-only SQL statement as DuckDB runs it (rows fetched as tuples: `traceflow sql`);
        an SQL error, or a statement that writes, is a UsageError, in one line."""
        _check_sql(self.con, text)
        try:
            return self.con.execute(text)
        except duckdb.Error as e:
            raise UsageError(f"SQL error: {one_line(e)}") from None

    def page(self, text: str, offset: int = 0, limit: int = 50, seconds: float = 10.0) -> dict:
        """One page of a read-only query's rows, bounded: a query that would scan without bound is
        refused (sql_bounds.unbounded) and one that runs past `seconds` stopped, each a UsageError
        with the reason. Returns {sql, columns, rows (tuples), total, offset}; a statement without
        rows (SET, a temp table) gives columns None."""
        from .sql_bounds import interrupt_after, unbounded
        _check_sql(self.con, text)
        if why := unbounded(text):
            raise UsageError(why)
        with interrupt_after(self.con, seconds) as stopped:
            try:
                rel = relation(self.con, text)
                if rel is None:
                    return {"sql": text, "columns": None, "rows": [], "total": 0, "offset": 0}
                total = rel.aggregate("count(*)").fetchone()[0]
                rows = rel.limit(max(0, int(limit)), max(0, int(offset))).fetchall()
            except duckdb.Error as e:
                if stopped.is_set():
                    raise UsageError(f"stopped after {seconds:g} s, the bound on one query: narrow it (a filter, "
                                     "an aggregate, fewer joins)") from None
                raise UsageError(f"SQL error: {one_line(e)}") from None
        return {"sql": text, "columns": list(rel.columns), "rows": rows, "total": total, "offset": max(0, int(offset))}

    def glance(self) -> list[dict]:
        """The job at a glance, as facts: {"what", "sql", "rows"}, each `rows` what its `sql` returns
        (re-run it through `sql` for the same rows): ranks and their profilers, GPUs, steps, GPU ops,
        warnings, what the traces cannot give, and the verdict's headline with its first finding."""
        facts = [
            ("ranks and their profilers", "SELECT rank, source_format AS profiler, profiler_version, hostname, device_name, "
             "world_size FROM traces ORDER BY rank"),
            ("GPUs", "SELECT rank, device, gpu_uuid, bus_id, hostname FROM gpu_devices ORDER BY rank, device"),
            ("steps (GPU window across ranks; a warm-up step is left out of the comparisons)",
             "SELECT step, wall_ns, warmup FROM findings_steps ORDER BY step"),
            ("median step time (the verdict's)", "SELECT round(median(wall_ns)) AS median_step_ns, count(*) AS steps "
             "FROM findings_steps WHERE NOT warmup OR (SELECT bool_and(warmup) FROM findings_steps)"),
            ("GPU ops per rank", "SELECT rank, count(*) AS gpu_ops, sum(end_ns - start_ns) AS gpu_busy_ns "
             "FROM gpu_ops GROUP BY rank ORDER BY rank"),
            ("warnings from ingest", "SELECT rank, unnest(warnings) AS warning FROM traces ORDER BY rank"),
            ("what these traces cannot give", "SELECT evidence AS figure, note AS why, ranks, share_pct, n "
             "FROM findings WHERE kind = 'cannot_answer' ORDER BY evidence"),
        ]
        out: list[dict[str, Any]] = []
        for what, sql in facts:
            rel = self.con.execute(sql)
            cols = [d[0] for d in rel.description]
            out.append({"what": what, "sql": sql, "rows": [dict(zip(cols, r)) for r in rel.fetchall()]})
        f = self.findings()
        first = self.finding_rows()[:1]
        out.append({"what": "headline (the verdict's first sentences; the first finding's row below it)",
                    "sentences": f["sentences"][:3], "sql": first[0]["sql"] if first else None,
                    "rows": first})
        return out

    def finding_rows(self) -> list[dict]:
        """The verdict's findings as rows, most important first: every column of the findings tables
        (verdict.FINDING_TABLES), the row's `sentence`, and `sql`: a SELECT that returns the row."""
        from .verdict import FINDING_TABLES
        union = " UNION ALL BY NAME ".join(f"SELECT * FROM {t}" for t in FINDING_TABLES)
        out = []
        for row in self.findings()["findings"]:
            keys = [k for k in ("kind", "rank", "step", "class", "cause", "evidence") if k in row]
            where = " AND ".join(f'"{k}" IS NOT DISTINCT FROM {_literal(row[k])}' for k in keys)
            out.append({**row, "sql": f"SELECT * FROM ({union}) WHERE {where}"})
        return out

    def describe(self, table: str | None = None) -> dict:
        """A table or view: its meaning, and each column's type, unit (its declared role) and meaning (the
        COMMENT ONs the packs' headers wrote, comments.py); without `table`, the tables with the first sentence of
        each. Helper tables (schema tf_internal) are described too. A name the job lacks: UsageError."""
        listing = ("SELECT table_name, schema_name, comment FROM duckdb_tables() WHERE database_name = current_database() "
                   "UNION ALL SELECT view_name, schema_name, comment FROM duckdb_views() "
                   "WHERE database_name = current_database() AND NOT internal ORDER BY 2, 1")
        tables = self.con.execute(listing).fetchall()
        if table is None:
            return {"sql": listing, "tables": [{"table": t, "schema": s, "meaning": (c or "").split(". ")[0]}
                                               for t, s, c in tables]}
        match = [(t, s, c) for t, s, c in tables if t == table or f"{s}.{t}" == table]
        if not match:
            raise UsageError(f"no table or view named {table!r}; describe_table without a name lists them")
        name, schema, comment = match[0]
        sql = ("SELECT column_name, data_type, comment FROM duckdb_columns() WHERE database_name = current_database() "
               f"AND schema_name = {_literal(schema)} AND table_name = {_literal(name)} ORDER BY column_index")
        from .graph import declared_tables
        roles = {c.name: c.role for c in d.columns} if (d := declared_tables().get(name)) else {}
        cols = [{"column": c, "type": t, "unit": _unit(c, roles.get(c)), "meaning": m} for c, t, m in self.con.execute(sql).fetchall()]
        return {"table": name, "schema": schema, "meaning": comment, "sql": sql, "columns": cols}

    # The critical path's table on a terminal leaves out segments under this share of their step's
    # path: the bundled job's step 4 is 1,308 segments, 1,291 of them 1 us - 0.5 ms idle gaps, copies
    # and launches (10.9 ms of its 531.5 ms); the table showed its first 50, all of 1-8 us, and none of
    # the 17 that make the step.
    MINOR_SEGMENT_PCT = 0.1

    def major_segments(self, rank: int | None = None, step: int | None = None) -> tuple[duckdb.DuckDBPyRelation, tuple[int, int]]:
        """The critical path's segments of at least MINOR_SEGMENT_PCT of their step's path, in time
        order, and (count, ns) of the others."""
        inner = self.relation("critical-path", rank, step).sql_query()
        base = f"""SELECT *, (end_ns - start_ns) * 100.0 < {self.MINOR_SEGMENT_PCT}
                              * sum(end_ns - start_ns) OVER (PARTITION BY step) AS _minor FROM ({inner})"""
        row = self.con.execute(f"SELECT count(*), coalesce(sum(end_ns - start_ns), 0) FROM ({base}) WHERE _minor").fetchone()
        n, ns = row if row else (0, 0)
        shown = relation(self.con, f"SELECT * EXCLUDE (_minor) FROM ({base}) WHERE NOT _minor ORDER BY step, ordinal")
        return shown, (int(n), int(ns))

    def critical_path(self, step: int | None = None) -> pl.DataFrame:
        """The critical path's segments in time order (all steps, or one)."""
        return self.query("critical-path", step=step)

    def critical_path_summary(self, step: int) -> dict:
        """One step's critical path by kind and rank: {"sql", "rows"}, the rows what the sql returns."""
        sql = ("SELECT kind, rank, sum(dur_ns) AS path_ns, count(*) AS segments, "
               "round(100.0 * sum(dur_ns) / sum(sum(dur_ns)) OVER (), 1) AS share_pct "
               f"FROM critical_path WHERE step = {int(step)} GROUP BY kind, rank ORDER BY path_ns DESC, kind, rank")
        rel = self.con.execute(sql)
        cols = [d[0] for d in rel.description]
        return {"sql": sql, "rows": [dict(zip(cols, r)) for r in rel.fetchall()]}

    def step_time_sql(self) -> str:
        """The SELECT giving each step's measured time (the GPU window across ranks, ns): what the
        verdict and the what-if call a step's time."""
        return "SELECT step, wall_ns AS measured_ns FROM findings_steps ORDER BY step"

    @property
    def name(self) -> str:
        """The job's name, for titles: `--name` at ingest, else its input folder or first file (job_name.py)."""
        from .job_name import read
        return read(self.con)

    def ranks(self) -> list[int]:
        """The job's ranks, in order."""
        return [r[0] for r in self.con.execute("SELECT rank FROM traces ORDER BY rank").fetchall()]

    def steps(self) -> list[int]:
        """The job's step numbers, in order."""
        return [r[0] for r in self.con.execute("SELECT DISTINCT step FROM tf_internal.step_windows ORDER BY step").fetchall()]

    def rank_summary(self) -> list[tuple]:
        """Per rank: (rank, format, GPU ops, steps, clock offset ns): what `traceflow ingest` prints."""
        return self.con.execute("""
            SELECT t.rank, t.source_format, coalesce(g.n, 0), coalesce(s.n, 0), t.clock_offset_ns FROM traces t
            LEFT JOIN (SELECT trace_id, count(*) AS n FROM gpu_ops GROUP BY ALL) g USING (trace_id)
            LEFT JOIN (SELECT rank, count(*) AS n FROM steps GROUP BY ALL) s USING (rank)
            ORDER BY t.rank""").fetchall()

    def why_empty(self, pack: str) -> str | None:
        """Why a pack has no rows where the job lacks its input (a memory pack without memory events), else None."""
        from .memory import hint
        return hint(self.con, pack)

    def dump_count(self) -> int:
        """Flight Recorder dumps in the database (docs/hang-forensics.md)."""
        from .hang import dump_count
        return dump_count(self.con)

    def findings(self) -> dict:
        """The verdict's findings (sentences and the facts behind them), computed once per Job."""
        if self._findings is None:
            from .verdict import findings
            self._findings = findings(self.con)
        return self._findings

    def verdict(self, explain: bool = False) -> str:
        """The verdict read in 30 seconds (a headline, at most five findings, the caveats), or with
        `explain` every sentence (docs/findings.md)."""
        from .verdict import text
        return text(self.findings(), explain)

    def whatif(self, steps: list[int] | None = None, scenario: Scenario | None = None, **fields) -> list[dict]:
        """Predicted step times after a fix, by replaying each step's dependency graph (docs/whatif.md).

        scenario: a whatif.Scenario (parse_scenario makes one from the command line's strings), or its
        fields: scale_kernels=[(regex, factor)], scale_kind={"compute"|"comm"|"memory": factor},
        remove_host_stall=[rank], no_launch_overhead, no_launch_stall, no_allocator_calls, no_host_syncs, host_ranks=[rank],
        overlap_comm, no_stragglers (booleans). A step or rank the job does not have is a UsageError,
        and so is host_ranks without an edit to apply on them.
        Returns one dict per step: measured_ns, replayed_ns, replay_error_pct, predicted_ns, gain_ns,
        and the same per rank under "ranks"; predicted_ns is None (with "refused") where the replay
        of the measured graph is more than 2 % off."""
        from .whatif import Scenario, whatif
        scenario = scenario or Scenario(**fields)
        have = self.steps()
        if missing := [s for s in steps or () if s not in have]:
            raise UsageError(f"--step {missing[0]}: the job has steps {', '.join(map(str, have)) or 'none'}")
        # a rank the job lacks predicted a gain of 0 in silence, as --on-rank did with nothing to apply
        ranks = self.ranks()
        for flag, given in (("--remove-host-stall", scenario.remove_host_stall), ("--on-rank", scenario.host_ranks)):
            if any(r not in ranks for r in given):
                raise UsageError(f"{flag} {next(r for r in given if r not in ranks)}: the job has ranks "
                                 f"{', '.join(map(str, ranks)) or 'none'}")
        if scenario.host_ranks and not scenario.edits_host():
            raise UsageError("--on-rank applies --no-launch-overhead, --no-launch-stall, --no-allocator-calls or "
                             "--no-host-syncs: give one")
        return whatif(self.con, list(steps or have), scenario)

    def write_report(self, output: str = "report.html", force: bool = False) -> str:
        """The post-mortem HTML page: one self-contained file that opens offline."""
        from .pages.html import write_report
        return write_report(self.view(), output, force=force)

    def write_perfetto(self, output: str = "job.perfetto-trace", ranks: list[int] | None = None,
                       steps: list[int] | None = None, force: bool = False) -> str:
        """A Perfetto trace of the job with traceflow's findings as tracks (gzip-compressed)."""
        from .perfetto import write_trace
        return write_trace(self.view(), output, ranks=ranks, steps=steps, force=force)

    def view(self) -> JobView:
        """What an output draws from (views.JobView): the connection, path, name and findings, read-only."""
        from .views import JobView
        return JobView(self.con, self.path, self.name, self.findings)


def ingest(files, output: str = "traceflow.duckdb", options: Options | None = None, *, progress=None, **settings) -> Job:
    """Read rank files (nsys SQLite / .nsys-rep / Kineto JSON, or folders of them) into the DuckDB
    database `output` and open it. The settings: `options` (traceflow.Options), or its fields as
    keywords (append, align, jobs, step_pattern, max_inflate, cluster, ...: options.py), checked
    before any work. The Job's `warnings`, `skipped` and `timings` say what the ingest did."""
    from .outputs import staged
    from .pipeline import ingest as build
    info = build(files, output, options, progress=progress, **settings)
    return Job(str(Path(output)), info, source=staged(output))


def input_files(files) -> list[str]:
    """The trace files `files` stand for (a folder: the trace files in it), found once per command."""
    from .pipeline import expand
    return expand(files)


def packs() -> list[PackInfo]:
    """The query packs, with a line on each (`traceflow query --list`)."""
    from .packs import listing
    return listing()


def parse_scenario(*options, **named) -> Scenario:
    """A what-if Scenario from the command line's strings (whatif.parse_scenario)."""
    from .whatif import parse_scenario as parse
    return parse(*options, **named)


def diff(a: str, b: str, step_a: int | None = None, step_b: int | None = None) -> Diff:
    """What changed between run `a` and run `b` (databases, or trace files / folders), and why (compare.py)."""
    from .compare import diff as compare
    return compare(a, b, step_a=step_a, step_b=step_b)


def scaling(paths: list[str], mode: str = "strong") -> Scaling:
    """How step time scales with the rank count over runs of one model (scaling_study.py)."""
    from .scaling_study import scaling as study
    return study(paths, mode=mode)


def recipe(name: str, files: list[str], database: str, nsys: str | None = None) -> list[tuple[str, int]]:
    """An Nsight Systems recipe's outputs loaded into `database` as recipe_<name>_<table> (recipes.py)."""
    from .recipes import load_recipe
    return load_recipe(name, files, database, nsys=nsys)


def open(path: str) -> Job:  # noqa: A001 - the verb users type: traceflow.open("job.duckdb")
    """The traceflow database at `path` (InputError, exit 3, when it is not one)."""
    job = Job(path)
    job.con  # noqa: B018 - fail here, naming the file, rather than at the first query
    return job


def connect(database: str, parts_of: str | None = None) -> duckdb.DuckDBPyConnection:
    """A read-only DuckDB connection to a traceflow database of this format (db_format), locked down
    (duck.lock_down): it reads the database and its own shard folder, nothing else, and writes nothing.
    `parts_of`: the path whose shard folders are the database's (its target, while it is a temp file)."""
    if not os.path.exists(database):
        raise InputError(database, "no such database (run `traceflow ingest` first)")
    if os.path.isdir(database):
        raise InputError(database, "is a folder, not a traceflow database")
    if not is_utf8_name(os.path.abspath(database)):
        raise InputError(database, "its name is not valid UTF-8, which DuckDB cannot open: rename it")
    try:
        os.close(os.open(database, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC))
    except OSError as e:
        raise InputError(database, f"cannot read it ({os_problem(e)})") from None
    if not is_duckdb_file(database):  # an nsys .sqlite, a trace, a FIFO: never handed to DuckDB
        raise InputError(database, "not a DuckDB database (run `traceflow ingest` on trace files first)")
    # Attached to a connection of its own rather than opened by duckdb.connect(path): DuckDB shares
    # one instance per file among a process's connect() calls and refuses a second one with other
    # settings (a user's own duckdb.connect(path), open beside a Job, made traceflow.open fail), and
    # the locked settings would have reached that user's connection. DuckDB spills where it would
    # for the file itself, beside it (<db>.tmp), never into the current folder.
    # Locked before the database is attached: nothing of a database someone sent (a macro, a view)
    # exists on the connection until no setting can change and no other file can be reached.
    real = os.path.realpath(database)
    con = duck_connect(config={"temp_directory": f"{real}.tmp"})
    try:
        lock_down(con, [str(p) for p in parts_folders(parts_of or database)], [real, f"{real}.wal"])
        con.execute(f"ATTACH {sql_string(real)} AS {_alias(real)} (READ_ONLY)")
        con.execute(f"USE {_alias(real)}")
    except duckdb.Error as e:
        con.close()
        raise InputError(database, f"not a readable DuckDB database ({one_line(e)})") from None
    try:
        _check_macros(con, database, _alias(real).strip('"'))
        _check_views(con, database)
        use_internal_schema(con)
        db_format.check(con, database)
        _check_parts(con, database, parts_of or database)
    except duckdb.Error as e:
        con.close()
        raise InputError(database, f"not a readable DuckDB database ({one_line(e)})") from None
    except BaseException:
        con.close()
        raise
    return con


def _alias(path: str) -> str:
    """The database's name in SQL: its file's stem, as `duckdb job.duckdb` names it, where that is
    a plain name DuckDB does not keep for itself; else `job`."""
    stem = os.path.basename(path).split(".")[0]
    ok = stem.isidentifier() and stem.isascii() and stem.lower() not in ("memory", "system", "temp", "main")
    return f'"{stem}"' if ok else "job"


def _check_macros(con, database: str, catalog: str):
    """A database holding a macro named like one of DuckDB's functions (duck.shadowing_macros) is
    refused: `CREATE MACRO round(x) AS ...` in it ran in place of DuckDB's round in traceflow's own
    SQL (internal errors; `current_setting` fooled the lock-down)."""
    names = shadowing_macros(con, catalog)
    if names:
        raise InputError(database, f"it holds a macro named {names[0]}, like DuckDB's own function, which traceflow "
                         "never writes: not a database traceflow wrote")


def _check_views(con, database: str):
    """A database whose views call DuckDB's logging functions (duck.LOGGING_FUNCTIONS) is refused
    before any is read: reading one on the locked connection aborts the process. So is one whose view
    has no bound on its cost (duck.unbounded_view: range(), a recursive CTE), which ran until killed."""
    for db, schema, name, text in con.execute("SELECT database_name, schema_name, view_name, sql FROM "
                                              "system.main.duckdb_views() WHERE NOT internal").fetchall():
        found = LOGGING_FUNCTIONS.search(text or "")
        if found:
            raise InputError(database, f"its view {name} calls {found.group(1).lower()}, which traceflow never runs: "
                             "not a database traceflow wrote")
        why = unbounded_view(con, text)
        if why is not None:
            raise InputError(database, f"its view {name} reads {why}, which traceflow never writes (its cost has no "
                             "bound): not a database traceflow wrote")
        why = costly_view(con, ".".join(f'"{x.replace(chr(34), chr(34) * 2)}"' for x in (db, schema, name)))
        if why is not None:
            raise InputError(database, f"its view {name} reads {why}, which traceflow never writes (its cost has no "
                             "bound): not a database traceflow wrote")


def _check_parts(con, database: str, parts_of: str):
    """A cluster job's tables read the Parquet shards in its parts folder: say so when it is gone,
    or not where it was made, beside the database (the only folder its connection may read)."""
    from .shard_views import folder_of
    folder = folder_of(con)
    if folder is None:
        return
    if not os.path.isdir(folder):
        raise InputError(database, f"its tables are views over the Parquet shards in {folder}, which is gone "
                         "(moved or deleted): keep that folder where it was, or ingest the rank files again")
    if os.path.realpath(folder) not in {str(p) for p in parts_folders(parts_of)}:
        raise InputError(database, f"its tables are views over the Parquet shards in {folder}, which is not beside "
                         "it: traceflow reads only a database's own shard folder; ingest the rank files again")


def _check_sql(con, text: str) -> None:
    """UsageError unless every statement of `text` only reads (duck.check_read_only)."""
    try:
        check_read_only(con, text)
    except ValueError as e:
        raise UsageError(str(e)) from None
    except duckdb.Error as e:
        raise UsageError(f"SQL error: {one_line(e)}") from None


def _filters(rank, step, columns):
    """The WHERE clause for --rank / --step, with the numbers written in (int() checks them): DuckDB
    1.5 runs a relation with parameters several times slower (launch-overhead --rank 3 of the nsys
    x16 bench: 1.57 s against 0.30 s)."""
    where = []
    if rank is not None:
        if "rank" not in columns:
            raise UsageError("this pack has no rank column; drop --rank")
        where.append(f"rank = {int(rank)}")
    if step is not None:
        if "step" not in columns:
            raise UsageError("this pack has no step column; drop --step")
        where.append(f"step = {int(step)}")
    return (" WHERE " + " AND ".join(where)) if where else ""


def _literal(v) -> str:
    """A value as an SQL literal, for a WHERE clause that finds a row again."""
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    return sql_string(str(v))


def _unit(column: str, role: str | None) -> str | None:
    """A column's unit, as its table's declaration gives it (role figure:<unit>; a time: ns; None for
    the other roles, and for `mixed`: the row names it); a column traceflow did not declare (a table
    a user made): its name's suffix (_ns, _pct, bytes), never words parsed out of its comment."""
    if role is not None:
        return "ns" if role.startswith("time") else role[7:] if role.startswith("figure:") and role != "figure:mixed" else None
    for suffix, unit in (("_ns", "ns"), ("_us", "us"), ("_ms", "ms"), ("_pct", "percent"), ("bytes", "bytes"),
                         ("_gbps", "gbps"), ("_tflops", "tflops"), ("flops", "flop")):
        if column.endswith(suffix) or column == suffix.lstrip("_"):
            return unit
    return None
