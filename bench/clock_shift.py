"""Moves one rank of an h100 Kineto fixture by a few ms (its baseTimeNanoseconds) and prints what
clock alignment makes of it: per rank (offset applied, skew estimated, spread) in ms, and the warnings.

    python bench/clock_shift.py [SHARED]
"""
import glob
import gzip
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))


def run(shared, rel, rank, shift):
    import duckdb

    import traceflow
    d = tempfile.mkdtemp()
    for f in sorted(glob.glob(os.path.join(shared, "fixtures", rel, "rank-*.json.gz"))):
        raw = gzip.open(f).read()
        if f.endswith(f"rank-{rank}.pt.trace.json.gz"):
            raw = re.sub(rb'("baseTimeNanoseconds"\s*:\s*)(\d+)', lambda m: m.group(1) + str(int(m.group(2)) + shift).encode(), raw, count=1)
        open(os.path.join(d, os.path.basename(f)), "wb").write(gzip.compress(raw, 1))
    res = traceflow.ingest(sorted(glob.glob(d + "/*.gz")), d + "/j.duckdb")
    con = duckdb.connect(d + "/j.duckdb", read_only=True)
    print(rel, f"rank {rank} moved {shift / 1e6:+} ms:", con.execute(
        "SELECT rank, clock_offset_ns / 1e6, clock_skew_ns / 1e6, clock_spread_ns / 1e6 FROM traces ORDER BY rank").fetchall())
    for w in res.warnings:
        print("   ", w)


if __name__ == "__main__":
    shared = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..", "shared")
    for rel in ["h100/kineto/ddp4_sync_stall", "h100/kineto/ddp4_straggler"]:
        for ms in [0, 5, -5, 20, -20]:
            run(shared, rel, 3, ms * 1_000_000)
