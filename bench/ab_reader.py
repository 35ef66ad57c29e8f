"""One file's reader, two source trees side by side: CPU seconds, the trees alternating (A B A B ...).

    python bench/ab_reader.py OLD_TREE NEW_TREE FILE [--reps 6]
    # e.g. OLD_TREE from `git archive <base> | tar -x -C /tmp/old`, NEW_TREE likewise from HEAD;
    #      FILE an input without memory events (long4's nsys rank 1, unpacked; or a Kineto trace)

The read is the map step alone (readers/worker.read_file into a scratch folder), in a fresh process per
run, so one run's caches never help the next. CPU seconds (time.process_time, the reader's threads
included) rather than wall time: on a shared machine the wall clock measures the neighbours.
Prints each run and the medians.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile

READ = """
import sys, time
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]  # the tree named, not this checkout
sys.path.insert(0, sys.argv[1])
import traceflow
from traceflow.readers.worker import read_file
assert traceflow.__file__.startswith(sys.argv[1]), traceflow.__file__
t = time.process_time()
read_file(sys.argv[2], sys.argv[3], 0)
print(time.process_time() - t)
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("file")
    ap.add_argument("--reps", type=int, default=6)
    a = ap.parse_args()
    got: dict = {a.old: [], a.new: []}
    for i in range(a.reps):
        for tree in (a.old, a.new) if i % 2 == 0 else (a.new, a.old):  # each goes first half the time
            with tempfile.TemporaryDirectory() as d:
                out = subprocess.run([sys.executable, "-c", READ, tree, a.file, d], capture_output=True, text=True)
            if out.returncode:
                sys.exit(f"{tree}: {out.stderr.strip().splitlines()[-1] if out.stderr.strip() else out.returncode}")
            got[tree].append(float(out.stdout.split()[-1]))
            print(f"{tree}: {got[tree][-1]:.3f} s CPU", flush=True)
    for tree, xs in got.items():
        print(f"{tree}: median {statistics.median(xs):.3f} s CPU (min {min(xs):.3f}, max {max(xs):.3f}; {len(xs)} reads)")


if __name__ == "__main__":
    main()
