"""Issue 44: a cluster client's DuckDB memory for the job's steps is a fixed cap (machine.CLIENT_MEMORY_LIMIT),
the user's limit over it, a quarter of an address-space limit under it."""
from __future__ import annotations

import subprocess
import sys

import duckdb

from traceflow.machine import CLIENT_MEMORY_LIMIT, client_memory_limit


def test_the_client_cap_yields_to_the_users_limit_and_to_ulimit():
    assert client_memory_limit("2GB") == "2GB"
    # a fresh process under `ulimit -v` 1 GiB: a quarter of it, below the cap
    code = ("import resource; resource.setrlimit(resource.RLIMIT_AS, (1 << 30, resource.RLIM_INFINITY)); "
            "from traceflow.machine import client_memory_limit; print(client_memory_limit())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["256MB"]
    if client_memory_limit() == CLIENT_MEMORY_LIMIT:  # no address-space limit here
        con = duckdb.connect()
        con.execute("SET memory_limit = ?", [CLIENT_MEMORY_LIMIT])  # a size DuckDB takes
        assert con.execute("SELECT current_setting('memory_limit')").fetchone()[0].endswith("MiB")
