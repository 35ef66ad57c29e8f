"""The map phase: one input file -> Arrow IPC files + trace records. A pure function of the file.

Runs on a worker thread or in a worker process; nothing here touches the job database, so the same function can
later run on a cluster engine writing shards per rank.
"""
from __future__ import annotations

import os
import shutil
import signal
import tempfile
import threading
import time
import traceback

from ..errors import InputError, OutputError, one_line, out_of_memory
from ..options import Options
from ..outputs import disk_problem
from .compressed import BoundedReader, inflate_bound
from .detect import ROCM_FORMATS, Input, identify
from .model import IpcSink, ProcessTrace
from .stream import content_hash


def worker_start(parent: int):
    """Runs first in each reader process. Ctrl-C in a terminal reaches the whole process group:
    the parent handles it (one line, exit 130) and stops the workers, so they ignore it. And a
    worker must not outlive its parent (kill -9 of traceflow would leave ~160 MB readers running
    forever): a thread watches that the parent is still there and ends the process when it is not.
    (PR_SET_PDEATHSIG would fire when the parent *thread* that started the worker ends, and the
    pool starts workers from whichever thread submits.)"""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from ..interrupts import quiet_c_reports
    quiet_c_reports()
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True, name="traceflow-parent-watch").start()


def _watch_parent(parent: int, every_s: float = 0.25):
    while os.getppid() == parent:
        time.sleep(every_s)
    os._exit(1)


def import_readers(formats) -> None:
    """Imports the readers of these formats here, before this process forks its reader workers,
    which then start with them (the Kineto reader takes ~45 ms to import, in each process)."""
    if "kineto-json" in formats:
        from . import kineto  # noqa: F401
    if set(formats) - {"kineto-json", "fr-pickle", "fr-json"}:
        from . import nsys  # noqa: F401
    if set(formats) & {*ROCM_FORMATS, "sqlite-gz", "sqlite-xz"}:
        from . import rocm  # noqa: F401


def read_file(inp: Input | str, folder: str, index: int, options: Options | None = None) -> list[ProcessTrace]:
    """The map step for one input (an Input from detect.identify, or a path, detected here), under
    the ingest's `options` (its nsys executable, its inflation bound); None: the defaults."""
    if isinstance(inp, str):
        inp = identify(inp)
    path = inp.path
    try:
        with inflate_bound(options.max_inflate if options else None):
            return _read_file(inp, folder, index, options.nsys if options else None)
    except InputError as e:
        if (problem := disk_problem(e)) is not None:  # a reader's own message, about the scratch folder
            raise OutputError(folder, f"{problem} while reading {path} (traceflow's scratch folder: set TMPDIR "
                              "to a folder with room)") from None
        raise
    except MemoryError:
        raise InputError(path, "ran out of memory while reading (input too deeply nested or too large)") from None
    except RecursionError:
        raise InputError(path, "input is nested too deeply") from None
    except RuntimeError as e:
        if not out_of_memory(e):  # a thread that could not start: the address space is full (ulimit -v)
            raise _unreadable(path, folder, e) from None
        raise InputError(path, "ran out of memory while reading (a thread could not start: raise the address-space "
                         "limit, ulimit -v)") from None
    except Exception as e:  # noqa: BLE001 - a reader met input it does not understand: still one line, exit 3
        raise _unreadable(path, folder, e) from None


def _unreadable(path: str, folder, e: Exception) -> InputError:
    """The one line for a reader's unexpected error: the scratch folder's (disk full), else the input's."""
    if (problem := disk_problem(e)) is not None:  # writing the scratch folder failed: not the input's fault
        return OutputError(folder, f"{problem} while reading {path} (traceflow's scratch folder: set TMPDIR "
                           "to a folder with room)")
    if os.environ.get("TRACEFLOW_DEBUG"):
        traceback.print_exc()
    return InputError(path, f"cannot read ({type(e).__name__}: {one_line(e, 200)})")


def _read_sqlite(path: str, sink, key: str, user_path: str):
    """A decompressed SQLite file: ROCm's (rocpd, .rpd) or an nsys export, by its tables."""
    from . import nsys, rocm
    fmt = rocm.sniff(path)
    try:
        return rocm.read(path, sink, key, fmt) if fmt else nsys.read(path, sink, key=key)
    except InputError as e:  # the message names the user's file, not the scratch copy
        if type(e) is not InputError:
            raise
        raise InputError(user_path, e.problem) from None


def _read_file(inp: Input, folder, index, nsys_exe):
    path, fmt = inp.path, inp.format
    sink = IpcSink(folder)
    scratch = None
    try:
        if fmt in ("fr-pickle", "fr-json"):
            from . import flight_recorder
            return flight_recorder.read(path, sink, f"f{index}fr", fmt)
        if fmt not in ("kineto-json", "torch-memory-snapshot", "perfetto"):
            from . import nsys  # DuckDB: imported only by the processes that read nsys exports
        if fmt == "perfetto":
            from . import perfetto_trace
            traces = perfetto_trace.read(path, sink, key=f"f{index}p")
        elif fmt == "torch-memory-snapshot":
            from . import memory_snapshot
            traces = memory_snapshot.read(path, sink, key=f"f{index}p0")
        elif fmt == "nsys-rep":
            from .nsys_cli import export_sqlite
            traces = nsys.read(export_sqlite(path, nsys_exe, scratch=folder), sink, key=f"f{index}p")
        elif fmt in ("sqlite-gz", "sqlite-xz"):
            fd, scratch = tempfile.mkstemp(suffix=".sqlite", dir=folder)
            with os.fdopen(fd, "wb") as out, BoundedReader(path, "gzip" if fmt == "sqlite-gz" else "xz") as src:
                shutil.copyfileobj(src, out, 1 << 22)
            traces = _read_sqlite(scratch, sink, f"f{index}p", path)
        elif fmt == "rocprof-csv":
            from . import rocprof_csv
            traces = rocprof_csv.read(path, sink, f"f{index}p")
        elif fmt in ROCM_FORMATS:
            from . import rocm
            traces = rocm.read(path, sink, f"f{index}p", fmt)
        elif fmt == "nsys-sqlite":
            traces = nsys.read(path, sink, key=f"f{index}p")
        else:
            from . import kineto
            traces = kineto.read(path, sink, key=f"f{index}p0")
    finally:
        sink.close()
        if scratch:
            os.unlink(scratch)
    digest = None
    for t in traces:
        t.source_path = path  # the user's file, also for .nsys-rep and compressed exports
        if t.source_hash is None:  # a reader that streams the file hashes it on the way
            digest = digest or content_hash(path)
            t.source_hash = digest
    return traces
