"""The graph of every step after the load, and the one runner that runs it.

Each step is a module declared in the shape of sqlmodules' Module: a group, a name, a scope, the
tables it reads and those it creates. The SQL modules (traceflow/derive/*.sql, queries/*.sql)
declare themselves in their headers (`-- requires:`, `-- scope:`); the Python steps are declared
below (group "python"). `run(con, ...)` orders the whole graph topologically from those
declarations and runs it on one connection (a local ingest), or one scope of it: a cluster's worker
runs the rank steps on its rank file (rank_task.py), the client the job steps over the workers'
shards (pipeline.py). Nothing else orders these steps. docs/architecture.md ("The graph") says how
to add a module.

Tables rewritten in place (an UPDATE or DELETE of a table the load or another module made) are
declared by their writers (an SQL module's `-- rewrites:` line, a Python step's `rewrites`); the
writers run in the one order of STAGES, and a module reading such a table runs after all its
writers, but those that need the module's own tables (they read it as it was before them).

Clock alignment, "derive, align, derive again if a clock moved", is two steps of the graph: the
alignment (clock_align) decides on the recorded times and stores each rank's offset in
`traces.clock_offset_ns`; the shift (clock_shift) then adds the offsets to the times of every
per-rank table made so far, and everything after it reads aligned times. A rank's own derivations
(steps, its ops' steps and launches, step windows, its collectives' keys) do not change when all its
times move by one offset, so shifting their times gives the rows deriving them again gave (the
cluster path has always relied on this: its workers derive on the recorded times and the views add
the offset; tests/test_cluster.py compares the two row for row). A cluster's tables of per-rank rows
are views that add the offset themselves: the shift passes over views.

Size: one concept, the graph: its Python steps' declarations and bodies (each a few lines calling the
module that does the work), the order computed from all declarations, the split by scope, the runner.
"""
from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from graphlib import CycleError, TopologicalSorter
from typing import Any

from . import sqlmodules
from .options import Options

SCOPES = ("rank", "job")

# The phases the user sees (progress) and the timings they fill, in the order they run: a ready
# step of an earlier phase runs before one of a later phase, so that each phase runs as one stretch.
# (name, what the user is told, the timing it fills)
DERIVE = ("derive", "deriving tables, aligning clocks", "derive")
ANALYSES = ("analyses", "running the analyses", "packs")
CRITICAL_PATH = ("critical_path", "computing the critical path", "critical_path")
CHECKS = ("checks", None, None)  # the invariants: quick, no phase of their own
CLAIMS = ("claims", "checking each fix by the what-if replay", None)
FINISH = ("finish", None, None)  # the format stamp and the comments
PHASES = (DERIVE, ANALYSES, CRITICAL_PATH, CHECKS, CLAIMS, FINISH)
CRITICAL_PATH_MODULES = ("cp_graph", "critical_path_walk", "critical_path")  # timed together



@dataclass(frozen=True)
class Step:
    """One module of the graph: sqlmodules.Module's fields (group, name, scope, reads, creates) and
    what runs it. `run` is None for an SQL module (its file runs); a Python step's takes the Run."""
    group: str
    name: str
    scope: str
    reads: frozenset[str]
    creates: tuple[str, ...]
    run: Callable[[Run], None] | None = None
    phase: tuple = DERIVE
    declared_in: str | None = None  # a Python step: the module whose DECLARED declares the tables it creates
    rewrites: tuple[str, ...] = ()  # tables others made that it UPDATEs or DELETEs from (a stage of STAGES)
    internal: bool = False  # a Python step whose tables are its own helpers (tf_internal, TEMP), none for users

    def __post_init__(self):
        if self.scope not in SCOPES:
            raise ValueError(f"{self.group}/{self.name}: scope {self.scope!r}, not one of {', '.join(SCOPES)}")


@dataclass
class Run:
    """One run of the graph: its settings in, what it has to say out."""
    con: Any
    options: Options = field(default_factory=lambda: Options())  # the ingest's settings (align, step pattern, peaks)
    walk_options: dict = field(default_factory=dict)
    timings: dict = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    phase: Callable[[str], None] = lambda _: None
    # what the steps tell each other and a cluster's worker (rank_task.py)
    absurd: list = field(default_factory=list)      # drop_absurd's (rank, what was dropped)
    cpu_notes: list = field(default_factory=list)   # host_clock.reconcile's (trace_id, note)
    moved: bool = False                             # the alignment moved a clock
    sharing_recorded: bool = False                  # gpu_sharing was detected on the recorded times


# ---- the Python steps -----------------------------------------------------------------------------

def _drop_absurd(r: Run):
    from .invariants import drop_absurd
    r.absurd = drop_absurd(r.con)
    r.warnings.extend(f"rank {rank}: {text}" for rank, text in r.absurd)


def _host_clock(r: Run):
    from .derive import host_clock
    r.cpu_notes = host_clock.reconcile(r.con)
    r.warnings.extend(host_clock.with_ranks(r.con, r.cpu_notes))


def _clock_align(r: Run):
    """The offsets, decided on the recorded times, into `traces` and, as the ns each rank's clock
    moved by, into clock_shifts (a temp table: what the shift reads). Ranks taking turns on one GPU
    share one clock: the alignment reads gpu_sharing as detected on the recorded times (its own
    input; the table the analyses read is the gpu_sharing step's, on the aligned times)."""
    con = r.con
    con.execute("CREATE OR REPLACE TEMP TABLE clock_shifts (rank INTEGER, shift_ns BIGINT)")
    if r.options.align == "off":
        return
    from .derive import clock, gpu_sharing
    gpu_sharing.detect(con)
    r.sharing_recorded = True
    con.execute("CREATE OR REPLACE TEMP TABLE tf_offsets_before AS SELECT DISTINCT rank, clock_offset_ns FROM traces")
    notes, moved = clock.align(con, mode=r.options.align)
    r.warnings.extend(notes)
    if moved:
        con.execute("""INSERT INTO clock_shifts SELECT DISTINCT t.rank, t.clock_offset_ns - b.clock_offset_ns
                       FROM traces t JOIN tf_offsets_before b USING (rank) WHERE t.clock_offset_ns <> b.clock_offset_ns""")
        r.moved = True
    con.execute("DROP TABLE tf_offsets_before")


def _clock_shift(r: Run):
    """Every per-rank table's times moved by what its rank's clock moved (views: they add it themselves)."""
    if not r.moved:
        return
    tables = {t for (t,) in r.con.execute("SELECT table_name FROM duckdb_tables() WHERE database_name = current_database()"
                                          ).fetchall()}
    for table, cols in time_columns().items():
        if table in tables and table in shifted():
            sets = ", ".join(f"{c} = {table}.{c} + s.shift_ns" for c in cols)
            r.con.execute(f"UPDATE {table} SET {sets} FROM clock_shifts s WHERE {table}.rank = s.rank")


def _gpu_sharing(r: Run):
    if r.sharing_recorded and not r.moved:
        return  # the alignment detected it on these very times
    from .derive import gpu_sharing
    gpu_sharing.detect(r.con)


def _peaks(r: Run):
    from .hardware import load_peaks
    r.warnings.extend(load_peaks(r.con, r.options.peak_tflops, r.options.peak_gbps))


def _walk(r: Run):
    from .critical_path import walk
    r.timings["walk_batches"] = walk(r.con, **r.walk_options)


def _checks(r: Run):
    from . import invariants
    invariants.check(r.con)


def _claims(r: Run):
    from . import claims
    claims.store(r.con)  # the verdict's rows with their fixes, replayed gains and repro SQL


def _stamp(r: Run):
    from . import db_format
    db_format.stamp(r.con)


def _comments(r: Run):
    """COMMENT ON every public table the SQL modules make (from their headers) and the loaded ones
    (schema.py), as one batch: a statement each cost 0.13 s of a small job (comments.apply_docs)."""
    from . import comments
    docs: dict = {}
    for s in steps():
        if s.run is None:
            text = sqlmodules.text(s.group, s.name)
            docs.update(comments.docs_for(text, _documented(s.group, text)))
    comments.apply_docs(r.con, docs)
    comments.apply_core(r.con)


def _documented(group: str, text: str) -> list[str]:
    """The public tables a module documents: the derived tables and views; the analyses' tables
    (their views, cp_edges, are for the walk's SQL, undocumented as before)."""
    return sqlmodules.creates_public(text, views=group != "queries")


def _public(group: str) -> frozenset[str]:
    """The public tables a group's modules make."""
    return frozenset().union(*(sqlmodules.creates_public(sqlmodules.text(group, n)) for n in sqlmodules.names(group)))


def public_tables() -> frozenset[str]:
    """The tables (not views) an ingest leaves in schema main, for users, from the declarations: the
    load's, those the SQL modules create outside tf_internal, and the Python steps' but for the steps
    that keep theirs to themselves (`internal`)."""
    sql = {t for s in steps() if s.run is None for t in sqlmodules.creates_public(sqlmodules.text(s.group, s.name), views=False)}
    return loaded() | sql | {t for s in steps() if s.run is not None and not s.internal for t in s.creates}


def _python_steps() -> list[Step]:
    from .invariants import reads as check_reads
    # the walk runs between queries/cp_graph.sql (the graph) and queries/critical_path.sql (naming)
    walk_reads = {"cp_gpu_preds", "cp_host_nodes", "collectives", "collective_waits", "gpu_ops", "step_windows"}
    walk_creates = {"critical_path_raw"}
    loaded = frozenset({"gpu_ops", "host_ops", "ranges", "traces"})
    analyses = _public("queries")
    documented = analyses | _public("derive")
    return [
        Step("python", "drop_absurd", "rank", loaded, (), _drop_absurd, rewrites=("gpu_ops", "host_ops", "ranges")),
        Step("python", "host_clock", "rank", loaded, (), _host_clock,
             rewrites=("host_ops", "ranges", "traces", "memory_events")),  # traces: clock_align's offsets too
        Step("python", "clock_align", "job", frozenset({"collectives", "gpu_ops", "traces"}), ("clock_shifts",), _clock_align,
             internal=True),
        # every per-rank table with times made before it (tests/test_graph.py: all of them, none after)
        Step("python", "clock_shift", "job", frozenset({"clock_shifts"}), (), _clock_shift,
             rewrites=("gpu_ops", "host_ops", "ranges", "memory_events", "steps", "step_windows", "collectives")),
        Step("python", "gpu_sharing", "job", frozenset({"gpu_ops", "traces"}), ("gpu_sharing",), _gpu_sharing,
             declared_in="traceflow.derive.gpu_sharing"),
        # rank scope: a worker's analyses of work and peaks read the peaks (and the client's warnings say them)
        Step("python", "device_peaks", "rank", frozenset({"gpu_ops", "traces"}), ("device_peaks", "gpu_devices"), _peaks,
             declared_in="traceflow.hardware"),
        Step("python", "critical_path_walk", "job", frozenset(walk_reads), tuple(sorted(walk_creates)), _walk, CRITICAL_PATH,
             declared_in="traceflow.critical_path.segments", internal=True),
        Step("python", "checks", "job", frozenset(check_reads()), (), _checks, CHECKS),
        # the claims replay each finding's fix over the analyses' tables
        Step("python", "claims", "job", analyses, ("claims_whatif",), _claims, CLAIMS, declared_in="traceflow.claims",
             rewrites=("findings",), internal=True),
        # the format's row of tf_internal.metadata (made by the load, job_name.py: not created here)
        Step("python", "format_stamp", "job", frozenset(), (), _stamp, FINISH, declared_in="traceflow.db_format"),
        Step("python", "comments", "job", documented | loaded, (), _comments, FINISH),
    ]


# The steps that rewrite tables in place (each declares what it rewrites: `rewrites`), in the one
# order they run: drop_absurd deletes what no profiler records before anything reads it; the CPU
# clock moves host ops before they are linked to the GPU ops they launched; gpu_ops.sql fills the
# ops' derived columns, step_windows.sql then the steps of ops launched between steps (in the
# windows gpu_ops.sql's steps give); the shift moves every per-rank time made before it (its
# `rewrites`: shifted()); the claims rewrite the findings with their claim columns.
STAGES = ("drop_absurd", "host_clock", "gpu_ops", "step_windows", "clock_shift", "claims")


def rewrites(graph: list[Step] | None = None) -> dict[str, tuple[str, ...]]:
    """{table: the steps that rewrite it in place, in the STAGES order}, from the declarations."""
    out: dict[str, list[str]] = {}
    for s in (steps() if graph is None else graph):
        if s.rewrites and s.name not in STAGES:
            raise GraphError(f"{s.group}/{s.name} rewrites {', '.join(s.rewrites)}: not a module of STAGES, "
                             "the one order of the steps that rewrite tables in place")
        for t in s.rewrites:
            out.setdefault(t, []).append(s.name)
    return {t: tuple(sorted(w, key=STAGES.index)) for t, w in out.items()}


def shifted() -> tuple[str, ...]:
    """The tables the clock shift moves: those it declares it rewrites (made or loaded before it)."""
    return next(s.rewrites for s in _steps() if s.name == "clock_shift")


def time_columns() -> dict[str, tuple[str, ...]]:
    """{table: its columns of role `time`} of every declared table: ns on a rank's clock, which the
    clock shift moves in the tables made before it (shifted(); tests/test_graph.py holds the two
    equal). A job table of ranks' rows (collectives: matched across ranks) is on their clocks too;
    `time:unaligned` columns (a snapshot's history, a Flight Recorder dump's calls) are not moved."""
    return {t: cols for t, d in declared_tables().items() if (cols := d.roles("time"))}


# ---- the SQL modules --------------------------------------------------------------------------------

GROUPS = ("derive", "queries")  # the groups an ingest runs (diff/ and scaling/ compare databases)

def _phase_of(group: str, name: str) -> tuple:
    if group == "derive":
        return DERIVE
    return CRITICAL_PATH if name in CRITICAL_PATH_MODULES else ANALYSES


def sql_step(group: str, name: str) -> Step:
    """An SQL module as a step: its declaration (sqlmodules.module), less the temp tables it makes
    for itself (each module drops its own: they are no table of the database)."""
    temp = {t for t, (schema, _) in sqlmodules.created(sqlmodules.text(group, name)).items() if schema == "temp"}
    m = sqlmodules.module(group, name)
    scope, reads, creates = m.scope, frozenset(m.reads), tuple(m.creates)
    return Step(group, name, scope, reads, tuple(t for t in creates if t not in temp), None, _phase_of(group, name),
                rewrites=m.rewrites)


def steps() -> list[Step]:
    """Every module of the graph: the SQL modules of GROUPS, then the Python steps."""
    return list(_steps())


@functools.cache
def _steps() -> tuple[Step, ...]:
    return tuple([sql_step(g, n) for g in GROUPS for n in sqlmodules.names(g)] + _python_steps())


def declared_tables() -> dict[str, sqlmodules.TableDecl]:
    """{table: its declaration} of every table an ingest makes: the load's (schema.py), each SQL
    module's (its header) and each Python step's (its module's DECLARED, in the same syntax)."""
    import importlib

    from . import schema
    out = dict(schema.declared())
    for s in steps():
        if s.run is None:
            out.update(sqlmodules.module(s.group, s.name).tables)
        elif s.declared_in:
            out.update(importlib.import_module(s.declared_in).DECLARED)
    return out


@functools.cache
def loaded() -> frozenset[str]:
    """The tables there before any step: those the load declares (schema.declared(): the readers'
    tables, traces, Flight Recorder dumps', memory), less any a step makes."""
    from . import schema
    made = {t for s in _python_steps() for t in s.creates}
    return frozenset(set(schema.declared()) - made)


# ---- the order ---------------------------------------------------------------------------------------

class GraphError(ValueError):
    """A declaration the graph cannot run: a table nothing makes, two makers, a cycle."""


def dependencies(graph: list[Step], available: frozenset[str] | None = None) -> dict[str, set[str]]:
    """{step: the steps it runs after}, from the declarations (what each reads, makes, rewrites)."""
    available = loaded() if available is None else available
    by_name = {s.name: s for s in graph}
    if len(by_name) != len(graph):
        twice = sorted({s.name for s in graph if sum(t.name == s.name for t in graph) > 1})
        raise GraphError(f"two modules named {', '.join(twice)}")
    maker: dict[str, str] = {}
    for s in graph:
        for t in s.creates:
            if t in maker and maker[t] != s.name:
                raise GraphError(f"{t} is made by both {maker[t]} and {s.name}")
            maker[t] = s.name
    deps: dict[str, set[str]] = {s.name: set() for s in graph}
    for s in graph:
        missing = sorted(t for t in s.reads if t not in maker and t not in available)
        if missing:
            raise GraphError(f"{s.group}/{s.name} reads {', '.join(missing)}, which no module creates and the load does not "
                             "make: declare the module that creates it, or correct the reads")
        deps[s.name] |= {maker[t] for t in s.reads if t in maker and maker[t] != s.name}
    stages = [s for s in STAGES if s in by_name]  # a part of the graph (a test's) has some of them
    for a, b in zip(stages, stages[1:]):
        deps[b].add(a)
    rewritten = rewrites(graph)
    for table, writers in rewritten.items():
        if table in maker and maker[table] not in writers:
            deps[writers[0]].add(maker[table])
    # a reader of a rewritten table runs after its writers, but those that need it (they read the
    # table as it was before them): needed = upstream by what it makes and the stages' order
    after = _closure({n: set(d) for n, d in deps.items()})
    for table, writers in rewritten.items():
        for s in graph:
            if table in s.reads and s.name not in writers:
                deps[s.name] |= {w for w in writers if s.name not in after[w]}
    return deps


def _closure(deps: dict[str, set[str]]) -> dict[str, set[str]]:
    """{step: every step it runs after, directly or not}."""
    out: dict[str, set[str]] = {}

    def visit(n: str, seen: tuple = ()) -> set[str]:
        if n in out:
            return out[n]
        if n in seen:
            raise GraphError(f"a cycle of declarations: {' -> '.join(seen[seen.index(n):] + (n,))}")
        acc: set[str] = set()
        for d in deps[n]:
            acc |= {d} | visit(d, seen + (n,))
        out[n] = acc
        return acc
    for n in deps:
        visit(n)
    return out


def order(graph: list[Step] | None = None, available: frozenset[str] | None = None) -> list[Step]:
    """The steps in an order where each runs after every step it depends on; among the ready ones,
    the earlier phase first (PHASES), then the name."""
    if graph is None and available is None:
        return list(_order())
    graph = steps() if graph is None else graph
    deps = dependencies(graph, available)
    by_name = {s.name: s for s in graph}
    ts = TopologicalSorter(deps)
    try:
        ts.prepare()
    except CycleError as e:
        raise GraphError(f"a cycle of declarations: {' -> '.join(e.args[1])}") from None
    out: list[Step] = []
    ready: list[str] = []
    while ts.is_active():
        ready += ts.get_ready()
        ready.sort(key=lambda n: (PHASES.index(by_name[n].phase), n))
        name = ready.pop(0)
        out.append(by_name[name])
        ts.done(name)
    return out


@functools.cache
def _order() -> tuple[Step, ...]:
    return tuple(order(steps(), loaded()))


def for_scope(graph: list[Step], scope: str | None, sharded: frozenset[str] | set[str] = frozenset()) -> list[Step]:
    """The steps one connection runs: all (None); a worker's ('rank'); or the client's over the
    workers' shards ('job': the job steps, and the rank steps whose tables are not among the
    `sharded` ones, which it makes too: tables of definitions, the peaks, the helpers that job steps
    read). A rank step may read only the load's tables, other rank steps' and those of job steps
    that read nothing (tables of definitions: a worker makes them too); else GraphError."""
    if scope is None:
        return graph
    if scope == "rank":
        # a job step reading nothing (a table of definitions) runs wherever a rank step reads it
        constant = {t: s.name for s in graph if s.scope == "job" and not s.reads for t in s.creates}
        job_made = {t: s.name for s in graph if s.scope == "job" and s.reads for t in s.creates}
        needed = set()
        for s in graph:
            if s.scope == "rank":
                if bad := sorted(t for t in s.reads if t in job_made):
                    raise GraphError(f"{s.group}/{s.name} is declared rank scope but reads {', '.join(bad)}, which the job "
                                     f"step {job_made[bad[0]]} makes from every rank")
                needed |= {constant[t] for t in s.reads if t in constant}
        return [s for s in graph if s.scope == "rank" or s.name in needed]
    if scope == "job":
        return [s for s in graph if s.scope == "job" or (s.creates and not set(s.creates) <= set(sharded))]
    raise ValueError(f"scope {scope!r}")


# ---- the runner --------------------------------------------------------------------------------------

def run(con, options: Options | None = None, *, scope: str | None = None, names=None, timings: dict | None = None,
        phase=None, **walk_options) -> Run:
    """Run the graph on `con` in order: every step (scope None: a local ingest), a cluster worker's
    ('rank') or its client's ('job', over the shards of rank_tables.SHARDED). `names`: only those
    steps (the critical path's three again on a finished database, say). Seconds go to
    timings["derive"], ["packs"], ["critical_path"]; phase(name) is told as each phase starts.
    Returns the Run: its warnings for the user, and what the steps noted."""
    from .duck import use_internal_schema
    r = Run(con, options or Options(), walk_options, {} if timings is None else timings, phase=phase or (lambda _: None))
    step_pattern = r.options.step_pattern
    con.execute("SET asof_loop_join_threshold = 0")  # DuckDB's ASOF join, never its nested-loop plan
    if step_pattern:
        con.execute("SET VARIABLE tf_step_pattern = ?", [step_pattern])
    use_internal_schema(con, create=True)
    sharded: frozenset[str] = frozenset()
    if scope == "job":
        from .rank_tables import SHARDED
        sharded = frozenset(SHARDED)
    todo = for_scope(order(), scope, sharded)
    if names is not None:
        todo = [s for s in todo if s.name in names]
    for _, _, key in PHASES:
        if key:
            r.timings.setdefault(key, 0.0)
    said = None
    for s in todo:
        _, told, key = s.phase
        if told and told != said:
            r.phase(told)
            said = told
        t0 = time.perf_counter()
        try:
            if s.run is None:
                con.execute(sqlmodules.text(s.group, s.name))
            else:
                s.run(r)
        except Exception as e:
            # which step ran out of memory or failed (a 4,096-rank client's "Out of Memory Error" named none)
            e.add_note(f"in the step {s.group}/{s.name} of traceflow's graph")
            raise
        if key:
            r.timings[key] += time.perf_counter() - t0
    return r
