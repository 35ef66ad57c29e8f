"""Past one machine: the per-rank map of ingest (read and convert each rank file) as Dask tasks.

    traceflow ingest runs/rank*.sqlite -o /shared/job.duckdb --cluster tcp://scheduler:8786
    traceflow ingest runs/rank*.sqlite -o job.duckdb --cluster local:4     # a LocalCluster of 4 processes
    traceflow.ingest(files, "job.duckdb", cluster=client)                 # a dask.distributed.Client

Each task (a batch of rank files: `batches`) runs the same reader as a local ingest
(readers/worker.py), then the per-rank part of the derive step, and writes its files' tables as
Parquet shards into the parts folder beside the output (rank_task.py), which must be on storage
every worker sees. The database's tables of per-rank rows are views over those shards
(shard_views.py); the cross-rank phase (clock alignment, collectives, the analyses) runs here, on
the client. Dask is an optional extra: `pip install traceflow[cluster]`.

Size: the Dask map, its scheduler probe and its clean-up on every exit path, together.
"""
from __future__ import annotations

import os
import signal
import sys
from contextlib import contextmanager
from typing import Any

from .errors import InputError, MachineLimit, OutputError, UsageError, one_line
from .options import Options, check_address
from .readers.detect import Input

RETRIES = 2  # a task whose worker died is run again elsewhere; a bad file fails the same way each time


def _distributed():
    try:
        import distributed
    except ImportError:
        raise UsageError("--cluster needs Dask: pip install 'traceflow[cluster]'") from None
    return distributed


CLUSTER_START_S = 120.0  # a local:8 starts in ~10 s on 2 loaded cores; past this something is wrong


def _start_local(distributed, n: int, env: dict, mask) -> Any:
    """The LocalCluster, started in a thread of its own (which keeps SIGINT and SIGTERM blocked, as
    its workers inherit that) and waited for at most CLUSTER_START_S: a start that never ends (too few
    open files hung it) becomes one line. The caller's _close_clusters stops what was started."""
    import threading
    box: dict = {}

    def start():
        try:
            box["cluster"] = distributed.LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                                                      dashboard_address=":0", silence_logs=50, **env)
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread, which raises it
            box["error"] = e
    t = threading.Thread(target=start, name="traceflow-cluster-start", daemon=True)
    t.start()
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # this thread takes Ctrl-C again while it waits
    t.join(CLUSTER_START_S)
    if t.is_alive():
        raise MachineLimit(f"--cluster local:{n}: the Dask cluster did not start in {CLUSTER_START_S:.0f} s")
    if "error" in box:
        e = box["error"]
        if isinstance(e, RuntimeError) and "failed to start" in str(e):
            raise MachineLimit(f"--cluster local:{n}: the Dask cluster did not start ({one_line(e)}): too few open "
                               "files (ulimit -n), processes or memory for its workers?") from None
        raise e
    return box["cluster"]


def _close_clusters(distributed) -> None:
    """Close every LocalCluster this process started, also one a signal caught half-started (its
    constructor never returned): else Dask's own atexit hook closed it and printed a traceback
    (AssertionError: Status.init) after the one line of a SIGTERM."""
    import atexit

    from distributed.deploy.spec import SpecCluster, close_clusters
    for c in list(SpecCluster._instances):
        try:
            if getattr(c, "status", None) != distributed.core.Status.closed:
                c.close(timeout=10)
        except Exception:  # noqa: BLE001 - a half-started cluster: its processes end with this one
            pass
    atexit.unregister(close_clusters)


@contextmanager
def client_for(cluster: Any, scratch: str | None = None):
    """A dask.distributed Client for `cluster`: 'local:N' (a LocalCluster of N worker processes,
    closed afterwards, its workers' scratch space in `scratch`, never Dask's dask-scratch-space/ in
    $TMPDIR), a scheduler address ('tcp://host:8786'), or a Client (used as it is)."""
    distributed = _distributed()
    if isinstance(cluster, distributed.Client):
        yield cluster
        return
    text = str(cluster)
    if text.startswith("local:"):
        import dask.config as dask_config
        check_address(text)
        n = int(text.split(":", 1)[1])
        # A terminal's Ctrl-C goes to the whole process group: the workers (and the loop thread that
        # starts them, again after a crash) start with SIGINT blocked, so only this process sees it
        # (else each worker printed its KeyboardInterrupt traceback); closing the cluster stops them.
        # The scheduler's and the workers' scratch space (Dask's temporary-directory), and the
        # workers' own temp files (their TMPDIR: a killed worker left its traceflow-* folder), all
        # inside the run's scratch folder, which goes with the run.
        where = os.path.join(scratch, "dask") if scratch else None
        env = {"env": {"TMPDIR": where}} if where else {}
        _quiet_resource_tracker()
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        config = dask_config.set({"temporary-directory": where} if where else {})
        try:
            try:
                if where:
                    os.makedirs(where, exist_ok=True)
                lc = _start_local(distributed, n, env, old)
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, old)
            with lc, distributed.Client(lc) as client:
                yield client
        finally:
            _close_clusters(distributed)
            config.__exit__(None, None, None)  # Dask's temporary-directory as it was
        return
    _probe_scheduler(text)
    try:
        client = distributed.Client(text, timeout="10s")
    except (OSError, TimeoutError, ValueError) as e:
        raise UsageError(f"--cluster {text}: cannot reach the Dask scheduler ({type(e).__name__}: {e})") from None
    with client:
        yield client


PROBE_TIMEOUT_S = 10.0
HANDSHAKE_MAX = 1 << 20  # a scheduler's first message (its handshake: versions, compression) is ~200 bytes


def _probe_scheduler(address: str) -> None:
    """A Dask scheduler speaks first: once it accepts a connection it sends its handshake, an 8-byte
    length and that many bytes. Dask's own client waits for it without end (a port that accepts and
    then says nothing hung the run with no output) and believes any length it reads (a port answering
    other bytes: "MemoryError: Unable to allocate 3.07 EiB"). Checked here first, bounded in time;
    InputError (exit 3) when the address is no Dask scheduler. Only tcp:// is probed."""
    import socket
    import struct
    if not address.startswith("tcp://"):
        return
    host, _, port = address[len("tcp://"):].rstrip("/").rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit():
        return  # Dask's own parse says what is wrong
    where = f"--cluster {address}"
    try:
        with socket.create_connection((host, int(port)), timeout=PROBE_TIMEOUT_S) as sock:
            sock.settimeout(PROBE_TIMEOUT_S)
            head = b""
            while len(head) < 8:
                got = sock.recv(8 - len(head))
                if not got:
                    raise InputError(where, "the other end closed the connection without a word: not a Dask scheduler")
                head += got
    except TimeoutError:
        raise InputError(where, f"the other end accepts connections but sent nothing in {PROBE_TIMEOUT_S:g} s: not a Dask "
                         "scheduler (or a busy one: try again)") from None
    except OSError as e:
        raise UsageError(f"{where}: cannot reach the Dask scheduler ({type(e).__name__}: {e})") from None
    (n,) = struct.unpack("<Q", head)
    if not 0 < n <= HANDSHAKE_MAX:
        raise InputError(where, f"the other end answers with bytes that are not Dask's protocol ({head!r}): not a "
                         "Dask scheduler")


def _quiet_resource_tracker() -> None:
    """multiprocessing's resource tracker (a process of its own, started once) cleans up the
    semaphores of the workers' queues when this process is killed, and then printed "There appear
    to be 12 leaked semaphore objects" on the user's terminal, after kill -9 or SIGTERM. It is
    started here with its stderr on /dev/null: it still cleans up, without the warning."""
    from multiprocessing import resource_tracker
    if getattr(resource_tracker._resource_tracker, "_fd", None) is not None:
        return  # already running
    devnull = os.open(os.devnull, os.O_WRONLY)
    saved = os.dup(2)
    try:
        sys.stderr.flush()
        os.dup2(devnull, 2)
        resource_tracker.ensure_running()
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


# The map's tasks (batches): a task's fixed cost on a worker (its DuckDB, 14 per-rank analyses, 28
# Parquet shards) was ~1.2 s for a 2.4 MB rank file, most of such a task; a task holds files up to
# TASK_BYTES of input (a gzip counted as inflated), so that cost is paid per 64 MB, not per file, and
# a worker's memory stays bounded (a file over it is a task alone: never two big files in one process).
# And at least TASKS_PER_WORKER tasks per worker while files last: every worker busy to the end.
# Measured: docs/scale-out.md.
TASK_BYTES = 64 << 20
TASKS_PER_WORKER = 4


def input_bytes(inp: Input) -> int:
    """What a reader reads of `inp`: its size on disk, a .gz's inflated size from its trailer (which
    holds it modulo 2^32: never counted below the file's own size)."""
    if not inp.path.endswith(".gz") or inp.size < 18:
        return inp.size
    try:
        with open(inp.path, "rb") as f:
            f.seek(-4, os.SEEK_END)
            return max(inp.size, int.from_bytes(f.read(4), "little"))
    except OSError:
        return inp.size


def batches(inputs: list[Input], workers: int, target: int | None = None,
            per_worker: int | None = None) -> list[list[int]]:
    """The map's tasks: runs of consecutive input indices, each of at most `target` input bytes
    (input_bytes; a file bigger than that alone) and at most as many files as gives every one of
    `workers` `per_worker` tasks (0: no bound by count)."""
    target = TASK_BYTES if target is None else target
    per_worker = TASKS_PER_WORKER if per_worker is None else per_worker
    most = max(1, -(-len(inputs) // max(1, workers * per_worker)))
    out: list[list[int]] = []
    size = 0
    for i, inp in enumerate(inputs):
        n = input_bytes(inp)
        if not out or len(out[-1]) >= most or size + n > target:
            out.append([])
            size = 0
        out[-1].append(i)
        size += n
    return out


def read_all(client, inputs: list[Input], folder: str, options: Options, progress) -> list:
    """The map: one task per batch of files (batches; rank_task.run: read, per-rank derive, one
    Parquet shard per table and task into `folder`, shared with the workers); each task gets the
    ingest's `options`, pickled (its settings reach a worker started anywhere, whatever its
    environment). `progress` is called once per file. Returns the traces in the order of
    `inputs`; a bad file raises its reader's InputError."""
    distributed = _distributed()
    from . import rank_task
    workers = sum(client.nthreads().values())
    tasks = batches(inputs, workers)
    futures = [client.submit(rank_task.run, [(i, inputs[i]) for i in batch], folder, options,
                             key=f"traceflow-ranks-{os.getpid()}-{batch[0]}-{os.urandom(4).hex()}",
                             retries=RETRIES, pure=False) for batch in tasks]
    index = {f.key: b for b, f in enumerate(futures)}
    results: dict[int, list] = {}
    try:
        for fut in distributed.as_completed(futures):
            batch = tasks[index[fut.key]]
            first, more = inputs[batch[0]].path, (f" (or one of the {len(batch) - 1} files read with it)"
                                                  if len(batch) > 1 else "")
            try:
                for i, traces in zip(batch, fut.result()):
                    results[i] = traces
            except InputError:
                raise
            except distributed.client.FutureCancelledError:
                raise InputError(first, f"the cluster cancelled the task reading this file{more}") from None
            except Exception as e:  # noqa: BLE001 - a worker lost RETRIES times, a scheduler gone: one line
                raise InputError(first, f"the cluster could not read this file{more} ({type(e).__name__}: {e})") from None
            for i in batch:
                progress(inputs[i].path)
    finally:
        client.cancel([f for f in futures if not f.done()])
    traces = [t for i in sorted(results) for t in results[i]]
    _check_shared(folder, traces)
    return traces


def _check_shared(folder: str, traces: list):
    """Every shard a worker wrote must be visible here: a folder on a worker's local disk is not."""
    from .rank_task import shard_path
    seen = set()
    for t in traces:
        if t.derived["part"] in seen:
            continue
        seen.add(t.derived["part"])
        if not shard_path(folder, t.derived["part"], "gpu_ops").exists():
            raise OutputError(folder, f"the workers wrote {t.source_path}'s tables where this machine cannot see "
                              "them: the output's folder must be on storage every worker shares")
