"""`traceflow mcp`: a Model Context Protocol server over stdio on one job's database (docs/mcp.md).

Each tool is a thin call of a Job method; what it adds is the bound on every reply and one-line
errors. Bounds: no reply over MAX_CHARS (10,000 tokens at 4 characters a token): rows come a page
at a time with a cursor and the count that remains, a long text value is cut with a marker, and a
query that would scan without bound is refused with the reason or stopped after QUERY_SECONDS.
Evidence: each figure comes with the `sql` that returns it on the same database (the `sql` tool
runs it); the what-if and the diff, computed in Python, say so instead.

Read-only by construction: every query goes through the Job's locked-down connection (duck.lock_down:
no file but the database, no setting changed, statements that write refused by kind).

Imported only by `traceflow mcp` (the `mcp` extra): `import traceflow.cli` does not import it.

Size: nine tools, each a thin call of a Job method, plus the one place that bounds and pages every reply.
"""
from __future__ import annotations

import functools
import json
import math
import os
import threading
from typing import Any

from .errors import InputError, UsageError, one_line
from .job import Job, packs, parse_scenario
from .job import diff as job_diff

MAX_CHARS = 40_000     # a reply's bound: 10,000 tokens at 4 characters a token
MAX_TEXT = 1_000       # a text value longer than this is cut, with a marker saying how much
MAX_LIST = 64          # likewise a list value in a row (a finding's ranks, a range())
PAGE = 50              # rows per page by default
MAX_PAGE = 500
QUERY_SECONDS = 10.0   # one query's time bound

INSTRUCTIONS = """traceflow: one multi-rank GPU job's profiles in a read-only DuckDB database.
Start with job_at_a_glance, then findings. Times are ns unless a column says otherwise; steps are the
profiler's step numbers. Every figure comes with the SQL that produced it: run it with the sql tool
to check it. Rows come a page at a time: pass next_cursor back as cursor for the next page."""


def cut(value: Any) -> Any:
    """A value fit for a reply: long text and long lists cut with a marker, NaN as null."""
    if isinstance(value, str) and len(value) > MAX_TEXT and not _marked(value[MAX_TEXT:]):
        return value[:MAX_TEXT] + f"…[cut: {len(value) - MAX_TEXT:,} more characters]"
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, (dict, list, tuple)) for v in value):
        return [cut(v) for v in value]  # a reply's own rows (a page, tables, facts): bounded by its size, not cut here
    if isinstance(value, (list, tuple)) and value and isinstance(value[-1], str) and _marked(value[-1]):
        return [cut(v) for v in value]  # cut already
    if isinstance(value, (list, tuple)):
        items = [cut(v) for v in value[:MAX_LIST]]
        return items + ([f"…[cut: {len(value) - MAX_LIST:,} more items]"] if len(value) > MAX_LIST else [])
    if isinstance(value, dict):
        return {k: cut(v) for k, v in value.items()}
    return value


def _marked(text: str) -> bool:
    return text.startswith("…[cut: ")


def dumps(obj: Any) -> str:
    return json.dumps(obj, default=str, ensure_ascii=False, separators=(",", ":"))


def reply(obj: dict) -> str:
    """The reply's text; past MAX_CHARS (a what-if of many steps, a diff's sentences) its longest
    values are cut until it fits, the cut marked."""
    text = dumps(cut(obj))
    tries = 0
    while len(text) > MAX_CHARS:
        tries += 1
        obj = _halve_longest(cut(obj))
        text = dumps(obj)
        if tries > 40:
            return dumps({"error": "the reply would be over the bound of 10,000 tokens; ask for less (a step, a table)"})
    return text


def _halve_longest(obj: Any) -> Any:
    """`obj` with its longest list halved (marked), or its longest string halved."""
    best: list = [None, None, -1]  # container, key, size

    def walk(o):
        items = o.items() if isinstance(o, dict) else enumerate(o) if isinstance(o, list) else ()
        for k, v in items:
            n = len(dumps(v))
            if isinstance(v, (list, str)) and n > best[2]:
                best[:] = [o, k, n]
            walk(v)
    walk(obj)
    parent, key, _ = best
    if parent is not None:
        v = parent[key]
        half = len(v) // 2
        parent[key] = v[:half] + ([f"…[cut: {len(v) - half:,} more items to keep the reply under 10,000 tokens]"]
                                  if isinstance(v, list) else f"…[cut: {len(v) - half:,} more characters]")
    return obj


def paged(head: dict, page: dict, limit: int) -> str:
    """A page of rows (Job.page's) in a reply: as many of its rows as fit under MAX_CHARS, with the
    cursor of the next page and how many rows remain."""
    offset, total = page["offset"], page["total"]
    base = {**head, **{k: page[k] for k in ("sql", "columns") if page.get(k) is not None},
            "total_rows": total, "offset": offset}
    room = MAX_CHARS - len(dumps(cut(base))) - 200
    rows: list = []
    for r in page["rows"][:limit]:
        r = cut(r) if isinstance(r, dict) else [cut(v) for v in r]  # cells cut, never the row's columns
        room -= len(dumps(r)) + 1
        if room < 0 and rows:
            break
        rows.append(r)
    shown = offset + len(rows)
    more = max(0, total - shown)
    return reply({**base, "rows": rows, "returned": len(rows), "remaining": more, "next_cursor": shown if more else None})


def _page_args(cursor: int, limit: int) -> tuple[int, int]:
    if cursor < 0:
        raise UsageError(f"cursor {cursor}: a row offset, 0 or more (the next_cursor of the last reply)")
    if not 1 <= limit <= MAX_PAGE:
        raise UsageError(f"limit {limit}: from 1 to {MAX_PAGE}")
    return cursor, limit


class Server:
    """The tools over one Job; `others`: the databases (or trace folders) `diff` may compare with,
    as named on the command line: no other path is opened."""

    def __init__(self, job: Job, others: list[str] | None = None):
        self.job = job
        self.others = list(others or [])
        self.lock = threading.Lock()  # one DuckDB connection; the SDK runs each call in a worker thread

    def check_step(self, step: int | None) -> None:
        if step is not None and step not in (have := self.job.steps()):
            raise UsageError(f"step {step}: the job has steps {', '.join(map(str, have)) or 'none'}")

    def check_rank(self, rank: int | None) -> None:
        if rank is not None and rank not in (have := self.job.ranks()):
            raise UsageError(f"rank {rank}: the job has ranks {', '.join(map(str, have)) or 'none'}")

    # -- the tools --------------------------------------------------------------------------------
    def job_at_a_glance(self) -> str:
        """The job at a glance: its ranks and profilers, GPUs, steps and their times, GPU ops per
        rank, ingest warnings, what the traces cannot give, and the verdict's headline with its first
        finding. Each fact comes with the SQL that returns its rows. Call this first."""
        return reply({"job": self.job.name, "facts": self.job.glance()})

    def findings(self, cursor: int = 0, limit: int = 20) -> str:
        """The verdict's findings, most important first (priority 0 the job stopped, 1 a fault, 2 the
        dominant cause, 3 a caveat, 4 a note): every column of each finding row (rank, step, cause,
        cost_ns, value_ns, baseline_ns, share_pct, evidence, ...), its sentence in words, and `sql`:
        the SELECT that returns that row. Answers "why is it slow", "which rank held up step N"."""
        cursor, limit = _page_args(cursor, limit)
        rows = self.job.finding_rows()
        page = {"offset": cursor, "total": len(rows),
                "rows": [{k: v for k, v in r.items() if v is not None} for r in rows[cursor:cursor + limit]]}
        return paged({"tool": "findings"}, page, limit)

    def list_analyses(self) -> str:
        """The analyses (query packs) with a line on each: idle-gaps, launch-overhead,
        exposed-comm, stragglers, critical-path, step-breakdown, memory ... Run one with run_analysis."""
        return reply({"analyses": [{"name": p.name, "table": p.table, "what": p.description} for p in packs()]})

    def run_analysis(self, name: str, rank: int | None = None, step: int | None = None, cursor: int = 0,
                     limit: int = PAGE) -> str:
        """One analysis's rows (name as list_analyses gives it, e.g. 'idle-gaps', 'step-breakdown',
        'exposed-comm'), optionally for one rank and/or one step, a page at a time. The reply's `sql`
        is the query behind the rows."""
        cursor, limit = _page_args(cursor, limit)
        self.check_rank(rank)
        self.check_step(step)
        page = self.job.page(self.job.pack_sql(name, rank, step), cursor, limit, QUERY_SECONDS)
        return paged({"tool": "run_analysis", "analysis": name, "rank": rank, "step": step}, page, limit)

    def describe_table(self, table: str | None = None) -> str:
        """A table's meaning and its columns' types, units and meanings (from the database's own
        COMMENT ONs); without a name, every table and view with a line on each."""
        return reply(self.job.describe(table))

    def sql(self, query: str, cursor: int = 0, limit: int = PAGE) -> str:
        """Read-only SQL (DuckDB dialect) on the job's database, a page of rows at a time. Writes,
        COPY, ATTACH, files and settings are refused; a recursive CTE or an unbounded generator is
        refused, and a query running past 10 s is stopped. describe_table names the columns."""
        cursor, limit = _page_args(cursor, limit)
        return paged({"tool": "sql"}, self.job.page(query, cursor, limit, QUERY_SECONDS), limit)

    def critical_path(self, step: int, cursor: int = 0, limit: int = PAGE) -> str:
        """The critical path of one step across ranks: its time by kind (compute, communication,
        host, launch, idle ...) and rank, then its segments in time order, a page at a time."""
        cursor, limit = _page_args(cursor, limit)
        self.check_step(step)
        summary = self.job.critical_path_summary(step)
        page = self.job.page(self.job.pack_sql("critical-path", step=step), cursor, limit, QUERY_SECONDS)
        return paged({"tool": "critical_path", "step": step, "by_kind_and_rank": summary}, page, limit)

    def whatif(self, steps: list[int] | None = None, scale_kernels: list[str] | None = None,
               scale_kind: list[str] | None = None, remove_host_stall: list[int] | None = None,
               no_launch_overhead: bool = False, no_allocator_calls: bool = False, no_host_syncs: bool = False,
               on_rank: list[int] | None = None, overlap_comm: bool = False, no_stragglers: bool = False,
               no_launch_stall: bool = False) -> str:
        """What would a fix gain? Replays each step's dependency graph with edited durations and
        predicts the step time (ns). scale_kernels: ['REGEX=FACTOR'] on kernel names; scale_kind:
        ['compute=0.5' | 'comm=0.8' | 'memory=0.5'] (memory=0.5: copies twice as fast, what pinned
        host memory gives a pageable copy); remove_host_stall: ranks; no_launch_overhead,
        no_launch_stall (stalled launch calls: a lazy module load), no_allocator_calls, no_host_syncs
        (on_rank: only those ranks); overlap_comm; no_stragglers.
        A replay more than 2 % off the measured step is refused for that step."""
        scenario = parse_scenario(scale_kernels or (), scale_kind or (), remove_host_stall or (), no_launch_overhead,
                                  overlap_comm, no_stragglers, no_allocator_calls, no_host_syncs, on_rank or (),
                                  no_launch_stall)
        rows = self.job.whatif(steps or None, scenario)
        return reply({"tool": "whatif", "scenario": scenario.describe(), "steps": rows,
                      "evidence": "predicted_ns and gain_ns come from the replay of each step's dependency graph "
                                  "(docs/whatif.md), not from one SQL query: `traceflow whatif DB` with the same "
                                  "options gives the same figures; measured_ns: " + self.job.step_time_sql()})

    def diff(self, other: str, step: int | None = None, other_step: int | None = None, table: str | None = None,
             cursor: int = 0, limit: int = 20) -> str:
        """What changed between this job and another run the server was started with (--compare):
        matched steps, the change in step time split along the critical path, kernels, collectives,
        idle. Without `table`: the sentences and the first rows of each table; with table (steps,
        critical_path, kernels, op_classes, collectives, idle): that table a page at a time."""
        cursor, limit = _page_args(cursor, limit)
        if other not in self.others:
            raise UsageError(f"{other!r} is not a run this server may open: start it with --compare PATH "
                             f"({', '.join(self.others) or 'none given'})")
        d = job_diff(self.job.path, other, step_a=step, step_b=other_step)
        head = {"tool": "diff", "a": d.a, "b": d.b, "pairs": [{"step_a": x, "step_b": y} for x, y in d.pairs],
                "evidence": "computed by traceflow diff (compare.py) over both databases: `traceflow diff A B "
                            "--format json` gives the same figures"}
        if table is None:
            tables = {name: {"total_rows": df.height, "first_rows": df.head(5).to_dicts()} for name, df in d.tables.items()}
            return reply({**head, "comparability": d.comparability, "warnings": d.warnings, "sentences": d.sentences,
                          "tables": tables})
        if table not in d.tables:
            raise UsageError(f"table {table!r}: one of {', '.join(d.tables)}")
        df = d.tables[table]
        page = {"columns": df.columns, "rows": df.slice(cursor, limit).rows(), "total": df.height, "offset": cursor}
        return paged({**head, "table": table}, page, limit)


TOOLS = ("job_at_a_glance", "findings", "list_analyses", "run_analysis", "describe_table", "sql", "critical_path",
         "whatif", "diff")


def _one_line_errors(fn):
    """A tool's failure as the SDK's tool error with one line, never a traceback."""
    from mcp.server.mcpserver.exceptions import ToolError

    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (UsageError, InputError) as e:
            raise ToolError(one_line(e, 500)) from None
        except Exception as e:  # noqa: BLE001 - any failure is a tool error in one line; the server goes on
            if type(e).__name__ == "PermissionException":
                raise ToolError("refused: traceflow reads only the job's database and its own shard folder") from None
            raise ToolError(f"internal error ({type(e).__name__}: {one_line(e, 200)})") from None
    return call


def build(server: Server):
    """The MCP server with the tools of `server`."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from pydantic import ValidationError

    class OneLine(MCPServer):
        async def call_tool(self, name, arguments, context=None):
            try:
                return await super().call_tool(name, arguments, context)
            except ToolError as e:
                cause = e.__cause__
                if isinstance(cause, ValidationError):
                    err = cause.errors()[0]
                    where = ".".join(str(p) for p in err["loc"])
                    raise ToolError(f"{name}: argument {where}: {err['msg']}") from None
                raise ToolError(one_line(str(e).removeprefix(f"Error executing tool {name}: "), 500)) from None

    mcp = OneLine("traceflow", instructions=INSTRUCTIONS, log_level="WARNING")
    for name in TOOLS:
        method = getattr(server, name)
        locked = _locked(server.lock, method)
        mcp.add_tool(_one_line_errors(locked), name=name, description=" ".join((method.__doc__ or "").split()),
                     structured_output=False)
    return mcp


def _locked(lock: threading.Lock, fn):
    @functools.wraps(fn)
    def call(*args, **kwargs):
        with lock:
            return fn(*args, **kwargs)
    return call


def serve(job: Job, others: list[str] | None = None) -> None:
    """Serves the job's tools over stdin / stdout until the client closes stdin."""
    build(Server(job, others)).run("stdio")


def run(inputs: list[str], output: str | None = None, others: list[str] | None = None, force: bool = False,
        warn=None) -> None:
    """`traceflow mcp`: serve one database, or trace files ingested first, once: into `output` (kept)
    or into a scratch folder removed when the server ends (outputs.scratch_folder: one a killed
    server left is removed by the next traceflow that starts). `warn(line)`: ingest's warnings go
    there (stderr: stdout is the protocol's)."""
    from contextlib import ExitStack

    from .job import ingest, input_files
    from .job import open as open_job
    from .outputs import is_duckdb_file, scratch_folder
    with ExitStack() as stack:
        if len(inputs) == 1 and output is None and is_duckdb_file(inputs[0]):
            job = stack.enter_context(open_job(inputs[0]))
        else:
            paths = input_files(inputs)
            db = output or os.path.join(stack.enter_context(scratch_folder()), "job.duckdb")
            job = stack.enter_context(ingest(paths, db, force=force))
            for w in job.warnings:
                (warn or (lambda _: None))(f"traceflow: warning: {w}")
        serve(job, others)
