"""The runner (traceflow/graph.py): its order respects every declaration, a declaration it cannot run
fails with one clear line, and the clock shift gives the rows deriving again gave."""
from __future__ import annotations

import gzip
import json
import re
import shutil

import pytest
from conftest import ROOT, connect

from traceflow import graph, sqlmodules
from traceflow.rank_tables import SHARDED


def positions(order) -> dict[str, int]:
    return {s.name: i for i, s in enumerate(order)}


def test_order_respects_every_declaration():
    steps = graph.steps()
    order = graph.order(steps)
    at = positions(order)
    assert set(at) == {s.name for s in steps}
    maker = {t: s.name for s in steps for t in s.creates}
    for s in steps:
        for t in s.reads:
            if t in maker and maker[t] != s.name:
                assert at[maker[t]] < at[s.name], f"{s.name} reads {t} before {maker[t]} makes it"
    # the stages that rewrite tables in place, in their order; each after the maker of what it rewrites
    assert [at[n] for n in graph.STAGES] == sorted(at[n] for n in graph.STAGES)
    for table, writers in graph.rewrites().items():
        if table in maker and maker[table] not in writers:
            assert at[maker[table]] < at[writers[0]], table
    # a reader of a rewritten table reads it after its last writer, unless that writer needs the reader
    needs = graph._closure(graph.dependencies(steps))
    for table, writers in graph.rewrites().items():
        for s in steps:
            if table in s.reads and s.name not in writers:
                for w in writers:
                    assert (at[w] < at[s.name]) or s.name in needs[w], f"{s.name} reads {table} before {w} rewrites it"
    # the phases come out in one stretch each, as the user is told them
    told = [s.phase[0] for s in order if s.phase[0] != "critical_path" and s.group != "queries"]
    assert told == sorted(told, key=[p[0] for p in graph.PHASES].index)
    assert order[-1].name in ("comments", "format_stamp") and at["claims"] > at["findings"] and at["checks"] > at["step_breakdown"]


def test_shift_runs_after_alignment_and_before_every_reader_of_times():
    at = positions(graph.order())
    assert at["collectives"] < at["clock_align"] < at["clock_shift"] < at["gpu_sharing"]
    # what reads the offsets clock_align writes into traces (not declared: traces is the load's) reads
    # shifted tables too, so it runs after the shift
    for group in graph.GROUPS:
        for name in sqlmodules.names(group):
            if re.search(r"\bclock_(offset|skew|spread|note)", sqlmodules.text(group, name)):
                assert at[name] > at["clock_shift"], name


def test_a_table_nothing_creates_is_one_clear_line():
    bad = graph.Step("queries", "orphan", "job", frozenset({"gpu_ops", "no_such_table"}), ("orphan",))
    with pytest.raises(graph.GraphError, match=r"^queries/orphan reads no_such_table, which no module creates"):
        graph.order(graph.steps() + [bad])
    twice = graph.Step("queries", "again", "job", frozenset(), ("steps",))
    with pytest.raises(graph.GraphError, match="steps is made by both"):
        graph.order(graph.steps() + [twice])
    loop = [graph.Step("queries", "a", "job", frozenset({"tb"}), ("ta",)), graph.Step("queries", "b", "job", frozenset({"ta"}), ("tb",))]
    with pytest.raises(graph.GraphError, match="cycle"):
        graph.order(graph.steps() + loop)


def test_a_rank_step_reading_a_job_table_is_refused():
    bad = graph.Step("queries", "peeks_across", "rank", frozenset({"collectives"}), ("peeks_across",))
    with pytest.raises(graph.GraphError, match="peeks_across is declared rank scope but reads collectives"):
        graph.for_scope(graph.order(graph.steps() + [bad]), "rank")


def test_the_scopes_split_the_graph():
    """A worker runs the rank steps; the client the job steps and the rank steps whose tables are not
    among the worker's shards; together every step, and every sharded table made on a worker."""
    order = graph.order()
    worker = graph.for_scope(order, "rank")
    client = graph.for_scope(order, "job", frozenset(SHARDED))
    assert {s.name for s in worker} | {s.name for s in client} == {s.name for s in order}
    assert all(s.scope == "rank" for s in worker) and {s.name for s in client if s.scope == "rank"} < {s.name for s in worker}
    made_on_workers = {t for s in worker for t in s.creates}
    assert set(SHARDED) - graph.loaded() <= made_on_workers | graph.loaded() | {"gpu_ops", "host_ops", "ranges"}
    for s in worker:  # a worker's tables reach the client as shards, or the client makes them too
        assert set(s.creates) <= set(SHARDED) or s in client, s.name
    # the client's order is the graph's
    at = positions(order)
    assert [at[s.name] for s in client] == sorted(at[s.name] for s in client)


def test_every_in_place_rewrite_is_declared():
    """An SQL module that UPDATEs or DELETEs from a table it does not make says so (`-- rewrites:`),
    and says no more than it does."""
    for group in graph.GROUPS:
        for name in sqlmodules.names(group):
            text = "\n".join(line.split("--")[0] for line in sqlmodules.text(group, name).splitlines())
            temp = set(re.findall(r"CREATE\s+(?:OR\s+REPLACE\s+)?TEMP\s+TABLE\s+(\w+)", text, re.I))
            step = graph.sql_step(group, name)
            done = set(re.findall(r"\b(?:UPDATE|DELETE\s+FROM)\s+(?:\w+\.)?(\w+)", text, re.I)) - temp - set(step.creates)
            assert done == set(step.rewrites), f"{group}/{name} rewrites {sorted(done)}, declares {sorted(step.rewrites)}"


def test_the_shift_moves_every_time_made_before_it_and_nothing_after():
    """clock_shift's `rewrites` (graph.shifted()) are exactly the tables with time columns that are
    loaded or made by a step it runs after: a table made before it and not shifted would keep a
    rank's recorded clock beside tables on the aligned one; one made after it is made aligned."""
    steps = graph.steps()
    before = graph._closure(graph.dependencies(steps))["clock_shift"]
    made_before = {t for s in steps if s.name in before for t in s.creates} | set(graph.loaded())
    timed = set(graph.time_columns())
    assert set(graph.shifted()) == timed & made_before, (sorted(timed & made_before), graph.shifted())


def test_a_step_rewriting_a_table_outside_the_stages_is_refused():
    bad = graph.Step("python", "late_rewriter", "job", frozenset({"gpu_ops"}), (), None, rewrites=("gpu_ops",))
    with pytest.raises(graph.GraphError, match="late_rewriter rewrites gpu_ops: not a module of STAGES"):
        graph.dependencies(graph.steps() + [bad])


def _late_rank(tmp_path, shift_ns: int) -> list[str]:
    """The bundled job with rank 2 on a host of its own and its clock `shift_ns` late."""
    out = tmp_path / "late"
    out.mkdir()
    for f in sorted((ROOT / "fixtures" / "ddp4_sync_stall").glob("*.json.gz")):
        d = json.load(gzip.open(f))
        rank = d["distributedInfo"]["rank"]
        if rank == 2:
            d["baseTimeNanoseconds"] += shift_ns
        d["hostname"] = f"host{rank == 2}"
        (out / f.name.replace(".gz", "")).write_text(json.dumps(d))
    return sorted(str(p) for p in out.iterdir())


def test_the_shift_gives_the_rows_deriving_again_gives(tmp_path):
    """Rank 2's clock 20 ms late: the alignment moves it back, and the shift (graph.clock_shift) moves
    the tables derived on the recorded times. Deriving them again from the aligned tables gives the
    same rows (the old runner derived again; a cluster's views shift)."""
    import traceflow
    db = tmp_path / "late.duckdb"
    traceflow.ingest(_late_rank(tmp_path, 20_000_000), str(db))
    offsets = dict(connect(db).execute("SELECT rank, clock_offset_ns FROM traces").fetchall())
    assert -25_000_000 < offsets[2] - offsets[0] < -10_000_000, offsets  # moved back (-17.6 ms: the estimate)
    copy = tmp_path / "again.duckdb"
    shutil.copy(db, copy)
    import duckdb

    from traceflow.duck import use_internal_schema
    con = duckdb.connect(str(copy))
    use_internal_schema(con)
    con.execute("SET asof_loop_join_threshold = 0")
    before = {t: con.execute(f"SELECT * FROM {t}").fetchall() for t in ("steps", "step_windows", "collectives", "gpu_ops")}
    for name in ("steps", "gpu_ops", "step_windows", "collectives"):
        con.execute(sqlmodules.text("derive", name))
    for table, rows in before.items():
        again = con.execute(f"SELECT * FROM {table}").fetchall()
        assert sorted(map(repr, again)) == sorted(map(repr, rows)), table
    assert any(r[0] == 2 for r in before["steps"])


def test_a_table_of_definitions_is_made_where_a_rank_step_reads_it():
    """A job step that reads nothing (a list of kernel names, say) runs on a worker too when a rank
    step reads its table, and on the client as every job step does."""
    kinds = graph.Step("derive", "kinds", "job", frozenset(), ("kinds",))
    uses = graph.Step("queries", "uses_kinds", "rank", frozenset({"kinds", "gpu_ops"}), ("uses_kinds",))
    order = graph.order(graph.steps() + [kinds, uses])
    worker = [s.name for s in graph.for_scope(order, "rank")]
    assert "kinds" in worker and worker.index("kinds") < worker.index("uses_kinds")
    assert "kinds" in [s.name for s in graph.for_scope(order, "job", frozenset(SHARDED))]


def test_every_table_a_python_step_creates_is_declared_with_its_columns():
    """A Python step declares its tables in the SQL modules' header syntax (its module's DECLARED):
    each table it creates, with typed columns of known roles, and its DDL follows from that."""
    from traceflow import sqlmodules
    python = [s for s in graph.steps() if s.run is not None and s.creates]
    assert {s.name for s in python} >= {"gpu_sharing", "device_peaks", "critical_path_walk", "claims"}
    declared = graph.declared_tables()
    for s in python:
        for t in s.creates:
            if t == "clock_shifts":  # a TEMP table between the alignment and the shift: no table of the database
                continue
            assert t in declared and declared[t].columns, (s.name, t)
            assert all(sqlmodules.valid_role(c.role) and c.doc for c in declared[t].columns), t
            assert sqlmodules.create_table(t, declared[t]).startswith(f"CREATE OR REPLACE TABLE {t} (")

