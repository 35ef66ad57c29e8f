"""`make bench-cluster`: ingest on a Dask LocalCluster against the local ingest, as ranks grow.

Inputs: ../shared/bench/long4's Kineto ranks repeated (rank ids rewritten) to 16 and 64 ranks, the
way `make bench` makes x16. Each ingest runs as its own process; recorded: wall time, the peak RSS
of the client process alone and of its worker processes, and the phases' seconds (read = the
per-rank map; load, derive, packs, critical_path = the cross-rank phase on the client).
Results: a table on stdout and bench/cluster-results.json.

    python bench/cluster.py --shared ../shared --ranks 16 64 --workers 2
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

INGEST = """
import json, sys, traceflow
cluster = sys.argv[2] if sys.argv[2] != "-" else None
job = traceflow.ingest(sys.argv[3:], sys.argv[1], cluster=cluster, force=True)
print(json.dumps({k: round(v, 2) for k, v in job.timings.items()}))
"""


def measure(cmd) -> dict:
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = {"client": 0, "workers": 0}
    stop = threading.Event()

    def sample():
        root = psutil.Process(p.pid)
        while not stop.is_set():
            try:
                peak["client"] = max(peak["client"], root.memory_info().rss)
                peak["workers"] = max(peak["workers"], sum(c.memory_info().rss for c in root.children(recursive=True)))
            except psutil.Error:
                pass
            time.sleep(0.05)
    t0 = time.perf_counter()
    th = threading.Thread(target=sample, daemon=True)
    th.start()
    out, err = p.communicate()
    stop.set()
    th.join()
    res = {"wall_s": round(time.perf_counter() - t0, 2), "client_rss_mib": round(peak["client"] / 2**20),
           "workers_rss_mib": round(peak["workers"] / 2**20), "rc": p.returncode}
    if p.returncode == 0:
        res["timings"] = json.loads(out.strip().splitlines()[-1])
    else:
        res["stderr"] = err[-500:]
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", default=str(HERE.parent.parent / "shared"))
    ap.add_argument("--ranks", type=int, nargs="+", default=[16, 64])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--modes", nargs="+", choices=["local", "cluster"], default=["local", "cluster"])
    args = ap.parse_args()
    from run import scale_kineto
    src = sorted((Path(args.shared) / "bench" / "long4" / "kineto").glob("rank-*.json.gz"))
    work = HERE / "work" / "cluster"
    rows = []
    for n in args.ranks:
        folder = work / f"r{n}"
        files = sorted(folder.glob("*.json*")) if folder.exists() else []  # scale_kineto writes .json
        if len(files) != n:
            files = scale_kineto(src, folder, 1, n // len(src))
        files = [str(f) for f in files]
        modes = (("local", "-"), (f"cluster local:{args.workers}", f"local:{args.workers}"))
        for mode, cluster in [m for m in modes if m[0].split()[0] in args.modes]:
            r = measure([sys.executable, "-c", INGEST, str(work / f"r{n}-{mode.split()[0]}.duckdb"), cluster, *files])
            r.update({"ranks": n, "mode": mode})
            rows.append(r)
            t = r.get("timings", {})
            cross = sum(t.get(k, 0) for k in ("load", "derive", "packs", "critical_path"))
            print(f"{n:>5} ranks  {mode:<18} wall {r['wall_s']:>7.2f} s  map {t.get('read', float('nan')):>6.2f} s  "
                  f"cross-rank {cross:>6.2f} s  client {r['client_rss_mib']:>5} MiB  workers {r['workers_rss_mib']:>5} MiB"
                  + ("" if r["rc"] == 0 else f"  FAILED: {r.get('stderr')}"), flush=True)
    (HERE / "cluster-results.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
