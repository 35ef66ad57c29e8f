"""The readers' pool: every input file read (worker.read_file) on threads or in worker processes.

`map_files` is the one entry: the ingest's per-file map when it runs on this machine (a cluster's
is cluster.py). The rest keeps its processes safe to interrupt: how they start (fork or spawn),
that a terminal's Ctrl-C reaches only this process, and that none outlives an error or Ctrl-C.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sys
import threading
import warnings
from contextlib import nullcontext

from ..errors import InputError
from ..interrupts import deferred
from ..options import Options
from .detect import ROCM_FORMATS, Input
from .model import ProcessTrace
from .worker import import_readers, read_file, worker_start


def workers(jobs: int | None, n: int) -> int:
    """--jobs if given, else one per core; never more than there is work."""
    return max(1, min(jobs or os.cpu_count() or 1, n))


def map_files(inputs: list[Input], folder, options: Options, progress) -> list[ProcessTrace]:
    """Reads every input (worker.read_file, its Arrow files into `folder`); returns the traces in the
    order of `inputs`, the first error raised. In parallel when there are several files or a big one: on threads for
    SQLite exports; for JSON (a reader that runs Python code) in worker processes, and in this one
    too on small inputs."""
    jobs = workers(options.jobs, len(inputs))
    # A big input is read in workers only: what a reader allocated goes back to the OS with its
    # process instead of staying in the heap of the one that builds the database.
    big = sum(i.size for i in inputs) > (64 << 20)
    if jobs == 1 and not big:
        return _share(inputs, [read_file], folder, options, progress)
    if all(i.format in ("nsys-sqlite", *ROCM_FORMATS) for i in inputs):
        # An SQLite export is read by DuckDB scans and Arrow writes, which release the GIL:
        # threads do as well as processes here, without a worker's start (~0.2 s).
        return _share(inputs, [read_file] * jobs, folder, options, progress)
    # A spawned worker takes ~0.2 s to start (a fresh interpreter importing Arrow; a forked one starts
    # at once, start_method): on small inputs this process reads too, and takes the next file
    # whenever it is free.
    n_proc = jobs if big else jobs - 1
    readers: list[_Reader] = []
    try:
        # A terminal's progress display redraws from a thread of its own, which would rule out a fork.
        # All the processes start here, from this thread, before the reader slots' threads exist.
        with getattr(progress, "paused", nullcontext)():
            method = start_method()
            if method == "fork":
                import_readers({i.format for i in inputs})
            context = mp.get_context(method)
            for _ in range(n_proc):
                with deferred():  # started and in `readers` (which _stop kills), or not started at all
                    readers.append(_Reader(context))
        slots = [r.read for r in readers] + ([] if big else [read_file])
        return _share(inputs, slots, folder, options, progress, abort=lambda: _stop(readers))
    except BaseException:
        _stop(readers)  # an error or Ctrl-C: the readers' work is lost anyway, do not wait for it
        raise
    finally:
        _close(readers)


def start_method() -> str:
    """How reader processes start. A forked one is reading at once; a spawned one first starts an
    interpreter and imports Arrow (~0.2 s of a core: on 2 cores the bundled 4-rank job's read took
    0.44 s with one spawned worker, 0.30-0.35 s with one forked). Fork only on Linux (macOS's
    system libraries are not fork-safe) and only while this process runs no other Python thread:
    a fork from a reader slot's thread, while this one was reading, hung the child (a lock held by
    a thread the child does not have). The native threads of a plain process (OpenBLAS's pool,
    jemalloc's background thread, a DuckDB connection's idle workers) make no call the child
    makes, and the C allocators re-arm their locks across fork."""
    if sys.platform.startswith("linux") and threading.active_count() == 1:
        return "fork"
    return "spawn"


class _Died(Exception):
    """The reader process ended (killed, or out of memory) before it answered."""


class _Reader:
    """One reader process, reading one file at a time for a slot of _share: `read` sends it the
    file and waits for its traces. Its own process and pipe, not a concurrent.futures pool: stopping
    one needs no private state of the pool (its processes, its manager thread, whose join raced
    Python's exit after a Ctrl-C: "OSError: [Errno 9] Bad file descriptor", 1 interrupted run in
    110 on a loaded machine), and no thread is left to race."""

    def __init__(self, context):
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_serve, args=(child, os.getpid()), daemon=True, name="traceflow-reader")
        # SIGINT blocked on this thread while the process starts: it inherits the mask, so a
        # terminal's Ctrl-C (sent to the whole process group) never interrupts a worker while its
        # interpreter starts, before it could ignore it (this process stops the workers itself).
        # Python 3.12+ warns of any fork in a process with threads, counting native ones; those
        # are the ones start_method found harmless.
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT}) if hasattr(signal, "pthread_sigmask") else None
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", "This process .* is multi-threaded", DeprecationWarning)
                self.process.start()
        finally:
            if old is not None:
                signal.pthread_sigmask(signal.SIG_SETMASK, old)
        child.close()

    def read(self, *args):
        try:
            self.conn.send(args)
            ok, value = self.conn.recv()
        except (EOFError, OSError):
            raise _Died from None
        if ok:
            return value
        raise value

    def close(self):
        """Asks the process to end once its file is read, and waits for it."""
        try:
            self.conn.send(None)
        except OSError:
            pass  # gone already
        self.process.join()
        self.conn.close()


def _serve(conn, parent: int):
    """A reader process: files to read come down the pipe, their traces (or the error) go back."""
    worker_start(parent)
    while True:
        try:
            args = conn.recv()
        except EOFError:  # the parent is gone without a word
            return
        if args is None:
            return
        answer: tuple[bool, object]
        try:
            answer = (True, read_file(*args))
        except BaseException as e:  # noqa: BLE001 - the parent raises it
            answer = (False, e)
        try:
            conn.send(answer)
        except Exception as e:  # noqa: BLE001 - an error that does not pickle: its text instead
            conn.send((False, RuntimeError(f"{type(answer[1]).__name__}: {answer[1]} ({type(e).__name__} sending it back)")))


def _stop(readers: list[_Reader]):
    for r in readers:
        if r.process.is_alive():
            r.process.kill()
    for r in readers:  # dead before the scratch folder they write into is removed
        r.process.join(timeout=5)


def _close(readers: list[_Reader]):
    """Ends the reader processes and waits for them, also through a Ctrl-C that lands meanwhile
    (then raised once they are gone)."""
    interrupted = False
    while True:
        try:
            for r in readers:
                r.close()
            break
        except KeyboardInterrupt:
            interrupted = True
            _stop(readers)
    if interrupted:
        raise KeyboardInterrupt


def _share(inputs: list[Input], slots, folder, options, progress, abort=None):
    """Each slot (a function that reads one file, here or in a worker) takes the next file as soon
    as it is free, so a slow start or a big file holds up only its own slot. The last slot runs
    on the calling thread. Returns the traces in the order of `inputs`; the first error wins."""
    todo = list(range(len(inputs)))[::-1]
    results: dict[int, list[ProcessTrace]] = {}
    errors: list[BaseException] = []
    lock = threading.Lock()

    def take():
        with lock:
            return todo.pop() if todo and not errors else None

    def run(read):
        try:
            while (i := take()) is not None:
                try:
                    results[i] = read(inputs[i], folder, i, options)
                except _Died:
                    raise InputError(inputs[i].path, "the reader process died while reading this file "
                                     "(killed, or out of memory)") from None
                progress(inputs[i].path)
        except BaseException as e:  # noqa: BLE001 - handed to the calling thread, which raises it
            with lock:
                errors.append(e)
                todo.clear()
            if isinstance(e, KeyboardInterrupt) and abort:
                abort()  # the other slots wait on workers: stop those now, not when their file is read

    threads = [threading.Thread(target=run, args=(r,), daemon=True) for r in slots[:-1]]
    for t in threads:
        t.start()
    run(slots[-1])
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return [t for i in sorted(results) for t in results[i]]
