"""The raw side of the checks on ROCm's SQLite profiles: rocprofv3's rocpd database, rocmProfileData's
.rpd and rocprof v1's results.db, read with sqlite3 and plain Python (dicts for the joins), independently of traceflow's reader.

Each returns what tests/test_wild.py's raw readers return: the GPU ops (start, end, name, correlation),
the runtime calls by (pid, correlation), and the span; times as recorded (ns, the host's monotonic clock).
"""
from __future__ import annotations

import csv
import gzip
import re
import shutil
import sqlite3
import tempfile
from pathlib import Path

# rocmProfileData's op types that are GPU work (rpd's own words: rocpd_op.opType); barriers and
# markers on a queue are not
RPD_GPU = {"KernelExecution", "Task", "CopyHostToDevice", "CopyDeviceToHost", "CopyDeviceToDevice",
           "CopyHostToHost", "CopyPeerToPeer", "FillBuffer"}
RPD_KERNEL = {"KernelExecution", "Task"}


def _open(path: Path):
    """sqlite3 on the file; a .gz is decompressed into a temporary copy, loaded into memory, removed."""
    if path.read_bytes()[:2] != b"\x1f\x8b":
        return sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d) / "plain.sqlite"
        with gzip.open(path) as src, open(tmp, "wb") as out:
            shutil.copyfileobj(src, out)
        disk, mem = sqlite3.connect(tmp), sqlite3.connect(":memory:")
        disk.backup(mem)
        disk.close()
    return mem


def kind_of(path: Path) -> str | None:
    """'rocpd', 'rpd' or 'rocprof' by the file's tables, 'csv' for a rocprofv3 CSV; None for another file."""
    if path.name.endswith("kernel_trace.csv"):
        return "csv"
    head = path.read_bytes()[:16]
    if not (head.startswith(b"SQLite format 3") or head[:2] == b"\x1f\x8b"):
        return None
    try:
        c = _open(path)
        names = {r[0] for r in c.execute("select name from sqlite_master")}
    except (sqlite3.Error, OSError, EOFError):
        return None
    if any(n.startswith("rocpd_kernel_dispatch") for n in names):
        return "rocpd"
    if {"rocpd_op", "rocpd_api", "rocpd_string"} <= names:
        return "rpd"
    if ("OPS" in names or "KERN" in names) and "StringIds" not in names:
        return "rocprof"
    return None


def rocpd_raw(path: Path) -> dict:
    c = _open(path)
    tables = [r[0] for r in c.execute("select name from sqlite_master where type = 'table'")]

    def rows(family, cols):
        out = []
        for t in tables:
            if re.fullmatch(f"rocpd_{family}(_[0-9a-f_]{{36}})?", t):
                out += c.execute(f"select {cols} from {t}").fetchall()
        return out
    strings = {(g, i): s for g, i, s in rows("string", "guid, id, string")}
    symbols = {(g, i): d or k for g, i, k, d in rows("info_kernel_symbol", "guid, id, kernel_name, display_name")}
    events = {(g, i): (cat, stack) for g, i, cat, stack in rows("event", "guid, id, category_id, stack_id")}
    procs = {(g, i): pid for g, i, pid in rows("info_process", "guid, id, pid")}
    threads = {(g, i): tid for g, i, tid in rows("info_thread", "guid, id, tid")}
    gpu = []
    for g, k, a, b, e in rows("kernel_dispatch", 'guid, kernel_id, start, "end", event_id'):
        gpu.append((a, b, symbols[g, k], events.get((g, e), (None, None))[1]))
    for g, a, b, e in rows("memory_copy", 'guid, start, "end", event_id'):
        gpu.append((a, b, "", events.get((g, e), (None, None))[1]))
    runtime = {}
    for g, p, t, a, b, e in rows("region", 'guid, pid, tid, start, "end", event_id'):
        cat, stack = events.get((g, e), (None, None))
        if strings.get((g, cat), "").startswith("HIP"):
            runtime[procs.get((g, p)), stack] = (threads.get((g, t)), a, b)
    span = [min((x[0] for x in gpu), default=None), max((x[1] for x in gpu), default=None)]
    return {"gpu": gpu, "runtime": runtime, "cpu": None, "steps": set(), "span": span,
            "kernel_ns": sum(b - a for a, b, n, _ in gpu if n)}


def rpd_raw(path: Path) -> dict:
    c = _open(path)
    strings = dict(c.execute("select id, string from rocpd_string"))
    launch: dict[int, int] = {}
    for api, op in c.execute("select api_id, op_id from rocpd_api_ops"):
        launch[op] = min(api, launch.get(op, api))
    gpu, kernel_ns = [], 0
    for i, a, b, d, t in c.execute('select id, start, "end", description_id, opType_id from rocpd_op'):
        if strings[t] in RPD_GPU:
            gpu.append((a, b, strings[d] if strings[t] in RPD_KERNEL else "", launch.get(i)))
            kernel_ns += (b - a) if strings[t] in RPD_KERNEL else 0
    runtime = {}
    for i, p, t, a, b, n in c.execute('select id, pid, tid, start, "end", apiName_id from rocpd_api'):
        if strings[n].startswith("hip"):
            runtime[p, i] = (t, a, b)
    span = [min((x[0] for x in gpu), default=None), max((x[1] for x in gpu), default=None)]
    return {"gpu": gpu, "runtime": runtime, "cpu": None, "steps": set(), "span": span, "kernel_ns": kernel_ns}


def rocprof_raw(path: Path) -> dict:
    """rocprof v1: kernels in OPS (--hip-trace, by the call's Index) or, when OPS has none, in KERN
    (--timestamp on); copies in COPY; the HIP calls in HIP."""
    c = _open(path)
    tables = {r[0]: {x[1] for x in c.execute(f'pragma table_info("{r[0]}")')}
              for r in c.execute("select name from sqlite_master where type = 'table'")}
    timed = [t for t in ("OPS", "KERN", "COPY") if {"BeginNs", "EndNs"} <= tables.get(t, set())]
    ops = "OPS" in timed and c.execute("select count(*) from OPS").fetchone()[0] > 0
    gpu, kernel_ns = [], 0
    if ops:
        for a, b, n, i in c.execute('select BeginNs, EndNs, Name, "Index" from OPS'):
            gpu.append((a, b, n.strip('"'), i))
            kernel_ns += b - a
    elif "KERN" in timed:
        for a, b, n in c.execute("select BeginNs, EndNs, KernelName from KERN"):
            gpu.append((a, b, n.strip('"'), None))
            kernel_ns += b - a
    if "COPY" in timed:
        gpu += [(a, b, "", i) for a, b, i in c.execute('select BeginNs, EndNs, "Index" from COPY')]
    runtime = {}
    if "HIP" in tables:
        for p, t, a, b, i in c.execute('select pid, tid, BeginNs, EndNs, "Index" from HIP'):
            runtime[p, i] = (t, a, b)
    span = [min((x[0] for x in gpu), default=None), max((x[1] for x in gpu), default=None)]
    return {"gpu": gpu, "runtime": runtime, "cpu": None, "steps": set(), "span": span, "kernel_ns": kernel_ns}


def csv_raw(path: Path) -> dict:
    """rocprofv3 CSV: the kernel trace, and the memory copy and HIP API traces beside it (same prefix)."""
    prefix = path.name[: -len("kernel_trace.csv")]

    def rows(name):
        f = path.parent / (prefix + name)
        return list(csv.DictReader(open(f, newline=""))) if f.is_file() else []
    gpu, kernel_ns = [], 0
    for r in rows("kernel_trace.csv"):
        a, b = int(r["Start_Timestamp"]), int(r["End_Timestamp"])
        gpu.append((a, b, r["Kernel_Name"], int(r["Correlation_Id"]) if r.get("Correlation_Id") else None))
        kernel_ns += b - a
    for r in rows("memory_copy_trace.csv"):
        gpu.append((int(r["Start_Timestamp"]), int(r["End_Timestamp"]), "", int(r["Correlation_Id"])))
    runtime = {}
    for r in rows("hip_api_trace.csv"):
        runtime[int(r["Process_Id"]), int(r["Correlation_Id"])] = (
            int(r["Thread_Id"]), int(r["Start_Timestamp"]), int(r["End_Timestamp"]))
    span = [min((x[0] for x in gpu), default=None), max((x[1] for x in gpu), default=None)]
    return {"gpu": gpu, "runtime": runtime, "cpu": None, "steps": set(), "span": span, "kernel_ns": kernel_ns}
