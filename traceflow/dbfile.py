"""Writing a database file safely: one writer at a time, atomic replace, no stray temp files.

A writer builds the new database in a temp file beside the target and renames it into place,
so a reader (or a crash, or kill -9) only ever sees the old file or the new one.
"""
from __future__ import annotations

import fcntl
import os
import shutil
from contextlib import contextmanager
from pathlib import Path

from .errors import OutputBusy

TMP_MARK = ".traceflow-tmp-"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_orphans(paths, pid_of) -> list[Path]:
    """Remove the files or folders whose owning process (pid_of(path), from its name) is gone."""
    removed = []
    for p in paths:
        try:
            pid = pid_of(p)
        except (ValueError, IndexError):
            continue
        if not _pid_alive(pid):
            if p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
            removed.append(p)
    return removed


def clean_stale(target: Path) -> list[Path]:
    """Remove temp files of earlier writers of `target` that died (kill -9, power loss)."""
    return remove_orphans(target.parent.glob(f".{target.name}{TMP_MARK}*"),
                          lambda p: int(p.name.rsplit("-", 1)[-1].split(".")[0]))


@contextmanager
def exclusive_writer(target: str | os.PathLike, copy_existing: bool = False):
    """Yields a temp path to build the database in; renames it over `target` on success.

    Holds an flock on `target.lock` for the whole time: a second writer of the same path
    fails at once with OutputBusy. On any exception the temp file is removed and `target`
    is left exactly as it was.
    """
    target = Path(target).resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    lock_path = target.with_name(f".{target.name}.lock")
    lock = open(lock_path, "a+")
    try:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        raise OutputBusy(target, "another traceflow process is writing this database; try again when it is done") from None
    tmp = target.with_name(f".{target.name}{TMP_MARK}{os.getpid()}")
    try:
        clean_stale(target)
        for leftover in (tmp, Path(str(tmp) + ".wal")):
            leftover.unlink(missing_ok=True)
        if copy_existing and target.exists():
            shutil.copyfile(target, tmp)
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, target)
        dfd = os.open(target.parent, os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    finally:
        for leftover in (tmp, Path(str(tmp) + ".wal")):
            leftover.unlink(missing_ok=True)
        fcntl.flock(lock.fileno(), fcntl.LOCK_UN)
        lock.close()
