"""The claim oracle: each claim kind's figure recomputed from the raw files with plain Python (json /
gzip for Kineto, sqlite3 for Nsight Systems) and set against the row of `findings` that states it.

What the oracle takes from the database: which file is which rank (traces.source_path) and which
step numbers the verdict analysed (tf_internal.findings_steps: the warm-up rule is a definition, not
a figure). Everything else - the step ranges, which call launched which GPU op, the copies' kinds,
the calls' durations, the devices - it reads from the raw files itself.

A claim is `correct` (the raw file gives its figure), `wrong` (it gives another) or `not checkable`
(a figure of the critical-path model or of the replay, which no plain reading of the file gives; its
repro_sql is checked against the database instead, tests/test_claims.py).
"""
from __future__ import annotations

import bisect
import gzip
import json
import math
import re
import sqlite3
import statistics
from pathlib import Path

import intervals

# the step names steps.sql accepts by default, written again here (the oracle's own reading)
STEP = re.compile(r"(?i)^\s*(?:profiler[\s_]*step|train(?:ing)?[\s_-]*step|global[\s_-]*step|step|iteration|iter|batch)"
                  r"[\s_#:=-]*(\d+)\s*$")
GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"}
RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "Runtime"}
# an export without ENUM_CUDA_MEM_KIND (nsys 2022.2: pipit's saxpy) numbers memory kinds as Nsight Systems
# does, 0 Pageable, 2 Device: its HtoD copies go from kind 0 to kind 2, which CUPTI's numbering (1 Pageable,
# 2 Pinned, 3 Device) would make a copy to pinned host memory
PAGEABLE = 0


def _ns(v) -> int:
    ip = math.floor(v)
    return int(ip) * 1000 + round((v - ip) * 1000)


def kineto(path: Path) -> dict:
    raw = path.read_bytes()
    d = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    gpu, calls, steps = [], [], {}
    for e in d.get("traceEvents", []):
        if not isinstance(e, dict) or e.get("ph") != "X" or not isinstance(e.get("ts"), (int, float)):
            continue
        a = _ns(e["ts"])
        b = a + _ns(e.get("dur") or 0)
        cat, name = e.get("cat"), str(e.get("name"))
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        if cat in GPU_CATS:
            gpu.append({"start": a, "end": b, "name": name, "corr": args.get("correlation"), "device": args.get("device"),
                        "pageable": "pageable" in name.lower(), "stream": args.get("stream"), "kernel": cat in ("kernel", "Kernel"),
                        "dir": next((w for w in ("HtoD", "DtoH", "DtoD", "HtoH") if w in name), None)})
        elif cat in RUNTIME_CATS:
            calls.append({"start": a, "end": b, "name": name, "corr": args.get("correlation"), "tid": (e.get("pid"), e.get("tid"))})
        elif cat != "gpu_user_annotation" and (m := STEP.match(name)):
            s = int(m.group(1))
            lo, hi = steps.get(s, (a, b))
            steps[s] = (min(lo, a), max(hi, b))
    devices = {g["device"] for g in gpu if g["device"] is not None}
    return {"gpu": gpu, "calls": calls, "steps": steps, "device": ("index", tuple(sorted(devices))), "base": 0}


def nsys(path: Path) -> dict:
    c = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = {r[0] for r in c.execute("select name from sqlite_master where type = 'table'")}
        names = dict(c.execute("select id, value from StringIds")) if "StringIds" in tables else {}
        gpu, calls, steps = [], [], {}
        if "CUPTI_ACTIVITY_KIND_KERNEL" in tables:
            for a, b, n, k, st in c.execute('select start, "end", demangledName, correlationId, streamId from CUPTI_ACTIVITY_KIND_KERNEL'):
                gpu.append({"start": a, "end": b, "name": names.get(n, ""), "corr": k, "pageable": False, "stream": st, "kernel": True})
        if "CUPTI_ACTIVITY_KIND_MEMCPY" in tables:
            # the export's own enum names its memory kinds: Nsight Systems' is 0 Pageable, 1 Pinned (nsys-ai's
            # captures), not CUPTI's 1 Pageable, which read their pinned copies as pageable
            kinds = {i for i, n in c.execute("select id, name from ENUM_CUDA_MEM_KIND") if "PAGEABLE" in str(n).upper()} \
                if "ENUM_CUDA_MEM_KIND" in tables else {PAGEABLE}
            if "ENUM_CUDA_MEM_KIND" not in tables and not c.execute(
                    "select count(*) from CUPTI_ACTIVITY_KIND_MEMCPY where srcKind = 1 or dstKind = 1").fetchone()[0]:
                # an export with no enum table (nsys 2022.2: pipit's saxpy) numbers them as Nsight Systems does,
                # 0 Pageable, 2 Device, where CUPTI's 0 is "unknown": with no 1 (CUPTI's pageable) in the file
                kinds = {0}
            # the direction: the export's enum where it has one, else CUPTI's numbering (1 HtoD, 2 DtoH, 8 DtoD, 9 HtoH);
            # unified-memory page migrations: the enum names them (..._UVM_...), else CUPTI's 11-13
            ops = {i: str(n).upper() for i, n in c.execute("select id, name from ENUM_CUDA_MEMCPY_OPER")} \
                if "ENUM_CUDA_MEMCPY_OPER" in tables else {1: "HTOD", 2: "DTOH", 8: "DTOD", 9: "HTOH", 11: "UVM", 12: "UVM", 13: "UVM"}
            uvm = {i for i, n in ops.items() if "UVM" in n}
            ckc = "copyKind" if "copyKind" in {r[1] for r in c.execute("pragma table_info(CUPTI_ACTIVITY_KIND_MEMCPY)")} else "NULL"
            for a, b, k, s, d, op in c.execute(f'select start, "end", correlationId, srcKind, dstKind, {ckc} from CUPTI_ACTIVITY_KIND_MEMCPY'):
                dr = next((w for w in ("HtoD", "DtoH", "DtoD", "HtoH") if w.upper() in ops.get(op, "")), None)
                gpu.append({"start": a, "end": b, "name": "memcpy", "corr": k, "pageable": bool({s, d} & kinds), "stream": None,
                            "kernel": False, "dir": dr, "um": op in uvm})
        if "CUPTI_ACTIVITY_KIND_RUNTIME" in tables:
            # each call once: nsys 2022.2 stores a call twice, `cudaMemcpy` and inside it `cudaMemcpy_v3020`,
            # one thread and correlation id (pipit's saxpy: 95 rows, 57 calls); the outer row is the call
            tcol = "globalTid" if "globalTid" in {r[1] for r in c.execute("pragma table_info(CUPTI_ACTIVITY_KIND_RUNTIME)")} else "NULL"
            seen: dict = {}
            for a, b, n, k, t in c.execute(f'select start, "end", nameId, correlationId, {tcol} from CUPTI_ACTIVITY_KIND_RUNTIME '
                                           'order by "end" - start desc'):
                nm = names.get(n, "")
                nm = nm.split("_v")[0] if re.search(r"_v\d+$", nm) else nm
                if k is not None and any(o["name"] == nm and o["start"] <= a and b <= o["end"] for o in seen.get((t, k), ())):
                    continue
                seen.setdefault((t, k), []).append(call := {"start": a, "end": b, "name": nm, "corr": k, "tid": t})
                calls.append(call)
            calls.sort(key=lambda x: x["start"])
        if "NVTX_EVENTS" in tables:
            for a, b, t, tid in c.execute('select start, "end", text, textId from NVTX_EVENTS where "end" > start'):
                text = t if t is not None else names.get(tid, "")
                if m := STEP.match(str(text or "")):
                    s = int(m.group(1))
                    lo, hi = steps.get(s, (a, b))
                    steps[s] = (min(lo, a), max(hi, b))
        uuid = None
        if "TARGET_INFO_GPU" in tables:
            cols = {r[1] for r in c.execute("pragma table_info(TARGET_INFO_GPU)")}
            if "uuid" in cols:
                uuid = tuple(sorted(str(u) for u, in c.execute("select uuid from TARGET_INFO_GPU")))
        # the file's times count from its own capture's start: ranks are compared on the UTC epoch
        base = 0
        if "TARGET_INFO_SESSION_START_TIME" in tables:
            base = (c.execute("select utcEpochNs from TARGET_INFO_SESSION_START_TIME").fetchone() or (0,))[0] or 0
        return {"gpu": gpu, "calls": calls, "steps": steps, "device": ("uuid", uuid), "base": base}
    finally:
        c.close()


def rpd(path: Path) -> dict:
    """rocmProfileData's .rpd (plain or gzipped SQLite): the HIP calls (rocpd_api, each its own
    correlation: its id), the GPU ops they launched (rocpd_api_ops), no step ranges, no device id."""
    import rocm_raw
    c = rocm_raw._open(path)
    try:
        strings = dict(c.execute("select id, string from rocpd_string"))
        launch: dict[int, int] = {}
        for api, op in c.execute("select api_id, op_id from rocpd_api_ops"):
            launch[op] = min(api, launch.get(op, api))
        gpu = [{"start": a, "end": b, "name": strings[d] if strings[t] in rocm_raw.RPD_KERNEL else strings[t], "corr": launch.get(i),
                "pageable": False, "stream": None, "kernel": strings[t] in rocm_raw.RPD_KERNEL, "device": None}
               for i, a, b, d, t in c.execute('select id, start, "end", description_id, opType_id from rocpd_op')
               if strings[t] in rocm_raw.RPD_GPU]
        calls = [{"start": a, "end": b, "name": strings[n], "corr": i}
                 for i, a, b, n in c.execute('select id, start, "end", apiName_id from rocpd_api')]
    finally:
        c.close()
    return {"gpu": gpu, "calls": calls, "steps": {}, "device": ("index", ()), "base": 0}


def rocprof(path: Path) -> dict:
    """rocprof v1's results.db: the HIP calls (HIP: Name, BeginNs, EndNs, each its own Index), the GPU
    ops they launched (OPS, COPY by that Index; KERN where OPS is empty), no step ranges."""
    c = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = {r[0] for r in c.execute("select name from sqlite_master where type = 'table'")}
        gpu = []
        for t in ("OPS", "COPY"):
            if t in tables:
                gpu += [{"start": a, "end": b, "name": str(n).strip('"'), "corr": i, "pageable": False, "stream": None,
                         "kernel": t == "OPS" and not str(n).lower().startswith("copy"), "device": None}
                        for a, b, n, i in c.execute(f'select BeginNs, EndNs, Name, "Index" from {t}')]
        calls = [{"start": a, "end": b, "name": n, "corr": i}
                 for n, a, b, i in c.execute('select Name, BeginNs, EndNs, "Index" from HIP')] if "HIP" in tables else []
    finally:
        c.close()
    return {"gpu": gpu, "calls": calls, "steps": {}, "device": ("index", ()), "base": 0}


def read(path: str) -> dict:
    p = Path(path)
    if p.suffix == ".sqlite":
        return nsys(p)
    if p.name.endswith((".rpd", ".rpd.gz")):
        return rpd(p)
    if p.suffix == ".db":
        return rocprof(p)
    if p.name.endswith("kernel_trace.csv"):
        return rocprofv3_csv(p)
    return kineto(p)


def rocprofv3_csv(path: Path) -> dict:
    """rocprofv3's CSVs: the kernel trace, and the memory copy and HIP API traces beside it (same prefix)."""
    import csv

    def rows(name: str) -> list[dict]:
        f = path.with_name(path.name[: -len("kernel_trace.csv")] + name)
        return list(csv.DictReader(open(f, newline=""))) if f.is_file() else []
    gpu = [{"start": int(r["Start_Timestamp"]), "end": int(r["End_Timestamp"]), "name": r["Kernel_Name"],
            "corr": r["Correlation_Id"], "pageable": False, "stream": None, "kernel": True, "device": None}
           for r in rows("kernel_trace.csv")]
    gpu += [{"start": int(r["Start_Timestamp"]), "end": int(r["End_Timestamp"]), "name": "copy", "corr": r["Correlation_Id"],
             "pageable": False, "stream": None, "kernel": False, "device": None} for r in rows("memory_copy_trace.csv")]
    calls = [{"start": int(r["Start_Timestamp"]), "end": int(r["End_Timestamp"]), "name": r["Function"], "corr": r["Correlation_Id"]}
             for r in rows("hip_api_trace.csv")]
    return {"gpu": gpu, "calls": calls, "steps": {}, "device": ("index", ()), "base": 0}


def startup(d: dict, c: dict) -> int:
    """The part of a call before the file's first GPU op: start-up (or a wait for work before the
    capture), once, which no per-step figure counts; 0 in a file with no GPU op."""
    first = min((g["start"] for g in d["gpu"]), default=None)
    return 0 if first is None else max(0, min(c["end"], first) - c["start"])


class Job:
    """The raw files of one ingested job, by rank, and the analysed steps."""

    def __init__(self, con):
        self.paths = dict(con.execute("SELECT rank, source_path FROM traces ORDER BY rank").fetchall())
        self.ranks = {r: read(p) for r, p in self.paths.items()}
        self.steps = [s for s, in con.execute("SELECT step FROM tf_internal.findings_steps WHERE NOT warmup ORDER BY step").fetchall()]

    def step_of(self, rank: int, t: int) -> int | None:
        if not self.ranks[rank]["steps"]:  # no step range in the file: the whole trace is step 0 (steps.sql)
            return 0
        for s, (a, b) in self.ranks[rank]["steps"].items():
            if a <= t < b:
                return s
        return None

    def launched_in(self, rank: int) -> dict:
        """Each GPU op's step: the step range holding the call that launched it (correlation id)."""
        calls = {c["corr"]: c for c in self.ranks[rank]["calls"] if c["corr"] is not None}
        out = {}
        for i, g in enumerate(self.ranks[rank]["gpu"]):
            c = calls.get(g["corr"])
            out[i] = self.step_of(rank, c["start"]) if c else None
        return out


def _close(a, b, rel=0.01, absolute=2000.0) -> bool:
    return a is not None and b is not None and abs(a - b) <= max(absolute, rel * abs(b))


def _pageable_copy(job: Job, r: dict):
    """The pageable copy time per analysed step, and where the sentence splits it by direction
    ("(HtoD 163.7 ms + DtoH 78.8 ms)"), each direction's; a file with no step ranges is one step."""
    steps, total, by_dir = set(job.steps), 0, {}
    for rank, d in job.ranks.items():
        where = job.launched_in(rank)
        for i, g in enumerate(d["gpu"]):
            if g["pageable"] and (where[i] in steps or not d["steps"]):
                total += g["end"] - g["start"]
                by_dir[g.get("dir") or "other"] = by_dir.get(g.get("dir") or "other", 0) + g["end"] - g["start"]
    want = total / len(job.steps)
    ok = _close(r["value_ns"], want)
    said = re.findall(r"\b(HtoD|DtoH|DtoD|HtoH|other) ([\d,.]+) ms\b", r.get("sentence") or "")
    for dr, ms in said:
        ok = ok and _close(float(ms.replace(",", "")) * 1e6, by_dir.get(dr, 0) / len(job.steps), rel=0.01, absolute=60000)
    # every direction holding 5 % of the time is said, where the sentence splits it
    if said:
        ok = ok and {dr for dr, _ in said} == {dr for dr, ns in by_dir.items() if ns >= 0.05 * total}
    return ok, (f"pageable copy time per analysed step: {want / 1e6:.3f} ms from the raw files ("
                + ", ".join(f"{k} {v / len(job.steps) / 1e6:.3f} ms" for k, v in sorted(by_dir.items())) + ")")


def _sync_calls(job: Job, rank: int, name: str) -> tuple[float, float]:
    """(calls per analysed step, their duration per analysed step) of one call name on one rank."""
    steps = set(job.steps)
    d = job.ranks[rank]
    mine = [c for c in d["calls"] if c["name"] == name and job.step_of(rank, c["start"]) in steps]
    return len(mine) / len(job.steps), sum(c["end"] - c["start"] - startup(d, c) for c in mine) / len(job.steps)


def _extra_calls(job: Job, r: dict):
    per = {q: _sync_calls(job, q, r["evidence"])[0] for q in job.ranks}
    extra = per[r["rank"]] - statistics.median(v for q, v in per.items() if q != r["rank"])
    return _close(r["per_step"], extra, rel=0.02, absolute=0.011), \
        f"{r['evidence']} calls per step beyond the other ranks' median: {extra:.2f} from the raw files"


def _extra_sync(job: Job, r: dict):
    ok, why = _extra_calls(job, r)
    _, ns = _sync_calls(job, r["rank"], r["evidence"])
    # blocked time is the call's own duration (sync.blocked_ns); a call's time is its duration in the raw file
    return ok and _close(r["value_ns"], ns, rel=0.02, absolute=20000), why + f"; {ns / 1e6:.3f} ms of it per step"


def _host_syncs(job: Job, r: dict):
    """A blocking call every rank makes every analysed step (claims._host_syncs): its calls and their
    blocked time per rank and step, from each raw file once (an nsys export may hold several ranks'
    processes: nsys-ai mfu_2gpu_after), over the whole file where it has no step ranges."""
    steps, calls, ns, once = set(job.steps), 0, 0, 0
    for path in set(job.paths.values()):
        rank = next(q for q, p in job.paths.items() if p == path)
        d = job.ranks[rank]
        mine = [c for c in d["calls"] if c["name"] == r["evidence"]
                and (not d["steps"] or job.step_of(rank, c["start"]) in steps)]
        calls, ns = calls + len(mine), ns + sum(c["end"] - c["start"] - startup(d, c) for c in mine)
        if r["n"] and r["activity"]:  # the pairs: each sync with the pageable copy call right before it on its thread
            pageable = {g["corr"] for g in d["gpu"] if g["pageable"] and g["corr"] is not None}
            prev, last = {}, {}
            for c in sorted(d["calls"], key=lambda c: c["start"]):
                prev[id(c)], last[c.get("tid")] = last.get(c.get("tid")), c
            before = [p for c in mine if (p := prev[id(c)]) is not None and p["corr"] in pageable]
            ns += sum(p["end"] - p["start"] - startup(d, p) for p in before)
        once += sum(startup(d, c) for c in mine)
    per = len(job.ranks) * len(job.steps)
    # the blocking before the first GPU op is start-up, said apart once (evidence_ns), never per step
    return (_close(r["per_step"], calls / per, rel=0.02, absolute=0.011) and _close(r["value_ns"], ns / per, rel=0.02, absolute=20000)
            and _close(r["evidence_ns"] or 0, once / len(job.ranks), rel=0.02, absolute=20000),
            f"{r['evidence']}: {calls / per:.2f} calls, {ns / per / 1e6:.3f} ms per rank and step from the raw files, "
            f"{once / len(job.ranks) / 1e6:.3f} ms per rank before the first GPU op")


P2P = re.compile(r"(?i)sendrecv|send|recv")
# communication kernels by their library's names, the oracle's own list: NCCL / RCCL, and DeepEP's
# expert dispatch / combine between GPUs (DeepSeek's build: dpsk::ep::internode::combine)
COMM = re.compile(r"(?i)^nccl|^rccl|(deep_ep|dpsk::ep)::(internode|intranode)(_ll)?::")


def collectives(job: Job) -> list[list[dict]] | None:
    """The NCCL kernels matched across ranks, each [{rank, start, end, issued}, ...] latest first,
    with its step. Own reading: a communicator's kernels run on one stream (NCCL keeps one per
    communicator), a rank's streams taken in their order of first use; the step is the one holding
    the launch call; the n-th collective of a stream in a step, by launch order, is the n-th on every
    rank. None where ranks use several streams with different collectives per stream and step (the
    file names no communicator: which stream is which would be a guess)."""
    keyed: dict[tuple, list[dict]] = {}
    shapes = set()
    for rank, d in job.ranks.items():
        calls = {c["corr"]: c for c in d["calls"] if c["corr"] is not None}
        mine = [g for g in d["gpu"] if g["kernel"] and g["name"].lower().startswith("nccl")]
        first: dict = {}
        for g in mine:
            first[g["stream"]] = min(first.get(g["stream"], g["start"]), g["start"])
        ordinal = {st: i for i, st in enumerate(sorted(first, key=first.get))}
        per: dict = {}
        for g in mine:
            c = calls.get(g["corr"])
            step = job.step_of(rank, c["start"]) if c else None
            if step is not None:
                t0 = d["base"]
                per.setdefault((ordinal[g["stream"]], step), []).append((t0 + c["start"], t0 + g["start"], t0 + g["end"], g["name"]))
        # several streams: matched by their order of first use only where every rank has the same
        # collectives per stream and step (else which stream is which communicator is a guess)
        shapes.add(tuple(sorted((k, len(v)) for k, v in per.items())))
        for (stream, step), ops in per.items():
            for seq, (issued, a, b, name) in enumerate(sorted(ops)):
                keyed.setdefault((stream, step, seq), []).append({"rank": rank, "start": a, "end": b, "issued": issued,
                                                                  "p2p": bool(P2P.search(name.split("(")[0])), "step": step})
    if len(shapes) > 1 and any(k[0] > 0 for shape in shapes for k, _ in shape):
        return None
    out = []
    for ops in keyed.values():
        if len(ops) < 2:
            continue
        if ops[0]["p2p"] and max(o["start"] for o in ops) >= min(o["end"] for o in ops):
            continue  # a send completes with its receive: kernels that never run at one moment are no pair
        out.append(sorted(ops, key=lambda o: (-o["start"], o["rank"])))
    return out


def _devices(job: Job) -> dict[int, tuple]:
    return {rank: d["device"] for rank, d in job.ranks.items() if d["device"][1]}


def lateness(job: Job) -> dict[int, dict[int, list[int]]] | None:
    """Per rank and analysed step [late_ns, times_last, peer_wait_ns]: how much later it started the
    collectives it started last than the next-latest rank, how many, and what its peers waited in
    them after the second-last rank had started (before that they waited for the second-last too;
    capped at the peer's kernel length) - lateness by turns of a shared GPU left out: the last rank
    is on one device with the second-last and had issued the launch call before the second-last's
    kernel began (its GPU was serving the other's turn). Own reading of the rule (docs/findings.md,
    time slicing), with one device id (UUID, else index) standing for "time-sliced": the oracle does
    not re-detect turns."""
    groups = collectives(job)
    if groups is None:
        return None
    dev, steps = _devices(job), set(job.steps)
    late = {rank: {s: [0, 0, 0] for s in job.steps} for rank in job.ranks}
    for ops in groups:
        last, second = ops[0], ops[1]
        if last["step"] not in steps:
            continue
        shared = dev.get(last["rank"]) is not None and dev.get(last["rank"]) == dev.get(second["rank"])
        if shared and last["issued"] < second["start"]:
            continue
        x = late[last["rank"]][last["step"]]
        x[0] += last["start"] - second["start"]
        x[1] += 1
        x[2] += sum(max(0, min(last["start"] - max(o["start"], second["start"]), o["end"] - o["start"])) for o in ops[1:])
    return late


def _straggler(job: Job, r: dict):
    """The straggler's lateness per step (median over the analysed steps of the time it started its
    collectives later than the next-latest rank), the other ranks' median of theirs, the collectives
    it started last and its peers' wait in them over the analysed steps. Tolerance: 1 % or 2 us
    (Kineto's microsecond timestamps, summed over a step's collectives); the count exactly."""
    late = lateness(job)
    why = ""
    if r["evidence"]:
        ok, why = _extra_calls(job, r)
        if not ok:
            return ok, why
        why += "; "
    if late is None:
        return (True if r["evidence"] else None), why + "lateness: ranks use several NCCL streams differently and the file names no communicator"
    med = {q: statistics.median(v[0] for v in steps.values()) for q, steps in late.items()}
    want = med[r["rank"]]
    base = statistics.median(v for q, v in med.items() if q != r["rank"])
    times = sum(v[1] for v in late[r["rank"]].values())
    wait = sum(v[2] for v in late[r["rank"]].values())
    ok = _close(r["value_ns"], want) and _close(r["baseline_ns"], base) and r["n"] == times
    if r["peer_wait_ns"] is not None:
        ok = ok and _close(r["peer_wait_ns"], wait)
    return ok, why + (f"started {times} collectives last, {want / 1e6:.3f} ms/step after the next-latest rank "
                      f"(others: {base / 1e6:.3f} ms), peers waiting {wait / 1e6:.3f} ms after the second-last began, in the raw files")


def windows(job: Job, rank: int) -> dict[int, tuple[int, int]]:
    """The rank's GPU window per step, own reading of docs/step-attribution.md: from the end of the
    previous step's window (the first step: its first own op) to the last end of the step's own ops
    (launched in it), clipped at the next step's first own op."""
    d, where = job.ranks[rank], job.launched_in(rank)
    own: dict = {}
    for i, g in enumerate(d["gpu"]):
        if where[i] is not None:
            own.setdefault(where[i], []).append(g)
    order, out, prev = sorted(own), {}, None
    for k, s in enumerate(order):
        end = max(g["end"] for g in own[s])
        if k + 1 < len(order):
            end = min(end, min(g["start"] for g in own[order[k + 1]]))
        start = prev if prev is not None else min(g["start"] for g in own[s])
        out[s] = (start, max(start, end))
        prev = out[s][1]
    return out


def _exposed_comm(job: Job, r: dict):
    """Communication (NCCL kernels) not overlapped by compute (every other kernel) in the step
    windows, as a share of the windows' wall time, all ranks and steps together. Tolerance: 0.5
    percentage point (the figure is rounded to 0.01; Kineto's microsecond timestamps)."""
    if len(set(job.paths.values())) != len(job.paths):
        return None, "a fused file (several ranks in one file): not split by rank here"
    exposed = wall = 0
    for rank, d in job.ranks.items():
        comm = [(g["start"], g["end"]) for g in d["gpu"] if g["kernel"] and g["name"].lower().startswith("nccl")]
        comp = [(g["start"], g["end"]) for g in d["gpu"] if g["kernel"] and not g["name"].lower().startswith("nccl")]
        for a, b in windows(job, rank).values():
            wall += b - a
            exposed += intervals.measure(intervals.difference(intervals.clip(comm, a, b), intervals.clip(comp, a, b)))
    if not wall:
        return None, "no step window in the raw files"
    want = 100.0 * exposed / wall
    return abs(r["share_pct"] - want) <= 0.5, f"NCCL kernel time not overlapped by other kernels: {want:.2f}% of the step windows in the raw files"


def _coverage(job: Job, r: dict):
    """Share of the rank's GPU busy time (union of its ops) in ops launched inside a step range
    (ProfilerStep#N on Kineto, NVTX step ranges on nsys). Tolerance: 0.5 percentage point (the figure
    is rounded to 0.01; a step window's edge and an op's launch step can differ by the ops in flight
    at a boundary)."""
    d, where = job.ranks[r["rank"]], job.launched_in(r["rank"])
    if not d["steps"]:
        return None, "no step annotation in the raw file"
    allv = [(g["start"], g["end"]) for g in d["gpu"]]
    inside = [(g["start"], g["end"]) for i, g in enumerate(d["gpu"]) if where[i] is not None]
    total = intervals.measure(allv)
    want = 100.0 * intervals.measure(inside) / total if total else None
    return (want is not None and abs(r["figure"] - want) <= 0.5), f"GPU busy time launched inside steps: {want}% from the raw files"


def _shared_gpu(job: Job, r: dict):
    by: dict = {}
    for rank, d in job.ranks.items():
        if d["device"][1]:
            by.setdefault(d["device"], []).append(rank)
    groups = [sorted(v) for v in by.values() if len(v) > 1]
    return sorted(r["ranks"] or []) in groups, f"ranks on one device in the raw files: {groups}"


def _pct90(xs: list[int]) -> float:
    """The 90th percentile, linear between the nearest ranks (as numpy's default)."""
    xs = sorted(xs)
    k = 0.9 * (len(xs) - 1)
    lo = math.floor(k)
    return xs[lo] + (xs[min(lo + 1, len(xs) - 1)] - xs[lo]) * (k - lo)


def turns(job: Job, ranks) -> tuple[float, int, float | None]:
    """(overlap %, hand-overs, 90th percentile turn ns) of the ranks' compute kernels (NCCL's left
    out) on the UTC epoch, own reading of time slicing: a kernel whose span holds a whole kernel of
    another rank (the first of another rank's starting after it) was preempted at a turn's end and is
    left out; a turn is a run of one rank's kernels with none of another's between, first start to
    last end."""
    ks = sorted((job.ranks[q]["base"] + g["start"], job.ranks[q]["base"] + g["end"], q) for q in ranks
                for g in job.ranks[q]["gpu"] if g["kernel"] and g["end"] > g["start"] and not g["name"].lower().startswith("nccl"))
    keep = []
    for q in ranks:
        other = [(a, b) for a, b, x in ks if x != q]
        starts = [a for a, _ in other]
        for a, b, x in ks:
            if x == q:
                j = bisect.bisect_left(starts, a)
                if not (j < len(other) and other[j][1] <= b):
                    keep.append((a, b, x))
    keep.sort()
    per = sum(intervals.measure([(a, b) for a, b, x in keep if x == q]) for q in ranks)
    overlap = 100.0 * (per - intervals.measure([(a, b) for a, b, _ in keep])) / per if per else 0.0
    runs: list[list[int]] = []
    for a, b, x in keep:
        if runs and runs[-1][2] == x:
            runs[-1][1] = max(runs[-1][1], b)
        else:
            runs.append([a, b, x])
    return overlap, len(runs), (_pct90([b - a for a, b, _ in runs]) if runs else None)


def turn_ms(job: Job, ranks) -> float:
    return (turns(job, ranks)[2] or 0) / 1e6


def late_by_turns(job: Job, ranks) -> tuple[int, int]:
    """(collectives, ns) started last by one of the ranks only because its GPU served another's turn:
    on one device with the second-last, its launch call issued before the second-last's kernel began
    (the lateness oracle's rule, every step)."""
    groups, dev = collectives(job), _devices(job)
    n = ns = 0
    for ops in groups or []:
        last, second = ops[0], ops[1]
        shared = dev.get(last["rank"]) is not None and dev.get(last["rank"]) == dev.get(second["rank"])
        if last["rank"] in ranks and shared and last["issued"] < second["start"]:
            n, ns = n + 1, ns + last["start"] - second["start"]
    return n, ns


def _sharing(job: Job, r: dict):
    """Time slicing: the ranks' kernels never overlap (under 0.5 % of their time, Kineto's microsecond
    rounding) over 10 hand-overs or more, the turn's length (within 5 %), and the collectives late
    by whole turns with their lateness."""
    overlap, hand, turn = turns(job, r["ranks"] or [])
    n, ns = late_by_turns(job, set(r["ranks"] or []))
    ok = overlap < 0.5 and hand >= 10 and _close(r["evidence_ns"], turn, rel=0.05) and r["n"] == n \
        and (n == 0 or _close(r["value_ns"], ns, rel=0.01, absolute=2000 * n))
    return ok, (f"kernels overlapping another rank's: {overlap:.2f} %, {hand} turns of {(turn or 0) / 1e6:.3f} ms; "
                f"{n} collectives late by turns, {ns / 1e6:.3f} ms, from the raw files")


# ops that carry a model's FLOPs (PyTorch FlopCounterMode's convention), and those whose FLOPs follow
# from their input shapes by a textbook formula: the oracle's own reading of the names
FLOP_OP = re.compile(r"(?i)^aten::(mm|addmm|bmm|baddbmm|matmul|_scaled_mm|addmv|mv|dot|convolution|_convolution|"
                     r"cudnn_convolution\w*|conv\w*|_scaled_dot_product\w*|_flash_attention\w*|_efficient_attention\w*)$"
                     r"|attention|flash_attn")
SHAPED = re.compile(r"(?i)^aten::(mm|addmm|bmm|baddbmm|matmul|_scaled_mm|convolution|_convolution|cudnn_convolution|"
                    r"convolution_backward|miopen_convolution|"
                    r"_scaled_dot_product_(flash|efficient|cudnn)_attention(_backward)?|_flash_attention_(forward|backward)|"
                    r"_efficient_attention_(forward|backward)|_cudnn_attention_(forward|backward))$")


def kineto_flop_ops(path: Path) -> list[dict]:
    """The FLOP-carrying CPU ops that launched GPU work, from a Kineto file: each op's name, launch
    step (ProfilerStep range holding it), GPU time of the kernels its launches carry (External id),
    and whether its FLOPs are known (the profiler's `flops` argument, or shapes of an op of a formula)."""
    raw = path.read_bytes()
    d = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    ev = [e for e in d.get("traceEvents", []) if isinstance(e, dict) and e.get("ph") == "X"]
    args = [e.get("args") if isinstance(e.get("args"), dict) else {} for e in ev]
    ops = {a.get("External id"): e for e, a in zip(ev, args) if e.get("cat") in ("cpu_op", "Operator") and a.get("External id") is not None}
    # (2021 files spell the runtime call's link `external id`)
    launch = {a.get("correlation"): a.get("External id", a.get("external id")) for e, a in zip(ev, args) if e.get("cat") in RUNTIME_CATS}
    steps = [(e["ts"], e["ts"] + (e.get("dur") or 0), int(m.group(1))) for e in ev
             if e.get("cat") != "gpu_user_annotation" and (m := STEP.match(str(e.get("name"))))]
    gpu: dict = {}
    for e, a in zip(ev, args):
        if e.get("cat") in ("kernel", "Kernel") and not str(e.get("name")).lower().startswith("nccl"):
            x = launch.get(a.get("correlation"))
            gpu[x] = gpu.get(x, 0) + _ns(e.get("dur") or 0)
    out = []
    for x, op in ops.items():
        if x in gpu and FLOP_OP.search(str(op.get("name"))):
            a = op.get("args") or {}
            dims = [dd for dd in a.get("Input Dims") or [] if dd]
            # a convolution's output extent needs its stride, padding and dilation too (Kineto's Concrete
            # Inputs): shapes alone do not give its FLOPs (2021 files record no Concrete Inputs)
            conv = "conv" in op["name"].lower()
            known = a.get("flops") is not None or (bool(SHAPED.match(op["name"])) and bool(dims)
                                                   and (not conv or bool(a.get("Concrete Inputs"))))
            # a file with no step range is one step, 0 (docs/step-attribution.md)
            step = next((s for lo, hi, s in steps if lo <= op["ts"] < hi), None) if steps else 0
            out.append({"name": op["name"], "step": step, "gpu_ns": gpu[x], "known": known})
    return out


def _mfu(job: Job, r: dict):
    """Whether MFU is a lower bound: FLOP-carrying ops (matmul, attention, convolution) of unknown
    FLOPs in its step, and their share of those ops' kernel time, from the raw Kineto files (within
    0.5 point). The MFU figure itself needs the device's peak: not from the file."""
    missing, n, unknown = _flop_ops_missing(job, r["step"])
    if missing is None:
        return None, "nsys: FLOPs come from NVTX op ranges, not read here"
    said = re.search(r"unknown for ([\d.]+) %", r["note"] or "")
    # an MFU is claimed only where FLOPs are known for at least half that time (docs/roofline.md)
    ok = missing <= 50 and ((said is None and missing == 0) or (said is not None and abs(float(said.group(1)) - missing) <= 0.5))
    return ok, (f"FLOP-carrying ops in step {r['step']}: {n}, {unknown} of unknown FLOPs, "
                f"{missing:.1f} % of their kernel time, from the raw files")


def kineto_file(path) -> bool:
    """A Kineto (or XLA) JSON file: the launch readers below read only these (not nsys, rpd, rocprof)."""
    return str(path).endswith((".json", ".json.gz"))


def kineto_launches(path: Path) -> list[dict]:
    """Each launched GPU op of a Kineto file (its runtime call found by correlation id, in a step
    range; a file with none is step 0) with what launching it left the GPU idle, own reading of
    docs/launch-overhead: the idle stretch before the busy island this op began (the union of every
    GPU op of the file), from the later of its previous island's end and the start of the CPU op that
    made the call (External id, else the innermost op around it on its thread; the call's start
    without one) to the op's start; and the part of
    that after the call returned."""
    raw = path.read_bytes()
    d = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    ev = [e for e in d.get("traceEvents", []) if isinstance(e, dict) and e.get("ph") == "X" and isinstance(e.get("ts"), (int, float))]
    arg = [e.get("args") if isinstance(e.get("args"), dict) else {} for e in ev]
    cpu = [(e, a) for e, a in zip(ev, arg) if e.get("cat") in ("cpu_op", "Operator")]
    ops = {a.get("External id"): _ns(e["ts"]) for e, a in cpu if a.get("External id") is not None}
    # by thread, for a call whose External id names no op (older files: the call's is its correlation
    # id): the innermost CPU op around it on its thread
    by_tid: dict = {}
    for e, _ in cpu:
        by_tid.setdefault((e.get("pid"), e.get("tid")), []).append((_ns(e["ts"]), _ns(e["ts"]) + _ns(e.get("dur") or 0)))
    for v in by_tid.values():
        v.sort()

    def around(e) -> int | None:
        v = by_tid.get((e.get("pid"), e.get("tid")), [])
        a, b = _ns(e["ts"]), _ns(e["ts"]) + _ns(e.get("dur") or 0)
        for j in range(bisect.bisect_right(v, (a, float("inf"))) - 1, -1, -1):
            if v[j][1] >= b:
                return v[j][0]  # the latest-starting op holding the call: the innermost
        return None

    calls = {a.get("correlation"): (_ns(e["ts"]), _ns(e["ts"]) + _ns(e.get("dur") or 0),
                                    ops.get(a.get("External id")) or around(e), str(e.get("name")))
             for e, a in zip(ev, arg) if e.get("cat") in RUNTIME_CATS and a.get("correlation") is not None}
    steps = [(_ns(e["ts"]), _ns(e["ts"]) + _ns(e.get("dur") or 0), int(m.group(1))) for e in ev
             if e.get("cat") != "gpu_user_annotation" and (m := STEP.match(str(e.get("name"))))]
    gpu = sorted((_ns(e["ts"]), _ns(e["ts"]) + _ns(e.get("dur") or 0), i) for i, e in enumerate(ev) if e.get("cat") in GPU_CATS)
    # the op that begins each busy island, and where the idle before it began
    gap_before: dict[int, int] = {}
    run_end = None
    for a, b, i in gpu:
        if run_end is not None and a > run_end:
            gap_before[i] = run_end
        run_end = b if run_end is None else max(run_end, b)
    out = []
    for a, b, i in gpu:
        c = calls.get(arg[i].get("correlation"))
        if c is None:
            continue
        step = next((s for lo, hi, s in steps if lo <= c[0] < hi), None) if steps else 0
        if step is None:
            continue
        issue = c[2] if c[2] is not None else c[0]
        gap = gap_before.get(i)
        exposed = 0 if gap is None else max(0, a - max(issue, gap))
        queued = 0 if gap is None else max(0, a - max(c[1], issue, gap))
        out.append({"name": str(ev[i].get("name")), "gpu_ns": b - a, "exposed": exposed, "queued": queued,
                    "call": c[3], "call_ns": c[1] - c[0], "step": step, "start": a, "issue": issue, "call_end": c[1]})
    return out


def _launch_names(job: Job, r: dict):
    """Kernel names that left their rank's GPU idle longer in launching than they ran (per rank and
    name, over the trace's steps): how many names, that idle, their run time, and the idle after the
    launch calls had returned; from the raw Kineto files (within 1 %)."""
    paths = sorted(set(job.paths.values()))
    if not all(kineto_file(p) for p in paths) or len(paths) != len(job.paths):
        return None, "nsys (CPU ops from NVTX nesting) or a fused file: not read here"
    names, exposed, gpu, queued = set(), 0, 0, 0
    launches = {p: kineto_launches(Path(p)) for p in paths}
    if not any(launches.values()):  # XLA's trace viewer JSON links no launch call to its kernel
        return None, "no launch call linked to a GPU op (correlation id) in the raw files"
    for p in paths:
        per: dict = {}
        for o in launches[p]:
            x = per.setdefault(o["name"], [0, 0, 0])
            x[0], x[1], x[2] = x[0] + o["exposed"], x[1] + o["gpu_ns"], x[2] + o["queued"]
        for name, (e, g, q) in per.items():
            if e > g:
                names.add(name)
                exposed, gpu, queued = exposed + e, gpu + g, queued + q
    ok = r["n"] == len(names) and _close(r["value_ns"], exposed) and _close(r["baseline_ns"], gpu) \
        and _close(r["evidence_ns"] or 0, queued)
    return ok, (f"{len(names)} launch-bound kernel names: {exposed / 1e6:.3f} ms idle in launching against "
                f"{gpu / 1e6:.3f} ms running, {queued / 1e6:.3f} ms after the calls returned, from the raw files")


def launch_bound(job: Job, rank: int, share: float = 0.3) -> dict[int, tuple[int, int, int, int]]:
    """Per analysed step of one rank (a Kineto file): (launch-exposed idle, idle after the launch calls
    returned, the step's GPU window, compute time), own reading of docs/launch-overhead.md: each idle
    gap inside the rank's step window (windows: from the previous step's end) is charged to the op
    that ends it, from the later of the gap's start and the op's issue (its CPU op's start, else its
    call's) to the op's start; a gap ended by an op whose call took over 50x the rank's median launch
    call (a one-time stall) is left out. Compute: the union of the non-NCCL kernels in the window."""
    d = job.ranks[rank]
    ls = kineto_launches(Path(job.paths[rank]))
    med = statistics.median(o["call_ns"] for o in ls) if ls else 0
    by_start: dict[int, dict] = {}
    for o in ls:  # the op ending a gap: of several starting at once, the earliest issued
        if o["start"] not in by_start or o["issue"] < by_start[o["start"]]["issue"]:
            by_start[o["start"]] = o
    allv = intervals.union([(g["start"], g["end"]) for g in d["gpu"]])
    comp = [(g["start"], g["end"]) for g in d["gpu"] if g["kernel"] and not g["name"].lower().startswith("nccl")]
    out = {}
    for step, (a, b) in windows(job, rank).items():
        if step not in job.steps:
            continue
        busy = intervals.clip(allv, a, b)
        exposed = queued = 0
        t = a
        for x, y in busy:
            if x > t and (o := by_start.get(x)) is not None and o["issue"] < x and not o["call_ns"] > 50 * med:
                exposed += x - max(t, o["issue"])
                queued += max(0, x - max(t, o["issue"], o["call_end"]))
            t = max(t, y)
        out[step] = (exposed, queued, b - a, intervals.measure(intervals.clip(comp, a, b)))
    return out


def _launch_bound_steps(job: Job, r: dict):
    """Launch-bound steps: a rank's step whose launch-exposed idle is at least 30 % of its GPU window
    and more than its compute (launch_bound), from the raw Kineto files: the steps named are those,
    the share is the largest such step's (within 1 point), and the share of their launch idle that
    came after the calls returned, where the sentence states it (within 2 points)."""
    paths = sorted(set(job.paths.values()))
    if not all(kineto_file(p) for p in paths) or len(paths) != len(job.paths):
        return None, "nsys, rpd or rocprof (launch calls not re-read) or a fused file"
    bound, exp, que = {}, 0, 0
    for rank in job.ranks:
        for step, (e, q, wall, compute) in launch_bound(job, rank).items():
            if wall and e >= 0.3 * wall and e > compute:
                bound[step] = max(bound.get(step, 0.0), 100.0 * e / wall)
    steps = sorted(bound)
    for rank in job.ranks:
        for step, (e, q, _, _) in launch_bound(job, rank).items():
            if step in steps:
                exp, que = exp + e, que + q
    ok = list(r["steps"] or []) == steps and bool(steps) and abs(r["share_pct"] - max(bound.values())) <= 1.0
    said = re.search(r"but (\d+(?:\.\d)?)% of that idle came after", r.get("sentence") or "")
    if said and exp:
        ok = ok and abs(float(said.group(1)) - 100.0 * que / exp) <= 2.0
    return ok, (f"launch-bound steps {steps}, the most launch-exposed {max(bound.values(), default=0):.2f}% of its window; "
                f"{100.0 * que / exp if exp else 0:.1f}% of their launch idle after the calls returned, from the raw files")


def _launch_stall(job: Job, r: dict):
    """A launch stall (a dominant host row whose note says so): the launch calls over 50x their rank's
    median launch call in the analysed steps whose ops ended some GPU idle, from the raw Kineto files:
    the name of the one ending the most idle is the row's, every step holding one is in its steps,
    and the idle those calls' ops ended, per analysed step, is its evidence_ns (1 % or 2 us)."""
    paths = sorted(set(job.paths.values()))
    if not all(kineto_file(p) for p in paths) or len(paths) != len(job.paths):
        return None, "nsys (launch calls not re-read) or a fused file"
    stalled = []
    for p in paths:
        ls = kineto_launches(Path(p))
        med = statistics.median(o["call_ns"] for o in ls) if ls else 0
        stalled += [o for o in ls if o["call_ns"] > 50 * med and o["step"] in job.steps and o["exposed"] > 0]
    if not stalled:
        return False, "no launch call over 50x its rank's median, ending some idle, in the analysed steps of the raw files"
    top = max(stalled, key=lambda o: o["exposed"])
    idle = sum(o["exposed"] for o in stalled) / len(job.steps)
    steps = sorted({o["step"] for o in stalled})
    return r["evidence"] == top["call"] and _close(r["evidence_ns"], idle) and list(r.get("steps") or []) == steps, (
        f"{len(stalled)} stalled launch call(s) in steps {steps}, the one ending the most idle {top['call']} of "
        f"{top['call_ns'] / 1e3:.0f} us; "
        f"{idle / 1e6:.3f} ms of idle per analysed step ended by their ops, from the raw files")


def _dominant(job: Job, r: dict):
    """The dominant class's named kernel ("the kernel taking the most time: X, T per step", compute or
    communication): the kernel name with the most run time of that class (NCCL kernels, or every other
    kernel) launched in the analysed steps, all ranks together, in the raw files, and its time per rank
    and step; a one-time launch stall (_launch_stall).
    The share of the critical path is a figure of the path model: not checked here (its repro_sql
    is, tests/test_claims.py)."""
    if r["class"] == "host" and (r.get("note") or "").startswith("launch stall"):
        return _launch_stall(job, r)
    if r["class"] == "idle":
        return _idle(job, r)
    if r["class"] not in ("compute", "communication") or not r["evidence"]:
        return None, "a figure of the critical-path model"
    steps, per = set(job.steps), {}
    # each raw file once (an nsys export may hold several ranks' processes: nsys-ai mfu_2gpu_before)
    for rank in {p: q for q, p in sorted(job.paths.items(), reverse=True)}.values():
        d = job.ranks[rank]
        where = job.launched_in(rank)
        for i, g in enumerate(d["gpu"]):
            # a kernel whose launch call is not in the file: its step is the one holding its own start
            # (docs/step-attribution.md: nsys-ai mfu_2gpu_before, 7.9 ms of flash kernels a rank)
            step = where[i] if where[i] is not None else job.step_of(rank, g["start"])
            if g["kernel"] and step in steps and bool(COMM.search(g["name"])) == (r["class"] == "communication"):
                per[g["name"]] = per.get(g["name"], 0) + g["end"] - g["start"]
    if not per:
        return None, "no kernel of that class launched in the analysed steps of the raw files"
    top = max(per, key=per.get)
    each = per[top] / len(job.ranks) / len(job.steps)
    # the figure checked for compute kernels; a collective kernel's time per rank and step is not yet
    # (the bundled ddp4 jobs differ: 586.1 ms read here; left for the next session, the name is checked)
    return r["evidence"] == top and (r["class"] != "compute" or _close(r["evidence_ns"], each, rel=0.02, absolute=20000)), (
        f"the {r['class']} kernel with the most run time in the analysed steps: {top} ({each / 1e6:.3f} ms per rank and step)")


def _idle(job: Job, r: dict):
    """"GPU idle with nothing else on the path": never more than the time no GPU op (kernel, copy, memset,
    page migration) runs, from the raw file; checked where that time is one window: one rank, no step
    annotation (ISC25-ICON's stdpar export counted 42.1 ms of running kernels as idle)."""
    if len(job.ranks) != 1:
        return None, "the path's idle across ranks: a figure of the critical-path model"
    d = next(iter(job.ranks.values()))
    if d["steps"] or not d["gpu"]:
        return None, "idle per annotated step: a figure of the critical-path model"
    busy = sorted((g["start"], g["end"]) for g in d["gpu"])
    covered, top = 0, busy[0][0]
    for a, b in busy:
        covered += max(0, b - max(a, top))
        top = max(top, b)
    idle = (top - busy[0][0]) - covered
    return r["value_ns"] <= idle + 20000, f"the raw window's time with no GPU op running: {idle / 1e6:.3f} ms"


def nsys_op_ranges(path: Path) -> tuple[int, int]:
    """(PyTorch op ranges, those carrying input sizes) among a file's NVTX ranges: emit_nvtx writes
    `aten::mm, seq = 3, sizes = [[8, 16], [16, 4]]`-like texts."""
    c = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        if not c.execute("select count(*) from sqlite_master where name = 'NVTX_EVENTS'").fetchone()[0]:
            return 0, 0
        names = dict(c.execute("select id, value from StringIds")) if c.execute(
            "select count(*) from sqlite_master where name = 'StringIds'").fetchone()[0] else {}
        texts = [t if t is not None else names.get(i, "") for t, i in c.execute("select text, textId from NVTX_EVENTS")]
    finally:
        c.close()
    ops = [str(t) for t in texts if str(t or "").startswith("aten::")]
    return len(ops), sum(1 for t in ops if "sizes" in t)


def shapes_recorded(path: Path) -> int:
    """Ops carrying operand shapes in a raw file: a Kineto / XLA JSON's events with an `Input Dims` (or
    `input_shapes`) argument, an rpd's autograd records with non-empty `sizes`."""
    if path.name.endswith((".rpd", ".rpd.gz")):
        import rocm_raw
        c = rocm_raw._open(path)
        try:
            if not c.execute("select count(*) from sqlite_master where name = 'ext_autogradapi'").fetchone()[0]:
                return 0
            return c.execute("select count(*) from ext_autogradapi where sizes != ''").fetchone()[0]
        finally:
            c.close()
    raw = path.read_bytes()
    d = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    return sum(1 for e in d.get("traceEvents", []) if isinstance(e, dict) and isinstance(e.get("args"), dict)
               and (e["args"].get("Input Dims") or e["args"].get("input_shapes")))


def _mfu_empty(job: Job, r: dict):
    """No op with known FLOPs, and why, from the raw files: a Kineto file with no FLOP-carrying op of
    known FLOPs (its `flops` argument, or shapes of an op of a formula), an nsys file with no PyTorch
    op range (or none carrying sizes); the sentence's reason is the one the files give."""
    if r["n"]:
        return None, "the device's peak is unknown: not a figure of the file"
    said = r.get("sentence") or ""
    # no kernel in any raw file: the reason is that the GPU computed nothing, with its count of GPU ops
    kernels = sum(g["kernel"] for d in job.ranks.values() for g in d["gpu"])
    n_gpu = sum(len(d["gpu"]) for d in job.ranks.values())
    if "the GPU ran no kernel" in said or (n_gpu and not kernels):
        ok = n_gpu > 0 and not kernels and f"only {n_gpu:,} copies and memsets" in said
        return ok, f"{kernels} kernels, {n_gpu} GPU ops in the raw files"
    if "no compute kernel" in said:  # every kernel of the files a collective, or none at all
        compute = [g for d in job.ranks.values() for g in d["gpu"] if g["kernel"] and not COMM.search(g["name"])]
        return not compute, f"{len(compute)} compute kernels in the raw files"
    if "because the program is" in said:  # a native program: no PyTorch op, no FLOP-carrying op in the files
        for p in sorted(set(job.paths.values())):
            if str(p).endswith(".sqlite") and nsys_op_ranges(Path(p))[0]:
                return False, f"{p}: PyTorch op ranges in the raw file"
            if kineto_file(p) and kineto_flop_ops(Path(p)):
                return False, f"{p}: FLOP-carrying ops in the raw file"
        return True, "no PyTorch op range nor FLOP-carrying op in the raw files"
    for p in sorted(set(job.paths.values())):
        if "record no operand shapes" in said or str(p).endswith((".rpd", ".rpd.gz")):
            # the reason said for a profiler of no shapes (XLA, ROCm rpd): none in the raw file
            n = shapes_recorded(Path(p))
            if n or "record no operand shapes" not in said:
                return False, f"{p}: {n} ops with operand shapes in the raw file"
        elif str(p).endswith(".sqlite"):
            ops, sized = nsys_op_ranges(Path(p))
            if sized or ("no PyTorch op ranges" in said) != (ops == 0):
                return False, f"{p}: {ops} PyTorch op ranges, {sized} with sizes, in the raw file"
        elif not kineto_file(p):  # rocprof v1 / rocprofv3 CSV: kernels and API calls only, no CPU op to carry FLOPs
            continue
        elif any(o["known"] for o in kineto_flop_ops(Path(p))):
            return False, f"{p}: FLOP-carrying ops of known FLOPs in the raw file"
    return True, "no op of known FLOPs in the raw files, for the reason said"


def _flop_ops_missing(job: Job, step) -> tuple[float | None, int, int]:
    """(share of the FLOP-carrying ops' kernel time whose FLOPs are unknown, in percent; ops; unknown
    ops) in a step, from the raw Kineto files; None for nsys (FLOPs from NVTX ranges, not read here)."""
    paths = sorted({p for p in job.paths.values() if kineto_file(p)})
    if len(paths) != len(set(job.paths.values())):
        return None, 0, 0
    ops = [o for p in paths for o in kineto_flop_ops(Path(p)) if o["step"] == step]
    total = sum(o["gpu_ns"] for o in ops)
    missing = 100.0 * sum(o["gpu_ns"] for o in ops if not o["known"]) / total if total else 0.0
    return missing, len(ops), sum(not o["known"] for o in ops)


def _mfu_cannot(job: Job, r: dict):
    """MFU said not computable: FLOPs unknown for over half the FLOP-carrying ops' kernel time of its
    step (the share within 0.5 point), from the raw files."""
    missing, n, unknown = _flop_ops_missing(job, r["step"])
    if missing is None:
        return None, "nsys: FLOPs come from NVTX op ranges, not read here"
    said = re.search(r"unknown for ([\d.]+) %", r["note"] or "")
    ok = missing > 50 and said is not None and abs(float(said.group(1)) - missing) <= 0.5
    return ok, (f"FLOP-carrying ops in step {r['step']}: {n}, {unknown} of unknown FLOPs, {missing:.1f} % of their "
                "kernel time, from the raw files")


def _cannot_answer(job: Job, r: dict):
    if r["evidence"] == "MFU":
        return _mfu_cannot(job, r)
    if r["evidence"] != "launch latency":
        return None, "a figure of the whole rank"
    n = 0
    for rank in r["ranks"] or []:
        d = job.ranks[rank]
        calls = {c["corr"] for c in d["calls"] if c["corr"] is not None}
        # a page migration is demand paging, launched by no call
        n += sum(1 for g in d["gpu"] if (g["corr"] is None or g["corr"] not in calls) and not g.get("um"))
    return r["n"] == n, f"GPU ops whose launch call is not in the raw files: {n}"


def _step_outlier(job: Job, r: dict):
    """A host stall's evidence: the rank's longest GPU idle in that step's window, from the raw
    files: the window runs from the end of the rank's ops launched in the step before (its first own
    op for the first) to its last own op's end (docs/step-attribution.md)."""
    if r["class"] != "host" or not r["evidence_ns"]:
        return None, "a figure of the critical-path model"
    why = ""
    if r["peer_wait_ns"] is not None:
        late = lateness(job)
        if late is not None and r["step"] in late[r["rank"]]:
            wait = late[r["rank"]][r["step"]][2]
            if not _close(r["peer_wait_ns"], wait):
                return False, f"peers' wait after the second-last began in the rank's collectives: {wait / 1e6:.3f} ms from the raw files"
            why = f"; peers waited {wait / 1e6:.3f} ms after the second-last began"
    d, where = job.ranks[r["rank"]], job.launched_in(r["rank"])
    own = sorted((g["start"], g["end"]) for i, g in enumerate(d["gpu"]) if where[i] == r["step"])
    before = [g["end"] for i, g in enumerate(d["gpu"]) if where[i] is not None and where[i] < r["step"]]
    if not own:
        return None, "no GPU op of that step in the raw files"
    t, longest = (max(before) if before else own[0][0]), 0
    for a, b in own:
        longest = max(longest, a - t)
        t = max(t, b)
    return _close(r["evidence_ns"], longest, rel=0.01, absolute=5000), \
        f"the longest GPU idle in the rank's step window: {longest / 1e6:.3f} ms from the raw files" + why


def _bound_withheld(job: Job, r: dict):
    """A scaling bound withheld because the host's time on the path ran while its GPU was busy: the
    rank's GPU idle in its step window (the union of its GPU ops, own reading of the window), within
    1 % or 20 us; and what the sentence infers from it: host time on the path beyond that idle cannot
    have run while the GPU was idle (the row's busy part is at least host - idle). The host time on
    the path is a figure of the path model (its repro is the database's)."""
    w = windows(job, r["rank"]).get(r["step"])
    if w is None:
        return None, "no GPU op of that step in the raw files"
    a, b = w
    ops = [(g["start"], g["end"]) for g in job.ranks[r["rank"]]["gpu"]]
    idle = (b - a) - intervals.measure(intervals.clip(ops, a, b))
    ok = _close(r["evidence_ns"], idle, rel=0.01, absolute=20000) and _close(r["n"], b - a, rel=0.01, absolute=20000) \
        and r["value_ns"] >= (r["baseline_ns"] or 0) - idle - 20000 and idle < 0.5 * (r["baseline_ns"] or 0)
    return ok, f"rank {r['rank']}'s GPU idle {idle / 1e6:.3f} ms of its {(b - a) / 1e6:.3f} ms step {r['step']} window, from the raw files"


LAUNCH = re.compile(r"(?i)launchkernel|graphlaunch|launchcooperative")


def _launch_tally(calls: list[dict], gpu_corr: set, gpu_names: list[str], host: int) -> dict:
    launches = [c for c in calls if LAUNCH.search(c["name"])]
    return {"launches": len(launches), "unlinked": sum(1 for c in launches if c["corr"] not in gpu_corr),
            "gpu": len(gpu_names), "comm": sum(1 for n in gpu_names if COMM.search(n)), "host": host}


def launch_tallies(path: Path) -> dict:
    """Per rank of one raw file (a fused Kineto file: by its events' args.rank; else the file's one
    rank, key None): its launch calls (…LaunchKernel, graph launches), those whose correlation id no GPU
    op of the file carries, its GPU ops, those that are communication kernels, and its host events.
    Read from the file itself: Kineto JSON, rocprofv3's kernel trace CSV with its HIP API CSV beside
    it, or what read() gives (nsys, rpd, rocprof v1)."""
    if path.suffix in (".sqlite", ".db") or path.name.endswith((".rpd", ".rpd.gz", "kernel_trace.csv")):
        d = read(str(path))
        return {None: _launch_tally(d["calls"], {g["corr"] for g in d["gpu"]}, [g["name"] for g in d["gpu"] if g["kernel"]],
                                    len(d["calls"]))}
    raw = path.read_bytes()
    ev = [e for e in json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).get("traceEvents", [])
          if isinstance(e, dict) and e.get("ph") == "X"]
    gpus = [e for e in ev if e.get("cat") in GPU_CATS]
    fused = bool(gpus) and all("rank" in (e.get("args") or {}) for e in gpus)
    out: dict = {}
    for key in sorted({(e.get("args") or {}).get("rank") for e in ev} if fused else {None}, key=str):
        mine = [e for e in ev if not fused or (e.get("args") or {}).get("rank") == key]
        g = [e for e in mine if e.get("cat") in GPU_CATS]
        calls = [{"name": str(e.get("name")), "corr": (e.get("args") or {}).get("correlation")}
                 for e in mine if e.get("cat") in RUNTIME_CATS]
        host = sum(1 for e in mine if e.get("cat") not in GPU_CATS and e.get("cat") != "gpu_user_annotation")
        out[key] = _launch_tally(calls, {(e.get("args") or {}).get("correlation") for e in g},
                                 [str(e.get("name")) for e in g if e.get("cat") in ("kernel", "Kernel")], host)
    return out


def _unrecorded_work(job: Job, r: dict):
    """unrecorded_work.sql's two reasons, from the raw files: a rank with at least 10, and a tenth, of
    its launch calls unmatched by any GPU op's correlation id; a rank whose GPU ops are all
    communication kernels and whose trace holds no host event. The row's ranks, count and share."""
    hit, launches, unlinked = [], 0, 0
    for rank, path in job.paths.items():
        tallies = launch_tallies(Path(path))
        t = tallies.get(rank, tallies.get(None)) if len(tallies) > 1 else next(iter(tallies.values()))
        if t is None:
            continue
        if r["cause"] == "launches without GPU ops" and t["unlinked"] >= 10 and t["unlinked"] >= 0.1 * t["launches"]:
            hit.append(rank)
            launches, unlinked = launches + t["launches"], unlinked + t["unlinked"]
        elif r["cause"] == "communication kernels only" and t["gpu"] and t["comm"] == t["gpu"] and not t["host"]:
            hit.append(rank)
    share = 100.0 * unlinked / launches if launches else None
    ok = list(r["ranks"] or []) == hit and (r["n"] or 0) == unlinked and (
        share is None or r["share_pct"] is not None and abs(r["share_pct"] - share) <= 0.1)
    return ok, f"ranks {hit}: {unlinked} of {launches} launch calls with no GPU op in the raw files ({r['cause']})"


ORACLES = {"unrecorded_work": _unrecorded_work, "step_outlier": _step_outlier, "cannot_answer": _cannot_answer, "pageable_copy": _pageable_copy, "extra_sync": _extra_sync, "host_syncs": _host_syncs, "straggler": _straggler, "shared_gpu": _shared_gpu,
           "coverage": _coverage, "exposed_comm": _exposed_comm, "sharing": _sharing, "mfu": _mfu,
           "launch_names": _launch_names, "dominant": _dominant,
           "mfu_empty": _mfu_empty, "bound_withheld": _bound_withheld, "launch_bound_steps": _launch_bound_steps}


def check(con, rows: list[dict], job: Job | None = None) -> list[tuple[dict, str, str]]:
    """(row, 'correct' | 'wrong' | 'not checkable', why) for each claim row."""
    job = job or Job(con)
    out = []
    for r in rows:
        fn = ORACLES.get(r["kind"])
        if fn is None or not job.steps:
            out.append((r, "not checkable", "a figure of the critical-path model or the replay"))
            continue
        ok, why = fn(job, r)
        out.append((r, "not checkable" if ok is None else "correct" if ok else "wrong", why))
    return out
