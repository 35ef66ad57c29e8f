"""Wall time of ingest + every analysis for one source tree, twice (for old-vs-new comparisons):

    python bench/time_ingest.py ROOT 'GLOB'     # e.g. ROOT=/tmp/old, GLOB='../shared/bench/long4/kineto/*.gz'
"""
import glob
import sys
import tempfile
import time

if __name__ == "__main__":
    # the tree named, not the editable install of this checkout (its import hook comes before sys.path)
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
    sys.path.insert(0, sys.argv[1])
    import traceflow
    assert traceflow.__file__.startswith(sys.argv[1]), traceflow.__file__
    files = sorted(glob.glob(sys.argv[2]))
    d = tempfile.mkdtemp()
    for i in range(2):
        t = time.perf_counter()
        r = traceflow.ingest(files, f"{d}/run{i}.duckdb")
        print(sys.argv[1], f"{time.perf_counter() - t:.2f} s", {k: round(v, 2) for k, v in r.timings.items()})
