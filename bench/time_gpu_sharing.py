"""Time the GPU-sharing detection alone on a database's kernels, with a given source tree.

    python bench/time_gpu_sharing.py JOB.duckdb [TREE]    # TREE: a checkout (default: this one)
    python bench/time_gpu_sharing.py JOB.duckdb [TREE] --derive 4096   # copies of its ranks, no ingest

The database is attached read-only; its gpu_ops and traces are copied into memory and
`gpu_sharing.detect` is timed there (CPU and wall seconds); the table it makes is printed after, to
compare trees (`diff` the outputs of two trees). Also counted: the pairs measured on their kernels
(calls of `_kept`, the exact test's first step once the cheap skips pass; `detect` adds one per row).
With --derive N, the N ranks that bench/cluster.py's derive_ranks would make of the database's k
ranks are made here from its kernels instead (copy c of rank r is rank r + c·k, its times c µs later,
as the ingest of the derived files gives them; only kernel rows are copied, all the detection reads).
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import duckdb

args = sys.argv[1:]
derive = int(args.pop(args.index("--derive") + 1)) if "--derive" in args else 0
args = [a for a in args if a != "--derive"]
db = args[0]
tree = args[1] if len(args) > 1 else str(Path(__file__).resolve().parent.parent)
sys.path.insert(0, tree)
from traceflow.derive import gpu_sharing  # noqa: E402

assert gpu_sharing.__file__.startswith(str(Path(tree).resolve())), gpu_sharing.__file__
mem = duckdb.connect()
mem.execute(f"ATTACH '{db}' AS src (READ_ONLY)")
if derive:
    k = mem.execute("SELECT count(DISTINCT rank) FROM src.traces").fetchone()[0]
    copies = f"range({max(1, derive // k)}) c(c)"
    mem.execute(f"""CREATE TABLE gpu_ops AS SELECT * REPLACE (rank + c * {k} AS rank, start_ns + c * 1000 AS start_ns,
        end_ns + c * 1000 AS end_ns) FROM src.gpu_ops, {copies} WHERE kind = 'kernel';
        CREATE TABLE traces AS SELECT * REPLACE (rank + c * {k} AS rank) FROM src.traces, {copies}""")
else:
    mem.execute("CREATE TABLE gpu_ops AS SELECT * FROM src.gpu_ops; CREATE TABLE traces AS SELECT * FROM src.traces")
kept = gpu_sharing._kept
calls = [0]


def counted(*a):
    calls[0] += 1
    return kept(*a)


gpu_sharing._kept = counted  # a module global: the exact test looks it up at each call
t0, w0 = time.process_time(), time.perf_counter()
gpu_sharing.detect(mem)
print(f"detect: {time.process_time() - t0:.2f} s CPU, {time.perf_counter() - w0:.2f} s wall, {calls[0]} pairs measured on their kernels",
      file=sys.stderr)
for row in mem.execute("SELECT * FROM gpu_sharing ORDER BY ALL").fetchall():
    print(row)
