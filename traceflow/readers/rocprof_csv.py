"""rocprofv3's CSV output (`--output-format csv`) -> Arrow tables: one run's `<pid>_kernel_trace.csv`
with the files rocprofv3 wrote beside it under the same prefix (`_memory_copy_trace.csv`,
`_hip_api_trace.csv`, `_marker_api_trace.csv`, `_rccl_api_trace.csv`, `_hsa_api_trace.csv`), taken
together as one process. Read with pyarrow.csv and mapped in DuckDB, like the SQLite readers
(readers/rocm.py); times are the host's monotonic clock in ns, kept as recorded.

A file of the run given on its own, while its kernel trace is beside it, is refused with a line
naming the kernel trace: read twice, its rows would make a second rank.
"""
from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa

from ..duck import sql_string
from ..errors import InputError, one_line
from .model import ProcessTrace
from .rocm import MONOTONIC, ROCPD_COPY, drop_bad, emit, torch_ops

KERNEL = "kernel_trace.csv"
SIBLINGS = ("memory_copy_trace.csv", "hip_api_trace.csv", "marker_api_trace.csv", "rccl_api_trace.csv",
            "hsa_api_trace.csv")
# the header that names each kind of file (its first columns, quoted or not; rocpd2csv adds Guid)
KERNEL_HEAD = (["Kind", "Agent_Id"], ["Guid", "Kind", "Agent_Id"])
# a memory copy trace starts Kind,Direction (rocprofiler-sdk's documented sample of ROCm 6.2, and
# later ones with Stream_Id after Direction): without it every real copy trace was refused
COPY_HEAD = (["Kind", "Direction"], ["Guid", "Kind", "Direction"])
API_HEAD = (["Domain", "Function"], ["Guid", "Domain", "Function"])
REQUIRED = {"kernel": ("Kernel_Name", "Start_Timestamp", "End_Timestamp"),
            "copy": ("Start_Timestamp", "End_Timestamp"),
            "api": ("Domain", "Function", "Start_Timestamp", "End_Timestamp")}


def _columns(head: bytes) -> list[str]:
    line = head.lstrip(b"\xef\xbb\xbf").split(b"\n", 1)[0].decode("utf-8", "replace")
    return [c.strip().strip('"') for c in line.rstrip("\r").split(",")]


def sniff(head: bytes) -> bool:
    """A rocprofv3 CSV: its header starts with the columns rocprofv3 writes."""
    cols = _columns(head)
    return any(cols[:len(h)] == h for h in KERNEL_HEAD + COPY_HEAD + API_HEAD)


def _kind(name: str, cols: list[str]) -> str:
    if name.endswith(KERNEL):
        return "kernel"
    if name.endswith("memory_copy_trace.csv") or "Direction" in cols:
        return "copy"
    return "api" if any(cols[:len(h)] == h for h in API_HEAD) else "kernel"


def read(path: str, sink, key: str) -> list[ProcessTrace]:
    p = Path(path)
    name = p.name
    if not name.endswith(KERNEL):
        prefix = next((name[: -len(s)] for s in SIBLINGS if name.endswith(s)), None)
        if prefix is not None and (p.parent / (prefix + KERNEL)).exists():
            raise InputError(path, f"is part of the rocprofv3 run whose kernel trace is {p.parent / (prefix + KERNEL)}: "
                             "give that file (the run's CSV files are read with it)")
        files = [p]
    else:
        prefix = name[: -len(KERNEL)]
        files = [p] + [p.parent / (prefix + s) for s in SIBLINGS if (p.parent / (prefix + s)).is_file()]
    con = duckdb.connect(config={"autoinstall_known_extensions": "false", "autoload_known_extensions": "false"})
    try:
        con.execute("SET threads = 1")
        parts: dict[str, list[str]] = {"kernel": [], "copy": [], "api": []}
        for i, f in enumerate(files):
            kind, table = _read_csv(f)
            missing = [c for c in REQUIRED[kind] if c not in table.column_names]
            if missing:
                raise InputError(f, f"rocprofv3 CSV lacks column(s) {', '.join(missing)} (unsupported or damaged file)")
            con.register(f"csv{i}", table)
            parts[kind].append(f"csv{i}")
        try:
            return _map(con, parts, path, sink, key, _pid(files))
        except duckdb.Error as e:
            raise InputError(path, f"unreadable rocprofv3 CSV ({one_line(e) or type(e).__name__})") from None
    finally:
        con.close()


def _read_csv(f: Path) -> tuple[str, pa.Table]:
    import pyarrow.csv as pcsv
    try:
        with open(f, "rb") as fh:
            head = fh.read(4096)
        if not sniff(head):
            raise InputError(f, "not a rocprofv3 CSV (its header is not one rocprofv3 writes)")
        # every column as text: a damaged value must not change a whole column's type; DuckDB casts
        cols = _columns(head)
        table = pcsv.read_csv(f, convert_options=pcsv.ConvertOptions(column_types={c: pa.string() for c in cols}))
    except (pa.ArrowInvalid, OSError, UnicodeDecodeError) as e:
        raise InputError(f, f"corrupt or truncated rocprofv3 CSV ({one_line(e)})") from None
    return _kind(f.name, cols), table


def _pid(files) -> int | None:
    """The process id: rocprofv3 names each file `<pid>_<what>.csv`."""
    head = files[0].name.split("_", 1)[0]
    return int(head) if head.isdigit() else None


def _union(parts, select) -> str:
    return " UNION ALL ".join(f"SELECT {select(t)} FROM {t}" for t in parts)


def _map(con, parts, path, sink, key, pid) -> list[ProcessTrace]:
    def col(t, c, typ="BIGINT"):
        cols = {r[0] for r in con.execute(f"DESCRIBE {t}").fetchall()}
        return f'TRY_CAST("{c}" AS {typ})' if c in cols else f"NULL::{typ}"

    def agent(t, c):  # "Agent 4" (newer rocprofv3) or 4: the agent's number
        cols = {r[0] for r in con.execute(f"DESCRIBE {t}").fetchall()}
        return f"""TRY_CAST(regexp_extract("{c}", '(\\d+)\\s*$', 1) AS INTEGER)""" if c in cols else "NULL::INTEGER"
    empty = ("NULL::VARCHAR AS guid, NULL::BIGINT AS proc, NULL::INTEGER AS device, NULL::BIGINT AS stream, "
             "NULL::VARCHAR AS kind, NULL::VARCHAR AS name, NULL::VARCHAR AS short_name, NULL::BIGINT AS start_ns, "
             "NULL::BIGINT AS end_ns, NULL::BIGINT AS correlation_id, NULL::BIGINT AS bytes, NULL::VARCHAR AS copy_kind")
    sql = [f"SELECT {empty} WHERE FALSE"]
    if parts["kernel"]:
        sql.append(_union(parts["kernel"], lambda t: (
            f"NULL, NULL, {agent(t, 'Agent_Id')}, coalesce({col(t, 'Stream_Id')}, {col(t, 'Queue_Id')}), 'kernel', "
            f"Kernel_Name, NULL, {col(t, 'Start_Timestamp')}, {col(t, 'End_Timestamp')}, {col(t, 'Correlation_Id')}, "
            "NULL, NULL")))
    if parts["copy"]:
        case = " ".join(f"WHEN {sql_string(k)} THEN {sql_string(v)}" for k, v in ROCPD_COPY.items())
        sql.append(_union(parts["copy"], lambda t: (
            f"NULL, NULL, coalesce({agent(t, 'Destination_Agent_Id')}, {agent(t, 'Source_Agent_Id')}), "
            f"{col(t, 'Stream_Id')}, 'memcpy', 'Memcpy ' || coalesce(CASE {col(t, 'Direction', 'VARCHAR')} {case} END, 'Unknown'), "
            f"CASE {col(t, 'Direction', 'VARCHAR')} {case} END, {col(t, 'Start_Timestamp')}, {col(t, 'End_Timestamp')}, "
            f"{col(t, 'Correlation_Id')}, {col(t, 'Bytes')}, coalesce(CASE {col(t, 'Direction', 'VARCHAR')} {case} END, 'Unknown')")))
    con.execute("CREATE TEMP TABLE g AS " + " UNION ALL ".join(sql))
    api = ("SELECT NULL::VARCHAR AS guid, NULL::BIGINT AS proc, NULL::BIGINT AS tid, NULL::VARCHAR AS domain, "
           "NULL::VARCHAR AS name, NULL::BIGINT AS start_ns, NULL::BIGINT AS end_ns, NULL::BIGINT AS correlation_id WHERE FALSE")
    if parts["api"]:
        api += " UNION ALL " + _union(parts["api"], lambda t: (
            f"NULL, NULL, {col(t, 'Thread_Id')}, Domain, Function, {col(t, 'Start_Timestamp')}, {col(t, 'End_Timestamp')}, "
            f"{col(t, 'Correlation_Id')}"))
    con.execute(f"CREATE TEMP TABLE a AS {api}")
    con.execute("""CREATE TEMP TABLE h AS
        SELECT guid, proc, tid,
               CASE WHEN domain LIKE 'HIP%' THEN 'cuda_runtime' WHEN domain LIKE 'HSA%' THEN 'cuda_driver'
                    WHEN domain LIKE 'RCCL%' THEN 'rccl_api' ELSE lower(domain) END AS kind,
               name, start_ns, end_ns, correlation_id
        FROM a WHERE domain NOT LIKE 'MARKER%'""")
    con.execute("""CREATE TEMP TABLE rng AS SELECT guid, proc, tid, 'roctx' AS domain, name, start_ns, end_ns, FALSE AS on_gpu
                   FROM a WHERE domain LIKE 'MARKER%' AND end_ns > start_ns""")
    n = con.execute("SELECT count(*) FROM g WHERE name IS NULL").fetchone()[0]
    if n:
        raise InputError(path, f"rocprofv3 CSV has {n:,} kernels without a name (damaged file)")
    warnings = [MONOTONIC]
    torch_ops(con)
    drop_bad(con, (("g", "GPU ops"), ("h", "host calls"), ("rng", "roctx ranges")), warnings, path, "rocprofv3 CSV")
    n_calls = con.execute("SELECT count(*) FROM h WHERE name LIKE 'hipMemcpy%'").fetchone()[0]
    if n_calls and not parts["copy"]:
        warnings.append(f"{n_calls:,} hipMemcpy calls but no memory copy trace beside the kernel trace (rocprofv3 "
                        "ran without --memory-copy-trace): the GPU's copy time is in no figure")
    if not parts["api"]:
        warnings.append("no HIP API trace beside the kernel trace (rocprofv3 --hip-trace): kernels are not linked "
                        "to their launch calls, and no host time is known")
    return emit(con, [(None, None)], sink, key, path, "rocprof-csv", "rocprofv3 CSV", warnings,
                 lambda guid, proc: (pid, None), {})
