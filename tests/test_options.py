"""Issue 44: one options object (traceflow/options.py) carries every ingest setting, checked once, to
the readers and to a cluster's workers too; nothing below the command reads a setting from os.environ."""
from __future__ import annotations

import ast
import dataclasses
import pickle
from pathlib import Path

import pytest
from conftest import BUNDLED, run_cli

import traceflow
from traceflow.cli import ingest as ingest_cmd
from traceflow.cli import postmortem as postmortem_cmd
from traceflow.errors import UsageError
from traceflow.options import ENV_MAX_INFLATE, ENV_MEMORY_LIMIT, Options, of

PACKAGE = Path(traceflow.__file__).parent
KINETO = sorted(str(p) for p in (BUNDLED / "ddp4_sync_stall").glob("rank-*.json.gz"))

# every checked setting, a bad value, and what its one line names
BAD = [
    ({"align": "sideways"}, "--align"),
    ({"step_pattern": "step (\\d+"}, "--step-pattern"),
    ({"rank_pattern": "(["}, "--rank-pattern"),
    ({"max_inflate": "lots"}, "--max-inflate 'lots'"),
    ({"memory_limit": "lots"}, "memory_limit='lots'"),
    ({"peak_tflops": 0.0}, "--peak-tflops"),
    ({"peak_gbps": float("inf")}, "--peak-gbps"),
    ({"jobs": 0}, "-j/--jobs"),
    ({"cluster": "local:0"}, "--cluster local:0"),
    ({"cluster": "local:2", "append": True}, "--append cannot be combined with --cluster"),
]


@pytest.fixture
def no_env(monkeypatch):
    monkeypatch.delenv(ENV_MAX_INFLATE, raising=False)
    monkeypatch.delenv(ENV_MEMORY_LIMIT, raising=False)


@pytest.mark.parametrize("settings,needle", BAD, ids=[next(iter(s)) + ("+append" if "append" in s else "") for s, _ in BAD])
def test_a_bad_setting_is_one_line_at_construction(no_env, settings, needle):
    with pytest.raises(UsageError) as e:
        Options(**settings)
    assert needle in str(e.value) and "\n" not in str(e.value), str(e.value)
    with pytest.raises(UsageError):  # the Python API builds the same object from its keywords
        traceflow.ingest(KINETO, "/nonexistent/never-written.duckdb", **settings)


def test_every_setting_is_reachable_from_the_command():
    """Each flag of `ingest` and `postmortem` is a field of Options (the command builds the object
    from them alone), and each field is a flag, but the one only the environment sets."""
    fields = {f.name for f in dataclasses.fields(Options)}
    for cmd, own in ((ingest_cmd, {"files", "output"}), (postmortem_cmd, {"files", "outdir", "explain"})):
        flags = {p.name for p in cmd.params} - own
        assert flags == fields - {"memory_limit"}, cmd.name


def test_the_environment_is_read_once_into_the_object(monkeypatch):
    monkeypatch.setenv(ENV_MAX_INFLATE, "20x")
    monkeypatch.setenv(ENV_MEMORY_LIMIT, "1GB")
    o = Options()
    assert (o.max_inflate, o.memory_limit) == ("20x", "1GB")
    assert Options(max_inflate="4MB").max_inflate == "4MB"  # the flag wins
    monkeypatch.setenv(ENV_MAX_INFLATE, "lots")
    with pytest.raises(UsageError, match=f"^{ENV_MAX_INFLATE}: 'lots'"):
        Options()
    monkeypatch.delenv(ENV_MAX_INFLATE)
    assert o.max_inflate == "20x"  # read once: the object does not change with the environment


def test_options_pickle_whole_and_are_frozen(no_env):
    o = Options(step_pattern=r"iter (\d+)", max_inflate="4MB", peak_tflops=123.0, cluster="local:1", name="job")
    back = pickle.loads(pickle.dumps(o))
    assert back == o and hash(back) == hash(o)
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.max_inflate = "100x"  # type: ignore[misc]
    assert of(o) is o and of(None, align="off") == Options(align="off")
    with pytest.raises(UsageError, match="not both"):
        of(o, align="off")


def _environ_reads(tree: ast.AST) -> list[str]:
    """The names read from os.environ / os.getenv (a literal, else the expression's text), and '<write>' for a write."""
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Attribute) and n.value.attr == "environ":
            out.append("<write>" if isinstance(n.ctx, ast.Store) else ast.unparse(n.slice).strip("'\""))
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and (
                (n.func.attr in ("get", "setdefault", "pop", "update") and ast.unparse(n.func.value) == "os.environ")
                or ast.unparse(n.func) in ("os.getenv", "os.putenv")):
            name = ast.unparse(n.args[0]).strip("'\"") if n.args else "?"
            out.append("<write>" if n.func.attr in ("setdefault", "pop", "update", "putenv") else name)
    return out


def test_no_setting_is_read_from_the_environment_below_the_object():
    """The ingest's settings come from Options alone: outside options.py, traceflow reads only what is
    not a setting of an ingest (the debug switch, the terminal's width, the rank torch's launcher
    gives a process, the nsys export cache of the machine the reader runs on), and writes none."""
    allowed = {"TRACEFLOW_DEBUG", "COLUMNS", "RANK", "TRACEFLOW_CACHE", "XDG_CACHE_HOME"}
    found = {}
    for p in PACKAGE.rglob("*.py"):
        if p.name == "options.py" and p.parent == PACKAGE:
            continue
        if reads := _environ_reads(ast.parse(p.read_text())):
            found[str(p.relative_to(PACKAGE))] = reads
    assert {n for reads in found.values() for n in reads} <= allowed, found
    # the checker sees a read and a write: the hand-off that main's pipeline.py made
    assert _environ_reads(ast.parse('os.environ["TRACEFLOW_MAX_INFLATE"] = x\nos.environ.get("A")')) == ["<write>", "A"]


def test_a_bad_setting_on_the_command_is_one_line_before_any_work(tmp_path):
    """Flags and environment alike, on both commands that ingest: exit 2, one line, nothing written."""
    db, out = tmp_path / "job.duckdb", tmp_path / "pm"
    for cmd, args, env, needle in (
            (["ingest", *KINETO, "-o", db], ["--max-inflate", "lots"], {}, "--max-inflate"),
            (["ingest", *KINETO, "-o", db], [], {ENV_MEMORY_LIMIT: "lots"}, ENV_MEMORY_LIMIT),
            (["postmortem", *KINETO, "-o", out], ["--cluster", "local:2", "--append"], {}, "--append"),
            (["postmortem", *KINETO, "-o", out], [], {ENV_MAX_INFLATE: "lots"}, ENV_MAX_INFLATE)):
        r = run_cli(*cmd, *args, env=env)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and needle in lines[0] and "Traceback" not in r.stderr, (cmd, r.stderr)
    assert list(tmp_path.iterdir()) == []  # no database, no postmortem folder


def test_a_clusters_worker_gets_the_options(tmp_path):
    """--max-inflate reaches a Dask worker process with the options (no environment variable hands it
    over): the worker, the only process that inflates the files here, refuses them at 4 MB (they
    inflate to ~12 MB each), while the same run without the flag ingests them."""
    pytest.importorskip("distributed", reason="Dask is the optional extra traceflow[cluster]")
    r = run_cli("ingest", *KINETO[:2], "-o", tmp_path / "job.duckdb", "--cluster", "local:1", "--max-inflate", "4MB",
                env={"TMPDIR": str(tmp_path)})
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 3 and len(lines) == 1, r.stderr
    assert "inflates past" in lines[0] and "(--max-inflate 4MB)" in lines[0] and lines[0].count("rank-") == 1, lines
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no database, no parts folder, no scratch
    r = run_cli("ingest", *KINETO[:2], "-o", tmp_path / "job.duckdb", "--cluster", "local:1", env={"TMPDIR": str(tmp_path)})
    assert r.returncode == 0, r.stderr
