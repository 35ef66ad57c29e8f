"""The claims' what-if replays, one step graph at a time (issue 44: a cluster client's memory).

A step's graph (whatif.StepGraph) holds every rank's ops of its step; the claims (claims._Replays)
and the what-if table (whatif.best_fixes) used to keep each replayed step's graph for the whole of
their work, all at once. Now they build one, replay on it every scenario asked of its step, and drop
it before the next. Checked here on real jobs: never two graphs alive at once, and the same gains,
rows and what-if table as keeping every graph (the former way, written out below as the oracle).
"""
from __future__ import annotations

import weakref

import pytest
from conftest import FIX, connect

from traceflow import claims, whatif
from traceflow.whatif import Scenario, StepGraph


class _KeptGraphs:
    """The former claims._Replays: each analysed step's graph built once and kept, every scenario
    replayed on the spot."""

    def __init__(self, con, steps):
        self.con = con
        if len(steps) > claims.MAX_REPLAYED_STEPS:
            k = len(steps) / claims.MAX_REPLAYED_STEPS
            steps = [steps[int(i * k)] for i in range(claims.MAX_REPLAYED_STEPS)]
        self.steps, self._g = steps, {}

    def gains(self, sc, steps=None):
        out = []
        for s in steps or self.steps:
            if s not in self._g:
                g = StepGraph(self.con, s)
                self._g[s] = (g, g.measured()[0], g.replay(Scenario())[0])
            g, measured, replayed = self._g[s]
            noise = max(abs(replayed - measured), claims.NOISE_SHARE * measured)
            if measured and abs(replayed - measured) <= 0.02 * measured:
                out.append((s, float(replayed - g.replay(sc)[0]), noise))
        return out

    def settle(self):
        return False


@pytest.mark.parametrize("rel", ["h100/kineto/ddp4_straggler", "h100/kineto/ddp4_sync_stall"])
def test_one_step_graph_at_a_time_gives_the_rows_of_all_graphs_kept(rel, ingested, monkeypatch):
    if not (FIX / rel).is_dir():
        pytest.skip(f"{FIX / rel} not found")
    con = connect(ingested(rel))
    alive: set = set()
    most = [0]

    class Counted(StepGraph):  # the real graph, its live instances counted
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            alive.add(id(self))
            most[0] = max(most[0], len(alive))
            weakref.finalize(self, alive.discard, id(self))

    monkeypatch.setattr(claims, "StepGraph", Counted)
    monkeypatch.setattr(whatif, "StepGraph", Counted)
    rows, table = claims.build(con)
    assert most[0] == 1, f"{most[0]} step graphs alive at once"
    assert any(r["gain_ns"] for r in rows), "no replayed gain: the check would not tell the ways apart"

    monkeypatch.setattr(claims, "_Replays", _KeptGraphs)
    kept_rows, kept_table = claims.build(con)
    assert rows == kept_rows
    assert table == kept_table  # best_fixes itself is the same either way; its stored JSON: bench/compare_commits.py
    con.close()
