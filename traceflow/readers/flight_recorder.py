"""PyTorch Flight Recorder dumps -> Arrow tables (`fr_entries`, `fr_groups`) and one record per dump.

A dump is what one rank's Flight Recorder buffer held when it was written: the pickle the NCCL
watchdog writes to TORCH_FR_DUMP_TEMP_FILE<rank>, the same bytes from
`torch._C._distributed_c10d._dump_fr_trace(...)`, or the JSON text of `_dump_fr_trace_json(...)`.
Its top level is {version, pg_config, pg_status, entries, comm_lib_version}; each entry is one
collective or p2p call as the rank enqueued it. Versions differ by field, so every field is read
by its presence, never by the version number (fields first seen: `seq_id` before
`collective_seq_id` / `p2p_seq_id`; `pg_status`, `is_p2p`, `input_dtypes`, `thread_name`,
`timeout_ms` later). Pickles go through the restricted unpickler (readers/safe_pickle.py): a dump
holds only dicts, lists, tuples, strings and numbers, and one naming anything else is refused.

A dump does not say which rank wrote it (2.10 has no rank field; one is read where a version has
it): the rank comes from the file name, as PyTorch's own `fr_trace` takes it, but also from names
`fr_trace` cannot read (`host-name_3`, `dump_rank3.pkl`): docs/hang-forensics.md.

Size: one column per field of an entry, each read by its presence and checked for its type (a dump
is untrusted input), and the process groups' two dicts put side by side.
"""
from __future__ import annotations

import json
import os
import re
from typing import Any

import pyarrow as pa

from .. import schema
from ..errors import InputError
from . import safe_pickle
from .model import ProcessTrace
from .ranks import rank_from_name
from .stream import HashedFile

PICKLE_PROTO = 0x80  # a pickle of protocol 2 or later opens with this byte (PyTorch writes protocol 2)
# Top-level keys of a dump: the JSON variant is told from a Kineto trace by its first key
# (nlohmann::json writes keys sorted: "comm_lib_version" first, or "entries" in older dumps).
DUMP_KEYS = ("comm_lib_version", "entries", "pg_config", "pg_status", "version", "nccl_version")
_JSON_HEAD = re.compile(rb'^\s*\{\s*"(' + "|".join(DUMP_KEYS).encode() + rb')"\s*:')
# `host-name_3`, `trainer-7_12.json`: the rank is the number at the end of the name
_TRAILING_RANK = re.compile(r"[-_.](\d+)(?:\.[A-Za-z]\w*)?$")


def sniff(head: bytes) -> str | None:
    """'fr-pickle' or 'fr-json' when these first bytes open a Flight Recorder dump, else None."""
    if head[:1] == bytes([PICKLE_PROTO]) and len(head) > 1 and 2 <= head[1] <= 5:
        return "fr-pickle"
    if _JSON_HEAD.match(head):
        return "fr-json"
    return None


def _first_pickled_key(head: bytes) -> str | None:
    """The first key of the dict that these first bytes of a pickle open, read from its opcodes
    (nothing is unpickled), or None when they open something else."""
    import io
    import pickletools
    skip = {"PROTO", "FRAME", "MEMOIZE", "BINPUT", "LONG_BINPUT", "PUT"}
    ops = []
    try:
        for op, arg, _ in pickletools.genops(io.BytesIO(head)):
            if op.name in skip:
                continue
            ops.append((op.name, arg))
            if len(ops) == 3:
                break
    except ValueError:  # the head ends inside an opcode (a long first key) or is no pickle
        return None
    if [n for n, _ in ops[:2]] != ["EMPTY_DICT", "MARK"] or len(ops) < 3 or not isinstance(ops[2][1], str):
        return None
    return ops[2][1]


def looks_like_dump(path: str) -> bool:
    """In a folder, a file without a trace suffix is taken when its first bytes open a dump: for a
    pickle, a dict whose first key is a dump's ("version" in PyTorch's), not any pickle beside the
    traces (a user's pickled config was taken, then refused: the whole ingest ended with exit 3)."""
    try:
        with open(path, "rb") as f:
            head = f.read(256)
    except OSError:
        return False
    fmt = sniff(head)
    if fmt == "fr-pickle":
        return _first_pickled_key(head) in DUMP_KEYS
    return fmt is not None


def rank_of_file(path: str) -> int | None:
    """The rank in a dump's file name: `rank3`, `r3`, `worker3` as for traces, else a number ending
    the name (`nccl_trace_rank_3`, `host-name_3`, `fr-node-a_3.json`)."""
    r = rank_from_name(path)
    if r is not None:
        return r
    m = _TRAILING_RANK.search(os.path.basename(path))
    return int(m.group(1)) if m else None


def read(path: str, sink, key: str, fmt: str) -> list[ProcessTrace]:
    """Reads the dump at `path` ('fr-pickle' or 'fr-json') into `sink` under `key`."""
    try:
        f = HashedFile(path)  # hashed as it is read: the file is read once
        try:
            data = f.read()
            digest = f.hexdigest()
        finally:
            f.close()
    except OSError as e:
        raise InputError(path, f"cannot read ({e.strerror})") from None
    if fmt == "fr-pickle":
        dump = safe_pickle.loads(data, path)
    else:
        try:
            dump = json.loads(data)
        except (ValueError, UnicodeDecodeError) as e:
            raise InputError(path, f"Flight Recorder JSON dump that is not complete JSON ({e})") from None
    version = _check(dump, path)
    entries, groups, notes = _tables(dump, path)
    sink.write(key, "fr_entries", entries)
    sink.write(key, "fr_groups", groups)
    t = ProcessTrace(source_path=path, source_format=fmt, key=key, profiler_version=f"Flight Recorder {version}",
                     source_hash=digest, warnings=notes,
                     counts={"fr_entries": entries.num_rows, "fr_groups": groups.num_rows})
    stated = dump.get("rank")
    if isinstance(stated, int) and not isinstance(stated, bool):
        t.rank_hint, t.rank_hint_source = stated, "dump"
    else:
        r = rank_of_file(path)
        if r is not None:
            t.rank_hint, t.rank_hint_source = r, "file name"
    sizes = [g for g in groups.column("group_size").to_pylist() if g is not None]
    default = [s for s, d, n in zip(groups.column("group_size").to_pylist(), groups.column("pg_desc").to_pylist(),
                                    groups.column("pg").to_pylist()) if s and (d == "default_pg" or n == "0")]
    t.world_size = default[0] if default else (max(sizes) if sizes else None)
    return [t]


def _check(dump: Any, path: str) -> str:
    """The dump's version ('2.10'); InputError when this is no dump, or one of a version not known."""
    if not isinstance(dump, dict) or "entries" not in dump:
        raise InputError(path, "not a Flight Recorder dump (no 'entries' at its top level)")
    version = dump.get("version")
    if not isinstance(version, str) or not re.fullmatch(r"\d+\.\d+", version):
        raise InputError(path, f"Flight Recorder dump with no readable version (version = {version!r})")
    if version.split(".")[0] != "2":
        raise InputError(path, f"Flight Recorder dump of version {version}, which traceflow does not know "
                         "(it reads versions 2.x, by the fields each has)")
    if not isinstance(dump["entries"], list):
        raise InputError(path, "Flight Recorder dump whose 'entries' is not a list")
    return version


def _int(v) -> int | None:
    """Ints as the dump holds them; 0 stands for 'not recorded' in the JSON variant's times."""
    if isinstance(v, bool) or not isinstance(v, int):
        return None
    return v


def _num(v) -> int | None:
    """An int, also written as text (the JSON variant writes pg_status's ids as strings: "3")."""
    if isinstance(v, str) and re.fullmatch(r"-?\d{1,19}", v.strip()):
        return int(v)
    return _int(v)


def _time(v) -> int | None:
    v = _int(v)
    return v if v else None


def _text(v) -> str | None:
    return None if v is None else json.dumps(v, separators=(",", ":"))


def _frame_text(fr: dict) -> str:
    return f"{fr.get('filename', '?')}:{fr.get('line', '?')} {fr.get('name', '?')}"


def _user_frame(frames: list) -> str | None:
    """The innermost frame outside PyTorch: where the program called the collective."""
    for fr in frames:
        name = str(fr.get("filename", ""))
        if "/torch/" not in name.replace("\\", "/"):
            return f"{os.path.basename(name)}:{fr.get('line', '?')} {fr.get('name', '?')}"
    return None


def _op(profiling_name: str | None) -> str | None:
    """'nccl:all_reduce' -> 'all_reduce'; 'nccl:send 0->1' -> 'send'."""
    if not profiling_name:
        return None
    name = profiling_name.split(":", 1)[-1]
    return name.split(" ", 1)[0] or None


def _tables(dump: dict, path: str) -> tuple[pa.Table, pa.Table, list[str]]:
    # Long because: one column per field, each read by its presence (the version differences).
    notes: list[str] = []
    rows = [e for e in dump["entries"] if isinstance(e, dict)]
    if len(rows) != len(dump["entries"]):
        raise InputError(path, "Flight Recorder dump with entries that are not records")
    fields = [f for f in schema.FR_ENTRIES if f.name not in ("dump_id", "rank")]
    col: dict[str, list] = {f.name: [] for f in fields}
    # A buffer repeats a few shapes and call sites thousands of times: each one's text is made once
    # (a 2,000-entry dump: 104 -> 41 ms, median of 8 alternating runs, same table; JSON encoding was most of it)
    texts: dict[str, str | None] = {}
    stacks: dict[tuple, tuple[str | None, str | None]] = {}
    for e in rows:
        pg = e.get("process_group")
        name, desc = (str(pg[0]), str(pg[1])) if isinstance(pg, (list, tuple)) and len(pg) == 2 else (
            str(e["pg_id"]) if e.get("pg_id") is not None else None, None)
        prof = e.get("profiling_name")
        prof = prof if isinstance(prof, str) else None
        coll = _num(e.get("collective_seq_id", e.get("seq_id")))
        p2p = _num(e.get("p2p_seq_id"))
        is_p2p = e.get("is_p2p")
        if not isinstance(is_p2p, bool):
            is_p2p = _op(prof) in ("send", "recv")
        raw_frames = e.get("frames")
        frames = [f for f in raw_frames if isinstance(f, dict)] if isinstance(raw_frames, list) else []
        key = tuple((f.get("filename"), f.get("line"), f.get("name")) for f in frames)
        if key not in stacks:
            stacks[key] = (json.dumps([_frame_text(f) for f in frames]) if frames else None, _user_frame(frames))
        col["pg"].append(name)
        col["pg_desc"].append(desc)
        col["record_id"].append(_int(e.get("record_id")))
        col["seq"].append(p2p if is_p2p else coll)
        col["collective_seq_id"].append(coll)
        col["p2p_seq_id"].append(p2p)
        col["op_id"].append(_int(e.get("op_id")))
        col["is_p2p"].append(is_p2p)
        col["op"].append(_op(prof))
        col["profiling_name"].append(prof)
        for k in ("input_sizes", "output_sizes", "input_dtypes", "output_dtypes"):
            v = e.get(k)
            r = repr(v)  # the same value has the same repr (lists of ints and strings)
            if r not in texts:
                texts[r] = _text(v)
            col[k].append(texts[r])
        col["state"].append(e.get("state") if isinstance(e.get("state"), str) else None)
        col["retired"].append(e.get("retired") if isinstance(e.get("retired"), bool) else None)
        col["created_ns"].append(_time(e.get("time_created_ns")))
        col["started_ns"].append(_time(e.get("time_discovered_started_ns")))
        col["completed_ns"].append(_time(e.get("time_discovered_completed_ns")))
        col["timeout_ms"].append(_int(e.get("timeout_ms")))
        col["thread_name"].append(e.get("thread_name") if isinstance(e.get("thread_name"), str) else None)
        col["frames"].append(stacks[key][0])
        col["user_frame"].append(stacks[key][1])
    if rows and all(v is None for v in col["input_dtypes"]):
        notes.append("this dump's version records no dtypes: dtype mismatches cannot be told")
    if rows and all(v is None for v in col["seq"]):
        raise InputError(path, "Flight Recorder dump whose entries carry no sequence ids (no collective_seq_id or seq_id)")
    entries = pa.table({f.name: pa.array(col[f.name], f.type) for f in fields})
    return entries, _groups(dump, col), notes


def _groups(dump: dict, entries: dict) -> pa.Table:
    """pg_config (members) beside pg_status (last enqueued / started / completed), one row per group.
    pg_config is keyed by group name, pg_status by the same name; gloo writes the default group's
    config under '' (the name it had before it was named '0'): taken as that group's."""
    config: dict = dump["pg_config"] if isinstance(dump.get("pg_config"), dict) else {}
    status: dict = dump["pg_status"] if isinstance(dump.get("pg_status"), dict) else {}
    desc_of = {n: d for n, d in zip(entries["pg"], entries["pg_desc"]) if n is not None}
    default = next((n for n, d in desc_of.items() if d == "default_pg"), "0")
    rows: dict[str, dict] = {}
    for key, cfg in config.items():
        cfg = cfg if isinstance(cfg, dict) else {}
        name = str(cfg.get("name") or key or default)
        ranks = cfg.get("ranks")
        ranks_text = ranks if isinstance(ranks, str) else _text(ranks)
        try:
            members = json.loads(ranks_text) if ranks_text else None
        except ValueError:
            members = None
        rows[name] = {"pg": name, "pg_desc": cfg.get("desc") or desc_of.get(name), "ranks": ranks_text,
                      "group_size": len(members) if isinstance(members, list) else None}
    for key, st in status.items():
        st = st if isinstance(st, dict) else {}
        r = rows.setdefault(str(key), {"pg": str(key), "pg_desc": desc_of.get(str(key))})
        for a, b in (("last_enqueued", "last_enqueued_collective"), ("last_started", "last_started_collective"),
                     ("last_completed", "last_completed_collective")):
            v = _num(st.get(b))
            r[a] = v if v is not None and v >= 0 else None  # -1: none yet (gloo never marks one started)
    for name in desc_of:  # a group seen only in the entries (a version without pg_config / pg_status)
        rows.setdefault(name, {"pg": name, "pg_desc": desc_of[name]})
    out = list(rows.values())
    fields = [f for f in schema.FR_GROUPS if f.name not in ("dump_id", "rank")]
    return pa.table({f.name: pa.array([r.get(f.name) for r in out], f.type) for f in fields})
