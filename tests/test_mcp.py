"""`traceflow mcp`: the SDK's own stdio client (mcp.client.stdio) driving a real server process.

Each reply is checked against the CLI's `--format json` for the same question, every figure's SQL
re-run through the sql tool, a question set (tests/mcp_questions.py) answered against an oracle over
the raw trace files (plain Python, tests/intervals.py), and hostile calls refused in one line.
"""
from __future__ import annotations

import functools
import gzip
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import BUNDLED, FIX, ROOT, WILD, run_cli
from intervals import clip, difference, gaps, measure, union
from mcp_questions import JOBS, QUESTIONS

pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install 'traceflow[mcp]')")

BOUND = 40_000  # 10,000 tokens at 4 characters a token


# --- the client ---------------------------------------------------------------------------------

def session(args: list[str], calls, env: dict | None = None) -> list[tuple[bool, str]]:
    """Starts `traceflow mcp ARGS` and makes `calls` with the SDK's client: [(tool, arguments)] or a
    function (call -> results) for calls that depend on replies. Returns (is_error, text) per call."""
    import anyio
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    async def main():
        p = StdioServerParameters(command=sys.executable, args=["-m", "traceflow.cli", "mcp", *map(str, args)],
                                  cwd=str(ROOT), env=env)
        async with stdio_client(p) as (r, w), ClientSession(r, w) as s:
            await s.initialize()
            out = []

            async def call(name, arguments):
                res = await s.call_tool(name, arguments)
                text = "".join(c.text for c in res.content)
                out.append((res.is_error, text))
                return res.is_error, text
            if callable(calls):
                await calls(call)
            else:
                for name, arguments in calls:
                    await call(name, arguments)
            return out
    return anyio.run(main)


def ok(reply: tuple[bool, str]) -> dict:
    err, text = reply
    assert not err, text
    assert len(text) <= BOUND
    out = json.loads(text)
    if "returned" in out:  # a page says what it holds
        assert len(out["rows"]) == out["returned"] and out["returned"] + out["remaining"] + out["offset"] == out["total_rows"]
    return out


def rows_of(reply: dict) -> list[dict]:
    return [dict(zip(reply["columns"], r)) for r in reply["rows"]]


def same(a, b) -> bool:
    """Equal, a value cut in a reply (its marker) matching the start of the full one."""
    if isinstance(a, str) and "…[cut:" in a:
        return isinstance(b, str) and b.startswith(a.split("…[cut:")[0])
    if isinstance(a, float) or isinstance(b, float):
        return a is not None and b is not None and abs(float(a) - float(b)) <= 1e-9 * max(1.0, abs(float(b)))
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b or (a is not None and b is not None and str(a) == str(b))


def same_rows(mine: list[dict], theirs: list[dict]) -> bool:
    return len(mine) == len(theirs) and all(set(m) == set(t) and all(same(m[k], t[k]) for k in m) for m, t in zip(mine, theirs))


def cli_json(*args) -> list | dict:
    r = run_cli(*args, "--format", "json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def db_of(tmp_path_factory):
    """job key (mcp_questions.JOBS) -> a database of it, ingested once."""
    import traceflow
    made: dict[str, str] = {}

    def make(key: str) -> str:
        if key not in made:
            files = job_files(key)
            out = tmp_path_factory.mktemp("mcp") / f"{key}.duckdb"
            traceflow.ingest(files, str(out))
            made[key] = str(out)
        return made[key]
    return make


def job_files(key: str) -> list[str]:
    where, names = JOBS[key]
    base = {"bundled": BUNDLED, "shared": FIX, "wild": WILD}[where]
    out = []
    for n in names:
        p = base / n
        if not p.exists():
            pytest.skip(f"{p} not found ({where} files absent)")
        out += sorted(str(f) for f in p.iterdir() if f.name.endswith((".json.gz", ".sqlite"))) if p.is_dir() else [str(p)]
    return out


# --- installs as users install it -------------------------------------------------------------

def test_importing_traceflow_does_not_import_mcp():
    r = subprocess.run([sys.executable, "-c", "import sys, traceflow, traceflow.cli; print('mcp' in sys.modules)"],
                       capture_output=True, text=True)
    assert r.stdout.strip() == "False", r.stderr


def test_without_the_extra_one_line_exit_3():
    """Without the SDK (its import blocked): one line naming the extra, exit 3."""
    code = ("import sys; sys.modules['mcp'] = None; sys.argv = ['traceflow', 'mcp', 'job.duckdb']; "
            "from traceflow.cli import main; main()")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 3
    assert r.stderr.strip().count("\n") == 0 and "pip install 'traceflow[mcp]'" in r.stderr
    assert r.stdout == ""


# --- every tool against the CLI -----------------------------------------------------------------

@pytest.mark.parametrize("key", ["ddp4", "ddp2-stall"])
def test_every_tool_agrees_with_the_cli(key, db_of, tmp_path):
    db = db_of(key)
    other = db_of("ddp2-clean") if key == "ddp2-stall" else db
    steps = cli_json("sql", db, "select distinct step from step_windows order by step")
    step = steps[len(steps) // 2]["step"]
    calls = [("job_at_a_glance", {}), ("findings", {"limit": 50}), ("list_analyses", {}),
             ("run_analysis", {"name": "step-breakdown"}), ("run_analysis", {"name": "idle-gaps", "rank": 1, "step": step, "limit": 20}),
             ("describe_table", {"table": "idle_gaps"}), ("describe_table", {}),
             ("sql", {"query": "select rank, kind, count(*) AS n, sum(end_ns - start_ns) AS ns from gpu_ops group by all order by all"}),
             ("critical_path", {"step": step, "limit": 30}), ("whatif", {"steps": [step], "no_launch_overhead": True}),
             ("diff", {"other": other})]
    replies = [ok(r) for r in session([db, "--compare", other], calls)]
    glance, findings, analyses, breakdown, gaps_, describe, tables, by_kind, path, whatif, diff = replies

    for fact in glance["facts"]:  # each fact: its rows are what its SQL gives through `traceflow sql`
        if not fact["what"].startswith("headline"):
            assert same_rows(fact["rows"], cli_json("sql", db, fact["sql"])), fact["what"]
    cli_findings = cli_json("query", db, "findings")
    for f in findings["rows"]:
        match = [c for c in cli_findings if c["kind"] == f["kind"] and c["rank"] == f.get("rank") and c["step"] == f.get("step")
                 and c["evidence"] == f.get("evidence")]
        assert match and all(same(f[k], match[0][k]) for k in match[0] if k in f), f
    assert findings["total_rows"] == len(findings["rows"]) >= 1
    listed = run_cli("query", db, "--list").stdout.split("\n")
    assert [a["name"] for a in analyses["analyses"]] == [line.split()[0] for line in listed if line.strip()]
    assert same_rows(rows_of(breakdown), cli_json("query", db, "step-breakdown"))
    cli_gaps = cli_json("query", db, "idle-gaps", "--rank", "1", "--step", str(step))
    assert gaps_["total_rows"] == len(cli_gaps) and same_rows(rows_of(gaps_), cli_gaps[:gaps_["returned"]])
    assert gaps_["remaining"] == len(cli_gaps) - gaps_["returned"]
    cols = cli_json("sql", db, "select column_name, data_type, comment from duckdb_columns() where table_name = 'idle_gaps' "
                    "and schema_name = 'main' order by column_index")
    assert [(c["column"], c["type"], c["meaning"]) for c in describe["columns"]] == [
        (c["column_name"], c["data_type"], c["comment"]) for c in cols]
    assert {"idle_gaps", "gpu_ops", "findings", "critical_path"} <= {t["table"] for t in tables["tables"]}
    assert same_rows(rows_of(by_kind), cli_json("sql", db, by_kind["sql"]))
    cli_path = cli_json("query", db, "critical-path", "--step", str(step))
    assert path["total_rows"] == len(cli_path) and same_rows(rows_of(path), cli_path[:path["returned"]])
    assert same_rows(path["by_kind_and_rank"]["rows"], cli_json("sql", db, path["by_kind_and_rank"]["sql"]))
    cli_whatif = cli_json("whatif", db, "--step", str(step), "--no-launch-overhead")
    assert same_rows(whatif["steps"], cli_whatif)
    measured = {r["step"]: r["measured_ns"] for r in cli_json("sql", db, "SELECT step, wall_ns AS measured_ns FROM findings_steps")}
    assert all(s["measured_ns"] == measured[s["step"]] for s in whatif["steps"])
    cli_diff = cli_json("diff", db, other)
    assert diff["sentences"] == cli_diff["sentences"] and diff["pairs"] == cli_diff["pairs"]
    for name, t in diff["tables"].items():  # rows that tie on the diff's order (a run against itself) come in any order
        assert t["total_rows"] == len(cli_diff[name])
        assert all(any(same_rows([r], [c]) for c in cli_diff[name]) for r in t["first_rows"]), name


def test_every_figure_reruns_through_the_sql_tool(db_of):
    """Each reply's `sql` (and each finding's and fact's), run through the sql tool, gives its rows."""
    db = db_of("ddp4")

    async def script(call):
        replies = [json.loads((await call(n, a))[1]) for n, a in (
            ("job_at_a_glance", {}), ("findings", {"limit": 50}), ("run_analysis", {"name": "exposed-comm"}),
            ("critical_path", {"step": 4, "limit": 5}), ("describe_table", {"table": "exposed_comm"}))]
        glance, findings, exposed, path, describe = replies
        for fact in glance["facts"]:
            if fact["sql"] and fact["rows"]:
                again = json.loads((await call("sql", {"query": fact["sql"], "limit": 500}))[1])
                if fact["what"].startswith("headline"):
                    assert all(same(again["rows"][0][again["columns"].index(k)], v) for k, v in fact["rows"][0].items()
                               if k in again["columns"])
                else:
                    assert same_rows(fact["rows"], rows_of(again)), fact["what"]
        for f in findings["rows"]:
            again = rows_of(json.loads((await call("sql", {"query": f["sql"]}))[1]))
            assert any(all(same(f[k], a[k]) for k in a if k in f) for a in again), f["kind"]
        for reply in (exposed, path, path["by_kind_and_rank"]):
            again = json.loads((await call("sql", {"query": reply["sql"], "limit": 500}))[1])
            mine = reply["rows"] if isinstance(reply["rows"][0], list) else [list(r.values()) for r in reply["rows"]]
            assert again["rows"][:len(mine)] == mine
        describe_again = json.loads((await call("sql", {"query": describe["sql"]}))[1])
        assert [r[0] for r in describe_again["rows"]] == [c["column"] for c in describe["columns"]]
    session([db], script)


# --- bounded replies --------------------------------------------------------------------------------

def test_replies_are_bounded_and_paged(db_of):
    db = db_of("ddp4")
    total = cli_json("sql", db, "select count(*) AS n from gpu_ops")[0]["n"]

    async def script(call):
        seen, cursor = 0, 0
        for _ in range(3):  # pages of the widest table: each under the bound, the cursor where the last ended
            r = json.loads((await call("sql", {"query": "select * from gpu_ops order by op_id", "cursor": cursor, "limit": 500}))[1])
            assert r["total_rows"] == total and r["offset"] == cursor
            seen += r["returned"]
            assert r["remaining"] == total - seen and r["next_cursor"] == seen
            cursor = r["next_cursor"]
        wide = json.loads((await call("sql", {"query": "select repeat('x', 100000) AS wide, range(10000) AS many"}))[1])
        assert "…[cut: 99,000 more characters]" in wide["rows"][0][0] and "…[cut: 9,936 more items]" in wide["rows"][0][1]
    session([db], script)
    for err, text in session([db], [("sql", {"query": "select * from gpu_ops", "limit": 500}), ("job_at_a_glance", {}),
                                    ("sql", {"query": "select op_id from gpu_ops order by op_id", "limit": 500}),
                                    ("findings", {"limit": 100}), ("list_analyses", {}), ("describe_table", {}),
                                    ("run_analysis", {"name": "idle-gaps", "limit": 500}), ("critical_path", {"step": 4, "limit": 500}),
                                    ("whatif", {})]):
        assert not err and len(text) <= BOUND, text[:200]
        ok((err, text))  # a page holds the rows it says it holds
    narrow = ok(session([db], [("sql", {"query": "select op_id from gpu_ops order by op_id", "limit": 500})])[0])
    assert narrow["returned"] == 500 and len(narrow["rows"]) == 500  # small rows: the whole page fits


def test_a_reply_too_big_is_cut_to_the_bound_with_markers():
    """The last resort of the bound (a what-if of hundreds of steps, a diff's long sentences): the
    longest values halved until the reply fits, each cut marked; rows of a page are never cut by count."""
    from traceflow.mcp_server import MAX_CHARS, cut, reply
    steps = [{"step": i, "measured_ns": 10**9 + i, "critical_path": {"longest": [{"name": "k" * 300}] * 5}} for i in range(400)]
    text = reply({"tool": "whatif", "steps": steps, "sentences": ["s" * 50_000]})
    assert len(text) <= MAX_CHARS == BOUND
    out = json.loads(text)
    assert "…[cut: " in text and out["steps"][0]["measured_ns"] == 10**9
    assert len(cut([[1, 2]] * 500)) == 500 and len(cut(list(range(500)))) == 65


# --- hostile calls ------------------------------------------------------------------------------------

HOSTILE = [
    ("sql", {"query": "DELETE FROM gpu_ops"}, "DELETE statements are refused"),
    ("sql", {"query": "CREATE TABLE t AS SELECT 1"}, "Cannot"),
    ("sql", {"query": "COPY gpu_ops TO '{out}/x.csv'"}, "COPY statements are refused"),
    ("sql", {"query": "ATTACH '{out}/other.duckdb' AS o"}, "ATTACH statements are refused"),
    ("sql", {"query": "INSTALL httpfs"}, "refused"),
    ("sql", {"query": "SELECT * FROM read_csv('/etc/passwd')"}, "disabled"),
    ("sql", {"query": "SELECT * FROM read_json('../../../etc/hostname')"}, "disabled"),
    ("sql", {"query": "SET enable_external_access = true"}, "locked"),
    ("sql", {"query": "CALL enable_logging(storage='file', storage_path='{out}/log')"}, "enable_logging is refused"),
    ("sql", {"query": "WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM t) SELECT count(*) FROM t"},
     "recursive CTE"),
    ("sql", {"query": "SELECT count(*) FROM range(1000000000000)"}, "more than the bound"),
    ("sql", {"query": "SELECT * FROM generate_series(1, (SELECT count(*) FROM gpu_ops) * 1000000)"}, "not number literals"),
    ("sql", {"query": "SELECT count(*) FROM gpu_ops a, gpu_ops b, gpu_ops c, gpu_ops d"}, "stopped after 10 s"),
    ("sql", {"query": "SELEC 1"}, "SQL error"),
    ("sql", {"query": 42}, "argument query"),
    ("sql", {}, "argument query"),
    ("sql", {"query": "select 1", "limit": 10**9}, "limit"),
    ("sql", {"query": "select 1", "cursor": -5}, "cursor"),
    ("run_analysis", {"name": "no-such-pack"}, "no query pack named"),
    ("run_analysis", {"name": "idle-gaps", "step": 999}, "step 999: the job has steps"),
    ("run_analysis", {"name": "idle-gaps", "rank": 77}, "rank 77: the job has ranks"),
    ("run_analysis", {"name": "idle-gaps", "step": "four"}, "argument step"),
    ("critical_path", {"step": -1}, "step -1: the job has steps"),
    ("describe_table", {"table": "../../etc/passwd"}, "no table or view named"),
    ("describe_table", {"table": "gpu_ops; DROP TABLE gpu_ops"}, "no table or view named"),
    ("diff", {"other": "/etc/passwd"}, "is not a run this server may open"),
    ("diff", {"other": "{out}/../../x.duckdb"}, "is not a run this server may open"),
    ("whatif", {"steps": [999]}, "--step 999"),
    ("whatif", {"scale_kind": ["gpu=0.5"]}, "one of compute, comm, memory"),
    ("whatif", {"scale_kernels": ["(=0.5"]}, "not a regular expression"),
    ("no_such_tool", {}, "Unknown tool"),
]


def test_hostile_calls_are_one_line_errors_and_the_server_lives(db_of, tmp_path):
    db = db_of("ddp4")
    before = {p.name: p.stat().st_mtime_ns for p in Path(db).parent.iterdir()}
    calls = [(n, {k: v.replace("{out}", str(tmp_path)) if isinstance(v, str) else v for k, v in a.items()}) for n, a, _ in HOSTILE]
    t0 = time.monotonic()
    replies = session([db], [*calls, ("sql", {"query": "select count(*) from gpu_ops"})])
    assert time.monotonic() - t0 < 120
    for (name, args, words), (err, text) in zip(HOSTILE, replies):
        assert err, (name, args, text)
        assert "\n" not in text and "Traceback" not in text and len(text) < 600, text
        assert words.lower() in text.lower(), (name, args, text)
    assert not replies[-1][0] and json.loads(replies[-1][1])["rows"] == [[15541]]  # alive, and nothing deleted
    assert list(tmp_path.iterdir()) == []  # nothing written
    assert {p.name: p.stat().st_mtime_ns for p in Path(db).parent.iterdir()} == before


# --- leaves nothing behind ------------------------------------------------------------------------

def _scratch(tmp: Path) -> list[Path]:
    return [p for p in tmp.iterdir() if p.is_dir()]


def test_trace_files_are_ingested_once_and_the_database_goes_with_the_server(tmp_path):
    """Given trace files, the server ingests them into a scratch folder; a finished client, a second
    client beside it, and a client killed with SIGKILL each leave no folder and no process behind;
    a server killed with SIGKILL leaves a folder the next one removes."""
    import psutil
    files = job_files("ddp2-clean")
    env = {"TMPDIR": str(tmp_path)}

    async def script(call):
        assert len(_scratch(tmp_path)) == 1  # ingested, once
        import anyio  # a second client, its own server, at once
        inner = await anyio.to_thread.run_sync(lambda: session(files, [("job_at_a_glance", {})], env=env))
        assert not inner[0][0]
        assert len(_scratch(tmp_path)) == 1
        await call("job_at_a_glance", {})
    replies = session(files, script, env=env)
    assert not replies[0][0]
    assert _scratch(tmp_path) == []

    # a client killed: its server sees stdin close and goes, with its folder
    client = subprocess.Popen([sys.executable, "-c", f"""
import sys; sys.path.insert(0, {str(ROOT / 'tests')!r})
from test_mcp import session
async def hang(call):
    await call('job_at_a_glance', {{}})
    print('ready', flush=True)
    import anyio; await anyio.sleep(600)
session({files!r}, hang, env={env!r})
"""], stdout=subprocess.PIPE, text=True, cwd=str(ROOT / "tests"))
    assert client.stdout.readline().strip() == "ready"
    servers = psutil.Process(client.pid).children(recursive=True)
    assert servers and len(_scratch(tmp_path)) == 1
    client.kill()
    client.wait()
    gone, alive = psutil.wait_procs(servers, timeout=30)
    assert alive == []
    assert _scratch(tmp_path) == []

    # the server itself killed (SIGKILL: no code of its own runs): its folder stays until the next
    # traceflow starts, which removes it (outputs.scratch_folder's lock is free)
    server = subprocess.Popen([sys.executable, "-m", "traceflow.cli", "mcp", *files], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env={**os.environ, **env}, cwd=str(ROOT))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # until the ingest is done: one folder (the readers' went), the database in it
        found = _scratch(tmp_path)
        if len(found) == 1 and (found[0] / "job.duckdb").is_file():
            break
        time.sleep(0.2)
    server.kill()
    server.wait()
    assert len(_scratch(tmp_path)) == 1
    assert not session(files, [("job_at_a_glance", {})], env=env)[0][0]
    assert _scratch(tmp_path) == []


def test_output_keeps_the_database(tmp_path):
    out = tmp_path / "kept.duckdb"
    r = session([*job_files("ddp2-clean"), "-o", out], [("sql", {"query": "select count(*) from traces"})],
                env={"TMPDIR": str(tmp_path)})
    assert json.loads(r[0][1])["rows"] == [[2]]
    assert out.is_file() and _scratch(tmp_path) == []


# --- the question set ---------------------------------------------------------------------------------
# The oracle: plain Python over the raw Kineto JSON. Times as the trace writes them (µs, exact
# decimals) to ns since the epoch with its baseTimeNanoseconds, as the reader does.

GPU = ("kernel", "gpu_memcpy", "gpu_memset")


def _load(path: str) -> dict:
    from decimal import Decimal
    return json.loads(gzip.open(path).read(), parse_float=Decimal)


def _ns(v, base) -> int:
    from decimal import Decimal
    return base + int((Decimal(v) * 1000).to_integral_value())


def _nsys(key) -> dict[int, str] | None:
    """rank -> the Nsight Systems export (rank<N>.sqlite), or None for a Kineto job."""
    files = job_files(key)
    if not all(f.endswith(".sqlite") for f in files):
        return None
    return {int(re.search(r"rank(\d+)", Path(f).name).group(1)): f for f in files}


def _nsys_ops(path: str, tables=("KERNEL", "MEMCPY", "MEMSET")) -> list[tuple[int, int]]:
    import sqlite3
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    have = {n for (n,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    out = [r for t in tables if f"CUPTI_ACTIVITY_KIND_{t}" in have
           for r in con.execute(f'SELECT start, "end" FROM CUPTI_ACTIVITY_KIND_{t}')]
    con.close()
    return out


@functools.cache
def raw_ranks(key) -> dict[int, dict]:
    """rank -> the rank's trace: its distributedInfo rank, else its place among the files."""
    out = {}
    if (nsys := _nsys(key)) is not None:
        return {r: {"nsys": p} for r, p in nsys.items()}
    for i, f in enumerate(job_files(key)):
        d = _load(f)
        out[int((d.get("distributedInfo") or {}).get("rank", i))] = d
    return out


def _gpu_events(d) -> list[dict]:
    return [e for e in d["traceEvents"] if e.get("ph") == "X" and e.get("cat") in GPU]


def _windows(d) -> dict[int, tuple[int, int]]:
    if id(d) not in _WINDOWS:
        _WINDOWS[id(d)] = _windows_of(d)
    return _WINDOWS[id(d)]


_WINDOWS: dict[int, dict] = {}


def _windows_of(d) -> dict[int, tuple[int, int]]:
    """step -> (start, end) of the rank's GPU window (docs/step-attribution.md): an op belongs to the
    ProfilerStep#N host range holding its launch call (by correlation id); a window runs from the
    previous one's end (the first: its first op) to the last end of the ops of this and earlier
    steps, clipped at the next step's first op."""
    base = int(d.get("baseTimeNanoseconds") or 0)
    ev = d["traceEvents"]
    steps = [(_ns(e["ts"], base), _ns(e["ts"], base) + _ns(e["dur"], 0), int(e["name"].split("#")[1])) for e in ev
             if e.get("ph") == "X" and e.get("cat") in ("user_annotation", "cpu_op") and str(e.get("name", "")).startswith("ProfilerStep#")]
    launch = {e["args"]["correlation"]: _ns(e["ts"], base) for e in ev if e.get("ph") == "X"
              and e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in (e.get("args") or {})}
    own: dict[int, list[tuple[int, int]]] = {}
    for e in _gpu_events(d):
        t = launch.get((e.get("args") or {}).get("correlation"))
        for a, b, n in steps:
            if t is not None and a <= t < b:
                own.setdefault(n, []).append((_ns(e["ts"], base), _ns(e["ts"], base) + _ns(e["dur"], 0)))
    order = sorted(own, key=lambda n: min(a for a, _ in own[n]))
    out, prev, last = {}, None, None
    for i, n in enumerate(order):
        last = max([last or 0, *(b for _, b in own[n])])
        end = min(last, min(a for a, _ in own[order[i + 1]])) if i + 1 < len(order) else last
        out[n] = (prev if prev is not None else min(a for a, _ in own[n]), end)
        prev = end
    return out


def _ops(d, keep=lambda e: True) -> list[tuple[int, int]]:
    base = int(d.get("baseTimeNanoseconds") or 0)
    return [(_ns(e["ts"], base), _ns(e["ts"], base) + _ns(e["dur"], 0)) for e in _gpu_events(d) if keep(e)]


def _is_comm(e) -> bool:
    return e["cat"] == "kernel" and "nccl" in e["name"].lower()


def oracle_ranks(key):
    return [("text", f'"rank":{r},', 0) for r in sorted(raw_ranks(key))]


def oracle_gpu_ops(key, rank):
    d = raw_ranks(key)[rank]
    return [("num", len(_nsys_ops(d["nsys"])) if "nsys" in d else len(_gpu_events(d)), 0)]


def oracle_step_time(key, step):
    w = [_windows(d)[step] for d in raw_ranks(key).values() if step in _windows(d)]
    return [("num", max(b for _, b in w) - min(a for a, _ in w), 0)]


def oracle_exposed_comm(key, rank, step):
    d = raw_ranks(key)[rank]
    lo, hi = _windows(d)[step]
    comm = clip(_ops(d, _is_comm), lo, hi)
    compute = clip(_ops(d, lambda e: e["cat"] == "kernel" and not _is_comm(e)), lo, hi)
    return [("num", measure(difference(comm, compute)), 0), ("num", measure(comm), 0)]


def oracle_top_kernel(key, rank):
    d = raw_ranks(key)[rank]
    total: dict[str, int] = {}
    for e in _gpu_events(d):
        if e["cat"] == "kernel":
            total[e["name"]] = total.get(e["name"], 0) + _ns(e["dur"], 0)
    name = max(total, key=lambda n: total[n])
    return [("text", json.dumps(name, ensure_ascii=False)[1:-1][:200], 0), ("num", total[name], 0)]


def oracle_copy_time(key, rank):
    d = raw_ranks(key)[rank]
    if "nsys" in d:
        return [("num", sum(b - a for a, b in _nsys_ops(d["nsys"], ("MEMCPY",))), 0)]
    return [("num", sum(b - a for a, b in _ops(d, lambda e: e["cat"] == "gpu_memcpy")), 0)]


def _gap(d, step) -> tuple[int, int]:
    """The longest stretch of the rank's step window with nothing on its GPU."""
    lo, hi = _windows(d)[step]
    return max(gaps(union(_ops(d)), lo, hi), key=lambda g: g[1] - g[0], default=(0, 0))


def _longest_gap(d, step) -> int:
    a, b = _gap(d, step)
    return b - a


def _call_before(d, t: int) -> str:
    """The CUDA runtime call of the rank's host that returned last before GPU time t: what
    emptied the queue when a gap follows a synchronising call."""
    base = int(d.get("baseTimeNanoseconds") or 0)
    calls = [(_ns(e["ts"], base) + _ns(e["dur"], 0), e["name"]) for e in d["traceEvents"]
             if e.get("ph") == "X" and e.get("cat") == "cuda_runtime"]
    return max((c for c in calls if c[0] <= t + 1_000_000), default=(0, ""))[1]


def oracle_longest_gap(key, rank, step):
    return [("num", _longest_gap(raw_ranks(key)[rank], step), 0)]


def oracle_held_up(key, step):
    """The rank whose GPU sat idle longest in the step: its finding names it, the gap, and why: the
    runtime call that returned as the gap began (a synchronize emptied the queue before the stall)."""
    by_rank = {r: _longest_gap(d, step) for r, d in raw_ranks(key).items() if step in _windows(d)}
    rank = max(by_rank, key=lambda r: by_rank[r])
    why = _call_before(raw_ranks(key)[rank], _gap(raw_ranks(key)[rank], step)[0])
    return [("text", f'"rank":{rank},"step":{step}', 0), ("num", by_rank[rank], 0), ("text", why, 0)]


def oracle_copies_gain(key, step):
    """The measured step, and a gain of at most half the copy time of the slowest rank's step."""
    ranks = raw_ranks(key)
    half = max(sum(b - a for a, b in clip(_ops(d, lambda e: e["cat"] == "gpu_memcpy"), *_windows(d)[step])) // 2
               for d in ranks.values())
    return [*oracle_step_time(key, step), ("gain_at_most", half, 0)]


ORACLES = {name[len("oracle_"):]: fn for name, fn in globals().items() if name.startswith("oracle_")}


def contains(texts: list[str], kind: str, value, tol) -> bool:
    if kind == "text":
        return any(value in t for t in texts)
    numbers = [float(x) for t in texts for x in re.findall(r"-?\d+(?:\.\d+)?(?:e[+-]?\d+)?", t)]
    if kind == "num":
        return any(abs(n - value) <= tol for n in numbers)
    gains = [s["gain_ns"] for t in texts for s in json.loads(t).get("steps", []) if s.get("gain_ns") is not None]
    return bool(gains) and all(0 <= g <= value for g in gains)


@pytest.mark.parametrize("key", list(JOBS))
def test_question_set(key, db_of):
    """Each question of the job: its calls' replies contain the oracle's answer from the raw files."""
    asked = [q for q in QUESTIONS if q["job"] == key]
    job_files(key)
    calls = [c for q in asked for c in q["calls"]]
    replies = session([db_of(key)], calls)
    at = 0
    for q in asked:
        texts = [ok(r) and r[1] for r in replies[at:at + len(q["calls"])]]
        at += len(q["calls"])
        for kind, value, tol in ORACLES[q["oracle"]](key, **q["args"]):
            assert contains(texts, kind, value, tol), f"{key}: {q['question']}: {kind} {value} not in {texts[0][:300]}"


def test_the_question_set_is_big_enough():
    assert len(QUESTIONS) >= 30 and all(q["oracle"] in ORACLES for q in QUESTIONS)
    assert os.path.basename(__file__) == "test_mcp.py"
