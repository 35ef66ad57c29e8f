"""Bad inputs derived at test time from the real fixtures.

Each case is (name, make(folder) -> list of input paths, expected) with expected one of
  'error'  exit 3, one line naming the file
  'ok'     usable: exit 0 (a warning may say what was dropped)
  'either' depends on where the damage lands (flipped bytes): exit 0 or 3, never a crash
`TRACEFLOW_FUZZ=full` widens the sweep (more offsets, every fixture).
"""
from __future__ import annotations

import gzip
import json
import os
import random
import shutil
import sqlite3
from pathlib import Path

FULL = os.environ.get("TRACEFLOW_FUZZ") == "full"
ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("TRACEFLOW_SHARED", ROOT.parent / "shared")) / "fixtures"
KINETO = ROOT / "fixtures" / "ddp4_sync_stall" / "rank-0.pt.trace.json.gz"


def nsys_sources() -> list[Path]:
    if not SHARED.is_dir():
        return []
    small = [SHARED / "h100/nsys/graphs/rank0.sqlite", SHARED / "public/nvidia-fuser/report1.sqlite"]
    if FULL:
        small += [SHARED / "public/pipit-perlmutter/saxpy-mpi-cuda_nsys_perlmutter0.sqlite",
                  SHARED / "public/nsys-ai/mfu_2gpu_before.sqlite"]
    return [p for p in small if p.exists()]


def kineto_sources() -> list[Path]:
    out = [KINETO]
    if FULL and SHARED.is_dir():
        out += [SHARED / "h100/kineto/graphs/rank-0.pt.trace.json.gz", SHARED / "public/hta-2rank/sampled_rank-0.json.gz",
                SHARED / "public/param-dlrm8/worker3_step_12.1694128201557.pt.trace.json.gz"]
    return [p for p in out if p.exists()]


def _offsets(size: int, n: int, seed: int) -> list[int]:
    rnd = random.Random(seed)
    fixed = [1, 16, 100, size // 2, size - 1]
    return sorted(set(fixed + [rnd.randrange(1, size) for _ in range(n)]))


def _copy(src: Path, folder: Path, name: str) -> Path:
    dst = folder / name
    shutil.copyfile(src, dst)
    return dst


def _json(src: Path) -> dict:
    return json.load(gzip.open(src))


def _write(folder: Path, name: str, obj) -> Path:
    p = folder / name
    p.write_text(obj if isinstance(obj, str) else json.dumps(obj))
    return p


def _mutate_events(src: Path, fn):
    def make(folder):
        d = _json(src)
        evs = [e for e in d["traceEvents"] if e.get("ph") == "X"]
        fn(evs, d)
        return [_write(folder, "rank0.json", d)]
    return make


def _sqlite_edit(src: Path, sql: str, name="rank0.sqlite"):
    def make(folder):
        dst = _copy(src, folder, name)
        c = sqlite3.connect(dst)
        c.executescript(sql)
        c.commit()
        c.close()
        return [dst]
    return make


def cases():
    n_off = 40 if FULL else 4
    out = []
    # --- files that are nothing at all
    out += [("empty file", lambda f: [_write(f, "rank0.json", "")], "error"),
            ("whitespace only", lambda f: [_write(f, "rank0.json", "  \n\t ")], "error"),
            ("zero-byte gzip", lambda f: [_write(f, "rank0.json.gz", "")], "error"),
            ("gzip of garbage", lambda f: [(f / "rank0.json.gz").write_bytes(gzip.compress(os.urandom(5000))) or f / "rank0.json.gz"], "error"),
            ("random bytes", lambda f: [(f / "rank0.sqlite").write_bytes(os.urandom(8192)) or f / "rank0.sqlite"], "error"),
            ("a text file", lambda f: [_write(f, "rank0.txt", "hello, this is not a trace\n")], "error"),
            ("a folder with no traces", lambda f: [(f / "d").mkdir() or f / "d"], "error"),
            ("missing file", lambda f: [f / "nope.sqlite"], "error")]
    # --- JSON that is not a trace
    out += [("JSON array top level", lambda f: [_write(f, "rank0.json", "[1, 2, 3]")], "error"),
            ("JSON string top level", lambda f: [_write(f, "rank0.json", '"traceEvents"')], "error"),
            ("JSON object, no traceEvents", lambda f: [_write(f, "rank0.json", '{"schemaVersion": 1}')], "error"),
            ("traceEvents not a list", lambda f: [_write(f, "rank0.json", '{"traceEvents": 5}')], "error"),
            ("empty traceEvents", lambda f: [_write(f, "rank0.json", '{"traceEvents": []}')], "error"),
            ("NaN in JSON", lambda f: [_write(f, "rank0.json", '{"traceEvents": [{"ph": "X", "ts": NaN, "dur": 1}]}')], "error"),
            ("10^7 nested arrays", lambda f: [_write(f, "rank0.json", '{"traceEvents": [' + "[" * 10**7 + "]" * 10**7 + "]}")], "error"),
            ("gzip bomb", _gzip_bomb, "error")]
    for src in kineto_sources():
        text = gzip.open(src).read()
        for off in _offsets(len(text), n_off, 1):
            out.append((f"{src.name} JSON truncated at {off}", lambda f, t=text[:off]: [(f / "rank0.json").write_bytes(t) or f / "rank0.json"], "error"))
        raw = src.read_bytes()
        for off in _offsets(len(raw), n_off, 2):
            out.append((f"{src.name} gzip truncated at {off}", lambda f, t=raw[:off]: [(f / "rank0.json.gz").write_bytes(t) or f / "rank0.json.gz"], "error"))
        for off in _offsets(len(raw), n_off, 3)[1:-1]:
            out.append((f"{src.name} gzip byte flipped at {off}", lambda f, o=off, r=raw: [_flip(f / "rank0.json.gz", r, o)], "either"))
        for off in _offsets(len(text), n_off, 4)[1:-1]:
            out.append((f"{src.name} JSON byte flipped at {off}", lambda f, o=off, r=text: [_flip(f / "rank0.json", r, o)], "either"))
        # usable with a warning: bad events are dropped
        out += [
            (f"{src.name} ts as string", _mutate_events(src, lambda evs, d: evs[5].__setitem__("ts", str(evs[5]["ts"]))), "ok"),
            (f"{src.name} negative dur", _mutate_events(src, lambda evs, d: evs[7].__setitem__("dur", -5.0)), "ok"),
            (f"{src.name} ts missing", _mutate_events(src, lambda evs, d: evs[9].pop("ts")), "ok"),
            (f"{src.name} name is a number", _mutate_events(src, lambda evs, d: evs[11].__setitem__("name", 42)), "ok"),
            (f"{src.name} args not an object", _mutate_events(src, lambda evs, d: evs[13].__setitem__("args", [1, 2])), "ok"),
            (f"{src.name} clock runs backwards", _mutate_events(src, lambda evs, d: [e.__setitem__("dur", -e.get("dur", 1) - 1) for e in evs[::50]]), "ok"),
            (f"{src.name} distributedInfo wrong type", _mutate_events(src, lambda evs, d: d.__setitem__("distributedInfo", "rank 0")), "error"),
        ]
    for src in nsys_sources():
        raw = src.read_bytes()
        for off in _offsets(len(raw), n_off, 5):
            out.append((f"{src.name} SQLite truncated at {off}", lambda f, t=raw[:off]: [(f / "rank0.sqlite").write_bytes(t) or f / "rank0.sqlite"], "either" if off > len(raw) * 0.9 else "error"))
        for off in _offsets(len(raw), n_off, 6)[1:-1]:
            out.append((f"{src.name} SQLite byte flipped at {off}", lambda f, o=off, r=raw: [_flip(f / "rank0.sqlite", r, o)], "either"))
        out += [
            # an export is recognised by its tables: without kernels but with copies it is still read
            (f"{src.name} kernel table dropped", _sqlite_edit(src, "DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL;"),
             "ok" if {"CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"} & set(_tables(src)) else "error"),
            (f"{src.name} GPU activity tables dropped", _sqlite_edit(src, "".join(
                f"DROP TABLE IF EXISTS {t};" for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
                                                       "CUPTI_ACTIVITY_KIND_MEMSET"))), "error"),
            (f"{src.name} metadata table dropped", _sqlite_edit(src, "DROP TABLE IF EXISTS META_DATA_EXPORT; "
                                                                      "DROP TABLE IF EXISTS EXPORT_META_DATA;"), "ok"),
            (f"{src.name} StringIds dropped", _sqlite_edit(src, "DROP TABLE StringIds;"), "error"),
            # documented fallback: times relative to the session start, with a warning
            (f"{src.name} session start dropped", _sqlite_edit(src, "DROP TABLE TARGET_INFO_SESSION_START_TIME;"), "ok"),
            (f"{src.name} column renamed", _sqlite_edit(src, "ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL RENAME COLUMN demangledName TO dname;"), "error"),
            (f"{src.name} StringIds lacks ids", _sqlite_edit(src, "DELETE FROM StringIds WHERE id IN (SELECT demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL LIMIT 3);"), "error"),
            (f"{src.name} every table dropped", _sqlite_edit(src, "".join(f"DROP TABLE [{t}];" for t in _tables(src))), "error"),
            (f"{src.name} clock runs backwards", _sqlite_edit(src, "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET \"end\" = start - 1000 WHERE rowid % 50 = 0;"), "ok"),
            (f"{src.name} optional tables dropped", _sqlite_edit(src, "DROP TABLE IF EXISTS CUPTI_ACTIVITY_KIND_MEMSET; DROP TABLE IF EXISTS NVTX_EVENTS; DROP TABLE IF EXISTS OSRT_API; DROP TABLE IF EXISTS CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;"), "ok"),
        ]
        if "META_DATA_EXPORT" in _tables(src):  # exports before 2023 already use the old name
            out.append((f"{src.name} old schema names", _sqlite_edit(src, "ALTER TABLE META_DATA_EXPORT RENAME TO EXPORT_META_DATA;"), "ok"))
        out += [
            (f"{src.name} not an nsys database", _sqlite_edit(src, "".join(f"DROP TABLE [{t}];" for t in _tables(src)) + "CREATE TABLE t(x); INSERT INTO t VALUES (1);"), "error"),
        ]
    if len(nsys_sources()) >= 1 and SHARED.is_dir():
        a = SHARED / "h100/nsys/ddp4_straggler"
        out += [("duplicate ranks", lambda f: [_copy(a / "rank0.sqlite", f, "rank0.sqlite"), _copy(a / "rank1.sqlite", (f / "x").mkdir() or f / "x", "rank0.sqlite")], "error"),
                ("mixed jobs", lambda f: [_copy(SHARED / "public/pipit-perlmutter/saxpy-mpi-cuda_nsys_perlmutter0.sqlite", f, "rank0.sqlite"),
                                          _copy(SHARED / "public/pipit-perlmutter/perlmutter-cloverleaf-cuda.sqlite", f, "rank1.sqlite")], "error"),
                ("mixed world sizes", _world_sizes, "error")]
    return out


def _tables(src: Path) -> list[str]:
    c = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
    return [r[0] for r in c.execute("select name from sqlite_master where type='table'")]


def _flip(dst: Path, raw: bytes, off: int) -> Path:
    b = bytearray(raw)
    b[off] ^= 0xFF
    dst.write_bytes(bytes(b))
    return dst


def _gzip_bomb(folder: Path) -> list[Path]:
    """A few MiB that inflate to ~5 GiB of valid-looking JSON text."""
    p = folder / "rank0.json.gz"
    member = gzip.compress(b" " * (1 << 24), compresslevel=9)  # gzip members concatenate
    with open(p, "wb") as f:
        f.write(gzip.compress(b'{"traceEvents": ['))
        for _ in range(320):
            f.write(member)
    return [p]


def _world_sizes(folder: Path) -> list[Path]:
    a, b = _json(KINETO), _json(KINETO)
    b["distributedInfo"]["rank"] = 1
    b["distributedInfo"]["world_size"] = 8
    return [_write(folder, "rank0.json", a), _write(folder, "rank1.json", b)]
