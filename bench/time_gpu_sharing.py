"""Time the GPU-sharing detection alone on a database's kernels, with a given source tree.

    python bench/time_gpu_sharing.py JOB.duckdb [TREE]    # TREE: a checkout (default: this one)

The database is attached read-only; its gpu_ops and traces are copied into memory and
`gpu_sharing.detect` is timed there (CPU and wall seconds); the table it makes is printed after, to
compare trees (`diff` the outputs of two trees).
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import duckdb

db = sys.argv[1]
tree = sys.argv[2] if len(sys.argv) > 2 else str(Path(__file__).resolve().parent.parent)
sys.path.insert(0, tree)
from traceflow.derive import gpu_sharing  # noqa: E402

assert gpu_sharing.__file__.startswith(str(Path(tree).resolve())), gpu_sharing.__file__
mem = duckdb.connect()
mem.execute(f"ATTACH '{db}' AS src (READ_ONLY)")
mem.execute("CREATE TABLE gpu_ops AS SELECT * FROM src.gpu_ops; CREATE TABLE traces AS SELECT * FROM src.traces")
t0, w0 = time.process_time(), time.perf_counter()
gpu_sharing.detect(mem)
print(f"detect: {time.process_time() - t0:.2f} s CPU, {time.perf_counter() - w0:.2f} s wall", file=sys.stderr)
for row in mem.execute("SELECT * FROM gpu_sharing ORDER BY ALL").fetchall():
    print(row)
