"""Where a small job's ingest time goes, part by part, against the floor of each part (docs/performance.md,
"Why the small-job target ... is out of reach"):

    python bench/fixed_costs.py ['fixtures/ddp4_sync_stall/*.json.gz'] [--runs 3]

Prints, each --runs times: starting Python with the imports an ingest needs; traceflow's Kineto reader over
the files in this one process; a generic decode of the same files (gzip + msgspec to dicts); the CLI ingest's
wall and CPU seconds (its own process tree) and its phase timings.
"""
from __future__ import annotations

import argparse
import glob
import gzip
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

IMPORTS = "import traceflow.pipeline, duckdb, traceflow.readers.kineto, traceflow.cli"


def child_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("glob", nargs="?", default="fixtures/ddp4_sync_stall/*.json.gz")
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    files = sorted(glob.glob(a.glob))
    if not files:
        sys.exit(f"no files match {a.glob}")
    import msgspec

    from traceflow.readers.detect import identify
    from traceflow.readers.worker import read_file
    inputs = [identify(f) for f in files]
    work = tempfile.mkdtemp(prefix="fixed-costs-")
    for run in range(a.runs):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", IMPORTS], check=True)
        imports = time.perf_counter() - t

        t = time.perf_counter()
        for i, inp in enumerate(inputs):
            read_file(inp, work, run * 1000 + i)
        reader = time.perf_counter() - t

        t = time.perf_counter()
        for f in files:
            msgspec.json.decode(gzip.decompress(open(f, "rb").read()) if f.endswith(".gz") else open(f, "rb").read())
        generic = time.perf_counter() - t

        db = os.path.join(work, f"run{run}.duckdb")
        script = ("import json, sys, traceflow\n"
                  "if __name__ == '__main__':\n"
                  "    j = traceflow.ingest(sys.argv[2:], sys.argv[1])\n"
                  "    print(json.dumps(j.timings))\n")
        cpu0, t = child_cpu(), time.perf_counter()
        out = subprocess.run([sys.executable, "-c", script, db, *files], capture_output=True, text=True, check=True).stdout
        wall, cpu = time.perf_counter() - t, child_cpu() - cpu0
        timings = {k: round(v, 3) for k, v in json.loads(out.strip().splitlines()[-1]).items()}
        print(f"run {run + 1}: python + imports {imports:.2f} s | reader, one process {reader:.2f} s | "
              f"generic gunzip + decode {generic:.2f} s | ingest (API, own process) {wall:.2f} s wall, "
              f"{cpu:.2f} s CPU, phases {timings}", flush=True)


if __name__ == "__main__":
    main()
