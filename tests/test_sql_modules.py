"""Issue 17: the SQL files as modules: declared dependencies, checked both ways; run order from them.
Issue 32: every .sql file is a module of one system (sqlmodules.GROUPS), loaded by one loader."""
from __future__ import annotations

from pathlib import Path

import pytest

from traceflow import graph, packs, sqlmodules
from traceflow.sqlmodules import creates, creates_public, referenced, requires

ROOT = Path(__file__).resolve().parent.parent
FILES = sorted(sqlmodules.path(g, n) for g in sqlmodules.GROUPS for n in sqlmodules.names(g))
WRITTEN_BY_PYTHON = {"critical_path_raw"}  # the walk (traceflow/critical_path/segments.py) writes it


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_requires_header_matches_what_the_file_reads(path):
    sql = path.read_text()
    declared = requires(sql)
    assert declared is not None, f"{path.name} has no `-- requires:` line"
    assert declared == referenced(sql), (path.name, "declared", sorted(declared), "read", sorted(referenced(sql)))


def test_every_sql_file_is_a_module_of_one_group():
    """No .sql file outside the one system: each is in exactly one group, and the loader gives its text."""
    on_disk = sorted(p for d in ("queries", "traceflow") for p in (ROOT / d).rglob("*.sql"))
    assert on_disk == FILES
    assert {sqlmodules.text(g, n) for g in sqlmodules.GROUPS for n in sqlmodules.names(g)} == {p.read_text() for p in FILES}


def test_comparisons_run_in_an_order_that_satisfies_the_declarations():
    """diff and scaling read a traceflow database's tables (attached as runs) and what their Python
    makes (the step pairs, the runs table); each module's requirements are made before it runs."""
    from traceflow.compare import COMPARISONS
    database = graph.loaded() | {t for s in graph.order() for t in s.creates}
    have = database | {"pairs"}
    for name in COMPARISONS:
        sql = sqlmodules.text("diff", name)
        assert requires(sql) <= have, (name, requires(sql) - have)
        have |= creates(sql)
    assert set(COMPARISONS) == set(sqlmodules.names("diff"))
    from traceflow.cli import main  # `diff --table` offers each comparison (the command keeps its imports light: a list of its own)
    assert tuple(next(p for p in main.commands["diff"].params if p.name == "which").type.choices) == COMPARISONS
    assert requires(sqlmodules.text("scaling", "run_summary")) <= database
    assert requires(sqlmodules.text("scaling", "scaling")) == {"runs"}  # filled by run_summary, once per run


def test_the_one_order_satisfies_the_declarations_and_packs_follow_it():
    """graph.order() is the only order: every step reads what the load or an earlier step made, and
    the packs (`query --list`, their tables) come in that order."""
    have = set(graph.loaded())
    for s in graph.order():
        assert s.reads <= have | set(s.creates), (s.name, s.reads - have)
        have |= set(s.creates)
    queries = [s.name for s in graph.order() if s.group == "queries"]
    assert packs.run_order() == queries
    assert set(queries) == {p.stem for p in (ROOT / "queries").glob("*.sql")}


def test_the_checker_catches_an_undeclared_dependency():
    sql = "-- requires: gpu_ops\nCREATE OR REPLACE TABLE x AS WITH c AS (SELECT 1) SELECT * FROM gpu_ops JOIN idle_gaps USING (rank), c;"
    assert referenced(sql) == {"gpu_ops", "idle_gaps"} and requires(sql) == {"gpu_ops"}
    a = graph.Step("queries", "a", "job", frozenset({"nowhere"}), ("a",))
    with pytest.raises(graph.GraphError, match="no module creates"):
        graph.order([a], frozenset())
    b = graph.Step("queries", "b", "job", frozenset({"a"}), ("b",))
    a = graph.Step("queries", "a", "job", frozenset(), ("a",))
    assert [s.name for s in graph.order([b, a], frozenset())] == ["a", "b"]


@pytest.mark.parametrize("path", sorted((ROOT / "queries").glob("*.sql")), ids=lambda p: p.name)
def test_a_file_is_named_for_the_public_tables_it_creates(path):
    """File name = pack name = the public table: `idle_gaps.sql` makes idle_gaps (and may add
    idle_gaps_summary); helper tables live in schema tf_internal, out of a user's `.tables`."""
    from traceflow.sqlmodules import creates_public
    public = creates_public(path.read_text())
    assert all(t.startswith(path.stem) for t in public), (path.name, public)
    assert not public or public[0] == path.stem, (path.name, public)
    assert packs.table_of(path.stem.replace("_", "-")) in (public[0] if public else None, None)


def test_every_pack_is_described_by_the_header_that_documents_its_table():
    """`query --list` and COMMENT ON read one header, with one parser (comments.parse)."""
    from traceflow.comments import parse
    for p in packs.listing():
        assert p.description, p.name
        made_by = [n for n in packs.run_order() if p.table in parse(packs.pack_sql(n))[0]]
        assert len(made_by) == 1 and parse(packs.pack_sql(made_by[0]))[0][p.table].startswith(p.description), p.name


def test_pack_names_are_the_tables_and_aliases_still_work():
    assert packs.table_of("idle-gaps") == "idle_gaps" == packs.table_of("idle_gaps")
    assert packs.table_of("steps") == "step_breakdown" == packs.table_of("step-breakdown")
    assert packs.table_of("gpu-state") is None  # a helper, not a pack
    assert {p.name for p in packs.listing()} == {t.replace("_", "-") for t in packs.public_tables()}


# --- the declarations (issue 44): every module typed, scoped and documented -------------------------

def test_every_module_declares_scope_reads_and_each_column():
    from traceflow.sqlmodules import module, valid_role
    for g in sqlmodules.GROUPS:
        for n in sqlmodules.names(g):
            m = module(g, n)
            lines = sqlmodules.text(g, n).splitlines()
            code = next(i for i, line in enumerate(lines) if line.strip() and not line.startswith("--"))
            assert not [line for line in lines[code:] if line.startswith(("-- @", "-- scope:", "-- requires:"))], (g, n)  # one header
            assert m.scope in ("rank", "job") and m.reads == requires(sqlmodules.text(g, n)), (g, n)
            assert set(m.tables) <= set(m.creates) == creates(sqlmodules.text(g, n)), (g, n)
            assert set(creates_public(sqlmodules.text(g, n))) <= set(m.tables), (g, n)  # every public table declared
            for t, d in m.tables.items():
                assert d.doc and d.columns, (g, n, t)
                assert len({c.name for c in d.columns}) == len(d.columns), (g, n, t)
                for c in d.columns:
                    assert valid_role(c.role) and c.doc.strip() and c.type.split("[")[0].isupper(), (t, c)
                assert set(d.shows_first) <= {c.name for c in d.columns}, (t, d.shows_first)


def test_the_order_of_a_packs_rows_is_declared_in_its_header():
    """`traceflow query`'s ORDER BY of a pack (packs.default_order) is its header's `-- <table> sorts
    by:` line, equal to the hand list it replaced (packs.DEFAULT_ORDER at 3692f2c); a deeper line goes
    on with it (host_time's). tests/test_terminal.py runs every pack's query with it."""
    declared = {t: packs.default_order(t) for t in packs.public_tables() if packs.default_order(t)}
    assert declared == {
        "idle_gaps": "dur_ns DESC, rank, start_ns", "launch_overhead": "exposed_ns DESC NULLS LAST, rank",
        "idle_gaps_summary": "rank, step, total_ns DESC", "launch_overhead_summary": "rank, total_exposed_ns DESC",
        "desync": "created_ns, pg, seq, kind", "desync_ranks": "pg, rank",
        "host_time": "rank, step, list_position(['jit_compile', 'launch', 'sync', 'allocator', 'cuda_other', "
                     "'data_loading', 'cpu_op', 'no_op'], cause)"}
    assert not hasattr(packs, "DEFAULT_ORDER")
    from traceflow.sqlmodules import parse_header
    decl = parse_header("-- @table t: a table\n-- @column a BIGINT key a\n-- t sorts by: a DESC,\n--     b\n-- prose\n")[2]
    assert decl["t"].sorts_by == "a DESC, b"


def test_a_malformed_declaration_names_its_file_and_line():
    from traceflow.sqlmodules import parse_header
    with pytest.raises(ValueError, match=r"x\.sql:2: `-- @column name TYPE role doc`"):
        parse_header("-- @table t: a table\n-- @column a BIGINT seconds  a role not in the vocabulary\n", "x.sql")
    with pytest.raises(ValueError, match=r"x\.sql:1: `-- scope: rank`"):
        parse_header("-- scope: ranks\n", "x.sql")


def test_clock_alignment_moves_the_declared_rank_clock_times_on_both_roads():
    """A column moves with its rank's clock on the local road (the shift: graph.time_columns() of the
    tables graph.shifted()) and on a cluster's (the shard views add the offset to rank_tables.TIMES)
    exactly when its declared role is `time`: no list of exceptions beside the declarations. A time
    left on the clock that recorded it (role `time:unaligned`: a snapshot's history, a Flight
    Recorder dump's calls) is moved by neither road."""
    from traceflow import rank_tables
    declared = graph.declared_tables()
    rank_clock = {(t, c) for t, d in declared.items() for c in d.roles("time")}
    unaligned = {(t, c) for t, d in declared.items() for c in d.roles("time:unaligned")}
    local = {(t, c) for t, cols in graph.time_columns().items() if t in graph.shifted() for c in cols}
    views = {(t, c) for t, cols in rank_tables.TIMES.items() for c in cols}
    assert local and views and local | views <= rank_clock
    assert not (local | views) & unaligned
    # each road moves every rank-clock time of the tables it moves (a table is moved whole or not at all)
    for moved in (local, views):
        assert {(t, c) for t, c in rank_clock if t in {t for t, _ in moved}} == moved
    assert {("memory_snapshot_history", "time_ns"), ("fr_entries", "created_ns")} <= unaligned
    assert "memory_snapshot_history" in rank_tables.SHARDED and "memory_snapshot_history" not in rank_tables.TIMES


def test_the_per_rank_lists_follow_from_the_declarations():
    """rank_tables' shard list, id columns and time columns, computed from `-- scope:` and the roles,
    equal the hand lists they replaced (main at e07745c, below); the one difference is
    memory_snapshot_history.time_ns, ns since the epoch that clock alignment does not shift on either
    road: declared `time:unaligned`, so neither the views (TIMES) nor the shift (graph.time_columns)
    moves it."""
    from traceflow import rank_tables
    sharded = {"gpu_ops": ("main", "trace_id"), "host_ops": ("main", "trace_id"), "ranges": ("main", "trace_id"),
               "steps": ("main", "rank"), "step_windows": ("tf_internal", "rank"),
               "gpu_state": ("tf_internal", "rank"), "gpu_islands": ("tf_internal", "rank"),
               "idle_gaps": ("main", "rank"), "idle_gaps_summary": ("main", "rank"),
               "launch_overhead": ("main", "rank"), "launch_overhead_summary": ("main", "rank"), "op_flops": ("main", "rank"),
               "op_work": ("main", "rank"), "step_breakdown": ("main", "rank"), "sync": ("main", "rank"),
               "cp_host_nodes": ("tf_internal", "rank"), "cp_gpu_preds": ("tf_internal", "op_id"),
               "exposed_comm": ("main", "rank"), "exposed_comm_segments": ("tf_internal", "rank"),
               "kernels": ("main", "rank"), "launch_bound_steps": ("main", "rank"), "mfu": ("main", "rank"),
               "roofline": ("main", "rank"), "memory_events": ("main", "trace_id"), "devices": ("main", "trace_id")}
    sharded.update({t: ("main", "trace_id") for t in ("memory_segments", "memory_snapshot_blocks", "memory_snapshot_history")})
    # since: host_time made a rank step (issue 44: at 4,096 ranks the client ran out of memory in it)
    sharded.update({"host_time": ("main", "rank"), "host_time_spans": ("tf_internal", "rank")})
    sharded["unrecorded_work"] = ("tf_internal", "rank")  # a trace leaving GPU work out: one rank's rule
    times = {"gpu_ops": ("start_ns", "end_ns", "api_start_ns", "api_end_ns", "issue_start_ns"),
             "host_ops": ("start_ns", "end_ns"), "ranges": ("start_ns", "end_ns"), "steps": ("start_ns", "end_ns"),
             "step_windows": ("start_ns", "end_ns", "first_op_ns", "last_op_end_ns"), "gpu_state": ("start_ns", "end_ns"),
             "gpu_islands": ("start_ns", "end_ns"),
             "idle_gaps": ("start_ns", "end_ns", "next_api_start_ns", "next_issue_start_ns"),
             "launch_overhead": ("api_start_ns", "issue_start_ns"),
             "step_breakdown": ("start_ns", "end_ns", "host_start_ns", "host_end_ns"), "sync": ("start_ns", "end_ns"),
             "cp_host_nodes": ("start_ns", "end_ns"), "exposed_comm_segments": ("start_ns", "end_ns"), "memory_events": ("ts_ns",),
             "host_time_spans": ("start_ns", "end_ns")}
    ids = {"gpu_ops": {"op_id": "gpu_op_base", "cpu_op_id": "host_op_base", "launch_op_id": "host_op_base"},
           "host_ops": {"op_id": "host_op_base"}, "gpu_islands": {"first_op_id": "gpu_op_base"},
           "idle_gaps": {"next_op_id": "gpu_op_base"}, "launch_overhead": {"op_id": "gpu_op_base"},
           "op_flops": {"op_id": "host_op_base"}, "op_work": {"op_id": "host_op_base"},
           "sync": {"op_id": "host_op_base"}, "cp_host_nodes": {"node_op_id": "host_op_base", "waited_op_id": "gpu_op_base"},
           "cp_gpu_preds": {"op_id": "gpu_op_base", "stream_prev": "gpu_op_base", "dep_op_id": "gpu_op_base"}}
    assert sharded == rank_tables.SHARDED
    assert ids == rank_tables.IDS
    assert times == rank_tables.TIMES
    scoped = {n for g in ("derive", "queries") for n in sqlmodules.names(g) if sqlmodules.module(g, n).scope == "rank"}
    # the hand lists they replace (derive.PER_RANK, rank_tables.PER_RANK_PACKS and WORKER_HELPERS at e07745c)
    assert scoped == {"comm_kernels", "steps", "gpu_ops", "step_windows", "gpu_state", "gpu_islands", "idle_gaps",
                      "launch_overhead", "op_flops", "op_work", "step_breakdown", "sync", "cp_graph", "exposed_comm",
                      "kernels", "launch_bound_steps", "mfu", "roofline", "op_classes", "op_work_kernels", "host_time", "unrecorded_work"}
