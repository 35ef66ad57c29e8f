"""`Job`: one traceflow database and the verbs on it, for the CLI and for Python alike.

    job = traceflow.open("job.duckdb")
    job.query("idle-gaps", rank=3, step=4)     # a polars DataFrame
    job.findings()["sentences"]                # the verdict, computed once per Job
    job.write_report("report.html"); job.write_perfetto("job.perfetto-trace", steps=[4])

The connection is opened read-only at first use and held until `close()` (or the end of a `with`
block), so a report, a Perfetto trace and the verdict of one post-mortem share it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import duckdb
    import polars as pl


@dataclass
class IngestInfo:
    """What one ingest did: the rank files it loaded and what it had to say about them."""
    traces: list[dict] = field(default_factory=list)   # per loaded trace: rank, file, format, rank source, row counts
    warnings: list[str] = field(default_factory=list)  # for the user: what was dropped or assumed, and why
    skipped: list[str] = field(default_factory=list)   # inputs read once or already in the database
    timings: dict = field(default_factory=dict)        # seconds per phase: read, load, derive, packs, critical_path


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
    """A traceflow database. `ingest` (traceflow.ingest) fills `ingest_info`; `open` leaves it empty."""

    def __init__(self, path: str, ingest_info: IngestInfo | None = None):
        self.path = str(path)
        self.ingest_info = ingest_info or IngestInfo()
        self._con: duckdb.DuckDBPyConnection | None = None
        self._findings: dict | None = None

    # what an ingest reported (kept as attributes: `traceflow.ingest(...).warnings`)
    @property
    def database(self) -> str:
        return self.path

    @property
    def warnings(self) -> list[str]:
        return self.ingest_info.warnings

    @property
    def skipped(self) -> list[str]:
        return self.ingest_info.skipped

    @property
    def timings(self) -> dict:
        return self.ingest_info.timings

    @property
    def traces(self) -> list[dict]:
        return self.ingest_info.traces

    # the connection
    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        """The read-only DuckDB connection (opened at first use), locked down: it reads this database
        and its own shard folder and no other file, writes none, and its settings cannot change."""
        if self._con is None:
            from .api import connect
            self._con = connect(self.path)
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

    # the verbs
    def relation(self, pack: str, rank: int | None = None, step: int | None = None) -> duckdb.DuckDBPyRelation:
        """A query pack's table, filtered by rank / step, as a lazy DuckDB relation."""
        from .api import query_relation
        return query_relation(self.con, pack, rank, step)

    def query(self, pack: str, rank: int | None = None, step: int | None = None) -> pl.DataFrame:
        """A query pack's table as a polars DataFrame (`traceflow query DB --list` names the packs)."""
        return self.relation(pack, rank, step).pl()

    def sql(self, text: str) -> pl.DataFrame | None:
        """Any read-only SQL; None for a statement without rows. A statement that writes (COPY,
        EXPORT, ATTACH, INSTALL, ...) raises UsageError; the connection itself refuses files."""
        from .api import check_sql
        from .duck import relation
        check_sql(self.con, text)
        rel = relation(self.con, text)
        return None if rel is None else rel.pl()

    def critical_path(self, step: int | None = None) -> pl.DataFrame:
        """The critical path's segments in time order (all steps, or one)."""
        return self.query("critical-path", step=step)

    @property
    def name(self) -> str:
        """The job's name, for titles: `--name` at ingest, else its input folder or first file (job_name.py)."""
        from .job_name import read
        return read(self.con)

    def ranks(self) -> list[int]:
        return [r[0] for r in self.con.execute("SELECT rank FROM traces ORDER BY rank").fetchall()]

    def rank_summary(self) -> list[tuple]:
        """Per rank: (rank, format, GPU ops, steps, clock offset ns): what `traceflow ingest` prints."""
        return self.con.execute("""
            SELECT t.rank, t.source_format, coalesce(g.n, 0), coalesce(s.n, 0), t.clock_offset_ns FROM traces t
            LEFT JOIN (SELECT trace_id, count(*) AS n FROM gpu_ops GROUP BY ALL) g USING (trace_id)
            LEFT JOIN (SELECT rank, count(*) AS n FROM steps GROUP BY ALL) s USING (rank)
            ORDER BY t.rank""").fetchall()

    def findings(self) -> dict:
        """The verdict's findings (sentences and the facts behind them), computed once per Job."""
        if self._findings is None:
            from .verdict import findings
            self._findings = findings(self.con)
        return self._findings

    def verdict(self) -> str:
        return " ".join(self.findings()["sentences"])

    def whatif(self, steps: list[int] | None = None, **scenario) -> list[dict]:
        """Predicted step times after a fix, by replaying each step's dependency graph (docs/whatif.md).

        scenario: scale_kernels=[(regex, factor)], scale_kind={"compute"|"comm"|"memory": factor},
        remove_host_stall=[rank], no_launch_overhead, no_allocator_calls, no_host_syncs, overlap_comm,
        no_stragglers (booleans).
        Returns one dict per step: measured_ns, replayed_ns, replay_error_pct, predicted_ns, gain_ns,
        and the same per rank under "ranks"; predicted_ns is None (with "refused") where the replay
        of the measured graph is more than 2 % off."""
        from .whatif import Scenario, whatif
        if steps is None:
            steps = [r[0] for r in self.con.execute("SELECT DISTINCT step FROM tf_internal.step_windows ORDER BY step").fetchall()]
        return whatif(self.con, steps, Scenario(**scenario))

    def write_report(self, output: str = "report.html", force: bool = False) -> str:
        """The post-mortem HTML page: one self-contained file that opens offline."""
        from .report.html import write_report
        return write_report(self, output, force=force)

    def write_perfetto(self, output: str = "job.perfetto-trace", ranks: list[int] | None = None,
                       steps: list[int] | None = None, force: bool = False) -> str:
        """A Perfetto trace of the job with traceflow's findings as tracks (gzip-compressed)."""
        from .perfetto import write_trace
        return write_trace(self, output, ranks=ranks, steps=steps, force=force)


def open(path: str) -> Job:  # noqa: A001 - the verb users type: traceflow.open("job.duckdb")
    """The traceflow database at `path` (InputError, exit 3, when it is not one)."""
    job = Job(path)
    job.con  # noqa: B018 - fail here, naming the file, rather than at the first query
    return job
