"""Issue 19: `traceflow diff` — what changed between two runs, and why, checked on the bundled jobs
recorded with different faults, on a job against itself, and on a copy with one kernel stretched."""
from __future__ import annotations

import json
import shutil

import pytest
from conftest import BUNDLED, needs_shared, run_cli, truth

import traceflow


@pytest.fixture(scope="module")
def bundled(tmp_path_factory):
    out = tmp_path_factory.mktemp("diff") / "job.duckdb"
    traceflow.ingest(sorted(str(p) for p in (BUNDLED / "ddp4_sync_stall").glob("rank-*.json.gz")), str(out))
    return out


def test_a_job_against_itself_changes_nothing(bundled):
    d = traceflow.diff(str(bundled), str(bundled))
    assert d.pairs == [(3, 3), (4, 4), (5, 5)] and not d.warnings
    assert all(r["same"] for r in d.comparability)
    steps = d.tables["steps"]
    assert len(steps) == 3 * 5 * 6  # pairs × (job + 4 ranks) × metrics
    assert steps["delta_ns"].abs().max() == 0 and steps["noise"].all()
    assert d.tables["kernels"]["delta_ns"].abs().max() == 0
    assert d.tables["critical_path"]["delta_ns"].abs().max() == 0
    assert all("no change beyond" in s for s in d.sentences) and len(d.sentences) == 3
    c = d.tables["collectives"]
    assert c["delta_exposed_ns"].abs().max() == 0 and c["b_exposed_ns"].sum() > 0
    # a collective's exposed time lies inside it: at most its ranks' time in it (wait + transfer)
    assert (c["b_exposed_ns"] <= c["b_wait_ns"] + c["b_transfer_ns"]).all()
    oc = d.tables["op_classes"]
    assert {"matmul", "attention"} <= set(oc["op_class"].to_list()) and oc["a_ns"].sum() == d.tables["kernels"]["a_ns"].sum()


def test_a_stretched_kernel_tops_the_losers_by_its_stretch(bundled, tmp_path):
    """A copy of the job whose busiest compute kernel runs 20 % longer (edited in the database):
    exactly that kernel heads the kernels diff, by the delta the edit implies."""
    copy = tmp_path / "slower.duckdb"
    shutil.copy(bundled, copy)
    import duckdb
    con = duckdb.connect(str(copy))
    name, = con.execute("""SELECT name FROM gpu_ops WHERE category = 'compute' AND step IS NOT NULL
                           GROUP BY name ORDER BY sum(end_ns - start_ns) DESC LIMIT 1""").fetchone()
    durs = con.execute("SELECT end_ns - start_ns FROM gpu_ops WHERE name = ? AND step IS NOT NULL", [name]).fetchall()
    con.execute("UPDATE gpu_ops SET end_ns = start_ns + round((end_ns - start_ns) * 1.2)::BIGINT WHERE name = ?", [name])
    con.close()
    expected = sum(round(d * 1.2) - d for d, in durs) / 3  # per matched step, over the three steps
    k = traceflow.diff(str(bundled), str(copy)).tables["kernels"]
    top = k.row(0, named=True)
    assert top["name"] == name and top["status"] == "changed"
    assert top["delta_ns"] == pytest.approx(expected, abs=1)
    assert k["delta_ns"][1:].abs().max() == 0


@needs_shared
def test_the_stall_is_idle_in_one_run_and_hidden_in_the_other(ingested):
    """ddp4_sync_stall drained the GPU before rank 3's 40 ms sleep in step 4; ddp4_straggler slept
    with work queued, so the stall is (mostly) hidden (fixtures' README; truth files)."""
    stall = next(t for t in truth("h100/kineto/ddp4_sync_stall", 3) if t["step"] == 4)
    hidden = next(t for t in truth("h100/kineto/ddp4_straggler", 3) if t["step"] == 4)
    d = traceflow.diff(ingested("h100/kineto/ddp4_sync_stall"), ingested("h100/kineto/ddp4_straggler"), step_a=4, step_b=4)
    assert d.pairs == [(4, 4)]
    idle = d.tables["idle"].filter((d.tables["idle"]["rank"] == 3) & (d.tables["idle"]["cause"] == "host_late")).row(0, named=True)
    assert idle["a_ns"] >= 0.9 * stall["dur_ns"]
    assert idle["b_ns"] <= 0.2 * hidden["dur_ns"]
    steps = d.tables["steps"]
    r3 = steps.filter((steps["rank"] == 3) & (steps["metric"] == "idle")).row(0, named=True)
    assert r3["delta_ns"] <= -0.8 * stall["dur_ns"] and not r3["noise"]


@needs_shared
def test_runs_of_different_shape_are_said_not_comparable(ingested):
    d = traceflow.diff(ingested("h100/kineto/ddp4_sync_stall"), ingested("public/hta-2rank"))
    assert any("not comparable as one job" in w for w in d.warnings)
    assert any("different GPUs" in w for w in d.warnings)
    assert {r["what"]: r["same"] for r in d.comparability}["ranks"] is False


def test_cli_tables_json_csv_and_page(bundled, tmp_path):
    r = run_cli("diff", str(bundled), str(bundled))
    assert r.returncode == 0 and "no change beyond" in r.stdout and "critical path" in r.stdout
    r = run_cli("diff", str(bundled), str(bundled), "--format", "json", "--step-a", "4", "--step-b", "5")
    out = json.loads(r.stdout)
    assert out["pairs"] == [{"step_a": 4, "step_b": 5}] and {"steps", "kernels", "critical_path"} <= set(out)
    path_delta = sum(x["delta_ns"] for x in out["critical_path"])
    wall = next(x for x in out["steps"] if x["rank"] is None and x["metric"] == "wall")
    assert path_delta == wall["delta_ns"]  # the path's kinds add up to the change in step time
    r = run_cli("diff", str(bundled), str(bundled), "--format", "csv", "--table", "kernels")
    assert r.stdout.splitlines()[0].startswith("name,category,op_class,a_ns,b_ns,delta_ns")
    page = tmp_path / "diff.html"
    r = run_cli("diff", str(bundled), str(bundled), "-o", str(page))
    assert r.returncode == 0 and page.exists() and 'name="generator" content="traceflow"' in page.read_text()


def test_cli_bad_inputs_are_one_line(bundled, tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    r = run_cli("diff", str(bundled), str(text))
    assert r.returncode == 3 and len(r.stderr.strip().splitlines()) == 1 and "notes.txt" in r.stderr
    r = run_cli("diff", str(bundled), str(bundled), "--step-a", "99")
    assert r.returncode != 0 and "--step-a 99" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = run_cli("diff", str(bundled), str(tmp_path / "missing.duckdb"))
    assert r.returncode == 3 and "no such file" in r.stderr


def test_the_diff_page_renders_offline_in_a_browser(bundled, tmp_path):
    from test_report import BROWSER, check_page, render
    if BROWSER is None:
        pytest.skip("headless chromium not installed (make test installs Debian's chromium)")
    import duckdb
    slower = tmp_path / "slower.duckdb"
    shutil.copy(bundled, slower)
    con = duckdb.connect(str(slower))
    con.execute("UPDATE gpu_ops SET end_ns = end_ns + 1000 WHERE category = 'compute'")  # a change to draw
    con.close()
    page = tmp_path / "diff.html"
    assert run_cli("diff", str(bundled), str(slower), "-o", str(page)).returncode == 0
    res = render(page, tmp_path)
    check_page(res, n_expected_min=1)
    assert "Why the step time changed" in res["dom"] and "Slower or new" in res["dom"]


def test_trace_folders_are_ingested_first(bundled):
    d = traceflow.diff(str(BUNDLED / "ddp4_sync_stall"), str(bundled))
    assert d.pairs == [(3, 3), (4, 4), (5, 5)]
    assert d.tables["steps"]["delta_ns"].abs().max() == 0


def test_a_database_from_an_older_traceflow_is_one_line(bundled, tmp_path):
    """Derived at test time: a copy as an older traceflow left it (without what this version adds,
    gpu_ops.cpu_op_id and op_work, and without the format version), and one of an older format.
    Every command that opens a database says so in one line, exit 3, and writes nothing."""
    import duckdb
    old = tmp_path / "old.duckdb"
    shutil.copy(bundled, old)
    con = duckdb.connect(str(old))
    con.execute("DROP VIEW tf_internal.op_work_kernels")
    con.execute("ALTER TABLE gpu_ops DROP COLUMN cpu_op_id")
    for t in ("mfu_waterfall", "mfu", "roofline", "op_work", "op_flops", "tf_internal.metadata"):
        con.execute(f"DROP TABLE {t}")
    con.close()
    older = tmp_path / "older-format.duckdb"
    shutil.copy(bundled, older)
    con = duckdb.connect(str(older))
    con.execute("UPDATE tf_internal.metadata SET value = '0' WHERE key = 'format'")
    con.close()
    page = tmp_path / "r.html"
    kept = {db: db.read_bytes() for db in (old, older)}
    for db in (old, older):
        for args in (("diff", str(db), str(bundled)), ("diff", str(bundled), str(db)), ("scaling", str(bundled), str(db)),
                     ("report", str(db), "-o", str(page)), ("query", str(db), "steps"), ("sql", str(db), "select 1"),
                     ("whatif", str(db), "--no-stragglers"), ("annotate", str(db), "-o", str(tmp_path / "t.pftrace")),
                     ("ingest", str(BUNDLED / "ddp4_sync_stall" / "rank-0.pt.trace.json.gz"), "-o", str(db), "--append")):
            r = run_cli(*args)
            assert r.returncode == 3 and db.name in r.stderr and "ingest its rank files again" in r.stderr, (args, r.stderr)
            assert len(r.stderr.strip().splitlines()) == 1
        with pytest.raises(traceflow.InputError, match="ingest its rank files again"):
            traceflow.open(str(db))  # the Python surface: the same check, once, when the Job opens
        assert db.read_bytes() == kept[db]  # --append left it as it was
    assert not page.exists() and not (tmp_path / "t.pftrace").exists()
