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
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import nullcontext

from ..errors import InputError
from .detect import Input
from .model import ProcessTrace
from .worker import import_readers, read_file, worker_start


def workers(jobs: int | None, n: int) -> int:
    """--jobs if given, else one per core; never more than there is work."""
    return max(1, min(jobs or os.cpu_count() or 1, n))


def map_files(inputs: list[Input], folder, jobs: int | None, nsys_exe: str | None, progress) -> list[ProcessTrace]:
    """Reads every input (worker.read_file, its Arrow files into `folder`); returns the traces in the
    order of `inputs`, the first error raised. In parallel when there are several files or a big one: on threads for
    SQLite exports; for JSON (a reader that runs Python code) in worker processes, and in this one
    too on small inputs."""
    jobs = workers(jobs, len(inputs))
    # A big input is read in workers only: what a reader allocated goes back to the OS with its
    # process instead of staying in the heap of the one that builds the database.
    big = sum(i.size for i in inputs) > (64 << 20)
    if jobs == 1 and not big:
        return _share(inputs, [read_file], folder, nsys_exe, progress)
    if all(i.format == "nsys-sqlite" for i in inputs):
        # An SQLite export is read by DuckDB scans and Arrow writes, which release the GIL:
        # threads do as well as processes here, without a worker's start (~0.2 s).
        return _share(inputs, [read_file] * jobs, folder, nsys_exe, progress)
    # A spawned worker takes ~0.2 s to start (a fresh interpreter importing Arrow; a forked one starts
    # at once, start_method): on small inputs this process reads too, and takes the next file
    # whenever it is free.
    n_proc = jobs if big else jobs - 1
    pool = None
    try:
        # A terminal's progress display redraws from a thread of its own, which would rule out a fork.
        with getattr(progress, "paused", nullcontext)():
            method = start_method()
            if method == "fork":
                import_readers({i.format for i in inputs})
            pool = ProcessPoolExecutor(max_workers=n_proc, mp_context=mp.get_context(method),
                                       initializer=worker_start, initargs=(os.getpid(),))
            if method == "fork":
                _fork_workers_now(pool)
        slots = [lambda *a: _submit(pool, read_file, *a).result()] * n_proc + ([] if big else [read_file])
        return _share(inputs, slots, folder, nsys_exe, progress, abort=lambda: _stop_workers(pool))
    except BaseException:
        if pool is not None:
            _stop_workers(pool)  # an error or Ctrl-C: the readers' work is lost anyway, do not wait for it
        raise
    finally:
        if pool is not None:
            _close_pool(pool)


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


def _fork_workers_now(pool: ProcessPoolExecutor):
    """A fork pool starts all its workers at the first submit: make it now, from this thread, before
    the reader slots' threads exist. Python 3.12+ warns of any fork in a process with threads,
    counting native ones; those are the ones _start_method found harmless."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "This process .* is multi-threaded", DeprecationWarning)
        _submit(pool, os.getpid)


def _submit(pool: ProcessPoolExecutor, fn, *args):
    """pool.submit with SIGINT blocked on this thread: a worker the pool starts now inherits the mask,
    so a terminal's Ctrl-C (sent to the whole process group) never interrupts a worker while its
    interpreter starts, before it could ignore it (the parent stops the workers itself)."""
    if not hasattr(signal, "pthread_sigmask"):
        return pool.submit(fn, *args)
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        return pool.submit(fn, *args)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _manager_thread(pool: ProcessPoolExecutor):
    """The pool's manager thread (concurrent.futures keeps it private), remembered on the pool:
    shutdown(wait=False) drops its own reference unjoined, so a later shutdown(wait=True) joined
    nothing and the thread raced Python's exit after a Ctrl-C (the traceback of _close_pool's
    docstring, again 1 of 200 interrupted runs at a terminal)."""
    thread = getattr(pool, "_executor_manager_thread", None)
    if thread is not None:
        pool.traceflow_manager_thread = thread  # type: ignore[attr-defined]
    return getattr(pool, "traceflow_manager_thread", None)


def _stop_workers(pool: ProcessPoolExecutor):
    _manager_thread(pool)
    pool.shutdown(wait=False, cancel_futures=True)
    procs = list((getattr(pool, "_processes", None) or {}).values())
    for proc in procs:
        if proc.is_alive():
            proc.kill()
    for proc in procs:  # dead before the scratch folder they write into is removed
        proc.join(timeout=5)


def _close_pool(pool: ProcessPoolExecutor):
    """Shuts the pool down and waits for its manager thread, also through a Ctrl-C that lands
    meanwhile (then raised once it is done). A manager thread left running raced Python's exit,
    which wakes it on a pipe it may be closing: "OSError: [Errno 9] Bad file descriptor" printed
    after the interrupt line (1 interrupted run in 110 on a loaded machine)."""
    interrupted = False
    while True:
        try:
            manager = _manager_thread(pool)
            pool.shutdown(wait=True)
            if manager is not None:
                manager.join()  # ends once the workers are gone, killed or done
            break
        except KeyboardInterrupt:
            interrupted = True
            _stop_workers(pool)
    if interrupted:
        raise KeyboardInterrupt


def _share(inputs: list[Input], slots, folder, nsys_exe, progress, abort=None):
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
                    results[i] = read(inputs[i], folder, i, nsys_exe)
                except BrokenProcessPool:
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
