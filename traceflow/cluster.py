"""Past one machine: the per-rank map of ingest (read and convert each rank file) as Dask tasks.

    traceflow ingest runs/rank*.sqlite -o /shared/job.duckdb --cluster tcp://scheduler:8786
    traceflow ingest runs/rank*.sqlite -o job.duckdb --cluster local:4     # a LocalCluster of 4 processes
    traceflow.ingest(files, "job.duckdb", cluster=client)                 # a dask.distributed.Client

Each task runs the same reader as a local ingest (readers/worker.py), then the per-rank part of the
derive step, and writes the file's tables as Parquet shards into the parts folder beside the output
(rank_task.py), which must be on storage every worker sees. The database's tables of per-rank rows
are views over those shards (shard_views.py); the cross-rank phase (clock alignment, collectives,
the analyses) runs here, on the client. Dask is an optional extra: `pip install traceflow[cluster]`.
"""
from __future__ import annotations

import os
import signal
from contextlib import contextmanager
from typing import Any

from .errors import InputError, OutputError, UsageError
from .readers.detect import Input

RETRIES = 2  # a task whose worker died is run again elsewhere; a bad file fails the same way each time


def _distributed():
    try:
        import distributed
    except ImportError:
        raise UsageError("--cluster needs Dask: pip install 'traceflow[cluster]'") from None
    return distributed


@contextmanager
def client_for(cluster: Any):
    """A dask.distributed Client for `cluster`: 'local:N' (a LocalCluster of N worker processes,
    closed afterwards), a scheduler address ('tcp://host:8786'), or a Client (used as it is)."""
    distributed = _distributed()
    if isinstance(cluster, distributed.Client):
        yield cluster
        return
    text = str(cluster)
    if text.startswith("local:"):
        try:
            n = int(text.split(":", 1)[1])
        except ValueError:
            n = 0
        if n < 1:
            raise UsageError(f"--cluster {text}: local:N needs a number of worker processes, e.g. local:4")
        # A terminal's Ctrl-C goes to the whole process group: the workers (and the loop thread that
        # starts them, again after a crash) start with SIGINT blocked, so only this process sees it
        # (else each worker printed its KeyboardInterrupt traceback); closing the cluster stops them.
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            lc = distributed.LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=":0",
                                          silence_logs=50)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
        with lc, distributed.Client(lc) as client:
            yield client
        return
    try:
        client = distributed.Client(text, timeout="10s")
    except (OSError, TimeoutError, ValueError) as e:
        raise UsageError(f"--cluster {text}: cannot reach the Dask scheduler ({type(e).__name__}: {e})") from None
    with client:
        yield client


def read_all(client, inputs: list[Input], folder: str, nsys_exe: str | None, step_pattern: str | None, peaks: tuple,
             progress) -> list:
    """One task per file (rank_task.run: read, per-rank derive, Parquet shards into `folder`, shared
    with the workers). Returns the traces in the order of `inputs`; a bad file raises its reader's
    InputError."""
    distributed = _distributed()
    from . import rank_task
    futures = [client.submit(rank_task.run, inp, folder, i, nsys_exe, step_pattern, peaks,
                             key=f"traceflow-rank-{os.getpid()}-{i}-{os.urandom(4).hex()}",
                             retries=RETRIES, pure=False) for i, inp in enumerate(inputs)]
    index = {f.key: i for i, f in enumerate(futures)}
    results: dict[int, list] = {}
    try:
        for fut in distributed.as_completed(futures):
            i = index[fut.key]
            try:
                results[i] = fut.result()
            except InputError:
                raise
            except distributed.client.FutureCancelledError:
                raise InputError(inputs[i].path, "the cluster cancelled the task reading this file") from None
            except Exception as e:  # noqa: BLE001 - a worker lost RETRIES times, a scheduler gone: one line
                raise InputError(inputs[i].path, f"the cluster could not read this file ({type(e).__name__}: {e})") from None
            progress(inputs[i].path)
    finally:
        client.cancel([f for f in futures if not f.done()])
    traces = [t for i in sorted(results) for t in results[i]]
    _check_shared(folder, traces)
    return traces


def _check_shared(folder: str, traces: list):
    """Every shard a worker wrote must be visible here: a folder on a worker's local disk is not."""
    from .rank_task import shard_path
    for t in traces:
        if not shard_path(folder, t.key, "gpu_ops").exists():
            raise OutputError(folder, f"the workers wrote {t.source_path}'s tables where this machine cannot see "
                              "them: the output's folder must be on storage every worker shares")
