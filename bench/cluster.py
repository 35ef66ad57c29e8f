"""`make bench-cluster`: ingest on a Dask LocalCluster against the local ingest, as ranks grow.

Inputs: a real job's rank files (default: the bundled fixtures/ddp2_flops/clean, 2 ranks of a DDP
job, 2.4 MB of JSON each) copied to N ranks at run time (derive_ranks: copy c of source rank r is
rank r + c*k, its world size N, its host clock c µs late; gzipped, as torch writes them with
use_gzip). Each ingest runs as its own process; recorded: wall time, the peak RSS of the client
process alone, of its largest worker process and of all its worker processes together, and the
phases' seconds (read = the per-rank map; load, derive, packs, critical_path = the cross-rank phase
on the client), the bytes on disk (inputs, parts folder, database). Where both modes ran, every
table is compared (EXCEPT ALL both ways); with --sample K, the cluster run's per-rank tables of K
ranks against a local ingest of those K rank files alone (compare_sample).
Results: a table on stdout and bench/cluster-results.json (rows of earlier runs with other inputs kept).

    python bench/cluster.py --ranks 64 256 --workers 2                      # both modes, compared
    python bench/cluster.py --ranks 4096 --modes cluster --sample 8         # the cluster alone, 8 ranks checked
    python bench/cluster.py --ranks 4096 --modes cluster --map-only         # the cluster's map alone (no database)
    python bench/cluster.py --ranks 256 --task-seconds 27                   # one task of 27 rank files, in this process
    make bench-cluster    # 64 and 256 ranks both ways, then 4,096 on the cluster alone; 8 ranks sampled at each
    python bench/cluster.py --source ../shared/bench/long4/kineto --ranks 16 64
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

INGEST = """
import json, sys, traceflow
cluster = sys.argv[2] if sys.argv[2] != "-" else None
job = traceflow.ingest(sys.argv[3:], sys.argv[1], cluster=cluster, force=True)
print(json.dumps({k: round(v, 2) for k, v in job.timings.items() if isinstance(v, (int, float))}))
"""

# --map-only: the cluster's map alone (what `ingest --cluster` runs first: one Dask task per batch of
# rank files, cluster.read_all), into a parts folder removed afterwards; the client's phase is not run
MAP_ONLY = """
import json, shutil, sys, tempfile, time
from traceflow import cluster
from traceflow.options import Options
from traceflow.readers.detect import identify
inputs = [identify(p) for p in sys.argv[3:]]
parts = tempfile.mkdtemp(prefix="map-only-", dir=sys.argv[1])
try:
    with cluster.client_for(sys.argv[2]) as client:
        t0 = time.perf_counter()
        cluster.read_all(client, inputs, parts, Options(), lambda *_: None)
        print(json.dumps({"read": round(time.perf_counter() - t0, 2)}))
finally:
    shutil.rmtree(parts)
"""


def derive_ranks(src_files: list[Path], folder: Path, n: int, skew_ns: int = 1000) -> list[Path]:
    """N rank files from the k real ones, edited as bytes (no parse: 4,096 files in ~1 min): copy c
    of rank r says rank r + c*k and world size N in its distributedInfo (and its NCCL kernels' "Rank"
    argument), and its baseTimeNanoseconds is c * skew_ns later (each copy a node with its own clock;
    clock alignment finds it from the collectives). Kept between runs."""
    folder.mkdir(parents=True, exist_ok=True)
    raw = [gzip.decompress(p.read_bytes()) if p.name.endswith(".gz") else p.read_bytes() for p in src_files]
    k = len(raw)
    ranks = [int(re.search(rb'"distributedInfo": *\{[^}]*?"rank": *(\d+)', r).group(1)) for r in raw]
    assert sorted(ranks) == list(range(k)), f"{src_files}: ranks {ranks}, not 0..{k - 1}"
    out = []
    for c in range(max(1, n // k)):
        for r, data in zip(ranks, raw):
            rank = r + c * k
            target = folder / f"rank-{rank}.pt.trace.json.gz"
            out.append(target)
            if target.exists():
                continue

            def info(m, rank=rank):
                return re.sub(rb'"world_size": *\d+', b'"world_size": %d' % n,
                              re.sub(rb'"rank": *\d+', b'"rank": %d' % rank, m.group(0), count=1), count=1)
            d = re.sub(rb'"distributedInfo": *\{[^}]*?\}', info, data, count=1)
            d = re.sub(rb'"Rank": *%d\b' % r, b'"Rank": %d' % rank, d)
            d = re.sub(rb'"baseTimeNanoseconds": *(\d+)', lambda m, c=c: b'"baseTimeNanoseconds": %d' % (int(m.group(1)) + c * skew_ns), d, count=1)
            tmp = target.with_suffix(".tmp")
            tmp.write_bytes(gzip.compress(d, 1))
            tmp.rename(target)
    return sorted(out, key=lambda p: int(p.name.split("-")[1].split(".")[0]))


def measure(cmd) -> dict:
    """Run `cmd`; its wall time and peak RSS, sampled every 50 ms: the process itself (the client),
    the largest of its descendants (a Dask nanny or worker), and all its descendants together."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = {"client": 0, "workers": 0, "worker_max": 0}
    cpu: dict[int, float] = {}  # CPU seconds of each process, as last seen: robust where the machine is shared
    stop = threading.Event()

    def sample():
        root = psutil.Process(p.pid)
        while not stop.is_set():
            try:
                peak["client"] = max(peak["client"], root.memory_info().rss)
                cpu[p.pid] = sum(root.cpu_times()[:2])
                rss = []
                for c in root.children(recursive=True):
                    try:
                        rss.append(c.memory_info().rss)
                        cpu[c.pid] = sum(c.cpu_times()[:2])
                    except psutil.Error:
                        pass
                peak["workers"] = max(peak["workers"], sum(rss))
                peak["worker_max"] = max(peak["worker_max"], max(rss, default=0))
            except psutil.Error:
                pass
            time.sleep(0.05)
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    th = threading.Thread(target=sample, daemon=True)
    th.start()
    out, err = p.communicate()
    stop.set()
    th.join()
    res = {"wall_s": round(time.perf_counter() - t0, 2), "client_rss_mib": round(peak["client"] / 2**20),
           "worker_max_rss_mib": round(peak["worker_max"] / 2**20),
           "workers_rss_mib": round(peak["workers"] / 2**20), "rc": p.returncode,
           "client_cpu_s": round(cpu.get(p.pid, 0), 1), "workers_cpu_s": round(sum(v for k, v in cpu.items() if k != p.pid), 1),
           # the machine's 1-minute load average before and after (2 cores, shared): what the times were taken under
           "load_avg": [round(load, 1), round(os.getloadavg()[0], 1)]}
    if p.returncode == 0:
        res["timings"] = json.loads(out.strip().splitlines()[-1])
    else:
        res["stderr"] = err[-500:]
    return res


def task_seconds(paths: list[Path], times: int = 5) -> float:
    """One cluster task (rank_task.run: read, per-rank derive and analyses, the shards written) on
    the rank files `paths` together, here, in a warm process: the median of `times` runs, in seconds."""
    import statistics
    import tempfile

    from traceflow import rank_task
    from traceflow.readers.detect import identify
    batch, runs = [(i, identify(str(p))) for i, p in enumerate(paths)], []
    with tempfile.TemporaryDirectory(dir=HERE / "work") as parts:
        for _ in range(times + 1):  # the first imports and warms
            t0 = time.perf_counter()
            rank_task.run(batch, parts, None)
            runs.append(time.perf_counter() - t0)
    return statistics.median(runs[1:])


def _tables(con, db: str) -> list[tuple[str, str]]:
    return con.execute("SELECT schema_name, table_name FROM duckdb_tables() WHERE database_name = ? UNION ALL "
                       "SELECT schema_name, view_name FROM duckdb_views() WHERE database_name = ? AND NOT internal "
                       "ORDER BY ALL", [db, db]).fetchall()


def compare_all(a: Path, b: Path) -> dict:
    """Every table and view of both databases, row for row (EXCEPT ALL both ways), with the same
    column types: {"tables": n, "rows": rows of a, "differ": [table, ...]}. A view names its tables
    unqualified, so each is read with its database in use, into memory, before the comparison."""
    import duckdb
    con = duckdb.connect()
    for name, path in (("a", a), ("b", b)):
        con.execute(f"ATTACH '{str(path)}' AS {name} (READ_ONLY)")
    names, other = _tables(con, "a"), _tables(con, "b")
    differ, rows = [], 0
    only = {"a": [f"{s}.{t}" for s, t in names if (s, t) not in other], "b": [f"{s}.{t}" for s, t in other if (s, t) not in names]}
    for s, t in [x for x in names if x in other]:
        for x in ("a", "b"):
            con.execute(f"USE {x}")
            con.execute(f'CREATE OR REPLACE TABLE memory.main.tf_{x} AS FROM {x}."{s}"."{t}"')
        con.execute("USE memory")
        if con.execute("DESCRIBE tf_a").fetchall() != con.execute("DESCRIBE tf_b").fetchall():
            differ.append(f"{s}.{t} (columns)")
            continue
        rows += con.execute("SELECT count(*) FROM tf_a").fetchone()[0]
        if (con.execute("SELECT count(*) FROM (FROM tf_a EXCEPT ALL FROM tf_b)").fetchone()[0]
                or con.execute("SELECT count(*) FROM (FROM tf_b EXCEPT ALL FROM tf_a)").fetchone()[0]):
            differ.append(f"{s}.{t}")
    return {"tables": len(names), "rows": rows, "differ": differ, "only_in_a": only["a"], "only_in_b": only["b"]}


def _rank_relative(con, db: str, table: str, ranks: list[int]) -> str:
    """A per-rank table's rows of `ranks`, as the rank alone gives them: the trace id replaced by the
    rank, ids less the trace's base, times less its clock offset (rank_tables.IDS, TIMES)."""
    from traceflow.rank_tables import HOST_OP_ID_BASE, HOST_OP_IDS_PER_TRACE, IDS, SHARDED, TIMES
    schema, whose = SHARDED[table]
    cols = [r[0] for r in con.execute(f'DESCRIBE {db}.{schema}."{table}"').fetchall()]
    sel = []
    for c in cols:
        if c == "trace_id":
            continue
        if c in TIMES.get(table, ()):
            sel.append(f"s.{c} - m.clock_offset_ns AS {c}")
        elif c in IDS.get(table, {}):
            sel.append(f"s.{c} - m.{IDS[table][c]} AS {c}")
        elif c == "rank":
            continue
        else:
            sel.append(f"s.{c}")
    bases = (f"(SELECT t.trace_id, t.rank, t.clock_offset_ns, {HOST_OP_ID_BASE} + t.trace_id * {HOST_OP_IDS_PER_TRACE} AS host_op_base, "
             f"(SELECT min(op_id) - 1 FROM {db}.main.gpu_ops g WHERE g.trace_id = t.trace_id) AS gpu_op_base "
             f"FROM {db}.main.traces t WHERE t.rank IN ({', '.join(map(str, ranks))}))")
    if whose == "op_id":  # rows of GPU ops: whose they are follows from the op
        on = f"JOIN {db}.main.gpu_ops g ON g.op_id = s.op_id JOIN {bases} m ON m.trace_id = g.trace_id"
    else:
        on = f"JOIN {bases} m ON m.{whose} = s.{whose}"
    return f'SELECT m.rank AS tf_rank, {", ".join(sel)} FROM {db}.{schema}."{table}" s {on}'


def compare_sample(big: Path, small: Path, ranks: list[int]) -> dict:
    """The per-rank tables (rank_tables.SHARDED) of `ranks` in `big` against `small`, a local ingest
    of those ranks' files alone, rank-relative (_rank_relative), EXCEPT ALL both ways. The
    cross-rank tables are not comparable this way (they hold every rank's collectives)."""
    import duckdb

    from traceflow.rank_tables import SHARDED
    con = duckdb.connect()
    for name, path in (("a", big), ("b", small)):
        con.execute(f"ATTACH '{str(path)}' AS {name} (READ_ONLY)")
    differ, rows = [], 0
    for table in SHARDED:
        if not con.execute("SELECT count(*) FROM duckdb_tables() WHERE database_name = 'b' AND table_name = ?", [table]).fetchone()[0]:
            continue
        qa, qb = _rank_relative(con, "a", table, ranks), _rank_relative(con, "b", table, ranks)
        rows += con.execute(f"SELECT count(*) FROM ({qb})").fetchone()[0]
        if (con.execute(f"SELECT count(*) FROM ({qa} EXCEPT ALL {qb})").fetchone()[0]
                or con.execute(f"SELECT count(*) FROM ({qb} EXCEPT ALL {qa})").fetchone()[0]):
            differ.append(table)
    return {"ranks": ranks, "tables": len(SHARDED), "rows": rows, "differ": differ}


def du(*paths: Path) -> int:
    return sum(f.stat().st_size for p in paths for f in ([p] if p.is_file() else p.rglob("*")) if f.is_file())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", default=str(ROOT / "fixtures" / "ddp2_flops" / "clean"),
                    help="a folder of one job's Kineto rank files (rank-*.json[.gz]), ranks 0..k-1")
    ap.add_argument("--ranks", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--modes", nargs="+", choices=["local", "cluster"], default=["local", "cluster"])
    ap.add_argument("--local-max", type=int, default=256, help="the local ingest runs up to this many ranks "
                    "(at 256 ranks it took 4x the cluster run's client memory, and grows with the ranks)")
    ap.add_argument("--sample", type=int, default=0, help="also check the cluster run's per-rank tables of this many "
                    "ranks (the first two, the last, the others at random) against a local ingest of their files alone")
    ap.add_argument("--work", default=str(HERE / "work" / "cluster"))
    ap.add_argument("--results", default=str(HERE / "cluster-results.json"))
    ap.add_argument("--map-only", action="store_true", help="time the cluster's map alone (no database; not compared)")
    ap.add_argument("--task-seconds", type=int, nargs="?", const=1, metavar="K",
                    help="only time one task on K rank files (default 1) of the first --ranks job, in this process")
    args = ap.parse_args()
    src = sorted(p for p in Path(args.source).iterdir() if re.fullmatch(r"rank-\d+\.pt\.trace\.json(\.gz)?", p.name))
    work = Path(args.work)
    if args.task_seconds:
        n = max(args.ranks[0], args.task_seconds)
        files = derive_ranks(src, work / f"{Path(args.source).name}-r{n}", n)[:args.task_seconds]
        s = task_seconds(files)
        print(f"one task on {len(files)} rank file(s): {s:.2f} s, {s / len(files):.3f} s per file (median of 5), "
              f"load average {os.getloadavg()[0]:.1f}")
        return
    results = Path(args.results)
    kept = [r for r in json.loads(results.read_text())] if results.exists() else []
    label = "/".join(Path(args.source).resolve().parts[-2:])  # e.g. ddp2_flops/clean
    rows = []
    for n in args.ranks:
        folder = work / f"{Path(args.source).name}-r{n}"
        t0 = time.perf_counter()
        files = derive_ranks(src, folder, n)
        made_s = time.perf_counter() - t0
        plain = sum(len(gzip.decompress(p.read_bytes())) if p.name.endswith(".gz") else p.stat().st_size for p in src) * (n // len(src))
        print(f"{n} rank files in {folder} ({made_s:.0f} s): {du(*files) / 1e9:.2f} GB on disk, "
              f"{plain / 1e9:.2f} GB of JSON", flush=True)
        done = {}
        for mode in [m for m in args.modes if m == "cluster" or (n <= args.local_max and not args.map_only)]:
            cluster = f"local:{args.workers}" if mode == "cluster" else "-"
            out = work / f"{folder.name}-{mode}.duckdb"
            if args.map_only:
                r = measure([sys.executable, "-c", MAP_ONLY, str(work), cluster, *map(str, files)])
            else:
                r = measure([sys.executable, "-c", INGEST, str(out), cluster, *map(str, files)])
            r.update({"ranks": n, "mode": ("local" if mode == "local" else f"cluster {cluster}") + (" map only" if args.map_only else ""),
                      "source": label, "input_bytes": du(*files), "input_json_bytes": plain,
                      "db_bytes": du(out) if out.exists() else None,
                      "parts_bytes": sum(du(p) for p in work.glob(f"{out.name}.parts-*")) or None,
                      "date": time.strftime("%Y-%m-%d %H:%M", time.gmtime())})
            rows.append(r)
            if r["rc"] == 0 and not args.map_only:
                done[mode] = out
            t = r.get("timings", {})
            cross = sum(t.get(k, 0) for k in ("load", "derive", "packs", "critical_path"))
            print(f"{n:>5} ranks  {r['mode']:<16} wall {r['wall_s']:>8.2f} s  map {t.get('read', float('nan')):>7.2f} s "
                  f"({t.get('read', float('nan')) / n * 1000:.0f} ms/rank)  cross-rank {cross:>6.2f} s  "
                  f"client {r['client_rss_mib']:>5} MiB  largest worker {r['worker_max_rss_mib']:>5} MiB  "
                  f"workers {r['workers_rss_mib']:>5} MiB" + ("" if r["rc"] == 0 else f"  FAILED: {r.get('stderr')}"), flush=True)
        if len(done) == 2:
            rows[-1]["compared_with_local"] = c = compare_all(done["local"], done["cluster"])
            print(f"      every table: {c['tables']} tables, {c['rows']} rows, differing: {c['differ'] or 'none'}; "
                  f"only in the local run: {c['only_in_a'] or 'none'}, only in the cluster run: {c['only_in_b'] or 'none'}", flush=True)
        if args.sample and "cluster" in done:
            pick = sorted({0, 1, n - 1} | set(random.Random(n).sample(range(2, n - 1), max(0, min(args.sample, n) - 3))))
            small = work / f"{folder.name}-sample.duckdb"
            r = measure([sys.executable, "-c", INGEST, str(small), "-", *(str(files[i]) for i in pick)])
            assert r["rc"] == 0, r
            rows[-1]["sample_compared"] = c = compare_sample(done["cluster"], small, pick)
            print(f"      ranks {pick}: {c['rows']} rows of the per-rank tables, differing: {c['differ'] or 'none'}", flush=True)
        keys = {(r["ranks"], r["mode"], r.get("source")) for r in rows}
        results.write_text(json.dumps([r for r in kept if (r["ranks"], r["mode"], r.get("source")) not in keys] + rows, indent=1) + "\n")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
