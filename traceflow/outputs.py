"""Every file traceflow writes: what it may replace, how it replaces it, and its scratch folders.

- `check_output`: traceflow replaces only a file of its own kind (a DuckDB database it can open,
  its own report page, its own Perfetto trace), never one of the inputs, never anything that is
  not a regular file. `--force` lifts only the "own kind" rule.
- `atomic_output`: the one writer of every output. The new file is built in a temp file in the
  target's folder, synced to disk and renamed into place, so a reader (or a crash, or kill -9)
  sees the old file or the new one; on any failure the temp file is removed and the target is
  untouched. A second writer of the same path is refused while the first holds the lock.
- `replaced_together`: outputs written inside wait in their temp files and are renamed together at
  its end, or none are (postmortem's database, report and trace).
- `scratch_folder`: the reader's folder in $TMPDIR, carrying a marker file locked while in use;
  only folders with an unlocked marker (their process is gone) are ever cleaned.

Size: everything about where traceflow may write (kinds of output, the atomic writer, locks,
scratch folders) in one place: the safety rules are read together or not at all.
"""
from __future__ import annotations

import errno
import fcntl
import os
import secrets
import shutil
import stat
import tempfile
import time
from contextlib import contextmanager
from glob import escape as glob_escape
from pathlib import Path

from .errors import InputError, OutputBusy, OutputError, UsageError

TMP_MARK = ".traceflow-tmp-"
LOCK_SUFFIX = ".traceflow-lock"
SCRATCH_PREFIX = "traceflow-"
SCRATCH_MARKER = ".traceflow-scratch"
# The Perfetto writer puts this in the trace's first packet (trace_uuid.lsb): "traceflo".
PERFETTO_MARK = 0x7472616365666C6F
REPORT_MARK = b'<meta name="generator" content="traceflow">'
PARTS = ".parts-"  # job.duckdb.parts-XXXX: a cluster job's shards, beside its database

_DISK_PROBLEMS = {errno.ENOSPC: "disk full (no space left on device)", errno.EDQUOT: "disk quota exceeded",
                  errno.EROFS: "read-only file system"}
_PATH_PROBLEMS = {errno.EACCES: "permission denied", errno.EPERM: "permission denied", errno.ELOOP: "symlink loop",
                  errno.EISDIR: "is a folder, not a file", errno.ENOTDIR: "a part of the path is not a folder",
                  errno.ENOENT: "no such file or folder", errno.ENAMETOOLONG: "file name too long"}


def disk_problem(e: BaseException) -> str | None:
    """'disk full' and its kin, from an OSError or from the text of a DuckDB / Arrow error."""
    if isinstance(e, OSError) and e.errno in _DISK_PROBLEMS:
        return _DISK_PROBLEMS[e.errno]
    text = str(e)
    for code, problem in _DISK_PROBLEMS.items():
        if os.strerror(code) in text:
            return problem
    return None


def os_problem(e: OSError) -> str:
    """One line for an OSError met on an output path."""
    return disk_problem(e) or _PATH_PROBLEMS.get(e.errno or 0) or (e.strerror or str(e))


def is_utf8_name(name: str) -> bool:
    try:
        name.encode("utf-8")
        return True
    except UnicodeEncodeError:  # bytes that are not UTF-8, as os.fsdecode keeps them
        return False


def parts_folders(database) -> list[Path]:
    """The shard folders beside a database (`<its real path>.parts-*`), as real paths."""
    real = Path(os.path.realpath(database))
    try:
        return [Path(os.path.realpath(p)) for p in real.parent.glob(f"{glob_escape(real.name)}{PARTS}*")
                if p.is_dir() and not p.is_symlink()]
    except OSError:
        return []


def is_duckdb_file(path) -> bool:
    """A regular file that starts as a DuckDB database does (bytes 8-11: DUCK); says nothing of its
    state. Opened without blocking: a FIFO or a device is never read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        return stat.S_ISREG(os.fstat(fd).st_mode) and os.pread(fd, 12, 0)[8:12] == b"DUCK"
    except OSError:
        return False
    finally:
        os.close(fd)


# What a database traceflow wrote holds, whatever its version: the traces table with these columns.
# A DuckDB file without them is a user's own (a table `precious`): never replaced without --force,
# never appended to.
OWN_TABLE, OWN_COLUMNS = "traces", {"trace_id", "rank", "source_path", "source_format", "source_hash"}


def _is_database(path: Path) -> bool:
    if not is_duckdb_file(path):
        return False
    import duckdb

    from .duck import connect, sql_string
    try:
        con = connect()  # attached, not opened: see api.connect
        try:
            con.execute(f"ATTACH {sql_string(os.path.realpath(path))} AS tf_check (READ_ONLY)")
            # DuckDB 2 opens a truncated file and fails only when a lost block is read: the file
            # must hold every block its header counts.
            row = con.execute("SELECT block_size, total_blocks FROM pragma_database_size() "
                              "WHERE database_name = 'tf_check'").fetchone()
            cols = {r[0] for r in con.execute("SELECT column_name FROM duckdb_columns() WHERE schema_name = 'main' "
                                              "AND table_name = ? AND database_name = 'tf_check'",
                                              [OWN_TABLE]).fetchall()}
        finally:
            con.close()
    except duckdb.Error as e:
        if "Conflicting lock" in str(e) or "already attached" in str(e):  # another program (or this one) writes it
            raise OutputBusy(path, "is open for writing in another program (DuckDB holds its lock): close it first") from None
        return False
    return row is not None and os.path.getsize(path) >= int(row[0]) * int(row[1]) and cols >= OWN_COLUMNS


def _is_report(path: Path) -> bool:
    with open(path, "rb") as f:
        head = f.read(4096)
    return REPORT_MARK in head or b"<title>traceflow post-mortem" in head


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _is_perfetto(path: Path) -> bool:
    import gzip
    import zlib
    with open(path, "rb") as f:
        head = f.read(256)
    if head[:2] == b"\x1f\x8b":  # written gzip-compressed
        try:
            with gzip.open(path, "rb") as f:
                head = f.read(256)
        except (OSError, EOFError, zlib.error):
            return False
    return b"\x10" + _varint(PERFETTO_MARK) in head  # TraceUuid field 2 (lsb), a varint


KINDS = {"database": (_is_database, "a traceflow DuckDB database"),
         "report": (_is_report, "a traceflow report"),
         "perfetto": (_is_perfetto, "a Perfetto trace written by traceflow"),
         "summary": (lambda p: _has_mark(p, b"<!-- traceflow regression gate -->"), "a summary traceflow wrote")}


def _has_mark(path: Path, mark: bytes) -> bool:
    with open(path, "rb") as f:
        return mark in f.read(4096)


def check_output(path, kind: str, inputs=(), force: bool = False, appending: bool = False) -> Path:
    """The path to write `kind` to, once it is safe to replace; else OutputError naming it (exit 3).

    A symlink is followed (its target is checked and replaced). `appending`: an existing file is read
    first (`--append`), so it must be a database traceflow can open (a missing one is made anew).
    """
    p = Path(path)
    longest = 255 - len(f".{TMP_MARK}{4194304}.wal")  # NAME_MAX less the temp file's additions (pid_max: 7 digits)
    if len(os.fsencode(p.name)) > longest:  # 232-236 characters: the temp name failed, an internal error
        raise OutputError(p, f"its name is {len(os.fsencode(p.name))} bytes long, and traceflow's temp file beside it "
                          f"needs {255 - longest} more than the 255 a file name may have: name it in {longest} bytes or fewer")
    if kind == "database" and not is_utf8_name(os.path.abspath(p)):
        raise OutputError(p, "its name is not valid UTF-8, which DuckDB cannot open: name another file")
    try:
        st = os.stat(p)
    except FileNotFoundError:
        if os.path.lexists(p):
            raise OutputError(p, "is a symlink to a missing file: traceflow does not write through it") from None
        return _new_file(p)  # (with --append too: appending to nothing makes a new database)
    except OSError as e:
        raise OutputError(p, os_problem(e)) from None
    if stat.S_ISDIR(st.st_mode):
        raise OutputError(p, "is a folder, not a file: name a file to write")
    if not stat.S_ISREG(st.st_mode):
        raise OutputError(p, "is not a regular file (a device, pipe or socket): traceflow never replaces it")
    for i in inputs:
        try:
            if os.path.exists(i) and os.path.samefile(p, i):
                raise OutputError(p, "is one of the inputs: traceflow never writes over an input; name another output")
        except OSError:
            continue
    real = Path(os.path.realpath(p))
    is_kind, what = KINDS[kind]
    try:
        ours = st.st_size == 0 or is_kind(real)
    except OSError as e:
        raise OutputError(p, f"cannot read it to check what it is ({os_problem(e)})") from None
    if ours:
        return real
    if appending:
        raise OutputError(p, f"--append needs {what}, and this file is not one (or is damaged)")
    if force:
        return real
    raise OutputError(p, f"exists and is not {what}: traceflow does not replace it (use --force, or name another file)")


def _new_file(p: Path) -> Path:
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise OutputError(p, f"folder {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(p, f"cannot write in folder {parent} (permission denied or read-only)")
    return Path(os.path.realpath(parent)) / p.name


def _lock(target: Path) -> tuple[int, Path]:
    """An exclusive lock on `.NAME.traceflow-lock` beside the target, removed again by _unlock (no
    lock file stays behind). After taking the lock, check that the path still names the file locked:
    a writer that was finishing may have removed it in between."""
    path = target.with_name(f".{target.name}{LOCK_SUFFIX}")
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError as e:
            raise OutputError(target, f"cannot create a lock beside it ({os_problem(e)})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise OutputBusy(target, "another traceflow process is writing this file; try again when it is done") from None
        try:
            same = os.stat(path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd, path
        os.close(fd)


def _unlock(fd: int, path: Path):
    try:
        os.unlink(path)
    except OSError:
        pass
    os.close(fd)


def _sync_dir(folder: Path):
    dfd = os.open(folder, os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def _temp_files(tmp: Path) -> list[Path]:
    return [tmp, Path(f"{tmp}.wal")]


def _hold_database(target: Path, appending: bool) -> int | None:
    """An existing database target, held until it is replaced: a read lock of DuckDB's kind (a POSIX
    record lock, which every DuckDB process that opens the file for writing takes) keeps another
    program from writing it meanwhile (a table another process added during --append was lost with
    the replace). Its write-ahead log left beside it (a program that ended without closing the file)
    holds writes that are part of it: --append carries the log into the copy, where DuckDB replays
    it; a plain ingest refuses, as replacing the file beside that log made the next open fail ("not
    a readable DuckDB database") and lost the log's tables. Returns the open descriptor, None where
    there is no file to hold."""
    try:
        fd = os.open(target, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise OutputBusy(target, "is open for writing in another program (DuckDB holds its lock): close it first") from None
    wal = Path(f"{target}.wal")
    if not appending and wal.exists() and wal.stat().st_size:
        os.close(fd)
        raise OutputError(target, f"{wal.name} beside it holds writes not yet in the database (a program ended without "
                          "closing it): open the database once with DuckDB, which moves them in, or remove that file; "
                          "traceflow does not replace it meanwhile")
    return fd


def _copy_database(fd: int, target: Path, tmp: Path) -> None:
    """The held database (and its write-ahead log, when there is one) copied to `tmp`, read through
    the descriptor that holds the lock: closing any other descriptor of the file in this process
    would release it (POSIX record locks belong to the process)."""
    if os.fstat(fd).st_size:
        with open(tmp, "wb") as out:
            os.lseek(fd, 0, os.SEEK_SET)
            while chunk := os.read(fd, 1 << 22):
                out.write(chunk)
    wal = Path(f"{target}.wal")
    if wal.exists() and wal.stat().st_size:
        shutil.copyfile(wal, f"{tmp}.wal")


# Run just before an output replaces its target. The command adds one that raises a Ctrl-C which an
# extension module swallowed (interrupts.raise_if_interrupted): pyarrow and DuckDB, importing a module
# mid-call, turned the KeyboardInterrupt into an error of their own and went on (2 of 60 runs
# interrupted while the Perfetto trace was written finished and replaced their outputs).
BEFORE_REPLACE: list = []


class _Staged:
    """An output written and synced to its temp file, waiting for replaced_together's end."""

    def __init__(self, tmp: Path, target: Path, held: int | None, lock: tuple[int, Path]):
        self.tmp, self.target, self.held, self.lock = tmp, target, held, lock

    def release(self):
        for leftover in _temp_files(self.tmp):
            try:
                leftover.unlink(missing_ok=True)
            except OSError:
                pass
        if self.held is not None:
            os.close(self.held)
        _unlock(*self.lock)


class _Group:
    def __init__(self):
        self.staged: list[_Staged] = []
        self.after: list = []


_GROUP: _Group | None = None


@contextmanager
def replaced_together():
    """Every output atomic_output writes inside is renamed into place at the end, all of them, or
    none: `postmortem` interrupted after its database step left the new database beside the old
    report and trace. Until then each new file waits in its temp file (read through `staged`), its
    lock held; on any error or signal the temps go and the old files stay as they were."""
    global _GROUP
    group = _GROUP = _Group()
    try:
        yield
        _GROUP = None
        for check in BEFORE_REPLACE:
            check()
        with _signals_held():
            for s in group.staged:
                try:
                    os.replace(s.tmp, s.target)
                except OSError as e:
                    raise OutputError(s.target, os_problem(e)) from None
                if s.held is not None:
                    Path(f"{s.target}.wal").unlink(missing_ok=True)  # as atomic_output: the old log is in the new file
        for folder in {s.target.parent for s in group.staged}:
            _sync_dir(folder)
        for fn in group.after:
            fn()
    finally:
        _GROUP = None
        for s in group.staged:
            s.release()


@contextmanager
def _signals_held():
    """SIGINT, SIGTERM and SIGHUP noted, not acted on, while a group's renames run (microseconds): a
    signal between two renames would leave new outputs beside old ones. Delivered once they are done."""
    import signal
    import threading
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    noted: list[int] = []
    previous = {s: signal.signal(s, lambda n, _f: noted.append(n)) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        if noted:
            signal.raise_signal(noted[0])


def staged(path) -> str | None:
    """The temp file holding `path`'s new content inside replaced_together; None outside one."""
    if _GROUP is None:
        return None
    real = Path(os.path.realpath(path))
    return next((str(s.tmp) for s in _GROUP.staged if s.target == real), None)


def after_replace(fn) -> None:
    """`fn` run once the outputs are in place: now, or at the end of replaced_together."""
    if _GROUP is None:
        fn()
    else:
        _GROUP.after.append(fn)


@contextmanager
def atomic_output(path, kind: str, *, inputs=(), force: bool = False, copy_existing: bool = False):
    """Yields a temp path (same folder as the target) to write the new file to; renames it over
    the target on success. See the module's docstring for what is checked first."""
    target = check_output(path, kind, inputs, force, appending=copy_existing)
    tmp = target.with_name(f".{target.name}{TMP_MARK}{os.getpid()}")
    lock = None
    held = None
    grouped = False
    try:
        lock = _lock(target)  # inside the try: a signal right after it must not leave the lock file
        # Holding the lock, any temp file of this target is a dead writer's (kill -9, power loss).
        for stale in target.parent.glob(f".{target.name}{TMP_MARK}*"):
            stale.unlink(missing_ok=True)
        held = _hold_database(target, copy_existing) if kind == "database" else None
        if copy_existing and held is not None:
            _copy_database(held, target, tmp)
        yield tmp
        for check in BEFORE_REPLACE:
            check()
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        if _GROUP is not None and lock is not None:
            _GROUP.staged.append(_Staged(tmp, target, held, lock))
            lock = held = None  # the group's now, with the temp file: released at its end
            grouped = True
            return
        os.replace(tmp, target)
        if held is not None:
            # the old file's log, now in the new file (--append replayed it there): never left beside
            # the new file, where DuckDB would replay it again and refuse the file
            Path(f"{target}.wal").unlink(missing_ok=True)
        _sync_dir(target.parent)
    except (InputError, UsageError):
        raise
    except OSError as e:
        where = Path(e.filename) if getattr(e, "filename", None) else target
        raise OutputError(target if where == tmp else where, os_problem(e)) from None
    except Exception as e:
        problem = disk_problem(e)
        if problem:
            raise OutputError(target.parent, problem) from None
        raise
    finally:
        for leftover in [] if grouped else _temp_files(tmp):
            try:
                leftover.unlink(missing_ok=True)
            except OSError:
                pass
        if held is not None:
            os.close(held)
        if lock is not None:
            _unlock(*lock)


@contextmanager
def scratch_folder(parent: str | Path | None = None, prefix: str | None = None, keep: bool = False):
    """A folder for the readers' Arrow files and DuckDB's spill, removed at the end: in $TMPDIR, or
    in `parent` with its own `prefix` (a cluster's parts folder beside the output). `keep`: on
    success it stays, without its marker (a cluster job's database reads it); on failure it goes.

    It carries a marker file, locked while the folder is in use: cleaning takes only folders with
    that marker whose lock is free (their traceflow died), never anything else. Where the file
    system has no locks (some shared ones), the folder is used unlocked and never cleaned by others."""
    prefix = prefix or f"{SCRATCH_PREFIX}{os.getpid()}-"
    where = Path(parent) if parent is not None else Path(tempfile.gettempdir())
    if parent is None:
        clean_stale_scratch()
    else:
        clean_stale_scratch(where, prefix)
    folder: Path | None = None
    fd = -1
    done = False
    try:
        # The name is chosen and kept before the folder is made (not mkdtemp, which makes it first): a
        # signal landing as the folder appears still finds its name here to remove it (SIGTERM sent
        # the moment a cluster's parts folder appeared left it behind, 1 CI run in 3).
        for _ in range(100):
            folder = where / f"{prefix}{secrets.token_hex(4)}"
            try:
                os.mkdir(folder, 0o700)
                break
            except FileExistsError:
                folder = None
            except OSError as e:
                folder = None
                raise OutputError(str(where), f"cannot create traceflow's scratch folder ({os_problem(e)}); "
                                  + ("set TMPDIR to a folder with room" if parent is None else "the output's folder must be writable")) from None
        if folder is None:
            raise OutputError(str(where), "cannot create traceflow's scratch folder (100 names taken)")
        fd = os.open(folder / SCRATCH_MARKER, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            if parent is None:
                raise
            os.unlink(folder / SCRATCH_MARKER)  # no locks here: unmarked, so nobody's cleaning takes it
        yield str(folder)
        done = True
    finally:
        if folder is None:
            pass
        elif done and keep:
            (folder / SCRATCH_MARKER).unlink(missing_ok=True)
        else:
            # A reader thread still finishing a write (after an error or Ctrl-C elsewhere) can put a
            # file back while the folder is removed: try again briefly.
            for _ in range(20):
                shutil.rmtree(folder, ignore_errors=True)
                if not folder.exists():
                    break
                time.sleep(0.05)
        if fd >= 0:
            os.close(fd)


def clean_stale_scratch(where: Path | None = None, prefix: str = SCRATCH_PREFIX) -> list[Path]:
    """Scratch folders of traceflow runs that were killed (kill -9 leaves them behind)."""
    removed = []
    for p in (where or Path(tempfile.gettempdir())).glob(f"{prefix}*"):
        marker = p / SCRATCH_MARKER
        try:
            if p.is_symlink() or not p.is_dir() or marker.is_symlink() or not marker.is_file():
                continue
            if p.stat().st_uid != os.getuid():
                continue
            fd = os.open(marker, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            continue  # in use by a live traceflow
        finally:
            os.close(fd)
        shutil.rmtree(p, ignore_errors=True)
        removed.append(p)
    return removed
