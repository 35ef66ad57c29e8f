"""Issue 23: every pack as a user sees it at a terminal (a pseudo-terminal, not a pipe)."""
from __future__ import annotations

import re

import pytest
from conftest import BUNDLED, connect, on_a_terminal, run_cli

from traceflow import graph, packs, sqlmodules

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    d = tmp_path_factory.mktemp("term")
    db = d / "job.duckdb"
    r = run_cli("ingest", *sorted((BUNDLED / "ddp4_sync_stall").glob("rank-*.json.gz")), "-o", db)
    assert r.returncode == 0, r.stderr
    return db


def _table_lines(text: str) -> list[str]:
    return [line for line in ANSI.sub("", text).splitlines() if line.startswith(("┃", "│"))]


@pytest.mark.parametrize("pack", sorted(t.replace("_", "-") for t in packs.public_tables()) + sorted(packs.ALIASES))
@pytest.mark.parametrize("columns", [80])
def test_every_pack_reads_at_a_terminal(job, pack, columns):
    table = packs.table_of(pack)
    cols = [r[0] for r in connect(job).execute(f"DESCRIBE {table}").fetchall()]
    args = ["--step", "4"] if "step" in cols else []
    out = ANSI.sub("", on_a_terminal("query", job, pack, *args, columns=columns))
    assert "Traceback" not in out and "error" not in out.lower(), out
    assert "SELECT" not in out and "FROM " not in out  # never the internal SQL as a header
    rows = _table_lines(out)
    assert rows == [] or max(map(len, rows)) <= columns, out
    assert all(len(line) <= columns for line in out.splitlines() if line.startswith(("┏", "┡", "└"))), out
    if not rows:
        assert re.search(r"no rows for --step 4 \(ranks 0–3, steps \d+–\d+\)", out) or pack == "critical-path" \
            or (not args and "no rows (ranks 0–3" in out), out  # memory-snapshot: no step column
        return
    # one line per row: nothing folded onto a second line (a folded row has fewer cells)
    n_cells = {line.count("│") + line.count("┃") for line in rows}
    assert len(n_cells) == 1 and min(n_cells) >= 3, out
    # no column squeezed to nothing (a header folded at a narrow width ends on its last line)
    head = [line for line in rows if line.startswith("┃")]
    assert not re.search(r"[│┃]\s*[│┃]", head[-1]), head[-1]
    # numbers are whole: each numeric cell matches a number pattern, never cut with an ellipsis
    for line in rows[1:]:
        for cell in re.split(r"[│┃]", line)[1:-1]:
            c = cell.strip()
            if re.fullmatch(r"[-\d,.]*\d[-\d,.]*…", c):
                pytest.fail(f"a number was cut: {c!r} in {line!r}")


def test_idle_gaps_sorted_by_duration_by_default(job):
    r = run_cli("query", job, "idle-gaps", "--format", "json")
    durs = [row["dur_ns"] for row in __import__("json").loads(r.stdout)]
    assert durs == sorted(durs, reverse=True) and durs[0] >= 20_000_000  # the injected ~40 ms stall comes first


def test_ids_are_printed_whole_quantities_grouped(job):
    """An op id is copied into a query: 13314, never 13,314 (a duration or a count keeps its separators)."""
    rows = __import__("json").loads(run_cli("query", job, "idle-gaps", "--format", "json").stdout)
    big = [r for r in rows if (r["next_op_id"] or 0) >= 10_000][:3]
    assert big, "no op id of 5 digits or more in the bundled job's idle gaps"
    out = ANSI.sub("", on_a_terminal("query", job, "idle-gaps", "--limit", "0", columns=250))
    for r in big:
        assert re.search(rf"[│ ]{r['next_op_id']}[│ ]", out), (r["next_op_id"], out[:2000])
        assert f"{r['next_op_id']:,}" not in out
    from traceflow.terminal import cell
    assert (cell(13314, "next_op_id", False, False), cell(13314, "kernels", False, False)) == ("13314", "13,314")


def test_empty_answer_says_what_the_database_holds(job):
    out = on_a_terminal("query", job, "idle-gaps", "--rank", "9")
    assert "no rows for --rank 9 (ranks 0–3, steps" in out


def test_plurals_and_short_kernel_names(tmp_path):
    db = tmp_path / "one.duckdb"
    r = run_cli("ingest", BUNDLED / "ddp4_sync_stall" / "rank-0.pt.trace.json.gz", "-o", db)
    assert "1 rank\n" in r.stdout and "3 steps" in r.stdout
    out = ANSI.sub("", on_a_terminal("query", db, "kernels", "--limit", "0", columns=250))
    assert "at::native::vectorized_elementwise_kernel<" in out and "(int, T2, T3)" not in out
    full = run_cli("query", db, "kernels", "--format", "json").stdout
    assert re.search(r"vectorized_elementwise_kernel<[^…]", full)  # JSON keeps the full name
    # distinct: the shortening once showed six different kernels as one `…kernel<…>` (issue 36)
    names = {r["name"] for r in __import__("json").loads(full)}
    shown = [re.split(r"│", line)[2].strip() for line in _table_lines(out) if line.startswith("│")]
    assert len(shown) == len(names) == len(set(shown)), sorted(shown)


# --- the DuckDB shell ---------------------------------------------------------------------------

def test_every_user_table_and_column_is_documented(job):
    con = connect(job)
    # what ingest loads and derives for users, from the declarations (graph.public_tables()): the analyses' among them
    public = graph.public_tables()
    assert set(packs.public_tables()) <= public and graph.loaded() <= public
    rows = con.execute("""SELECT table_name, comment FROM duckdb_tables() WHERE schema_name = 'main'""").fetchall()
    assert {t for t, _ in rows} == public  # helpers live in tf_internal
    assert all(c for t, c in rows), [t for t, c in rows if not c]
    undocumented = con.execute("""SELECT table_name, column_name FROM duckdb_columns()
                                  WHERE schema_name = 'main' AND NOT internal AND comment IS NULL""").fetchall()
    assert undocumented == []
    helpers = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables() WHERE schema_name = 'tf_internal'").fetchall()}
    assert {"step_windows", "gpu_islands"} <= helpers


def test_read_of_a_pack_in_the_duckdb_shell(job, tmp_path):
    import shutil
    import subprocess
    cli = shutil.which("duckdb") or str(__import__("pathlib").Path(__import__("sys").executable).parent / "duckdb")
    if not __import__("os").path.exists(cli):
        pytest.skip("the duckdb command line (duckdb-cli) is not installed")
    copy = tmp_path / "copy.duckdb"
    shutil.copy(job, copy)
    pack = sqlmodules.path("queries", "exposed_comm")
    r = subprocess.run([cli, str(copy), "-csv", "-c", f".read {pack}"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1].count(",") >= 5 and "rank" in r.stdout  # the table's rows, printed
    # read-only: the file's last query alone shows the same table
    last = pack.read_text().rstrip().splitlines()[-1]
    r = subprocess.run([cli, "-readonly", str(copy), "-csv", "-c", last], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "rank" in r.stdout, r.stderr


def test_progress_names_each_phase(tmp_path):
    """On a terminal the progress line moves on past "4/4 files": each phase by name."""
    out = ANSI.sub("", on_a_terminal("postmortem", *sorted((BUNDLED / "ddp4_sync_stall").glob("rank-*.json.gz")),
                                     "-o", tmp_path / "pm", columns=120))
    for phase in ("reading", "loading into DuckDB", "running the analyses", "computing the critical path",
                  "writing the report", "writing the Perfetto trace"):
        assert phase in out, (phase, out[-2000:])
    assert "0/0 files" not in out  # the report's and the trace's phases count no files (issue 36)
    assert re.search(r"reading .*\d/4 files", out)


# --- issue 36: what a 100-column terminal keeps, numbers as the query gave them, pipes ------------

def _header_names(out: str) -> set[str]:
    """The columns a table shows: its header cells, folded headers joined back (`exposed_` + `comm`)."""
    head = [line for line in ANSI.sub("", out).splitlines() if line.startswith("┃")]
    cells = [re.split(r"┃", line)[1:-1] for line in head]
    return {"".join(c[k].strip() for c in cells if c[k].strip() not in ("(ms)", "(UTC)")) for k in range(len(cells[0]))}


@pytest.mark.parametrize("pack, args, wanted", [
    ("steps", ["--step", "4"], {"busy", "idle", "compute", "exposed_comm", "idle_pct", "compute_pct", "exposed_comm_pct"}),
    ("critical-path", ["--step", "4"], {"dur", "kind", "rank"}),
    ("idle-gaps", [], {"dur", "cause", "host_activity", "next_op"}),
])
def test_a_100_column_terminal_keeps_the_columns_that_matter(job, pack, args, wanted):
    """Each pack declares which columns a narrow terminal keeps first (`-- <table> shows first:` in its
    file); at 100 columns `steps` once kept the timestamps and dropped busy, idle, compute, exposed
    comm and every percentage, `critical-path` dropped dur_ns, `idle-gaps` host_activity."""
    out = on_a_terminal("query", job, pack, *args, "--limit", "5", columns=100)
    shown = _header_names(out)
    assert wanted <= shown, (wanted - shown, out)
    assert max(len(line) for line in ANSI.sub("", out).splitlines() if line.startswith(("┃", "│", "┏"))) <= 100
    table = packs.table_of(pack)
    first = packs.shows_first(pack)
    cols = [r[0] for r in connect(job).execute(f"DESCRIBE {table}").fetchall()]
    # the columns left out are named, and none of them comes before a kept one in the declared order
    left = re.search(r"not shown at this width: ([^;]+);", ANSI.sub("", out)).group(1).split(", ")
    assert set(left) <= set(cols) and not set(left) & set(first[: len(wanted)])


def test_every_wide_pack_declares_its_columns_by_priority(job):
    """A table of more than 8 columns says which a narrow terminal keeps; each name is one of its columns."""
    con = connect(job)
    for table in packs.public_tables():
        cols = [r[0] for r in con.execute(f"DESCRIBE {table}").fetchall()]
        first = packs.shows_first(table)
        assert set(first) <= set(cols), (table, set(first) - set(cols))
        assert len(cols) <= 8 or first, f"{table}: {len(cols)} columns and no `-- {table} shows first:` line"


def test_numbers_keep_the_querys_precision(job):
    """`select 0.000123::double` showed 0.00 (every double at 2 decimals); counts computed as doubles showed 4.00."""
    out = ANSI.sub("", on_a_terminal("sql", job, "select 0.000123::double AS small, round(2/3, 1) AS rounded, "
                                     "count(*)::double AS n, 1/3 AS third, 123456.789123::double AS big FROM traces", columns=120))
    row = next(line for line in out.splitlines() if line.startswith("│"))
    cells = [c.strip() for c in row.split("│")[1:-1]]
    n = connect(job).execute("SELECT count(*) FROM traces").fetchone()[0]
    assert cells == ["0.000123", "0.7", str(n), "0.33", "123,456.79"], cells


def test_piped_output_follows_columns(job):
    """Through a pipe a table took its natural width (200 to 1,100 characters); COLUMNS sets it."""
    wide = run_cli("query", job, "idle-gaps", "--limit", "5", env={"COLUMNS": ""}).stdout
    assert max(map(len, wide.splitlines())) > 150  # no width asked: nothing cut
    for columns in (80, 120):
        out = run_cli("query", job, "idle-gaps", "--limit", "5", env={"COLUMNS": str(columns)}).stdout
        table = [line for line in out.splitlines() if line[:1] in "┏┃│┡└"]
        assert table and max(map(len, table)) <= columns, (columns, out)
        assert "host_activity" in _header_names(out)


def test_short_names_are_distinct_and_one_function(job):
    """text.short_names, used by the terminal and the report: every kernel of the bundled job gets a
    short name of its own, each one a prefix-sharing brief of its full name."""
    from traceflow.text import short_name, short_names
    names = [r[0] for r in connect(job).execute("SELECT DISTINCT name FROM gpu_ops").fetchall()]
    short = short_names(names)
    assert len(set(short.values())) == len(names)
    assert len({short_name(n) for n in names}) < len(names)  # the plain shortening collides on this job
    for full, s in short.items():
        assert len(s) <= 120 and s.split("<")[0] == short_name(full).split("<")[0], (s, full[:100])
    import traceflow.pages.blocks as blocks
    import traceflow.terminal as terminal
    assert blocks.short_names is short_names and terminal.short_names is short_names
