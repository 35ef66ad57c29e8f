"""Shared test setup: where the real fixtures are, and databases ingested once per session."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("TRACEFLOW_SHARED", ROOT.parent / "shared"))
FIX = SHARED / "fixtures"
BUNDLED = ROOT / "fixtures"
TRACEFLOW = [sys.executable, "-m", "traceflow.cli"]

needs_shared = pytest.mark.skipif(not FIX.is_dir(), reason=f"real fixtures not found at {FIX} (../shared is absent)")


def fixture_files(rel: str) -> list[str]:
    """The trace files of a fixture folder, or the one file `rel` names."""
    d = FIX / rel
    if d.is_file():
        return [str(d)]
    if not d.is_dir():
        pytest.skip(f"fixture {rel} not found under {FIX}")
    return sorted(str(p) for p in d.iterdir() if p.name.endswith((".sqlite", ".json.gz", ".json")) and not p.name.startswith("truth"))


def truth(rel: str, rank: int) -> list[dict]:
    p = FIX / rel / f"truth-rank{rank}.json"
    return json.loads(p.read_text()) if p.exists() else []


def run_cli(*args, cwd=None, env=None, input=None, timeout=600):
    """The real command, in a subprocess, as a user runs it."""
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([*TRACEFLOW, *map(str, args)], capture_output=True, text=True, cwd=cwd, env=e,
                          input=input, timeout=timeout)


def on_a_terminal(*args, env=None, columns: int = 100, program=None) -> str:
    """The command's output with a pseudo-terminal of `columns` as its stdout and stderr, as a user
    at a terminal sees it. `program`: what runs with `args` (default: traceflow)."""
    import fcntl
    import pty
    import struct
    import termios
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    e = {**os.environ, **(env or {}), "COLUMNS": str(columns), "LINES": "50"}
    p = subprocess.Popen([*(program or TRACEFLOW), *map(str, args)], stdout=slave, stderr=slave, env=e)
    os.close(slave)
    chunks = []
    while True:
        try:
            b = os.read(master, 1 << 16)
        except OSError:  # EIO: the other side closed
            break
        if not b:
            break
        chunks.append(b)
    p.wait(timeout=120)
    os.close(master)
    return b"".join(chunks).decode("utf-8", "replace").replace("\r\n", "\n")


# Temporary files stay inside the clone (ignored by git), not in /tmp/pytest-of-<user>: one folder per run,
# `.pytest-tmp/run-<pid>`, xdist's workers each in a folder of it (popen-gwN); the folders of the
# last three runs that ended are kept for a look, older ones removed.
TMP_ROOT = ROOT / ".pytest-tmp"


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    if config.option.basetemp or hasattr(config, "workerinput"):  # given, or a worker (xdist gave it one)
        return
    TMP_ROOT.mkdir(exist_ok=True)
    ended = []
    for d in TMP_ROOT.glob("run-*"):
        pid = d.name[4:]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            ended.append(d)
    for d in sorted(ended, key=lambda d: d.stat().st_mtime)[:-3]:
        shutil.rmtree(d, ignore_errors=True)
    config.option.basetemp = str(TMP_ROOT / f"run-{os.getpid()}")


_DBS: dict[str, Path] = {}


@pytest.fixture(scope="session")
def db_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("dbs")


@pytest.fixture(scope="session")
def ingested(db_dir):
    """ingested('h100/nsys/ddp4_sync_stall') -> path of a database of that fixture, made once."""
    import traceflow

    def make(rel: str, **opts) -> str:
        key = rel + repr(sorted(opts.items()))
        if key not in _DBS:
            files = fixture_files(rel)
            out = db_dir / (rel.replace("/", "_") + f"_{len(_DBS)}.duckdb")
            traceflow.ingest(files, str(out), **opts)
            _DBS[key] = out
        return str(_DBS[key])
    return make


def connect(path):
    import duckdb

    from traceflow.duck import use_internal_schema
    con = duckdb.connect(str(path), read_only=True)
    use_internal_schema(con)  # helper tables (step_windows, ...) by bare name, as traceflow's own SQL does
    return con


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


# --- the Kineto reader's two paths ---------------------------------------------------------------

def read_kineto(src, folder):
    """What the reader makes of a Kineto file: its trace record and each table it wrote, or the InputError."""
    import pyarrow.ipc as ipc

    from traceflow.errors import InputError
    from traceflow.readers.worker import read_file
    folder.mkdir()
    try:
        rec = read_file(str(src), str(folder), 0)[0]
    except InputError as e:
        return e
    tables = {p.name.split(".", 1)[1]: ipc.open_stream(str(p)).read_all() for p in sorted(folder.glob("*.arrow"))}
    return rec, tables


class loose_decoding:
    """Reads with the loose types only: the path odd traces take."""
    def __enter__(self):
        from traceflow.readers import kineto
        self.saved = kineto._strict_events_decoder, kineto._strict_meta_decoder
        kineto._strict_events_decoder, kineto._strict_meta_decoder = kineto._events_decoder, kineto._meta_decoder

    def __exit__(self, *exc):
        from traceflow.readers import kineto
        kineto._strict_events_decoder, kineto._strict_meta_decoder = self.saved


def pytest_terminal_summary(terminalreporter):
    """One line saying how many tests skipped for want of ../shared, so a short run is never a surprise."""
    skipped = terminalreporter.stats.get("skipped", [])
    n = sum(1 for r in skipped if "../shared" in str(r.longrepr) or str(FIX) in str(r.longrepr))
    if n:
        terminalreporter.write_line(f"{n} tests skipped: the real fixtures are not at {FIX} (../shared is absent)")


def tagged_processes(tag: str) -> list[int]:
    """Processes (of any parent) whose environment carries `tag`: the command's descendants."""
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if tag.encode() in (d / "environ").read_bytes():
                    found.append(int(d.name))
            except OSError:
                continue
    return found
