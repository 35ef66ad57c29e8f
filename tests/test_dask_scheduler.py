"""Issue 44: `--cluster tcp://host:port` against a real `distributed` cluster started as a user starts
one (a scheduler and workers, each its own process, from Dask's command-line programs), not a
LocalCluster inside traceflow: the same tables as a local ingest, the user's cluster left running
and nothing of the ingest's own left behind."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid

import pytest
from conftest import run_cli
from test_cluster import KINETO, _parts, _same
from test_files_and_processes import wait_gone

import traceflow

distributed = pytest.importorskip("distributed", reason="Dask is the optional extra traceflow[cluster]")


def _start(args, env, log):
    return subprocess.Popen([sys.executable, "-m", *args], env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)


def test_an_ingest_on_a_scheduler_and_workers_started_apart_is_the_local_ingest(tmp_path):
    tag = uuid.uuid4().hex  # the user's cluster: a scheduler and two workers (each a nanny and its worker)
    env = {**os.environ, "TRACEFLOW_TEST_TAG": tag}
    info = tmp_path / "scheduler.json"
    log = open(tmp_path / "cluster.log", "w")
    procs = [_start(["distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                     "--scheduler-file", str(info)], env, log)]
    try:
        deadline = time.monotonic() + 120
        while not info.exists() and time.monotonic() < deadline and procs[0].poll() is None:
            time.sleep(0.1)
        address = json.loads(info.read_text())["address"]
        assert address.startswith("tcp://127.0.0.1:")
        for i in range(2):
            procs.append(_start(["distributed.cli.dask_worker", address, "--nthreads", "1", "--no-dashboard",
                                 "--name", f"w{i}", "--local-directory", str(tmp_path / f"w{i}")], env, log))
        with distributed.Client(address, timeout="60s") as c:
            c.wait_for_workers(2, timeout=120)
            before = c.run(lambda dask_worker: dask_worker.state.transition_counter)

        # the command as a user types it, in its own process with its own tag
        own = uuid.uuid4().hex
        out = tmp_path / "cluster.duckdb"
        r = run_cli("ingest", *KINETO, "-o", out, "--cluster", address,
                    env={"TRACEFLOW_TEST_TAG": own, "TMPDIR": str(tmp_path)})
        assert r.returncode == 0, r.stderr
        assert "Traceback" not in r.stderr
        assert wait_gone(own) == []  # the ingest started no process that outlived it

        # the tasks ran on the workers started apart (each worker's state machine moved), and the
        # user's cluster is still up: an ingest given an address does not close it
        with distributed.Client(address, timeout="60s") as c:
            after = c.run(lambda dask_worker: dask_worker.state.transition_counter)
            assert len(after) == 2
        assert sum(after.values()) > sum(before.values())
        assert all(p.poll() is None for p in procs)

        # the shards in the parts folder beside the output, and every table the local ingest's
        traceflow.ingest(KINETO, str(tmp_path / "local.duckdb"))
        parts, = _parts(tmp_path)
        assert len(list(parts.glob("*.gpu_ops.parquet"))) == len(KINETO)
        _same(tmp_path / "local.duckdb", out)
        assert not [x for x in os.listdir(tmp_path) if x.startswith(("dask-scratch-space", "traceflow-"))]
    finally:
        for p in procs:  # the user stops the cluster: every process of it goes
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
        log.close()
    assert wait_gone(tag, 30) == [], (tmp_path / "cluster.log").read_text()[-2000:]
