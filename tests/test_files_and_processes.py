"""Issue 16: never lose a user's file, never leave a process behind, never a traceback.

Every case runs the real command in a subprocess on inputs derived from the real fixtures, with
a private $TMPDIR, and checks: the exit code, one line on stderr, no traceback, every file that
existed before byte-identical after, no traceflow process left, no temp file left.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from conftest import BUNDLED, FIX, ROOT, TRACEFLOW, connect, on_a_terminal, run_cli, tagged_processes

KINETO = sorted(str(p) for p in (BUNDLED / "ddp4_sync_stall").glob("rank-*.json.gz"))
NSYS_SMALL = FIX / "h100/nsys/graphs/rank0.sqlite"


# --- the checks every case makes --------------------------------------------------------------

def snapshot(*roots: Path) -> dict[str, str]:
    out = {}
    for root in roots:
        for dirpath, _, names in os.walk(root):
            for n in names:
                p = Path(dirpath) / n
                if p.is_file() and not p.is_symlink():
                    out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def wait_gone(tag: str, seconds: float = 5.0) -> list[int]:
    end = time.monotonic() + seconds
    while (left := tagged_processes(tag)) and time.monotonic() < end:
        time.sleep(0.1)
    return left


class Run:
    """One command in a sandbox: its own $TMPDIR and a tag in its environment."""

    def __init__(self, tmp_path: Path):
        self.root = tmp_path
        self.tmpdir = tmp_path / "tmp"
        self.tmpdir.mkdir(exist_ok=True)
        self.tag = f"TRACEFLOW_TEST_TAG={uuid.uuid4().hex}"
        self.env = {"TMPDIR": str(self.tmpdir), self.tag.split("=")[0]: self.tag.split("=")[1]}

    def __call__(self, *args, **kw):
        return run_cli(*args, env={**self.env, **kw.pop("env", {})}, **kw)

    def popen(self, *args):
        return subprocess.Popen([*TRACEFLOW, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env={**os.environ, **self.env}, start_new_session=True)


def assert_refused(r, code: int = 3, *needles: str):
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("traceflow: error: "), r.stderr
    assert "Traceback" not in r.stderr + r.stdout
    for n in needles:
        assert n in lines[0], (n, lines[0])


def assert_clean(run: Run, before: dict[str, str], folder: Path):
    after = snapshot(run.root)
    changed = [p for p, h in before.items() if after.get(p) != h]
    assert changed == [], f"changed or removed: {changed}"
    leftovers = [p.name for p in folder.rglob("*") if ".traceflow-tmp-" in p.name or p.name.endswith(".traceflow-lock")]
    assert leftovers == []
    assert list(run.tmpdir.iterdir()) == []
    assert wait_gone(run.tag) == []


@pytest.fixture(scope="module")
def one_rank_db(tmp_path_factory):
    """A database of rank 0, made once: each test works on its own copy (an ingest per test was most
    of this module's time)."""
    d = tmp_path_factory.mktemp("one")
    assert run_cli("ingest", KINETO[0], "-o", d / "job.duckdb").returncode == 0
    return d / "job.duckdb"


@pytest.fixture
def sandbox(tmp_path, one_rank_db):
    run = Run(tmp_path)
    trace = tmp_path / "rank-0.pt.trace.json.gz"
    shutil.copyfile(KINETO[0], trace)
    db = tmp_path / "job.duckdb"
    shutil.copyfile(one_rank_db, db)
    return run, trace, db


# --- outputs that are not traceflow's ------------------------------------------------------------

def _text_file(folder: Path) -> Path:
    p = folder / "notes.txt"
    p.write_text("a user's notes\n")
    return p


OUTPUT_CASES = {
    # name: (make the -o path, words the error must contain)
    "text file": (lambda f, trace, db: _text_file(f), "is not a traceflow DuckDB database"),
    "symlink to a text file": (lambda f, trace, db: _link(f / "link.duckdb", _text_file(f)), "is not a traceflow DuckDB database"),
    "the input itself": (lambda f, trace, db: trace, "is one of the inputs"),
    "a symlink to the input": (lambda f, trace, db: _link(f / "in.duckdb", trace), "is one of the inputs"),
    "a folder": (lambda f, trace, db: f, "is a folder"),
    "a missing parent folder": (lambda f, trace, db: f / "no" / "such" / "job.duckdb", "does not exist"),
    "a symlink loop": (lambda f, trace, db: _loop(f), "symlink loop"),
    "a dangling symlink": (lambda f, trace, db: _link(f / "dangling.duckdb", f / "gone.duckdb"), "missing file"),
    "a character device": (lambda f, trace, db: Path("/dev/null"), "not a regular file"),
    "a fifo": (lambda f, trace, db: _fifo(f), "not a regular file"),
    "a truncated database": (lambda f, trace, db: _truncated(db, f), "is not a traceflow DuckDB database"),
}


def _link(link: Path, target: Path) -> Path:
    link.symlink_to(target)
    return link


def _loop(f: Path) -> Path:
    (f / "a").symlink_to(f / "b")
    (f / "b").symlink_to(f / "a")
    return f / "a"


def _fifo(f: Path) -> Path:
    os.mkfifo(f / "pipe")
    return f / "pipe"


def _truncated(db: Path, f: Path) -> Path:
    p = f / "cut.duckdb"
    p.write_bytes(db.read_bytes()[: 300_000])
    return p


@pytest.mark.parametrize("case", sorted(OUTPUT_CASES))
def test_ingest_refuses_outputs_it_does_not_own(sandbox, case):
    run, trace, db = sandbox
    make, words = OUTPUT_CASES[case]
    out = make(run.root, trace, db)
    dev = os.stat("/dev/null")
    before = snapshot(run.root)
    r = run("ingest", trace, "-o", out)
    assert_refused(r, 3, words)
    assert str(out) in r.stderr or case == "a symlink loop"
    assert_clean(run, before, run.root)
    now = os.stat("/dev/null")
    assert (now.st_mode, now.st_rdev) == (dev.st_mode, dev.st_rdev)  # still the device


@pytest.mark.parametrize("case", ["text file", "the input itself", "a character device", "a folder"])
def test_force_replaces_only_regular_files_that_are_not_inputs(sandbox, case):
    run, trace, db = sandbox
    make, _ = OUTPUT_CASES[case]
    out = make(run.root, trace, db)
    before = snapshot(run.root)
    r = run("ingest", trace, "-o", out, "--force")
    if case == "text file":
        assert r.returncode == 0, r.stderr
        assert connect(out).execute("select count(*) from traces").fetchone()[0] == 1
    else:
        assert_refused(r, 3)
        assert_clean(run, before, run.root)


def test_replacing_a_traceflow_database_is_allowed(sandbox):
    run, trace, db = sandbox
    r = run("ingest", KINETO[1], "-o", db)
    assert r.returncode == 0, r.stderr
    assert connect(db).execute("select min(rank) from traces").fetchone()[0] == 1


@pytest.mark.parametrize("case", ["text file", "a truncated database"])
def test_append_onto_what_is_not_a_database(sandbox, case):
    run, trace, db = sandbox
    out = OUTPUT_CASES[case][0](run.root, trace, db)
    before = snapshot(run.root)
    r = run("ingest", KINETO[1], "-o", out, "--append")
    assert_refused(r, 3, "--append needs a traceflow DuckDB database")
    assert_clean(run, before, run.root)


@pytest.mark.parametrize("command,kind", [("report", "report"), ("annotate", "Perfetto trace")])
def test_report_and_annotate_outputs(sandbox, command, kind):
    run, trace, db = sandbox
    before = snapshot(run.root)
    for out, words in [(_text_file(run.root), f"is not a traceflow {kind}" if kind == "report" else "not a Perfetto trace written by traceflow"),
                       (db, "is one of the inputs"), (run.root, "is a folder"), (Path("/dev/null"), "not a regular file"),
                       (run.root / "missing" / "x", "does not exist")]:
        before = snapshot(run.root)
        assert_refused(run(command, db, "-o", out), 3, words)
        assert_clean(run, before, run.root)
    out = run.root / f"out.{command}"
    assert run(command, db, "-o", out).returncode == 0
    assert run(command, db, "-o", out).returncode == 0  # its own kind: replaced


def test_postmortem_output_is_a_file_or_holds_foreign_files(sandbox):
    run, trace, db = sandbox
    notes = _text_file(run.root)
    before = snapshot(run.root)
    assert_refused(run("postmortem", trace, "-o", notes), 3, "is a file, not a folder")
    assert_clean(run, before, run.root)
    folder = run.root / "pm"
    folder.mkdir()
    (folder / "report.html").write_text("<html>the user's own page</html>")
    before = snapshot(run.root)
    assert_refused(run("postmortem", trace, "-o", folder), 3, "report.html", "not a traceflow report")
    assert_clean(run, before, run.root)
    assert not (folder / "job.duckdb").exists()  # refused before any work


def test_a_refused_postmortem_leaves_no_folder_it_made(sandbox):
    run, trace, db = sandbox
    notes = _text_file(run.root)
    out = run.root / "new-pm"
    assert_refused(run("postmortem", notes, "-o", out), 3, "unknown format")
    assert not out.exists()  # made for the outputs, and none came
    out.mkdir()
    assert_refused(run("postmortem", notes, "-o", out), 3, "unknown format")
    assert out.is_dir()  # the user's own folder stays


# --- scratch folders ----------------------------------------------------------------------------

def test_foreign_scratch_look_alikes_are_never_removed(sandbox):
    run, trace, db = sandbox
    # Named like traceflow's scratch, with a pid that is not alive, but not traceflow's (no marker).
    foreign = run.tmpdir / "traceflow-999999999-data"
    foreign.mkdir()
    (foreign / "results.csv").write_text("1,2,3\n")
    bare = run.tmpdir / "traceflow-1-x"
    bare.mkdir()
    # A real leftover of a killed traceflow: marker present and nobody holds its lock.
    stale = run.tmpdir / "traceflow-999999998-abc"
    stale.mkdir()
    (stale / ".traceflow-scratch").write_text("")
    (stale / "f0p0.gpu_ops.arrow").write_bytes(b"x" * 100)
    assert run("ingest", trace, "-o", db).returncode == 0
    assert (foreign / "results.csv").read_text() == "1,2,3\n" and bare.is_dir()
    assert not stale.exists()


# --- processes: kill -9 and Ctrl-C ------------------------------------------------------------

@pytest.mark.parametrize("phase", ["reading", "loading"])
def test_kill_9_leaves_no_process_behind(tmp_path, phase):
    run = Run(tmp_path)
    db = tmp_path / "job.duckdb"
    p = run.popen("ingest", *KINETO, "-o", db, "--jobs", "3")
    assert wait_for_phase(p, phase, run, tmp_path), p.communicate()
    os.kill(p.pid, signal.SIGKILL)  # the parent only, as the OOM killer or a scheduler would
    p.wait()
    assert wait_gone(run.tag, 30.0) == [], "a reader process or the resource tracker outlived its parent"


def _catches(pid: int, sig: int) -> bool:
    """The process has a handler of its own for `sig` (/proc/PID/status, SigCgt)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    except OSError:
        pass
    return False


# Where a postmortem run is, told by what it has made (never by a sleep: on a loaded machine 0.1 s
# after the start was sometimes inside the interpreter's own start-up, before any traceflow code):
# its handlers in place (Python catches SIGINT by itself; only traceflow catches SIGTERM), its scratch
# folder in $TMPDIR (the readers run), the database's temp file (loading, deriving), the report's.
PHASES = {
    "starting": lambda run, pm, pid: _catches(pid, signal.SIGTERM),
    "reading": lambda run, pm, pid: any(p.name.startswith("traceflow-") for p in run.tmpdir.iterdir()),
    "loading": lambda run, pm, pid: any(pm.glob(".job.duckdb.traceflow-tmp-*")),
    "writing the report": lambda run, pm, pid: any(pm.glob(".report.html.traceflow-tmp-*")),
}


def wait_for_phase(p, phase: str, run: Run, pm: Path, timeout: float = 120.0) -> bool:
    """Polls until the run reaches `phase`; False if it ended first."""
    end = time.monotonic() + timeout
    while p.poll() is None and time.monotonic() < end:
        try:
            if PHASES[phase](run, pm, p.pid):
                return True
        except OSError:  # a folder listed while the run removes it
            pass
        time.sleep(0.005)
    return False


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
@pytest.mark.parametrize("phase", list(PHASES))
def test_ctrl_c_is_one_line_exit_130_and_leaves_nothing(sandbox, phase, sig):
    """Ctrl-C (SIGINT to the whole process group, as a terminal sends it) and SIGTERM (to the
    command alone, as kill, timeout, Slurm and systemd send it), in each phase of a postmortem: one
    line, exit 130 / 143, no file changed, no temp file, folder or process left."""
    run, trace, db = sandbox
    old = db.read_bytes()
    before = snapshot(run.root)
    pm = run.root / "pm"
    p = run.popen("postmortem", *KINETO, "-o", pm, "--jobs", "3")
    reached = wait_for_phase(p, phase, run, pm)
    try:
        if sig == signal.SIGINT:
            os.killpg(p.pid, sig)
        else:
            p.send_signal(sig)
    except ProcessLookupError:  # it finished in between (a zombie takes no signal)
        pass
    out, err = p.communicate(timeout=120)
    code, word = (130, "interrupted") if sig == signal.SIGINT else (143, "terminated")
    assert reached or p.returncode == 0, (p.returncode, err)
    # the last phase may finish between the check and the signal: then the run completed
    assert p.returncode == code or (phase == "writing the report" and p.returncode == 0), (p.returncode, err)
    assert "Traceback" not in out + err
    if p.returncode == code:  # (the warnings of an ingest that finished before the signal may precede it)
        lines = [x for x in err.strip().splitlines() if not x.startswith(("traceflow: warning:", "traceflow: note:"))]
        assert lines == [f"traceflow: {word}"], err
    assert db.read_bytes() == old
    assert not pm.exists() or any(pm.iterdir()), "an empty output folder left behind"
    after = snapshot(run.root)
    assert all(after.get(k) == v for k, v in before.items())
    assert [x.name for x in run.root.rglob("*") if ".traceflow-tmp-" in x.name or x.name.endswith(".traceflow-lock")] == []
    assert wait_gone(run.tag) == []
    assert list(run.tmpdir.iterdir()) == []


# --- a full disk, a read-only folder -------------------------------------------------------------

@pytest.fixture
def small_tmpfs(tmp_path):
    mnt = tmp_path / "small"
    mnt.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root to mount a small tmpfs (a full disk on demand)")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_full_disk_at_the_output(sandbox, small_tmpfs):
    run, trace, db = sandbox
    before = snapshot(run.root)
    r = run("ingest", trace, "-o", small_tmpfs / "job.duckdb")
    assert_refused(r, 3, "disk full")
    assert list(small_tmpfs.iterdir()) == []
    assert_clean(run, before, run.root)


def test_full_disk_in_the_scratch_folder(sandbox, small_tmpfs):
    run, trace, db = sandbox
    old = db.read_bytes()
    r = run("ingest", *KINETO[:2], "-o", db, "--jobs", "2", env={"TMPDIR": str(small_tmpfs)})
    assert_refused(r, 3, "disk full", str(small_tmpfs))
    assert "cannot read" not in r.stderr  # the input is fine: the scratch folder is full
    assert db.read_bytes() == old
    assert list(small_tmpfs.iterdir()) == []
    assert wait_gone(run.tag) == []


def test_read_only_folder(sandbox, small_tmpfs):
    run, trace, db = sandbox
    subprocess.run(["mount", "-o", "remount,ro", str(small_tmpfs)], check=True)
    for cmd in (("ingest", trace), ("report", db), ("annotate", db)):
        r = run(*cmd, "-o", small_tmpfs / "out")
        assert_refused(r, 3, str(small_tmpfs))


# --- values a trace gets wrong ------------------------------------------------------------------

def _kineto_with(tmp: Path, name: str, edit) -> Path:
    obj = json.load(gzip.open(KINETO[1]))
    edit(obj)
    p = tmp / name
    with gzip.open(p, "wt") as f:
        json.dump(obj, f)
    return p


def _first_kernel(obj) -> dict:
    return next(e for e in obj["traceEvents"] if e.get("cat") == "kernel")


@pytest.mark.parametrize("case,edit,warning", [
    ("rank -1", lambda o: o["distributedInfo"].update(rank=-1), "states rank -1"),
    ("rank past the world", lambda o: o["distributedInfo"].update(rank=4), "not below its world size 4"),
    ("rank 1.5", lambda o: o["distributedInfo"].update(rank=1.5), "distributedInfo.rank '1.5' is not a whole number"),
    ("rank 2**31", lambda o: o["distributedInfo"].update(rank=2**31), "states rank 2147483648"),
    ("world 2**40", lambda o: o["distributedInfo"].update(world_size=2**40), "states world size 1099511627776"),
    ("negative timestamp", lambda o: _first_kernel(o).update(ts=-9e12), "negative timestamp"),
    ("kernel without dur", lambda o: _first_kernel(o).pop("dur"), "dropped 1 events"),
])
def test_values_a_trace_gets_wrong_are_refused_with_a_warning(tmp_path, case, edit, warning):
    run = Run(tmp_path)
    p = _kineto_with(tmp_path, "trace.json.gz", edit)
    db = tmp_path / "job.duckdb"
    r = run("ingest", p, "-o", db)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    warned = [line for line in r.stderr.splitlines() if warning in line]
    assert warned and str(p) in warned[0], r.stderr
    c = connect(db)
    rank, lo, hi, null_ends = c.execute("""select (select min(rank) from traces), min(start_ns), max(end_ns),
                                           count(*) filter (where end_ns is null) from gpu_ops""").fetchone()
    assert 0 <= rank < 2**31 and null_ends == 0
    assert hi - lo < 3600 * 10**9  # no event stretches the rank over days


def test_rank_in_a_file_name_past_int32(tmp_path):
    run = Run(tmp_path)
    p = tmp_path / "rank99999999999.json.gz"
    obj = json.load(gzip.open(KINETO[0]))
    obj.pop("distributedInfo", None)
    with gzip.open(p, "wt") as f:
        json.dump(obj, f)
    r = run("ingest", p, "-o", tmp_path / "job.duckdb")
    assert r.returncode == 0, r.stderr
    assert "the rank 99999999999 in the file name is not a rank" in r.stderr


def test_invalid_patterns_are_usage_errors(sandbox):
    run, trace, db = sandbox
    before = snapshot(run.root)
    assert_refused(run("ingest", trace, "-o", db, "--step-pattern", "step (\\d+"), 2, "--step-pattern")
    assert_refused(run("ingest", trace, "-o", db, "--rank-pattern", "(["), 2, "--rank-pattern")
    assert_refused(run("ingest", trace, "-o", db, "--max-inflate", "lots"), 2, "--max-inflate")
    assert_clean(run, before, run.root)


def _nsys_copy(tmp_path: Path) -> Path:
    """A writable copy of the small nsys fixture (the shared one is read-only)."""
    p = tmp_path / "rank0.sqlite"
    shutil.copyfile(NSYS_SMALL, p)
    os.chmod(p, 0o644)
    return p


@pytest.mark.skipif(not NSYS_SMALL.exists(), reason=f"nsys fixture not found at {NSYS_SMALL} (../shared is absent)")
@pytest.mark.parametrize("column", ["start", "end", "streamId", "correlationId", "globalPid", "deviceId", "demangledName"])
@pytest.mark.parametrize("value", [-2**63, 2**63 - 1])
def test_nsys_numeric_extremes(tmp_path, column, value):
    """Every numeric column the reader uses in the kernel table, at the edges of int64 and NULL."""
    run = Run(tmp_path)
    p = _nsys_copy(tmp_path)
    try:
        with sqlite3.connect(p) as c:
            c.execute(f"UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET {column} = ? WHERE rowid = (SELECT min(rowid) FROM CUPTI_ACTIVITY_KIND_KERNEL)", [value])
    except sqlite3.IntegrityError:
        pytest.skip(f"this export's schema declares {column} NOT NULL")
    db = tmp_path / "job.duckdb"
    r = run("ingest", p, "-o", db)
    assert r.returncode in (0, 3), r.stderr
    assert "Traceback" not in r.stderr
    if r.returncode == 3:
        assert_refused(r, 3, str(p))
    else:
        c = connect(db)
        assert c.execute("select count(*) from gpu_ops where end_ns is null or start_ns is null or end_ns < start_ns").fetchone()[0] == 0


@pytest.mark.skipif(not NSYS_SMALL.exists(), reason=f"nsys fixture not found at {NSYS_SMALL} (../shared is absent)")
def test_nsys_session_start_near_int64_min(tmp_path):
    run = Run(tmp_path)
    p = _nsys_copy(tmp_path)
    with sqlite3.connect(p) as c:
        c.execute("UPDATE TARGET_INFO_SESSION_START_TIME SET utcEpochNs = ?", [-2**63 + 5])
    assert_refused(run("ingest", p, "-o", tmp_path / "job.duckdb"), 3, str(p), "out of range")


# --- untrusted strings --------------------------------------------------------------------------

ESCAPES = ["\x1b]0;pwned\x07", "\x1b[2J", "\u202e", "\x00", "[red]x[/red]", "[/]"]


def test_escape_sequences_in_every_string_field_never_reach_the_terminal(tmp_path):
    run = Run(tmp_path)
    payload = "".join(ESCAPES)

    def edit(o):
        o["distributedInfo"]["backend"] = payload
        for e in o["traceEvents"]:
            if e.get("ph") == "X":
                e["name"] = payload + str(e.get("name"))
                for k, v in list((e.get("args") or {}).items()):
                    if isinstance(v, str):
                        e["args"][k] = payload + v
            if e.get("ph") == "M" and isinstance(e.get("args"), dict) and "name" in e["args"]:
                e["args"]["name"] = payload
    p = _kineto_with(tmp_path, "rank-1\x1b[2J.json.gz", edit)
    out = tmp_path / "pm"
    r = run("postmortem", p, "-o", out)
    assert r.returncode == 0, r.stderr
    texts = [r.stdout, r.stderr]
    for pack in ("kernels", "idle-gaps", "launch-overhead", "critical-path"):
        q = run("query", out / "job.duckdb", pack, "--limit", "5")
        assert q.returncode == 0, q.stderr
        texts += [q.stdout, q.stderr]
    q = run("sql", out / "job.duckdb", "select name, source_path from gpu_ops join traces using (trace_id) limit 3")
    texts += [q.stdout, q.stderr]
    texts.append(on_a_terminal("sql", out / "job.duckdb", "select name from gpu_ops limit 3", "--format", "csv", env=run.env))
    texts.append(on_a_terminal("query", out / "job.duckdb", "kernels", "--limit", "3", env=run.env))
    for t in texts:  # (on a terminal, the table's own bold header is an escape sequence of rich's: allowed)
        assert "\x1b]" not in t and "\x1b[2J" not in t and "\x07" not in t and "\u202e" not in t and "\x00" not in t
    assert "\\x1b" in texts[2]  # shown escaped, not dropped
    page = (out / "report.html").read_bytes()
    assert b"\x00" not in page and b"\x1b" not in page


# --- decompression bound ------------------------------------------------------------------------

def test_inflation_bound_is_a_setting(sandbox):
    run, trace, db = sandbox
    before = snapshot(run.root)
    r = run("ingest", trace, "-o", db, "--max-inflate", "4MB")  # the trace inflates to 12 MB
    assert_refused(r, 3, str(trace), "inflates past", "--max-inflate 4MB")
    assert_clean(run, before, run.root)
    r = run("ingest", trace, "-o", db, env={"TRACEFLOW_MAX_INFLATE": "2MiB"})
    assert_refused(r, 3, "inflates past")
    assert run("ingest", trace, "-o", db, "--max-inflate", "20x").returncode == 0  # 15x: within


def test_a_bomb_of_valid_events_is_refused_by_default(tmp_path):
    """Real events followed by whitespace, gzip'd: the file is small and inflates past 256 MiB."""
    run = Run(tmp_path)
    raw = gzip.open(KINETO[0]).read()
    cut = raw.rindex(b"]")
    p = tmp_path / "rank-0.pt.trace.json.gz"
    with gzip.open(p, "wb", compresslevel=9) as f:
        f.write(raw[:cut])
        block = b" " * (1 << 24)
        for _ in range(17):
            f.write(block)
        f.write(raw[cut:])
    assert p.stat().st_size < 2 << 20
    r = run("ingest", p, "-o", tmp_path / "job.duckdb")
    assert_refused(r, 3, str(p), "decompression bomb")


@pytest.mark.skipif(not NSYS_SMALL.exists(), reason=f"nsys fixture not found at {NSYS_SMALL} (../shared is absent)")
def test_nsys_kernels_with_null_end_are_dropped(tmp_path):
    """An export whose kernel table has no NOT NULL constraints (older schemas) and a NULL end."""
    run = Run(tmp_path)
    p = _nsys_copy(tmp_path)
    with sqlite3.connect(p) as c:
        c.execute("CREATE TABLE k AS SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL")  # CTAS keeps no constraints
        c.execute("DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL")
        c.execute("ALTER TABLE k RENAME TO CUPTI_ACTIVITY_KIND_KERNEL")
        c.execute('UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "end" = NULL WHERE rowid IN (SELECT rowid FROM CUPTI_ACTIVITY_KIND_KERNEL LIMIT 3)')
    db = tmp_path / "job.duckdb"
    r = run("ingest", p, "-o", db)
    assert r.returncode == 0, r.stderr
    assert "dropped 3 GPU ops with no start or end" in r.stderr
    assert connect(db).execute("select count(*) from gpu_ops where end_ns is null").fetchone()[0] == 0


def test_a_ctrl_c_that_lands_in_a_weakref_callback_is_not_lost():
    """Python only reports an error raised in a weakref callback or finalizer ("Exception ignored
    in ...", a traceback): a Ctrl-C landing there was lost, and printed a traceback (seen in 1 of 30
    interrupted cluster runs). The command's hook delivers it again to the main thread."""
    code = """
import signal, sys, time, weakref
from traceflow import interrupts
signal.signal(signal.SIGINT, interrupts._on_signal)
sys.unraisablehook = interrupts._unraisable
class A: pass
def callback(_):
    raise KeyboardInterrupt  # as the SIGINT handler does, wherever the main thread is
a = A()
r = weakref.ref(a, callback)
try:
    del a
    time.sleep(5)
    print("lost")
except KeyboardInterrupt:
    print("delivered")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "delivered" and "Traceback" not in r.stderr, r.stdout + r.stderr


def test_a_ctrl_c_that_pyarrow_swallowed_is_raised_at_the_next_progress_point(tmp_path):
    """pyarrow turns a KeyboardInterrupt raised inside its conversion of a list into ArrowInvalid,
    which a reader's fallback for mixed values handles: the run went on to the end (1 interrupted
    run in 100). The command's progress callback raises it again, and so does an output about to
    replace its target."""
    code = """
import signal
import pyarrow as pa
from traceflow import interrupts
from traceflow.terminal import Progress
signal.signal(signal.SIGINT, interrupts._on_signal)
class Late:
    def __index__(self):  # the SIGINT handler, run while pyarrow converts this value
        interrupts._on_signal(signal.SIGINT, None)
try:
    pa.array([1, Late()], pa.int64())
except pa.ArrowInvalid:
    print("swallowed", end=" ")
try:
    Progress(1, interrupts.raise_if_interrupted)("rank-0.json")
    print("lost")
except KeyboardInterrupt:
    print("raised", end=" ")
# and before any output replaces its target, for one swallowed after the last progress point
import os, sys
from traceflow.outputs import BEFORE_REPLACE, atomic_output
BEFORE_REPLACE.append(interrupts.raise_if_interrupted)
target = os.path.join(sys.argv[1], "trace.perfetto-trace")
try:
    with atomic_output(target, "perfetto") as tmp:
        open(tmp, "wb").write(b"x")
    print("replaced")
except KeyboardInterrupt:
    print("kept", *sorted(os.listdir(sys.argv[1])))
"""
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "swallowed raised kept", r.stdout + r.stderr


def test_readers_fork_only_from_a_process_without_other_python_threads():
    """A forked reader starts at once (a spawned one first imports Arrow, ~0.2 s); a fork from a
    process with another Python thread running could copy a lock that thread holds: spawn then."""
    code = """
import threading, time
from traceflow.readers.pool import start_method
alone = start_method()
t = threading.Thread(target=time.sleep, args=(1,)); t.start()
print(alone, start_method())
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.stdout.split() == (["fork", "spawn"] if sys.platform.startswith("linux") else ["spawn", "spawn"]), r.stderr


def test_readers_fork_at_a_terminal_too():
    """At a terminal the progress display redraws from a thread of its own: it pauses while the
    readers fork, else every interactive run would spawn them (~0.2 s more on a small job)."""
    code = """
import threading
from traceflow.readers.pool import start_method
from traceflow.terminal import Progress
with Progress(4) as progress:
    before = threading.active_count()
    with progress.paused():
        during = start_method()
    after = threading.active_count()
print("threads", before, during, after)
"""
    out = on_a_terminal("-c", code, program=[sys.executable])
    expected = "fork" if sys.platform.startswith("linux") else "spawn"
    assert f"threads 2 {expected} 2" in out, out


def test_a_ctrl_c_waits_until_an_extension_module_has_initialised():
    """A Ctrl-C while DuckDB's C extension initialised left it half-made ("ImportError:
    initialization failed") and the process crashed at exit (3 of 80 ingests interrupted while
    loading: SIGSEGV). The command holds SIGINT back during an extension's init and delivers it
    right after: the KeyboardInterrupt comes from its hold (interrupts.deferred), not from inside the init."""
    code = """
import signal, sys, traceback
from importlib.machinery import ExtensionFileLoader
from traceflow import interrupts
signal.signal(signal.SIGINT, interrupts._on_signal)
interrupts._hold_signals_in_extension_inits()
fired = []
def prof(frame, event, arg):  # a Ctrl-C at the first Python call made from inside an extension's init
    if fired or event != "call":
        return
    f = frame.f_back
    while f is not None:
        if f.f_code.co_name == "create_module" and isinstance(f.f_locals.get("self"), ExtensionFileLoader) \
                and frame.f_code.co_filename != f.f_code.co_filename:
            fired.append(1)
            signal.raise_signal(signal.SIGINT)
            return
        f = f.f_back
sys.setprofile(prof)
try:
    import duckdb
    print("not interrupted")
except KeyboardInterrupt as e:
    sys.setprofile(None)
    print("raised in", traceback.extract_tb(e.__traceback__)[-2].name)
import duckdb
print(duckdb.connect().execute("SELECT 1 + 2").fetchone()[0])
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.split("\n")[:2] == ["raised in deferred", "3"], r.stdout + r.stderr


def test_a_ctrl_c_that_ends_an_eval_still_exits_130(tmp_path):
    """CPython 3.11 marks a KeyboardInterrupt that ends an eval() of a string (namedtuple evals one
    per class, while modules import) as unhandled, and the process then killed itself with SIGINT
    (exit -2) after printing the interrupt line: 2 of 80 runs interrupted while starting."""
    (tmp_path / "interrupted_in_eval.py").write_text(
        "from traceflow import interrupts\n"
        "try:\n"
        "    eval('(_ for _ in ()).throw(KeyboardInterrupt)')\n"
        "except KeyboardInterrupt:\n"
        "    interrupts.exit_interrupted()\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]))
    r = subprocess.run([sys.executable, "-m", "interrupted_in_eval"], capture_output=True, text=True, timeout=60, env=env)
    assert (r.returncode, r.stderr.strip()) == (130, "traceflow: interrupted"), (r.returncode, r.stderr)
