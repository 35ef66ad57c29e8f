"""whatif.StepGraph holds a step's ops in columns (array.array, numpy; docs/scale-out.md, "The
claims' step graph in columns"): each column, predecessor and op-id lookup checked here against a
plain reading of the database (a tuple per row, dicts), on the bundled ddp4_sync_stall job (4 ranks
on one GPU, collectives, syncs) and, where ../shared is present, an h100 nsys job."""
from __future__ import annotations

import pytest
from conftest import BUNDLED, FIX, connect

import traceflow
from traceflow.whatif import StepGraph

JOBS = {"bundled ddp4_sync_stall": BUNDLED / "ddp4_sync_stall", "h100 nsys ddp4_sync_stall": FIX / "h100/nsys/ddp4_sync_stall"}


@pytest.fixture(scope="module", params=list(JOBS))
def con(request, tmp_path_factory):
    folder = JOBS[request.param]
    files = sorted(str(p) for p in folder.iterdir() if p.name.startswith("rank") and p.name.endswith((".json.gz", ".sqlite")))
    if not files:
        pytest.skip(f"{folder}: no rank files (../shared absent?)")
    db = str(tmp_path_factory.mktemp("sg") / "job.duckdb")
    traceflow.ingest(files, db)
    c = connect(db)
    yield c
    c.close()


def test_the_columns_are_the_rows_read_plainly(con):
    steps = [s for (s,) in con.execute("SELECT DISTINCT step FROM gpu_ops WHERE step IS NOT NULL ORDER BY step").fetchall()]
    assert steps
    ends = dict(con.execute("SELECT op_id, end_ns FROM gpu_ops").fetchall())
    checked = before = 0
    for step in steps:
        g = StepGraph(con, step)
        rows = con.execute("""
            SELECT g.op_id, g.rank, g.start_ns, g.end_ns, g.name, g.category, g.api_start_ns, p.stream_prev, p.dep_op_id
            FROM gpu_ops g JOIN tf_internal.cp_gpu_preds p USING (op_id) WHERE g.step = ?
            ORDER BY g.start_ns, g.op_id""", [step]).fetchall()
        pos = {r[0]: i for i, r in enumerate(rows)}
        assert list(g.op_id) == list(pos) and len(g.name) == len(rows)
        kinds = {"communication": 1, "memory": 2}
        for i, (o, rank, s, e, name, cat, api, sp, dep) in enumerate(rows):
            assert (g.rank[i], g.start[i], g.end[i], g.name[i], g.kind[i]) == (rank, s - g.t0, e - g.t0, name, kinds.get(cat, 0))
            assert g.api[i] == (api - g.t0 if api is not None and api >= 0 else -1)
            want = [(pos[x], 0) if x in pos else (-1, ends[x] - g.t0) for x in (sp, dep)
                    if x is not None and x >= 0 and (x in pos or x in ends)]
            assert g._preds(i) == want, (step, i)
            before += sum(q == -1 for q, _ in want)
            assert g.pos[o] == i and o in g.pos
        assert -7 not in g.pos and g.pos.get(max(ends) + 1) is None
        assert list(g.name) == [r[4] for r in rows]
        checked += len(rows)
    assert checked > 1000 and before > 0  # predecessors before their step were met, and checked
