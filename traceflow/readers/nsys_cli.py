"""The `nsys` command line, through a subprocess: .nsys-rep export and recipes."""
from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from ..errors import InputError


def _die_with_parent():
    """In the child, before exec: the kernel kills it when the thread that started it ends (that
    thread waits for it, so only when traceflow itself is killed). Linux only; elsewhere a no-op."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _run(cmd, timeout):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          preexec_fn=_die_with_parent if sys.platform == "linux" else None)


def find_nsys(explicit: str | None = None) -> str | None:
    if explicit:
        return explicit if (os.path.isfile(explicit) and os.access(explicit, os.X_OK)) else None
    return shutil.which("nsys")


def cache_dir() -> Path:
    base = os.environ.get("TRACEFLOW_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "traceflow")
    p = Path(base)
    p.mkdir(parents=True, exist_ok=True)
    return p


def _file_key(path: str) -> str:
    st = os.stat(path)
    return hashlib.blake2b(f"{os.path.abspath(path)}|{st.st_size}|{st.st_mtime_ns}".encode(), digest_size=10).hexdigest()


def export_sqlite(rep: str, nsys: str | None = None, timeout: int = 3600, scratch: str | None = None) -> str:
    """`nsys export --type sqlite` of a report into the cache; returns the .sqlite path.

    nsys writes into the run's `scratch` folder (removed with the run, also on Ctrl-C, SIGTERM or a
    killed reader), and the finished export is then copied into the cache under a temp name and
    renamed: a Ctrl-C during the export left its partial file in the cache for good. A temp file of
    a process that is gone (killed during the copy) is removed by the next export."""
    exe = find_nsys(nsys)
    if exe is None:
        raise InputError(rep, "is an .nsys-rep report and no `nsys` was found (not on PATH, no --nsys): "
                         f"export it by hand with `nsys export --type sqlite --output {Path(rep).stem}.sqlite {rep}` "
                         "and ingest the .sqlite")
    out = cache_dir() / f"{Path(rep).stem}-{_file_key(rep)}.sqlite"
    if out.exists() and out.stat().st_size > 0:
        return str(out)
    _remove_dead_temps(out)
    part = out.with_suffix(f".tmp{os.getpid()}.sqlite")
    tmp = Path(scratch) / out.name if scratch else part
    cmd = [exe, "export", "--type", "sqlite", "--force-overwrite", "true", "--output", str(tmp), rep]
    try:
        try:
            r = _run(cmd, timeout)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise InputError(rep, f"`nsys export` failed to run ({e})") from None
        if r.returncode != 0 or not tmp.exists():
            msg = (r.stderr or r.stdout or "").strip().splitlines()
            raise InputError(rep, f"`nsys export` exited {r.returncode}: {msg[-1] if msg else 'no output'}")
        if tmp != part:
            shutil.copyfile(tmp, part)
        os.replace(part, out)
    finally:
        for leftover in {tmp, part}:
            leftover.unlink(missing_ok=True)
    return str(out)


def _remove_dead_temps(out: Path) -> None:
    for p in out.parent.glob(f"{out.stem}.tmp*.sqlite"):
        pid = p.name[len(out.stem) + 4:-len(".sqlite")]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            p.unlink(missing_ok=True)


def run_recipe(name: str, reports: list[str], nsys: str | None = None, timeout: int = 3600) -> Path:
    """`nsys recipe NAME --input ...` into a fresh folder of the cache; returns that folder."""
    exe = find_nsys(nsys)
    if exe is None:
        raise InputError(name, "Nsight Systems recipes need the `nsys` command: none on PATH and no --nsys given")
    key = hashlib.blake2b("|".join([name] + [_file_key(r) for r in reports]).encode(), digest_size=10).hexdigest()
    out = cache_dir() / f"recipe-{name}-{key}"
    if out.exists():
        shutil.rmtree(out)
    cmd = [exe, "recipe", name, "--output", str(out)] + ["--input", *reports]
    try:
        r = _run(cmd, timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise InputError(name, f"`nsys recipe` failed to run ({e})") from None
    if r.returncode != 0:
        msg = (r.stderr or r.stdout or "").strip().splitlines()
        raise InputError(name, f"`nsys recipe {name}` exited {r.returncode}: {msg[-1] if msg else 'no output'}")
    if not out.exists():
        raise InputError(name, f"`nsys recipe {name}` wrote no output folder {out}")
    return out
