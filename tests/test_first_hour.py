"""The first hour of a new user (issue 45): the database documents itself, each output reads as the
README says, the regression gate, the Slurm epilog and the notebook view."""
from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest
from conftest import BUNDLED, run_cli

JOB = sorted(str(p) for p in (BUNDLED / "ddp4_sync_stall").glob("rank-*.pt.trace.json.gz"))
# the SQL types DuckDB names (duckdb_columns().data_type shows them; a comment repeating one read as
# part of the meaning: "the call (INTEGER, INTEGER, VARCHAR)")
SQL_TYPE = re.compile(r"\b(BIGINT|UBIGINT|INTEGER|SMALLINT|TINYINT|HUGEINT|VARCHAR|DOUBLE|FLOAT|REAL|BOOLEAN|TIMESTAMP)"
                      r"(\[\])?\W*$")
# columns of one table that may share one text: none today (each says which end, which part)
SHARED_BY_MEANING: set[tuple[str, str]] = set()


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The demo's job ingested by the command, as `make demo` does: (database, the command's result)."""
    out = tmp_path_factory.mktemp("demo") / "job.duckdb"
    r = run_cli("ingest", *JOB, "-o", out)
    assert r.returncode == 0, r.stderr
    return str(out), r


@pytest.fixture(scope="module")
def demo_db(demo):
    return demo[0]


def _catalog(path):
    import duckdb
    con = duckdb.connect(path, read_only=True)
    cols = con.execute("""SELECT table_name, column_name, comment, data_type FROM duckdb_columns()
                          WHERE schema_name = 'main' AND NOT internal ORDER BY table_name, column_index""").fetchall()
    tables = dict(con.execute("""SELECT table_name, comment FROM duckdb_tables() WHERE schema_name = 'main'
                                 UNION ALL SELECT view_name, comment FROM duckdb_views()
                                 WHERE schema_name = 'main' AND NOT internal""").fetchall())
    return con, cols, tables


def test_every_column_has_a_comment_of_its_own(demo_db):
    con, cols, tables = _catalog(demo_db)
    assert len(tables) > 40, tables
    missing = [(t, c) for t, c, doc, _ in cols if not doc]
    assert not missing, missing
    typed = [(t, c, doc) for t, c, doc, _ in cols if SQL_TYPE.search(doc)]
    assert not typed, typed
    by_table: dict[str, Counter] = {}
    for t, _, doc, _ in cols:
        by_table.setdefault(t, Counter())[doc] += 1
    shared = [(t, c, doc) for t, c, doc, _ in cols if by_table[t][doc] > 1 and (t, c) not in SHARED_BY_MEANING]
    assert not shared, shared


def test_table_comments_are_whole_sentences(demo_db):
    """A table's comment is its whole paragraph: never cut where a line of the header ended ("... its
    usual count of"), never running on into a column's name ("... to the end of its trace. rank")."""
    con, cols, tables = _catalog(demo_db)
    cut = {t: doc for t, doc in tables.items() if not doc or re.search(r"\b(of|the|a|an|to|in|its|and|or|beyond)$", doc)
           or doc.count("(") != doc.count(")")
           or (t == "desync_timing_ranks" and doc.endswith(" rank"))}
    assert not cut, cut
    # `query --list` shows each pack's first sentence: whole, too
    from traceflow.packs import listing
    for p in listing():
        if p.description:
            assert not re.search(r"\b(of|the|a|an|to|in|its|and|or)$", p.description), p


def test_enumerated_values_are_the_columns_values(demo_db):
    """A comment listing a column's values (a | b | c) lists the values the column holds."""
    con, cols, _ = _catalog(demo_db)
    checked = 0
    for t, c, doc, dtype in cols:
        if dtype != "VARCHAR" or " | " not in (doc or ""):
            continue
        values = {v for (v,) in con.execute(f'SELECT DISTINCT "{c}" FROM "{t}" WHERE "{c}" IS NOT NULL LIMIT 50').fetchall()}
        if not values or len(values) > 20:
            continue
        pieces = doc.split("|")
        unnamed = {v for v in values
                   if not any(re.search(rf"(^|[\s:('])'?{re.escape(v)}'?($|[\s:)',(])", p.strip()) for p in pieces)}
        if "..." in doc:  # an open list: its named values are examples
            continue
        assert not unnamed, (t, c, doc, unnamed)
        checked += 1
    assert checked >= 5


def test_declared_docs_are_each_tables_own_and_continue_over_lines():
    """comments.parse_tables reads the declarations: a table's columns its own (desync_timing_ranks.rank
    is not desync_timing's), a doc continued over deeper lines joined into one."""
    from traceflow import comments
    from traceflow.packs import pack_sql
    tables, cols = comments.parse_tables(pack_sql("sync_extra"))
    assert tables["sync_extra"].startswith("the blocking calls a rank made in a step beyond its usual count of them:")
    assert cols["sync_extra"]["blocked_ns"] == "its time blocked"
    assert set(tables) == {"sync_extra", "sync_extra_peers"}
    tables, cols = comments.parse_tables(pack_sql("idle_gaps"))
    assert "  " not in cols["idle_gaps"]["host_activity"] and cols["idle_gaps"]["host_activity"].endswith("NULL if neither")
    tables, cols = comments.parse_tables(pack_sql("desync_timing"))
    assert cols["desync_timing_ranks"]["rank"] and tables["desync_timing_ranks"].endswith("to the end of its trace.")


def _declared():
    from traceflow import graph
    return graph.declared_tables()


def test_every_table_holds_the_declared_columns_in_order_with_their_types(demo_db):
    """Every table the demo's database holds is declared (by schema.py, an SQL module's header or a
    Python step's DECLARED): exactly its declared columns, in order, of the declared DuckDB types
    (duckdb_columns())."""
    import duckdb
    con = duckdb.connect(demo_db, read_only=True)
    have: dict[str, list] = {}
    for t, c, ty in con.execute("""SELECT table_name, column_name, data_type FROM duckdb_columns()
                                   WHERE NOT internal AND database_name = current_database()
                                   ORDER BY table_name, column_index""").fetchall():
        have.setdefault(t, []).append((c, ty))
    declared = _declared()
    checked = [t for t in declared if t in have]
    for t in checked:
        assert have[t] == [(c.name, c.type) for c in declared[t].columns], t
    assert len(checked) >= 60 and {"idle_gaps", "gpu_ops", "step_windows", "findings", "traces", "fr_entries",
                                    "gpu_sharing", "device_peaks", "critical_path_raw", "metadata"} <= set(checked)
    assert set(have) - set(declared) == set()


def test_describe_takes_each_unit_from_the_declaration_not_the_comment(demo_db):
    """Job.describe (the MCP describe_table) gives a column the unit its declared role gives: a count
    named without a suffix has one (step_breakdown.n_ops), a time its ns, a key or a text none, even
    where the comment says '(ns' (the old reading of a comment's words for a unit matched nothing:
    its pattern held a backspace)."""
    import traceflow
    job = traceflow.open(demo_db)
    units = {t: {c["column"]: c["unit"] for c in job.describe(t)["columns"]} for t in ("step_breakdown", "idle_gaps", "mfu", "traces")}
    assert units["step_breakdown"]["n_ops"] == "count" and units["step_breakdown"]["idle_pct"] == "percent"
    assert units["idle_gaps"]["start_ns"] == units["idle_gaps"]["dur_ns"] == "ns" and units["idle_gaps"]["rank"] is None
    assert units["mfu"]["peak_tflops"] == "tflops" and units["mfu"]["flops"] == "flop"
    # traces.clock_offset_ns is declared figure:ns; hostname a text whose name says nothing
    assert units["traces"]["clock_offset_ns"] == "ns" and units["traces"]["hostname"] is None
    declared = _declared()
    for t, cols in units.items():
        roles = {c.name: c.role for c in declared[t].columns}
        for c, unit in cols.items():
            assert (unit is None) == (not roles[c].startswith(("time", "figure:")) or roles[c] == "figure:mixed"), (t, c, unit)


def test_time_columns_hold_epoch_ns_inside_the_traces_and_ids_name_ops(demo_db):
    """A column of role `time` holds ns since the epoch within the job's traced span (a duration or a
    relative time fails); one of role id:gpu_ops / id:host_ops holds op_ids of that table."""
    import duckdb
    con = duckdb.connect(demo_db, read_only=True)
    con.execute("SET search_path = 'main,tf_internal'")
    lo, hi = con.execute("""SELECT min(s), max(e) FROM (SELECT min(start_ns) s, max(end_ns) e FROM gpu_ops
                            UNION ALL SELECT min(start_ns), max(end_ns) FROM host_ops)""").fetchone()
    assert lo > 10**18  # 2001-09-09 in ns since the epoch
    times = ids = 0
    for t, decl in _declared().items():
        if not con.execute("SELECT count(*) FROM duckdb_columns() WHERE table_name = ?", [t]).fetchone()[0]:
            continue
        for c in decl.columns:
            if c.role in ("time", "time:unaligned"):  # either clock: ns since the epoch
                out = con.execute(f'SELECT count(*) FROM {t} WHERE "{c.name}" NOT BETWEEN ? AND ?', [lo - 10**9, hi + 10**9]).fetchone()[0]
                assert out == 0, (t, c.name, out)
                times += 1
            elif c.role in ("id:gpu_ops", "id:host_ops"):
                of = c.role[3:]
                out = con.execute(f'SELECT count(*) FROM {t} WHERE "{c.name}" IS NOT NULL AND "{c.name}" NOT IN (SELECT op_id FROM {of})').fetchone()[0]
                assert out == 0, (t, c.name, out)
                ids += 1
    assert times >= 40 and ids >= 15, (times, ids)


def test_a_diff_and_a_scaling_study_give_the_declared_columns(demo_db):
    """The comparisons' tables (TEMP, so in no database): a diff of the demo with itself and a scaling
    study of it twice give each declared column, in order, of the declared type."""
    import polars as pl

    import traceflow
    from traceflow import sqlmodules
    duck = {pl.Int64: "BIGINT", pl.Int32: "INTEGER", pl.Float64: "DOUBLE", pl.String: "VARCHAR", pl.Boolean: "BOOLEAN"}

    def types(df):
        return [(n, f"{duck[t.inner.base_type()]}[]" if isinstance(t, pl.List) else duck[t.base_type()]) for n, t in df.schema.items()]

    d = traceflow.diff(demo_db, demo_db)
    for name in sqlmodules.names("diff"):
        decl = sqlmodules.module("diff", name).tables[f"diff_{name}"]
        assert types(d.tables[name]) == [(c.name, c.type) for c in decl.columns], name
    s = traceflow.scaling([demo_db, demo_db])
    decl = sqlmodules.module("scaling", "scaling").tables["scaling"]
    assert types(s.table) == [(c.name, c.type) for c in decl.columns]


# --- output slips ---------------------------------------------------------------------------------

def test_an_ingest_with_nothing_wrong_warns_of_nothing(demo):
    """The bundled job's clocks need no shift: the note on it is the report's (inputs section, from
    traces.clock_note), not a warning on every ingest."""
    import duckdb
    db, r = demo
    assert "warning" not in r.stderr, r.stderr
    notes = duckdb.connect(db, read_only=True).execute("SELECT rank, clock_note FROM traces ORDER BY rank").fetchall()
    # one note names the ranks that share the reference clock (time-sliced ranks of one GPU are one unit)
    assert sum("share one clock" in (n or "") for _, n in notes) >= 1, notes
    assert all(n for _, n in notes)  # every rank says what alignment did


def test_critical_path_summary_through_a_pipe_under_a_short_table(demo_db):
    import duckdb
    r = run_cli("query", demo_db, "critical-path", "--step", "4")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    con = duckdb.connect(demo_db, read_only=True)
    n, wall = con.execute("SELECT count(*), sum(end_ns - start_ns) FROM critical_path WHERE step = 4").fetchone()
    minor = con.execute("""SELECT count(*) FROM critical_path WHERE step = 4
                           AND (end_ns - start_ns) * 1000 < ?""", [wall]).fetchone()[0]
    assert minor > 0
    rows = [line for line in lines if line.startswith("│")]
    assert len(rows) == n - minor < 50
    assert lines[-1].startswith(f"step 4: {wall / 1e6:.1f} ms; ")  # the summary, last
    assert any(line.startswith(f"{minor:,} segments shorter than 0.1%") for line in lines)


def test_sql_header_of_an_expression_is_never_folded(demo_db):
    r = run_cli("sql", demo_db, "select count(*) from gpu_ops", env={"COLUMNS": "30"})
    assert r.returncode == 0, r.stderr
    assert "count_star()" in r.stdout and "count_ " not in r.stdout, r.stdout


def test_diff_prints_words_and_counts_not_python_literals(demo_db):
    import duckdb
    r = run_cli("diff", demo_db, demo_db)
    assert r.returncode == 0, r.stderr
    head = r.stdout.split("\n\n")[0]
    assert "True" not in r.stdout and "False" not in r.stdout
    kernels = duckdb.connect(demo_db, read_only=True).execute("""SELECT median(n) FROM (SELECT count(*) AS n FROM gpu_ops
        WHERE kind = 'kernel' AND collective IS NULL AND step IS NOT NULL GROUP BY rank, step)""").fetchone()[0]
    line = next(x for x in head.splitlines() if x.startswith("kernels per rank and step"))
    assert line.split()[6] == f"{int(kernels):,}" and ".0" not in line, line
    assert next(x for x in head.splitlines() if x.startswith("critical path")).split()[3] == "yes"


def test_host_time_in_ms_and_percent_columns_in_one_format(demo_db):
    import duckdb
    con = duckdb.connect(demo_db, read_only=True)
    r = run_cli("query", demo_db, "host-time", "--rank", "0", "--step", "4")
    assert r.returncode == 0, r.stderr
    header = next(x for x in r.stdout.splitlines() if "cause" in x)
    cells = [[c.strip() for c in x.strip("│").split("│")] for x in r.stdout.splitlines() if x.startswith("│")]
    cols = [c.strip() for c in header.strip("┃").split("┃")]
    assert "time (ms)" in cols and "share (%)" in cols and "ns" not in cols, cols
    want = {c: (ns, sh) for c, ns, sh in con.execute("SELECT cause, ns, share FROM host_time WHERE rank = 0 AND step = 4").fetchall()}
    for row in cells:
        got = dict(zip(cols, row))
        ns, share = want[got["cause"]]
        assert got["time (ms)"] == f"{ns / 1e6:,.3f}"
        assert got["share (%)"] == f"{100 * share:,.1f}"
    r = run_cli("query", demo_db, "step-breakdown", "--limit", "0")
    pct = [c for x in r.stdout.splitlines() if x.startswith("│") for c in x.strip("│").split("│")[-4:]]
    assert pct and all(re.fullmatch(r"-?[\d,]+\.\d", c.strip()) for c in pct), pct


def test_peak_tflops_listed_before_the_likewise_of_peak_gbps():
    out = run_cli("ingest", "--help").stdout
    assert out.index("--peak-tflops") < out.index("--peak-gbps")


def test_a_job_is_named_for_its_folder_not_its_profiler(tmp_path):
    """runs/myjob/kineto/rank*.json is the job `myjob` (the title said "kineto"); rank folders of one
    job folder name it too. (The stored name and the report's title: the Slurm epilog's test.)"""
    import shutil

    from traceflow.job_name import from_inputs
    folder = tmp_path / "myjob" / "kineto"
    folder.mkdir(parents=True)
    for k, f in enumerate(JOB[:2]):
        (tmp_path / "other" / f"rank{k}").mkdir(parents=True)
        shutil.copy(f, folder)
        shutil.copy(f, tmp_path / "other" / f"rank{k}")
    assert from_inputs(sorted(folder.iterdir())) == "myjob"
    assert from_inputs([folder]) == "myjob"
    assert from_inputs(sorted((tmp_path / "other").glob("rank*/*.gz"))) == "other"
    assert from_inputs([JOB[0]]) == "rank-0"  # one file: its name


def test_report_charts_keep_titles_and_labels_clear(demo_db):
    """No Plotly tool bar (across the top it covered a title's end, upright the legend); the what-if
    chart's fixes named whole on its axis (on short bars they were clipped); shares in percent."""
    import html as htmllib
    import json

    import traceflow
    job = traceflow.open(demo_db)
    with job:
        fixes = job.findings().get("fixes", [])
    assert fixes, "the bundled job has fixes worth predicting"
    page = traceflow.report(demo_db, str(Path(demo_db).parent / "r.html"), force=True)
    text = Path(page).read_text()
    specs = json.loads(re.search(r'<script type="application/json" id="specs">(.*?)</script>', text, re.S).group(1))
    assert "displayModeBar: false" in text  # no tool bar over the titles and legends
    what_if = next(s for s in specs if s["layout"]["title"]["text"].startswith("Predicted gain"))
    from traceflow.pages.whatif import _is_bound  # a yardstick is listed apart, never charted as a fix
    assert [y.replace("<br>", " ") for y in what_if["data"][0]["y"]][::-1] == [f["scenario"] for f in fixes if not _is_bound(f)]
    assert any(_is_bound(f) for f in fixes) and "bounds, not fixes" in htmllib.unescape(text).lower()
    assert what_if["layout"]["yaxis"]["showticklabels"]
    assert "share of busy (%)" in htmllib.unescape(text)


# --- the regression gate ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ddp2(tmp_path_factory):
    """The bundled 2-rank job run twice: clean, and with rank 1 stalled 40 ms in step 3 (truth file)."""
    import traceflow
    d = tmp_path_factory.mktemp("ddp2")
    out = {}
    for run in ("clean", "stall"):
        files = sorted(str(p) for p in (BUNDLED / "ddp2_flops" / run).glob("rank-*.pt.trace.json.gz"))
        traceflow.ingest(files, str(d / f"{run}.duckdb")).close()
        out[run] = str(d / f"{run}.duckdb")
    return out


def _windows(db) -> dict[int, int]:
    """Each step's GPU window across ranks, by plain SQL over the step windows."""
    import duckdb
    con = duckdb.connect(db, read_only=True)
    return dict(con.execute("SELECT step, max(end_ns) - min(start_ns) FROM tf_internal.step_windows GROUP BY step").fetchall())


def test_regression_gate_fails_the_stalled_step_and_names_what_grew(ddp2, tmp_path):
    """Exit 4 only when the step time grew past the threshold and the noise; the line names the
    critical path's part that grew (rank 1's host, where the truth file puts the stall)."""
    import xml.etree.ElementTree as ET
    a, b = _windows(ddp2["clean"]), _windows(ddp2["stall"])
    grew = b[3] - a[3]
    assert grew > 0.05 * a[3]  # the stall is a regression of step 3
    junit = tmp_path / "gate.xml"
    r = run_cli("diff", ddp2["clean"], ddp2["stall"], "--step-a", "3", "--step-b", "3", "--fail-on-regression", "5",
                "--summary", "junit", junit)
    assert r.returncode == 4, (r.returncode, r.stdout[-800:], r.stderr)
    line = r.stdout.strip().splitlines()[-1]
    assert line.startswith("regression gate: REGRESSION: ")
    assert f"{a[3] / 1e6:.1f} → {b[3] / 1e6:.1f} ms ({grew / 1e6:+.1f} ms" in line, line
    assert "on rank 1" in line.split("the critical path grew in", 1)[1].split(",")[0], line
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite.get("failures") == "1" and suite.find("testcase/failure") is not None
    # the same step the other way, and a step without the stall: exit 0
    for args in (("--step-a", "3", "--step-b", "3"), ("--step-a", "2", "--step-b", "2")):
        pair = (ddp2["stall"], ddp2["clean"]) if args[1] == "3" else (ddp2["clean"], ddp2["stall"])
        md = tmp_path / f"gate-{args[1]}.md"
        r = run_cli("diff", *pair, *args, "--fail-on-regression", "5", "--summary", "markdown", md)
        assert r.returncode == 0, (args, r.stdout[-600:], r.stderr)
        assert "regression gate: passed" in r.stdout and md.read_text().startswith("<!-- traceflow regression gate -->")


def test_regression_gate_passes_a_run_against_itself(demo_db):
    r = run_cli("diff", demo_db, demo_db, "--fail-on-regression", "0", "--format", "json")
    assert r.returncode == 0, r.stderr
    assert "regression gate: passed" in r.stderr and "within the runs' own step-to-step variation" in r.stderr
    import json
    json.loads(r.stdout)  # stdout stays the machine's


# --- the notebook and the Slurm epilog --------------------------------------------------------------

def test_a_job_shows_itself_in_a_notebook(demo_db):
    """Job._repr_html_: the headline and one row per step with the step's GPU window across ranks."""
    import html as htmllib

    import traceflow
    with traceflow.open(demo_db) as job:
        page = job._repr_html_()
        verdict = job.findings()["sentences"]
    assert htmllib.escape(verdict[0]) in page and htmllib.escape(verdict[1]) in page
    rows = re.findall(r"<tr><td>(\d+)</td><td>([\d,.]+)</td>", page)
    windows = _windows(demo_db)
    assert {int(s): t for s, t in rows} == {s: f"{ns / 1e6:,.1f}" for s, ns in windows.items()}


def test_slurm_epilog_runs_the_post_mortem_of_the_job_that_ended(tmp_path):
    """examples/slurm_postmortem.sh as Slurm runs an epilog: no arguments, SLURM_* set, the job's
    traces (a copy of the bundled 2-rank job) in $SLURM_SUBMIT_DIR/traceflow/$SLURM_JOB_ID."""
    import getpass
    import os
    import shutil
    import subprocess
    import sys

    import duckdb
    submit = tmp_path / "train"
    traces = submit / "traceflow" / "4242"
    traces.mkdir(parents=True)
    for f in (BUNDLED / "ddp2_flops" / "clean").glob("rank-*.pt.trace.json.gz"):
        shutil.copy(f, traces)
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "4242", "SLURM_JOB_NAME": "gpt2",
           "SLURM_SUBMIT_DIR": str(submit), "SLURM_JOB_USER": getpass.getuser(), "SLURM_JOB_UID": str(os.getuid())}
    script = Path(__file__).resolve().parent.parent / "examples" / "slurm_postmortem.sh"
    r = subprocess.run(["bash", str(script)], capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = traces / "postmortem"
    assert r.stdout.strip() == f"slurm_postmortem: job 4242: traceflow exit 0; {out}/postmortem.log"
    assert {"report.html", "job.duckdb", "job.perfetto-trace", "postmortem.log"} <= {p.name for p in out.iterdir()}
    log = (out / "postmortem.log").read_text()
    assert "steps analysed" in log and f"database: {out}/job.duckdb" in log, log
    con = duckdb.connect(str(out / "job.duckdb"), read_only=True)
    assert con.execute("SELECT value FROM tf_internal.metadata WHERE key = 'name'").fetchone()[0] == "gpt2-4242"
    assert con.execute("SELECT count(DISTINCT rank) FROM traces").fetchone()[0] == 2
    assert "traceflow post-mortem: gpt2-4242" in (out / "report.html").read_text()
    # a job without traces: nothing to do; a damaged trace: the log says so, the epilog still exits 0
    r = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                       env={**env, "SLURM_JOB_ID": "4243"})
    assert r.returncode == 0 and "wrote no traces" in r.stdout
    bad = submit / "traceflow" / "4244"
    bad.mkdir()
    first = sorted(traces.glob("rank-*.gz"))[0]
    (bad / first.name).write_bytes(first.read_bytes()[:5000])
    r = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                       env={**env, "SLURM_JOB_ID": "4244"})
    assert r.returncode == 0 and "traceflow exit 3" in r.stdout, (r.stdout, r.stderr)
    assert "traceflow: error: " in (bad / "postmortem" / "postmortem.log").read_text()


def test_the_last_internal_errors_of_the_first_hour_are_one_line(demo_db, tmp_path):
    """`sql DB ""` and `ingest --peak-tflops 1e-300` ended in internal errors (exit 1)."""
    for text in ("", " -- only a comment"):
        r = run_cli("sql", demo_db, text)
        assert r.returncode == 2 and r.stderr.startswith("traceflow: error: no SQL statement"), (text, r.stderr)
        assert len(r.stderr.splitlines()) == 1
    out = tmp_path / "x.duckdb"
    for flag in ("--peak-tflops",):  # --peak-gbps: the same check
        r = run_cli("ingest", *JOB[:1], "-o", out, flag, "1e-300")
        assert r.returncode == 2 and r.stderr.startswith(f"traceflow: error: {flag} must be a number from 0.001"), r.stderr
        assert not out.exists()


def test_traceflow_report_stays_the_function_after_its_pages_are_imported(demo_db, tmp_path):
    """`traceflow.report(db, out)` twice: the page package was `traceflow.report` too, and its first
    import replaced the function with the package ("'module' object is not callable" on the second
    call, and in any process that had imported a page module)."""
    import traceflow
    first = traceflow.report(demo_db, str(tmp_path / "a.html"))
    second = traceflow.report(demo_db, str(tmp_path / "b.html"))
    assert callable(traceflow.report) and Path(first).stat().st_size > 0 and Path(second).stat().st_size > 0
