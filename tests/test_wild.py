"""Issue 33: the wild corpus. Public traces (tests/wild/manifest.json: source repository, path, commit,
licence, sha256 of each), kept outside the repository under $TRACEFLOW_WILD (default ../shared/wild);
each ingested and checked against its raw file, read here with plain Python:

- counts: the GPU ops read = the raw file's GPU events with usable times (docs/bad-input.md says
  which are dropped; a drop is counted in the warnings);
- conservation: per rank, the step rows' busy time = the union of the raw GPU intervals; rows tile
  the timeline and every row's identity holds (test_step_attribution.check_conservation);
- steps: a Kineto trace's ProfilerStep#N annotations = its steps; no step window longer than the capture;
- communication: NCCL/RCCL kernel time = the raw sum of kernels so named; DeepEP's likewise;
- attribution validity: every GPU op's CPU op contains, on its thread, the runtime call that launched it
  (the call found in the raw file by its correlation id);
- a trace with no GPU work at all (an nsys export of CPU sampling only) is refused: exit 3, one line.
"""
from __future__ import annotations

import collections
import gzip
import json
import math
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import WILD, WILD_MANIFEST, connect, wild_file
from intervals import measure
from rocm_raw import csv_raw, kind_of, rocpd_raw, rocprof_raw, rpd_raw
from test_step_attribution import check_conservation

import traceflow
from traceflow.cli import main

MANIFEST = WILD_MANIFEST
JOBS: dict[str, list[dict]] = collections.defaultdict(list)
for _e in MANIFEST:
    # "part": a file read with another (a rocprofv3 CSV run's API trace: tests/test_rocm.py); "nsys": an
    # .nsys-rep, read only where nsys is (test_nsys_rep_reads_as_its_sqlite_export)
    if _e["expect"] not in ("part", "nsys"):
        JOBS[_e["job"]].append(_e)

needs_wild = pytest.mark.skipif(not WILD.is_dir(), reason=f"wild corpus not found at {WILD} (set TRACEFLOW_WILD; "
                                "tests/wild/manifest.json names every file and where it comes from)")
GPU_CATS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset", "Kernel": "kernel",
            "Memcpy": "memcpy", "Memset": "memset"}
NCCL = re.compile(r"^\s*(void\s+)?(nccl|rccl)", re.I)
DEEPEP = re.compile(r"(deep_ep|dpsk::ep)::(internode|intranode)", re.I)
SLACK_NS = 20_000  # a CPU op moved onto the runtime calls' clock is placed to within a few us (host_clock.py)


def test_manifest():
    """At least 40 traces from at least 12 sources, each with provenance and licence."""
    assert len(MANIFEST) >= 40 and len({e["repo"] for e in MANIFEST}) >= 12
    for e in MANIFEST:
        assert e["repo"] and e["path"] and len(e["commit"]) == 40 and e["licence"] and len(e["sha256"]) == 64


_file = wild_file


# --- the raw side -------------------------------------------------------------------------------

def _ns(v) -> int:
    """us -> ns as written: the integer part and the fraction apart (us since the epoch times 1000
    is past float precision)."""
    ip = math.floor(v)
    return int(ip) * 1000 + round((v - ip) * 1000)


def _usable(e) -> bool:
    """What the reader keeps (docs/bad-input.md): numeric ts and dur, finite, dur >= 0, ts >= 0."""
    ts, dur = e.get("ts"), e.get("dur", 0)
    return (isinstance(ts, (int, float)) and not isinstance(ts, bool) and isinstance(dur, (int, float))
            and not isinstance(dur, bool) and math.isfinite(ts) and math.isfinite(dur) and dur >= 0 and 0 <= ts < 9e15)


def kineto_raw(path: Path) -> dict:
    raw = path.read_bytes()
    d = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    base = int(d.get("baseTimeNanoseconds") or 0)
    gpu, runtime, cpu, steps, span = [], {}, set(), set(), [None, None]
    # TraceLens's fused file: each event's args.rank names its rank (its GPU ops and steps, per rank)
    by_rank: dict = collections.defaultdict(lambda: {"gpu": [], "steps": set()})
    xla = _xla_lines(d["traceEvents"])
    for e in d["traceEvents"]:
        if not isinstance(e, dict) or e.get("ph") != "X" or not _usable(e):
            continue
        a, b = base + _ns(e["ts"]), base + _ns(e["ts"]) + _ns(e.get("dur", 0))
        span = [a if span[0] is None else min(span[0], a), b if span[1] is None else max(span[1], b)]
        cat, args = e.get("cat"), e.get("args") if isinstance(e.get("args"), dict) else {}
        if xla is not None:  # a JAX / XLA trace: the process and thread say what a row is, not its cat
            line = xla.get((e.get("pid"), e.get("tid")))
            if line == "gpu":
                gpu.append((a, b, str(e.get("name")), e.get("bind_id")))
            elif line == "host" and cat == "gpu_launch":
                runtime[None, e.get("bind_id")] = (e.get("tid"), a, b)
            elif line == "host":
                cpu.add((str(e.get("tid")), str(e.get("name")), a, b))
            continue
        rank = args.get("rank")
        if cat in GPU_CATS:
            gpu.append((a, b, str(e.get("name")), args.get("correlation")))
            if rank is not None:
                by_rank[rank]["gpu"].append((a, b))
        elif cat in ("cuda_runtime", "cuda_driver", "Runtime"):
            runtime[None, args.get("correlation")] = (e.get("tid"), a, b)
        elif cat in ("cpu_op", "Operator"):
            cpu.add((str(e.get("tid")), str(e.get("name")), a, b))
        m = re.fullmatch(r"ProfilerStep#(\d+)", str(e.get("name")))
        if m and cat != "gpu_user_annotation":
            steps.add(int(m.group(1)))
            if rank is not None:
                by_rank[rank]["steps"].add(int(m.group(1)))
    return {"gpu": gpu, "runtime": runtime, "cpu": cpu, "steps": steps, "span": span, "by_rank": dict(by_rank)}


def _xla_lines(events: list) -> dict | None:
    """A JAX / XLA trace viewer file (process `/device:GPU:N` or TPU:N, `/host:CPU`): (pid, tid) ->
    'gpu' (a `Stream #N` thread; on a device without streams, a TPU, its `XLA Ops`) or 'host'; None
    for any other trace."""
    procs = {e.get("pid"): str(e["args"].get("name")) for e in events if isinstance(e, dict) and e.get("ph") == "M"
             and e.get("name") == "process_name" and isinstance(e.get("args"), dict)}
    devices = {p for p, n in procs.items() if re.search(r"/device:(GPU|TPU):\d+$", n)}
    if not devices:
        return None
    hosts = {p for p, n in procs.items() if n.endswith("/host:CPU")}
    threads = {(e.get("pid"), e.get("tid")): str(e["args"].get("name")) for e in events if isinstance(e, dict)
               and e.get("ph") == "M" and e.get("name") == "thread_name" and isinstance(e.get("args"), dict)}
    streams = {p for (p, _), n in threads.items() if p in devices and n.startswith("Stream #")}
    out: dict = {}
    for (p, t), n in threads.items():
        if p in devices and (n.startswith("Stream #") or (n.startswith("XLA Ops") and p not in streams)):
            out[p, t] = "gpu"
    for e in events:
        if isinstance(e, dict) and e.get("pid") in hosts:
            out[e.get("pid"), e.get("tid")] = "host"
    return out


def nsys_raw(path: Path) -> dict:
    c = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    tables = {r[0] for r in c.execute("select name from sqlite_master where type = 'table'")}
    cols = {t: {r[1] for r in c.execute(f"pragma table_info({t})")} for t in tables}
    names = dict(c.execute("select id, value from StringIds")) if "StringIds" in tables else {}
    base = 0  # nsys times are ns after the session start; its wall clock, where the export has it
    if "utcEpochNs" in cols.get("TARGET_INFO_SESSION_START_TIME", ()):
        base = (c.execute("select utcEpochNs from TARGET_INFO_SESSION_START_TIME").fetchone() or (0,))[0] or 0
    gpu = []
    # several processes in one export: each process's GPU ops (globalPid's pid bits), which a rank must hold
    by_pid: dict = collections.defaultdict(lambda: {"gpu": [], "steps": set()})
    for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
        if t in tables:
            name = "demangledName" if t.endswith("KERNEL") else "NULL"
            corr = "correlationId" if "correlationId" in cols[t] else "NULL"
            pid = "(globalPid >> 24) & 16777215" if "globalPid" in cols[t] else "NULL"
            for a, b, n, k, p in c.execute(f'select start, "end", {name}, {corr}, {pid} from {t} where "end" >= start and start >= 0'):
                gpu.append((base + a, base + b, names.get(n, "") if t.endswith("KERNEL") else "", k))
                by_pid[p]["gpu"].append((base + a, base + b))
    runtime: dict = {}
    calls: list = []  # each CUDA call's duration, once
    if "CUPTI_ACTIVITY_KIND_RUNTIME" in tables and "correlationId" in cols["CUPTI_ACTIVITY_KIND_RUNTIME"]:
        # correlation ids are per process: two processes in one export repeat them
        g = "globalTid" in cols["CUPTI_ACTIVITY_KIND_RUNTIME"]
        tid, pid = ("globalTid & 16777215", "(globalTid >> 24) & 16777215") if g else ("NULL", "NULL")
        rows = c.execute(f'select correlationId, {pid}, {tid}, start, "end", nameId from CUPTI_ACTIVITY_KIND_RUNTIME '
                         'where start >= 0 and "end" >= start order by "end" - start desc').fetchall()
        for k, p, t, a, b, n in rows:
            # a call is stored once; nsys 2022.2 writes it twice, an inner row (`cudaMemcpy_v3020`) inside the
            # outer (`cudaMemcpy`) with the same thread and correlation id: one call (the outer, the longer)
            name = re.sub(r"_v\d+$", "", str(names.get(n, "")))
            first = runtime.get((p, k))
            if first is not None and first[0] == t and first[3] == name and first[1] <= base + a and base + b <= first[2]:
                continue
            runtime.setdefault((p, k), (t, base + a, base + b, name))
            calls.append(b - a)
    span = [min((g[0] for g in gpu), default=None), max((g[1] for g in gpu), default=None)]
    return {"gpu": gpu, "runtime": runtime, "calls": calls, "cpu": None, "steps": set(), "span": span,
            "by_pid": dict(by_pid) if len(by_pid) > 1 else {}}


def raw(path: Path) -> dict:
    if (rocm := kind_of(path)) is not None:  # ROCm's SQLite profiles (tests/rocm_raw.py), by their tables
        return {"rocpd": rocpd_raw, "rpd": rpd_raw, "rocprof": rocprof_raw, "csv": csv_raw}[rocm](path)
    return nsys_raw(path) if path.suffix == ".sqlite" else kineto_raw(path)


def oracles(r: dict) -> dict:
    """The figures a manifest entry records for its file (its "oracles"), from the raw side."""
    gpu = r["gpu"]
    return {"gpu_ops": len(gpu), "busy_ns": measure([(a, b) for a, b, _, _ in gpu]),
            "kernel_ns": r.get("kernel_ns"), "comm_ns": sum(b - a for a, b, n, _ in gpu if NCCL.match(n)),
            "steps": len(r["steps"])}


# --- the checks ----------------------------------------------------------------------------------

@needs_wild
@pytest.mark.parametrize("job", sorted(JOBS), ids=str)
def test_wild_trace(job, tmp_path):
    entries = JOBS[job]
    files = [_file(e) for e in entries]
    db_path = tmp_path / "w.duckdb"
    if entries[0]["expect"] == "refused":
        r = CliRunner().invoke(main, ["ingest", *map(str, files), "-o", str(db_path)])
        lines = r.stderr.strip().splitlines()
        assert r.exit_code == 3 and len(lines) == 1 and str(files[0]) in lines[0], (r.exit_code, r.stderr)
        return
    res = traceflow.ingest([str(f) for f in files], str(db_path))
    db = connect(db_path)
    if db.execute("select count(*) from gpu_ops").fetchone()[0]:
        check_conservation(db)
    traces = db.execute("select trace_id, rank, source_path, pid, cpu_clock_offset_ns, clock_offset_ns, "
                        "cpu_clock_consistent from traces").fetchall()
    for f in files:
        r = raw(f)
        mine = [t for t in traces if t[2] == str(f)]
        assert mine, f
        entry = next(e for e in entries if wild_file(e) == f)
        if "oracles" in entry:  # the manifest's figures are the raw file's, as this test reads it
            assert oracles(r) == entry["oracles"], (f.name, oracles(r), entry["oracles"])
        ids = [t[0] for t in mine]
        q = ",".join(map(str, ids))
        # counts
        n_db = db.execute(f"select count(*) from gpu_ops where trace_id in ({q})").fetchone()[0]
        assert n_db == len(r["gpu"]), (f.name, n_db, len(r["gpu"]), res.warnings)
        # a fused file: one process per args.rank, each with its own GPU ops, busy time and steps
        by_rank = r.get("by_rank") or {}
        if by_rank:
            assert sorted(t[1] for t in mine) == sorted(by_rank), (f.name, [t[1] for t in mine])
            for rank, rr in by_rank.items():
                n, busy, steps = db.execute(f"""select (select count(*) from gpu_ops where rank = {rank}),
                                               (select sum(busy_ns) from step_breakdown where rank = {rank}),
                                               (select count(*) from steps where rank = {rank})""").fetchone()
                assert (n, busy or 0) == (len(rr["gpu"]), measure(rr["gpu"])), (f.name, rank)
                assert not rr["steps"] or steps == len(rr["steps"]), (f.name, rank, steps, rr["steps"])
        # an nsys export of several processes: one rank per process with GPU work (docs/formats.md), each
        # holding its own process's GPU ops and busy time
        for pid, pr in (r.get("by_pid") or {}).items():
            rank = next((t[1] for t in mine if t[3] == pid), None)
            assert rank is not None, (f.name, "a process with GPU work is no rank", pid)
            n, busy = db.execute(f"""select (select count(*) from gpu_ops where rank = {rank}),
                                     (select sum(busy_ns) from step_breakdown where rank = {rank})""").fetchone()
            assert (n, busy) == (len(pr["gpu"]), measure(pr["gpu"])), (f.name, pid, rank)
        # conservation against the raw file (one process per file; a file of several is checked as a whole)
        if len(mine) == 1:
            busy = db.execute(f"select sum(busy_ns) from step_breakdown where rank = {mine[0][1]}").fetchone()[0] or 0
            assert busy == measure([(a, b) for a, b, _, _ in r["gpu"]]), f.name
        # CUDA calls, each once (nsys: a call an export stores twice is one call)
        if r.get("calls") is not None and f.suffix == ".sqlite":
            n_calls, t_calls = db.execute(f"""select count(*), coalesce(sum(end_ns - start_ns), 0) from host_ops
                                              where trace_id in ({q}) and kind in ('cuda_runtime', 'cuda_driver')""").fetchone()
            assert (n_calls, t_calls) == (len(r["calls"]), sum(r["calls"])), (f.name, n_calls, len(r["calls"]))
        # communication
        nccl_db = db.execute(f"""select coalesce(sum(end_ns - start_ns), 0) from gpu_ops where trace_id in ({q})
                                 and category = 'communication' and regexp_matches(name, '(?i)^\\s*(void\\s+)?(nccl|rccl)')""").fetchone()[0]
        assert nccl_db == sum(b - a for a, b, n, _ in r["gpu"] if NCCL.match(n)), f.name
        ep_db = db.execute(f"""select coalesce(sum(end_ns - start_ns), 0) from gpu_ops where trace_id in ({q})
                               and category = 'communication' and regexp_matches(name, '(?i)(deep_ep|dpsk::ep)::(internode|intranode)')""").fetchone()[0]
        assert ep_db == sum(b - a for a, b, n, _ in r["gpu"] if DEEPEP.search(n)), f.name
        if r.get("kernel_ns") is not None:
            k_db = db.execute(f"""select coalesce(sum(end_ns - start_ns), 0) from gpu_ops
                                  where trace_id in ({q}) and kind = 'kernel'""").fetchone()[0]
            assert k_db == r["kernel_ns"], f.name
        # steps
        if r["steps"] and not by_rank:
            got = db.execute(f"select count(*) from steps where rank in (select rank from traces where trace_id in ({q}))").fetchone()[0]
            assert got == len(r["steps"]), (f.name, got, sorted(r["steps"]))
        # no window longer than the capture
        if r["span"][0] is not None:
            longest = db.execute(f"""select coalesce(max(end_ns - start_ns), 0) from tf_internal.step_windows
                                     where rank in (select rank from traces where trace_id in ({q}))""").fetchone()[0]
            assert longest <= r["span"][1] - r["span"][0], (f.name, longest, r["span"])
        # attribution validity
        _check_links(db, q, r, mine, f)


def _check_links(db, q, r, mine, f):
    """Every GPU op's CPU op, as recorded in the raw file, contains the launch call (found in the raw
    file by correlation id) on the call's thread. DB times are the recorded ones plus the rank's clock
    offset, and for CPU ops plus the CPU-clock offset (host_clock.py), undone here."""
    off = {t[0]: (t[5] or 0, t[4] or 0) for t in mine}
    pid = {t[0]: t[3] if f.suffix == ".sqlite" or kind_of(f) else None for t in mine}
    rows = db.execute(f"""select g.trace_id, g.correlation_id, h.tid, h.name, h.start_ns, h.end_ns
                          from gpu_ops g join host_ops h on h.op_id = g.cpu_op_id
                          where g.trace_id in ({q})""").fetchall()
    bad = []
    for trace_id, corr, tid, name, a, b in rows:
        call = r["runtime"].get((pid[trace_id], corr))
        assert call is not None, (f.name, "a GPU op linked to a CPU op has no runtime call in the file", corr)
        ctid, ca, cb = call[:3]
        clock, cpu = off[trace_id]
        a1, b1 = a - clock, b - clock            # on the runtime calls' clock
        slack = SLACK_NS if cpu else 0
        if r["cpu"] is not None:                 # Kineto: the CPU op is one of the file's
            assert (str(tid), name, a1 - cpu, b1 - cpu) in r["cpu"], (f.name, "the CPU op is not in the file", name, a1 - cpu)
        if not (str(ctid) == str(tid) and a1 - slack <= ca and cb <= b1 + slack):
            bad.append((corr, name, a1, b1, call))
    assert not bad, (f.name, f"{len(bad)} of {len(rows)} GPU ops charged to a CPU op that does not contain their launch", bad[:3])


# the Kineto categories traceflow reads, and those a CPU-only trace holds besides CPU ops
READ_OR_HOST = {"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset", "cuda_runtime", "cuda_driver",
                "Runtime", "cpu_op", "Operator", "python_function", "user_annotation", "gpu_user_annotation",
                "Trace", "overhead", "cpu_instant_event"}


@needs_wild
@pytest.mark.parametrize("name", ["hta/mtia_inference_trace/", "hta/mtia_trace_single_rank/", "hta/cpu_only/"])
def test_an_accelerator_not_read_is_not_called_cpu_only(name, tmp_path):
    """HTA's MTIA traces: the device's work is `mtia_ccp_events`, launched by `mtia_runtime` calls,
    neither of which traceflow reads. The ingest and the verdict name what was not read, with the
    raw file's counts of complete events, instead of "CPU-only" / "no GPU work was recorded"; a
    real CPU-only trace still says CPU-only."""
    e = next(x for x in MANIFEST if x["file"].startswith(name))
    path = wild_file(e)
    raw: dict[str, int] = {}
    for ev in json.load(gzip.open(path))["traceEvents"]:
        if ev.get("ph") == "X" and ev.get("cat") and ev["cat"] not in READ_OR_HOST:
            raw[ev["cat"]] = raw.get(ev["cat"], 0) + 1
    r = subprocess.run([sys.executable, "-m", "traceflow", "postmortem", str(path), "-o", str(tmp_path / "pm")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    if raw:
        top = sorted(raw.items(), key=lambda x: (-x[1], x[0]))[:2]
        for cat, n in top:
            assert f"{cat} ({n:,})" in r.stderr and f"{cat} ({n:,})" in r.stdout, (cat, n, r.stderr, r.stdout)
        assert "CPU-only" not in r.stderr and "No GPU work was recorded" not in r.stdout
    else:
        assert "CPU-only" in r.stderr


FUSED = [e for e in MANIFEST if e.get("derived_from")]


@needs_wild
@pytest.mark.parametrize("entry", FUSED, ids=lambda e: e["file"])
def test_fused_file_reads_as_its_ranks(entry, tmp_path):
    """TraceLens's fused file (TraceFuse: every event's args.rank names its rank) is read as its ranks:
    rank k's GPU op count, busy union, kernel time and communication time equal a plain reading of the
    per-rank file TraceFuse took as rank k, and rank k states its rank (args.rank), not file order."""
    path = _file(entry)
    sources = [_file(next(x for x in MANIFEST if x["file"] == f)) for f in entry["derived_from"]]
    db_path = tmp_path / "f.duckdb"
    traceflow.ingest([str(path)], str(db_path))
    db = connect(db_path)
    got = dict(db.execute("select rank, rank_source from traces").fetchall())
    assert got == {k: "args.rank" for k in range(len(sources))}, got
    for rank, src in enumerate(sources):
        r = kineto_raw(src)
        kernels = [(_ns(e["ts"]), _ns(e["dur"])) for e in _events(src) if e.get("ph") == "X"
                   and e.get("cat") in ("kernel", "Kernel") and _usable(e)]
        n, busy, kernel, comm = db.execute(f"""select count(*), (select sum(busy_ns) from step_breakdown where rank = {rank}),
            coalesce(sum(end_ns - start_ns) filter (where kind = 'kernel'), 0),
            coalesce(sum(end_ns - start_ns) filter (where category = 'communication'
                     and regexp_matches(name, '(?i)^\\s*(void\\s+)?(nccl|rccl)')), 0)
            from gpu_ops where rank = {rank}""").fetchone()
        assert n == len(r["gpu"]) and n > 0, (rank, n, len(r["gpu"]))
        assert busy == measure([(a, b) for a, b, _, _ in r["gpu"]]), rank
        assert kernel == sum(d for _, d in kernels), rank
        assert comm == sum(b - a for a, b, name, _ in r["gpu"] if NCCL.match(name)), rank


def _events(path: Path) -> list:
    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)["traceEvents"]


# issue 46: the formats read since the corpus began (a fused file, JAX / XLA trace viewer JSON)
NEW_FORMATS = [e for e in MANIFEST if e.get("source") in ("tracelens-fused", "xla")]


@needs_wild
@pytest.mark.parametrize("entry", NEW_FORMATS, ids=lambda e: e["file"])
def test_postmortem_runs_on_each_new_format(entry, tmp_path):
    """`traceflow postmortem` on a real file of each new format: exit 0, its three outputs written, and
    the database's GPU op count the raw file's (the plain reader above)."""
    path = _file(entry)
    out = tmp_path / "pm"
    r = subprocess.run([sys.executable, "-m", "traceflow", "postmortem", str(path), "-o", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert {p.name for p in out.iterdir()} >= {"report.html", "job.perfetto-trace", "job.duckdb"}
    db = connect(out / "job.duckdb")
    fmt = "xla-json" if entry["source"] == "xla" else "kineto-json"
    assert {f for (f,) in db.execute("select distinct source_format from traces").fetchall()} == {fmt}
    assert db.execute("select count(*) from gpu_ops").fetchone()[0] == len(kineto_raw(path)["gpu"]) > 0
    if entry["source"] == "xla":  # one process, several devices: one rank, and said so (jax_conv_minimal_08: 8 GPUs)
        import re
        meta = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
        devices = {int(m.group(1)) for e in meta if e.get("ph") == "M" and e.get("name") == "process_name"
                   and (m := re.search(r"/device:(?:GPU|TPU):(\d+)$", str(e.get("args", {}).get("name", ""))))}
        said = [w for (w,) in db.execute("select unnest(warnings) from traces").fetchall() if "devices (" in w]
        assert said == ([f"one process drove {len(devices)} devices ({', '.join(map(str, sorted(devices)))}): read as "
                         "one rank; its GPU figures (busy, idle, gaps) take the devices' streams together"]
                        if len(devices) > 1 else []), said


@needs_wild
@pytest.mark.parametrize("entry", NEW_FORMATS[:1] + [e for e in NEW_FORMATS if e["source"] == "xla"][:1],
                         ids=lambda e: e["source"])
def test_damaged_new_formats_one_line_exit_3(entry, tmp_path):
    """A damaged copy of a real file of each new format (cut mid-stream; its gzip cut; its JSON cut
    inside the events): one line naming the file, exit 3, nothing written."""
    raw = gzip.decompress(_file(entry).read_bytes())
    cases = {"cut.json.gz": _file(entry).read_bytes()[: len(_file(entry).read_bytes()) // 2],
             "cut.json": raw[: len(raw) // 2], "nul.json": raw[: len(raw) // 3] + b"\x00" * 64}
    for name, data in cases.items():
        bad = tmp_path / name
        bad.write_bytes(data)
        out = tmp_path / f"out-{name}"
        r = subprocess.run([sys.executable, "-m", "traceflow", "postmortem", str(bad), "-o", str(out)],
                           capture_output=True, text=True, timeout=120)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 3 and len(lines) == 1 and str(bad) in lines[0], (name, r.returncode, r.stderr)
        assert not out.exists(), name


NSYS_JAX = [e for e in MANIFEST if e["source"] == "nsys-jax"]


@needs_wild
@pytest.mark.parametrize("entry", NSYS_JAX[:2], ids=lambda e: e["file"])
def test_nsys_jax_archive_without_its_report_says_what_it_holds(entry, tmp_path):
    """JAX-Toolbox's public nsys-jax archives are slimmed for CI: the .nsys-rep is left out and only
    nsys-jax's post-processed tables stay (NVTX ranges projected onto the GPU), so no GPU op can be
    read from them. Refused in one line that says so and what to pass, exit 3, nothing written; the
    raw archive (zipfile, pyarrow) holds no report and no kernel table, and its NVTX projection the
    rows the manifest records."""
    import zipfile

    import pyarrow.parquet as pq
    path = _file(entry)
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
        rows = pq.read_table(z.open("nvtx_gpu_proj_trace/trace.parquet")).num_rows
    assert not [n for n in names if n.endswith((".nsys-rep", ".qdrep", ".sqlite")) or "CUPTI_ACTIVITY" in n]
    assert rows == entry["shape"]["nvtx_gpu_proj_rows"]
    out = tmp_path / "pm"
    r = subprocess.run([sys.executable, "-m", "traceflow", "postmortem", str(path), "-o", str(out)],
                       capture_output=True, text=True, timeout=120)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 3 and len(lines) == 1 and str(path) in lines[0], (r.returncode, r.stderr)
    assert "nsys-jax archive without its Nsight Systems report" in lines[0] and "no GPU ops" in lines[0], lines[0]
    assert not out.exists()


@needs_wild
def test_a_rocprofv3_pftrace_without_gpu_work_is_refused_naming_its_tracks(tmp_path):
    """The one public rocprofv3 Perfetto trace found (a CINES hackathon's turbulence solver, the run its
    README says left the GPU unused): read with the Perfetto protos here, it holds only HIP API slices on
    one thread track, no GPU track. Refused in one line naming its process and thread tracks (rocprofv3
    describes the thread track twice, the second time with its parent only: the names are kept), exit 3,
    nothing written."""
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace
    entry = next(e for e in MANIFEST if e["source"] == "hackathon-cines")
    path = _file(entry)
    t = Trace.FromString(path.read_bytes())
    cats = {c.iid: c.name for p in t.packet if p.HasField("interned_data") for c in p.interned_data.event_categories}
    begins = [p.track_event for p in t.packet if p.HasField("track_event") and p.track_event.type == 1]
    assert collections.Counter(cats[e.category_iids[0]] for e in begins) == entry["shape"]["slices_by_category"]
    named = sorted({d.process.process_name for p in t.packet if (d := p.track_descriptor).HasField("process")}
                   | {d.thread.thread_name for p in t.packet if (d := p.track_descriptor).HasField("thread")})
    out = tmp_path / "pm"
    r = subprocess.run([sys.executable, "-m", "traceflow", "postmortem", str(path), "-o", str(out)],
                       capture_output=True, text=True, timeout=120)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 3 and len(lines) == 1 and str(path) in lines[0], (r.returncode, r.stderr)
    assert "no GPU stream tracks" in lines[0] and all(repr(n) in lines[0] for n in named), (named, lines[0])
    assert not out.exists()


NSYS_REP = [e for e in MANIFEST if e["expect"] == "nsys"]


@needs_wild
@pytest.mark.parametrize("entry", NSYS_REP, ids=lambda e: e["file"])
def test_nsys_rep_reads_as_its_sqlite_export(entry, tmp_path):
    """Public .nsys-rep files whose SQLite export the same commit holds (in the corpus too). With nsys on
    PATH (a GPU session's ../shared/gpu/nsys-env.sh), the report read through `nsys export` gives the GPU
    op count, busy union and kernel time of a plain reading of the committed export (nsys_raw above);
    without nsys, one line naming the report and the `nsys export` command to run, exit 3, nothing written."""
    import shutil
    path = _file(entry)
    db_path = tmp_path / "r.duckdb"
    if shutil.which("nsys") is None:
        r = CliRunner().invoke(main, ["ingest", str(path), "-o", str(db_path)])
        lines = r.stderr.strip().splitlines()
        assert r.exit_code == 3 and len(lines) == 1 and str(path) in lines[0], (r.exit_code, r.stderr)
        assert "nsys export --type sqlite" in lines[0], lines[0]
        assert not db_path.exists()
        return
    export = _file(next(e for e in MANIFEST if e["file"] == entry["sqlite_export"]))
    want = oracles(nsys_raw(export))
    with sqlite3.connect(f"file:{export}?mode=ro", uri=True) as c:
        want["kernel_ns"] = c.execute('select coalesce(sum("end" - start), 0) from CUPTI_ACTIVITY_KIND_KERNEL '
                                      'where "end" >= start and start >= 0').fetchone()[0]
    traceflow.ingest([str(path)], str(db_path))
    db = connect(db_path)
    n, kernel = db.execute("select count(*), coalesce(sum(end_ns - start_ns) filter (where kind = 'kernel'), 0) "
                           "from gpu_ops").fetchone()
    busy = db.execute("select coalesce(sum(busy_ns), 0) from step_breakdown").fetchone()[0]
    assert (n, busy, kernel) == (want["gpu_ops"], want["busy_ns"], want["kernel_ns"]), (path.name, (n, busy, kernel), want)
