"""`make bench`: traceflow against its peers and the hardware floors, in one run, on the same inputs.

Inputs: ../shared/bench/long4 (4 ranks, Kineto and nsys), and scaled copies made here:
  x4  the same 4 ranks with every step repeated 4 times (times shifted past the end, step
      numbers, correlation ids and External ids offset so nothing collides)
  x16 x4 with the ranks repeated 4 times too (16 ranks; rank ids rewritten)
Each command runs as its own process; wall time and the peak RSS of its whole process tree
(sampled every 20 ms with psutil) are recorded. Results: a table on stdout, bench/results.json.
"""
from __future__ import annotations

import argparse
import gzip
import json
import lzma
import os
import platform
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PY = sys.executable
TRACEFLOW = [PY, "-m", "traceflow.cli"]


def measure(cmd, env=None, cwd=None) -> dict:
    """Wall seconds and peak RSS (MiB) of the command's whole process tree."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd)
    peak = [0]
    stop = threading.Event()

    def sample():
        try:
            root = psutil.Process(p.pid)
        except psutil.NoSuchProcess:
            return
        while not stop.is_set():
            try:
                rss = root.memory_info().rss + sum(c.memory_info().rss for c in root.children(recursive=True))
                peak[0] = max(peak[0], rss)
            except psutil.Error:
                pass
            time.sleep(0.02)
    th = threading.Thread(target=sample, daemon=True)
    th.start()
    out, err = p.communicate()
    stop.set()
    th.join()
    wall = time.perf_counter() - t0
    res = {"wall_s": round(wall, 2), "peak_rss_mib": round(peak[0] / 2**20), "rc": p.returncode}
    if p.returncode != 0:
        res["error"] = (err or out).strip().splitlines()[-1][:300] if (err or out).strip() else "failed"
    res["stdout"] = out[-2000:]
    return res


# --- inputs -----------------------------------------------------------------------------------

def unpack_nsys(src: Path, dst: Path) -> list[Path]:
    dst.mkdir(parents=True, exist_ok=True)
    out = []
    for f in sorted(src.iterdir()):
        name = f.name.replace(".gz", "").replace(".xz", "")
        target = dst / name.replace("long-nsys-", "")
        if not target.exists():
            opener = gzip.open if f.name.endswith(".gz") else lzma.open
            with opener(f, "rb") as i, open(target, "wb") as o:
                shutil.copyfileobj(i, o, 1 << 22)
        out.append(target)
    return out


STEP_OFFSET = 1000       # step k of copy c becomes step k + c * STEP_OFFSET
ID_OFFSET = 10**9        # correlation / External ids of copy c are offset by c * ID_OFFSET


def scale_kineto(src_files, dst: Path, steps: int, ranks: int) -> list[Path]:
    import msgspec
    dst.mkdir(parents=True, exist_ok=True)
    out = []
    # One shift for every rank, so the copies of a step line up across ranks.
    lo = hi = None
    for f in src_files:
        for e in msgspec.json.decode(gzip.open(f).read())["traceEvents"]:
            if isinstance(e.get("ts"), (int, float)):
                lo = e["ts"] if lo is None else min(lo, e["ts"])
                hi = e["ts"] if hi is None else max(hi, e["ts"])
    span = hi - lo + 1000.0
    for rcopy in range(ranks):
        for f in src_files:
            d = msgspec.json.decode(gzip.open(f).read())
            rank = d["distributedInfo"]["rank"] + rcopy * len(src_files)
            target = dst / f"rank-{rank}.pt.trace.json"
            out.append(target)
            if target.exists():
                continue
            evs = d["traceEvents"]
            new = []
            for c in range(steps):
                for e in evs:
                    e2 = dict(e)
                    if "ts" in e2 and isinstance(e2["ts"], (int, float)):
                        e2["ts"] = e2["ts"] + c * span
                    if c:
                        if isinstance(e2.get("name"), str) and e2["name"].startswith("ProfilerStep#"):
                            e2["name"] = f"ProfilerStep#{int(e2['name'][13:]) + c * STEP_OFFSET}"
                        a = e2.get("args")
                        if isinstance(a, dict):
                            a = dict(a)
                            for k in ("correlation", "External id"):
                                if isinstance(a.get(k), int):
                                    a[k] += c * ID_OFFSET
                            e2["args"] = a
                        if e2.get("ph") in ("s", "f") and isinstance(e2.get("id"), int):
                            e2["id"] += c * ID_OFFSET
                    new.append(e2)
            d["traceEvents"] = new
            d["distributedInfo"] = dict(d["distributedInfo"], rank=rank, world_size=len(src_files) * ranks)
            target.write_bytes(msgspec.json.encode(d))
    return out


NSYS_TIME_TABLES = ["CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
                    "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "OSRT_API", "NVTX_EVENTS"]


def scale_nsys(src_files, dst: Path, steps: int, ranks: int) -> list[Path]:
    dst.mkdir(parents=True, exist_ok=True)
    out = []
    # One shift for every rank (in absolute time), so the copies of a step line up across ranks.
    bounds = []
    for f in src_files:
        c = sqlite3.connect(f)
        base = c.execute("select utcEpochNs from TARGET_INFO_SESSION_START_TIME").fetchone()[0]
        lo, hi = c.execute("select min(start), max(end) from CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()
        bounds.append((base + lo, base + hi))
        c.close()
    span = max(b for _, b in bounds) - min(a for a, _ in bounds) + 10**6
    for rcopy in range(ranks):
        for i, f in enumerate(src_files):
            rank = i + rcopy * len(src_files)
            target = dst / f"rank{rank}.sqlite"
            out.append(target)
            if target.exists():
                continue
            shutil.copyfile(f, target)
            c = sqlite3.connect(target)
            tables = {r[0] for r in c.execute("select name from sqlite_master where type='table'")}
            # copy the original rows only: later copies must not copy earlier ones
            last = {t: c.execute(f"select max(rowid) from {t}").fetchone()[0] or 0 for t in NSYS_TIME_TABLES if t in tables}
            for k in range(1, steps):
                for t in NSYS_TIME_TABLES:
                    if t not in tables:
                        continue
                    cols = [r[1] for r in c.execute(f"pragma table_info({t})")]
                    sel = []
                    for col in cols:
                        if col in ("start", "end"):
                            sel.append(f'"{col}" + {k * span}')
                        elif col == "correlationId":
                            sel.append(f"correlationId + {k * ID_OFFSET}")
                        elif col == "text" and t == "NVTX_EVENTS":
                            sel.append(f"CASE WHEN text LIKE 'step %' THEN 'step ' || (CAST(substr(text, 6) AS INTEGER) + {k * STEP_OFFSET}) ELSE text END")
                        else:
                            sel.append(f'"{col}"')
                    rows = f"SELECT {', '.join(sel)} FROM {t} WHERE rowid <= {last[t]}"
                    c.execute(f"INSERT INTO {t} ({', '.join(chr(34) + x + chr(34) for x in cols)}) {rows}")
            # a distinct file: its content hash must differ from the rank it copies
            c.execute("UPDATE TARGET_INFO_SESSION_START_TIME SET utcTime = utcTime || ?", [f" copy{rcopy}"])
            c.commit()
            c.close()
    return out


# --- commands ---------------------------------------------------------------------------------

FLOOR_KINETO = """
import gc, gzip, sys, msgspec
from traceflow.readers.kineto import Meta
gc.disable()
n = 0
for f in sys.argv[1:]:
    data = gzip.open(f).read() if f.endswith('.gz') else open(f, 'rb').read()
    n += len(msgspec.json.decode(data, type=Meta).traceEvents)
print(n)
"""

FLOOR_NSYS = """
import sys, duckdb
from traceflow.readers.nsys import connect_sqlite
TABLES = %r
for f in sys.argv[1:]:
    con = connect_sqlite(f)
    con.execute("SET threads = 2")
    have = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables() WHERE database_name = 'src'").fetchall()}
    for t in TABLES + ["StringIds"]:
        if t in have:
            con.execute(f"CREATE TEMP TABLE x_{t} AS SELECT * FROM src.{t}")
    con.close()
""" % NSYS_TIME_TABLES

TRACEFLOW_INGEST = """
import json, sys, traceflow
r = traceflow.ingest(sys.argv[2:], sys.argv[1])
con = traceflow.connect(sys.argv[1])
n = con.execute("select (select count(*) from gpu_ops) + (select count(*) from host_ops) + (select count(*) from ranges)").fetchone()[0]
print(json.dumps({"timings": r.timings, "events": n}))
"""

HTA = """
import sys, time, json
from hta.trace_analysis import TraceAnalysis
t0 = time.perf_counter()
a = TraceAnalysis(trace_dir=sys.argv[1])
t1 = time.perf_counter()
a.get_temporal_breakdown(visualize=False)
a.get_idle_time_breakdown(visualize=False)
a.get_comm_comp_overlap(visualize=False)
a.get_cuda_kernel_launch_stats(visualize=False)
t2 = time.perf_counter()
print(json.dumps({"parse_s": t1 - t0, "analyses_s": t2 - t1}))
"""


def peers_venv(work: Path) -> Path | None:
    """The peers' own venv. nsys-ai reads with DuckDB's SQLite scanner, which DuckDB downloads at
    first use; offline, it is taken from the scanner's PyPI package instead: DuckDB is pinned to
    the version traceflow uses (nsys-ai needs duckdb >= 1.0) and the extension is put where DuckDB
    looks for installed ones, under PEERS_HOME."""
    import duckdb
    venv = work / "peers-venv"
    py = venv / "bin" / "python"
    stamp = venv / f".peers-{duckdb.__version__}"
    if not stamp.exists():
        if not py.exists():
            r = subprocess.run(["python3.11", "-m", "venv", str(venv)], capture_output=True, text=True)
            if r.returncode != 0:
                return None
        r = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "traceinsight==0.6.1", "nsys-ai==0.3.0",
                            f"duckdb=={duckdb.__version__}", f"duckdb-extension-sqlite-scanner=={duckdb.__version__}"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            print("peers: install failed:", r.stderr.strip().splitlines()[-1:], file=sys.stderr)
            return None
        found = sorted(venv.glob(f"lib/python*/site-packages/duckdb_extension_sqlite_scanner/extensions/"
                                 f"v{duckdb.__version__}/sqlite_scanner.duckdb_extension"))
        if found:
            ext_dir = peers_home(work) / ".duckdb" / "extensions" / f"v{duckdb.__version__}" / "linux_amd64"
            ext_dir.mkdir(parents=True, exist_ok=True)
            shutil.copy(found[0], ext_dir / found[0].name)
        stamp.touch()
    return venv


def peers_home(work: Path) -> Path:
    return work / "peers-home"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shared", default=str(ROOT.parent / "shared"))
    ap.add_argument("--scales", default="1,4,16")
    ap.add_argument("--skip-peers", action="store_true")
    ap.add_argument("--big-json", action="store_true", help="also ingest one ~1 GB JSON trace (rank 0, steps repeated 25x)")
    ap.add_argument("--only-big-json", action="store_true", help="just that")
    ap.add_argument("--only-small", action="store_true", help="just the small-job rows (fixed costs)")
    ap.add_argument("--against", metavar="REV", help="also each reader of revision REV side by side with this tree's, "
                    "on long4 inputs without memory events (bench/ab_reader.py: CPU seconds, alternating)")
    ap.add_argument("--work", default=str(HERE / "work"))
    ap.add_argument("--out", default=str(HERE / "results.json"))
    args = ap.parse_args()
    shared = Path(args.shared).resolve() / "bench" / "long4"  # absolute: the peers' folders link to these files
    if not shared.is_dir():
        sys.exit(f"bench inputs not found at {shared} (give --shared)")
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    scales = [int(s) for s in args.scales.split(",")]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    results = {"machine": {"cpus": os.cpu_count(), "memory_gib": round(psutil.virtual_memory().total / 2**30),
                           "python": platform.python_version(), "platform": platform.platform()},
               "inputs": {}, "runs": {}}

    kineto_gz = sorted(shared.glob("kineto/*.json.gz"))

    def run(key, cmd, env=env):
        print(f"  {key} ...", end="", flush=True)
        r = measure(cmd, env=env)
        print(f" {r['wall_s']} s, {r['peak_rss_mib']} MiB" + (f"  ERROR {r.get('error')}" if r["rc"] else ""), flush=True)
        results["runs"][key] = r
        return r

    small_rows(run, work, args)
    if args.only_small:
        for r in results["runs"].values():
            r.pop("stdout", None)
        Path(args.out).write_text(json.dumps(results, indent=1))
        print(table(results))
        return

    if args.big_json or args.only_big_json:
        print("making one ~1 GB JSON trace (rank 0, 25x steps)...", flush=True)
        big = scale_kineto(kineto_gz[:1], work / "big", 25, 1)
        mib = round(os.path.getsize(big[0]) / 2**20)
        results["inputs"]["kineto 1 GB file"] = {"files": 1, "mib": mib}
        r = run("traceflow kineto one 1 GB file: ingest+packs+critical path", [PY, "-c", TRACEFLOW_INGEST, str(work / "big.duckdb"), str(big[0])])
        if r["rc"] == 0:
            r.update(json.loads(r["stdout"].strip().splitlines()[-1]))
        if args.only_big_json:
            for r in results["runs"].values():
                r.pop("stdout", None)
            Path(args.out).write_text(json.dumps(results, indent=1))
            print(table(results))
            return
    nsys1 = unpack_nsys(shared / "nsys", work / "x1" / "nsys")
    inputs = {("kineto", 1): [str(p) for p in kineto_gz], ("nsys", 1): [str(p) for p in nsys1]}
    for s in scales:
        if s == 1:
            continue
        steps, ranks = (4, 1) if s == 4 else (4, s // 4)
        print(f"making x{s} inputs ({steps}x steps, {ranks}x ranks)...", flush=True)
        inputs[("kineto", s)] = [str(p) for p in scale_kineto(kineto_gz, work / f"x{s}" / "kineto", steps, ranks)]
        inputs[("nsys", s)] = [str(p) for p in scale_nsys(nsys1, work / f"x{s}" / "nsys", steps, ranks)]
    if args.against:
        results["against"] = ab_rows(args.against, work, [inputs[("nsys", 1)][1], inputs[("kineto", 1)][0]])
    for (fmt, s), files in inputs.items():
        results["inputs"][f"{fmt} x{s}"] = {"files": len(files), "mib": round(sum(os.path.getsize(f) for f in files) / 2**20)}

    # Floors, on the x1 inputs
    run("floor kineto: gzip -dc", ["bash", "-c", "for f in \"$@\"; do gzip -dc \"$f\" > /dev/null; done", "_", *inputs[("kineto", 1)]])
    run("floor kineto: gzip -dc + msgspec decode", [PY, "-c", FLOOR_KINETO, *inputs[("kineto", 1)]])
    run("floor nsys: table scan", [PY, "-c", FLOOR_NSYS, *inputs[("nsys", 1)]])

    # traceflow at every scale
    for (fmt, s), files in inputs.items():
        db = work / f"tf-{fmt}-x{s}.duckdb"
        r = run(f"traceflow {fmt} x{s}: ingest+packs+critical path", [PY, "-c", TRACEFLOW_INGEST, str(db), *files])
        if r["rc"] == 0:
            r.update(json.loads(r["stdout"].strip().splitlines()[-1]))
            r["events_per_s"] = round(r["events"] / r["wall_s"])
        if s == 1:
            run(f"traceflow {fmt} x{s}: report", [*TRACEFLOW, "report", str(db), "-o", str(work / f"report-{fmt}.html")])
            run(f"traceflow {fmt} x{s}: annotate (Perfetto trace)",
                [*TRACEFLOW, "annotate", str(db), "-o", str(work / f"job-{fmt}.perfetto-trace")])
            # issue 19's target: a diff of two long4 databases in under 1 s
            run(f"traceflow {fmt} x{s}: diff against itself", [*TRACEFLOW, "diff", str(db), str(db), "--format", "json"])
            # issue 20's target: a scenario on one step of long4 in under 1 s
            import duckdb
            with duckdb.connect(str(db), read_only=True) as c:
                steps = [r[0] for r in c.execute("SELECT DISTINCT step FROM tf_internal.step_windows ORDER BY step").fetchall()]
            if steps:
                run(f"traceflow {fmt} x{s}: whatif, one step", [*TRACEFLOW, "whatif", str(db), "--step", str(steps[len(steps) // 2]),
                                                                "--scale-kind", "compute=0.5", "--format", "json"])

    # Peers on the x1 inputs
    if not args.skip_peers:
        venv = peers_venv(work)
        if venv:
            hta_dir = work / "hta-x1"
            hta_dir.mkdir(exist_ok=True)
            for f in inputs[("kineto", 1)]:
                link = hta_dir / Path(f).name
                if link.is_symlink() and not link.exists():
                    link.unlink()  # a link to where the inputs no longer are (a relative --shared once)
                if not link.exists():
                    os.symlink(os.path.abspath(f), link)
            r = run("HTA: parse + 4 analyses (kineto x1)", [str(venv / "bin" / "python"), "-c", HTA, str(hta_dir)])
            if r["rc"] == 0:
                r.update(json.loads(r["stdout"].strip().splitlines()[-1]))
            script = " && ".join(
                f"{venv}/bin/nsys-ai warm {f} > /dev/null && " + " && ".join(
                    f"{venv}/bin/nsys-ai skill run {s} {f} --format json > /dev/null"
                    for s in ("gpu_idle_gaps", "overlap_breakdown", "kernel_launch_overhead"))
                for f in inputs[("nsys", 1)])
            for f in inputs[("nsys", 1)]:  # its cache sits beside the profile: start cold
                for c in Path(f).parent.glob(Path(f).stem + "*"):
                    if c != Path(f) and c.is_dir():
                        shutil.rmtree(c, ignore_errors=True)
            run("nsys-ai: cache + 3 analyses (nsys x1)", ["bash", "-c", script],
                env=dict(os.environ, HOME=str(peers_home(work))))

    for r in results["runs"].values():
        r.pop("stdout", None)
    Path(args.out).write_text(json.dumps(results, indent=1))
    print()
    print(table(results))


def ab_rows(rev: str, work: Path, files: list[str]) -> dict:
    """Issue 35's criterion, that traces without memory events read as fast as before: the readers of
    `rev` (git archive, unpacked under work/) and of this tree on the same files, alternating."""
    old = work / f"tree-{rev}"
    if not old.is_dir():
        old.mkdir(parents=True)
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(old)], input=archive, check=True)
    out = {}
    for f in files:
        r = subprocess.run([PY, str(HERE / "ab_reader.py"), str(old), str(ROOT), f, "--reps", "6"],
                           capture_output=True, text=True, check=True)
        out[Path(f).name] = r.stdout.strip().splitlines()[-2:]  # the two medians
        print(f"  reader, {rev} vs this tree, {Path(f).name}:", *out[Path(f).name], sep="\n    ", flush=True)
    return out


SMALL = ROOT / "fixtures" / "ddp4_sync_stall"  # the bundled real 4-rank job: 16 k GPU ops, 3.2 MB of gzip


def small_rows(run, work: Path, args):
    """Small jobs are most jobs: fixed costs side by side with HTA on the same small input, and the
    CLI's own start (`--help`, a query on an existing database)."""
    files = sorted(str(p) for p in SMALL.glob("rank-*.json.gz"))
    db = work / "small.duckdb"
    run("traceflow small (4-rank kineto, bundled): ingest+packs+critical path", [*TRACEFLOW, "ingest", *files, "-o", str(db)])
    run("traceflow --help", [*TRACEFLOW, "--help"])
    run("traceflow query small steps", [*TRACEFLOW, "query", str(db), "steps", "--format", "csv"])
    if args.skip_peers:
        return
    py = os.environ.get("TRACEFLOW_HTA_PYTHON") or str(ROOT / ".peers-venv" / "bin" / "python")
    if not os.path.exists(py):
        venv = peers_venv(work)
        py = str(venv / "bin" / "python") if venv else None
    if py:
        hta_dir = work / "hta-small"
        hta_dir.mkdir(exist_ok=True)
        for f in files:
            link = hta_dir / Path(f).name
            if link.is_symlink() and not link.exists():
                link.unlink()
            if not link.exists():
                os.symlink(os.path.abspath(f), link)
        r = run("HTA small: parse + 4 analyses", [py, "-c", HTA, str(hta_dir)])
        if r["rc"] == 0:
            r.update(json.loads(r["stdout"].strip().splitlines()[-1]))


def table(res) -> str:
    R = res["runs"]

    def g(k, f="wall_s"):
        return R.get(k, {}).get(f)
    lines = ["| run | wall (s) | peak RSS (MiB) |", "|---|---:|---:|"]
    for k, v in R.items():
        lines.append(f"| {k} | {v['wall_s']} | {v['peak_rss_mib']} |" + (" failed" if v.get("rc") else ""))
    lines.append("")
    ratios = []
    tk, hta = g("traceflow kineto x1: ingest+packs+critical path"), g("HTA: parse + 4 analyses (kineto x1)")
    if tk and hta and not R["HTA: parse + 4 analyses (kineto x1)"].get("rc"):
        ratios.append(f"Kineto x1 vs HTA: time {tk / hta:.3f} (target <= 0.1), peak RSS "
                      f"{g('traceflow kineto x1: ingest+packs+critical path', 'peak_rss_mib') / g('HTA: parse + 4 analyses (kineto x1)', 'peak_rss_mib'):.2f} (target <= 0.5)")
    ts, hs = g("traceflow small (4-rank kineto, bundled): ingest+packs+critical path"), g("HTA small: parse + 4 analyses")
    if ts and hs and not R["HTA small: parse + 4 analyses"].get("rc"):
        ratios.append(f"small job vs HTA: time {ts / hs:.3f} (target <= 0.2)")
    for k in ("traceflow --help", "traceflow query small steps"):
        if g(k):
            ratios.append(f"{k}: {g(k)} s (target < 0.3)")
    tn, nai = g("traceflow nsys x1: ingest+packs+critical path"), g("nsys-ai: cache + 3 analyses (nsys x1)")
    if tn and nai and not R["nsys-ai: cache + 3 analyses (nsys x1)"].get("rc"):
        ratios.append(f"nsys x1 vs nsys-ai: time {tn / nai:.3f} (target < 1)")
    for fmt, floor in (("kineto", "floor kineto: gzip -dc + msgspec decode"), ("nsys", "floor nsys: table scan")):
        t = R.get(f"traceflow {fmt} x1: ingest+packs+critical path", {}).get("timings", {})
        if t and g(floor):
            ratios.append(f"{fmt} x1 ingest alone (read+load {t['read'] + t['load']:.2f} s) vs floor {g(floor)} s: "
                          f"{(t['read'] + t['load']) / g(floor):.2f} (target <= 2)")
    for fmt in ("kineto", "nsys"):
        a, b = g(f"traceflow {fmt} x1: ingest+packs+critical path"), g(f"traceflow {fmt} x16: ingest+packs+critical path")
        if a and b:
            ratios.append(f"{fmt} x16 / x1 time: {b / a:.1f} (target <= 18), x16 peak RSS "
                          f"{g(f'traceflow {fmt} x16: ingest+packs+critical path', 'peak_rss_mib')} MiB (target < 4096)")
    inputs = "; ".join(f"{k}: {v['files']} files, {v['mib']} MiB" for k, v in res["inputs"].items())
    m = res["machine"]
    return "\n".join(lines + ratios + ["", f"Inputs: {inputs}.",
                                        f"Machine: {m['cpus']} cores, {m['memory_gib']} GiB, Python {m['python']}, {m['platform']}."])


if __name__ == "__main__":
    main()
