"""Nsight Systems SQLite export -> Arrow tables, one set per traced process.

Reads through the ADBC SQLite driver into DuckDB (columnar, no Python per row). Every nsys schema among
the fixtures is handled: 2.9 (nsys 2022, `EXPORT_META_DATA`, no ENUM tables) to 3.25
(nsys 2026, `META_DATA_EXPORT`); optional tables (MEMSET, NVTX_EVENTS, OSRT_API, ...) may be
absent. nsys stores times as ns since the session start; we add the session's UTC epoch time.

Size: the nsys export schema across releases 2022-2026 (renamed tables and columns, string ids,
missing tables) read through ADBC; one format, one module.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import quote

import duckdb
import pyarrow as pa

from ..duck import arrow_table, relation, sql_string
from ..errors import InputError, one_line
from . import nsys_memory
from .model import ProcessTrace

# CUPTI's enum values; used when an old export has no ENUM_* tables.
_COPY_KIND = {0: "Unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD",
              7: "DtoA", 8: "DtoD", 9: "HtoH", 10: "PtoP", 11: "HtoD", 12: "DtoH", 13: "DtoD"}
_MEM_KIND = {0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed",
             5: "Device Static", 6: "Managed Static", 7: "Unknown"}

_NVTX_RANGE_TYPES = (59, 60)  # NvtxPushPopRange, NvtxStartEndRange
_NVTX_DOMAIN_CREATE = 75


# The tables the reader queries, and of the big ones the columns it uses: only these are copied out
# of SQLite (the rest of a kernel row, grid sizes and registers, is most of its bytes). ENUM_*
# tables are taken too. A column listed here that an export lacks is simply not there (src.has).
_BIG = {
    "CUPTI_ACTIVITY_KIND_KERNEL": ("globalPid", "deviceId", "streamId", "demangledName", "shortName", "start", "end",
                                   "correlationId", "graphId", "graphNodeId"),
    "CUPTI_ACTIVITY_KIND_MEMCPY": ("globalPid", "deviceId", "streamId", "copyKind", "srcKind", "dstKind", "start", "end",
                                   "correlationId", "bytes", "graphNodeId"),
    "CUPTI_ACTIVITY_KIND_MEMSET": ("globalPid", "deviceId", "streamId", "memKind", "start", "end", "correlationId", "bytes",
                                   "graphNodeId"),
    "CUPTI_ACTIVITY_KIND_RUNTIME": ("globalTid", "nameId", "start", "end", "correlationId"),
    "OSRT_API": ("globalTid", "nameId", "start", "end"),
    "NVTX_EVENTS": ("globalTid", "start", "end", "eventType", "text", "textId", "domainId", "binaryData"),
}
READ_TABLES = (*_BIG, "StringIds", "NVTX_PAYLOAD_SCHEMA_ENTRIES", "META_DATA_EXPORT", "EXPORT_META_DATA",
               "TARGET_INFO_GPU", "TARGET_INFO_SESSION_START_TIME", "TARGET_INFO_SYSTEM_ENV", nsys_memory.TABLE)


class SqliteError(Exception):
    """The SQLite file could not be read (not SQLite, damaged, a table unreadable)."""


def connect_sqlite(path: str, spill_dir: str | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB whose schema `src` holds, as views over Arrow tables, the export's
    tables (and columns) that the reader uses.

    Read through the ADBC SQLite driver, not with DuckDB's SQLite extension: that comes as a wheel
    built for one exact DuckDB release, which pinned every user to it. ADBC also reads columns
    without a declared type. One SQLite connection reads at ~4 M rows/s; big tables are read in
    rowid ranges on several threads (the bench's rank-2 export, 1.2 M rows: 0.42 s on one thread,
    0.2 s on four; DuckDB's extension took 0.75 s for the whole file with the queries).
    """
    import adbc_driver_sqlite.dbapi as adbc

    # A URI, so that SQLite opens it read-only and immutable: it never creates a journal, -wal or -shm
    # file beside the user's file (a WAL-mode export), and reads from a read-only folder;
    # the path is %-escaped (a '?' or '#' in a file name is not a URI part).
    uri = "file:" + quote(os.fsencode(Path(path).resolve())) + "?mode=ro&immutable=1"
    con = duckdb.connect(config={"autoinstall_known_extensions": "false", "autoload_known_extensions": "false"})
    try:
        con.execute("SET preserve_insertion_order = false")
        con.execute("SET threads = 1")  # files are already read in parallel, one reader each
        con.execute("SET memory_limit = '768MB'")  # two readers at once stay well inside small machines
        if spill_dir:
            con.execute(f"SET temp_directory = {sql_string(spill_dir)}")
        con.execute("SET enable_progress_bar = false")
        con.execute("CREATE SCHEMA src")
        try:
            with adbc.connect(uri) as db, db.cursor() as cur:
                cur.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
                tables = [r[0] for r in cur.fetchall()]
                wanted = [t for t in tables if t in READ_TABLES or t.startswith("ENUM_")]
                tasks = [(t, _columns(cur, t), lo, hi) for t in wanted for lo, hi in _row_ranges(cur, t)]
            with ThreadPoolExecutor(min(4, os.cpu_count() or 1)) as pool:
                parts = list(pool.map(lambda task: _fetch(adbc, uri, *task), tasks))
        except adbc.Error as e:
            raise SqliteError(one_line(e) or type(e).__name__) from None
        con.execute("CREATE TABLE src._all_tables (name VARCHAR)")
        if tables:  # executemany refuses an empty list: a file with no tables is refused below, by name
            con.executemany("INSERT INTO src._all_tables VALUES (?)", [[t] for t in tables])
        for t in wanted:
            chunks = [part for (name, *_), part in zip(tasks, parts) if name == t]
            table = chunks[0] if len(chunks) == 1 else pa.concat_tables(chunks, promote_options="permissive")
            con.register(f"_sqlite_{t}", valid_utf8(table))
            con.execute(f"CREATE VIEW src.{sql_ident(t)} AS SELECT * FROM {sql_ident('_sqlite_' + t)}")
    except BaseException:
        con.close()
        raise
    return con


ROWS_PER_TASK = 250_000


def _row_ranges(cur, table: str) -> list[tuple[int | None, int | None]]:
    """rowid ranges of about ROWS_PER_TASK rows, for the big tables; (None, None) is the whole table."""
    if table not in _BIG:
        return [(None, None)]
    try:
        cur.execute(f"SELECT min(rowid), max(rowid), count(*) FROM {sql_ident(table)}")
        lo, hi, n = cur.fetchone()
    except Exception:  # noqa: BLE001 - a WITHOUT ROWID table: read whole
        return [(None, None)]
    if lo is None or n < 2 * ROWS_PER_TASK:
        return [(None, None)]
    # As many ranges as the rows fill, never as the rowids span: one kernel's rowid set to 2**33 in a
    # 57 KB export made 34,000 ranges (52 s), 2**62 ran out of memory listing them.
    tasks = -(-n // ROWS_PER_TASK)
    step = -(-(hi - lo + 1) // tasks)
    return [(a, min(a + step, hi + 1)) for a in range(lo, hi + 1, step)]


def _fetch(adbc, uri: str, table: str, columns: str, lo, hi) -> pa.Table:
    where = f" WHERE rowid >= {int(lo)} AND rowid < {int(hi)}" if lo is not None else ""
    with adbc.connect(uri) as db, db.cursor() as cur:
        cur.execute(f"SELECT {columns} FROM {sql_ident(table)}{where}")
        return cur.fetch_arrow_table()


def sql_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _columns(cur, table: str) -> str:
    if table not in _BIG:
        return "*"
    cur.execute(f"SELECT name FROM pragma_table_info('{table}')")
    have = [r[0] for r in cur.fetchall()]
    return ", ".join(sql_ident(c) for c in have if c in _BIG[table]) or "*"


def valid_utf8(table: pa.Table) -> pa.Table:
    """SQLite stores whatever bytes a program handed it as TEXT; DuckDB takes only valid UTF-8. A
    public export (pipit-perlmutter saxpy) has such strings. A column that fails the check is
    repaired with U+FFFD, as a decoder with errors='replace' would (only that column, in Python)."""
    for i, f in enumerate(table.schema):
        if not (pa.types.is_string(f.type) or pa.types.is_large_string(f.type)):
            continue
        col = table.column(i)
        try:
            col.validate(full=True)
        except pa.ArrowInvalid:
            raw = col.cast(pa.binary() if pa.types.is_string(f.type) else pa.large_binary())
            fixed = pa.array([None if v is None else v.decode("utf-8", "replace") for v in raw.to_pylist()], f.type)
            table = table.set_column(i, f, fixed)
    return table


class _Src:
    """The tables and columns one export has."""

    def __init__(self, con, path):
        self.con, self.path = con, path
        rows = con.execute(
            "SELECT table_name, column_name FROM duckdb_columns() WHERE schema_name = 'src' AND table_name != '_all_tables'").fetchall()
        self.cols: dict[str, set[str]] = {}
        for t, c in rows:
            self.cols.setdefault(t, set()).add(c)
        self.n_tables = con.execute("SELECT count(*) FROM src._all_tables").fetchone()[0]

    def has(self, table, col=None):
        return table in self.cols and (col is None or col in self.cols[table])

    def count(self, table):
        return self.con.execute(f"SELECT count(*) FROM src.{table}").fetchone()[0]


def _meta(src: _Src) -> dict:
    table = "META_DATA_EXPORT" if src.has("META_DATA_EXPORT") else "EXPORT_META_DATA" if src.has("EXPORT_META_DATA") else None
    meta = {}
    if table:
        meta = dict(src.con.execute(f"SELECT name, value FROM src.{table}").fetchall())
    return meta


def _enum_map(src: _Src, table: str, fallback: dict, short: bool = False) -> dict:
    """Enum id -> label, from the export's ENUM table when it has one (for _case)."""
    mapping = dict(fallback)
    if src.has(table):
        for i, name, label in src.con.execute(f"SELECT id, name, label FROM src.{table}").fetchall():
            if table == "ENUM_CUDA_MEMCPY_OPER" and short:
                code = name.replace("CUDA_MEMCPY_KIND_", "").replace("UVM_", "")  # HTOD -> HtoD, like CUPTI's docs
                mapping[int(i)] = f"{code[0]}to{code[3]}" if len(code) == 4 and code[1:3] == "TO" else code.title()
            elif table != "ENUM_CUDA_MEMCPY_OPER" or not short:
                mapping[int(i)] = label
    return mapping


def _uvm_copy_kinds(src: _Src) -> set[int]:
    """The copyKind ids of unified-memory migrations: the export's ENUM names them (CUDA_MEMCPY_KIND_UVM_*),
    else CUPTI's values 11-13."""
    if src.has("ENUM_CUDA_MEMCPY_OPER"):
        return {int(i) for i, name in src.con.execute("SELECT id, name FROM src.ENUM_CUDA_MEMCPY_OPER").fetchall()
                if "UVM" in str(name)}
    return {11, 12, 13}


def _case(col: str, mapping: dict) -> str:
    whens = " ".join(f"WHEN {int(k)} THEN {sql_string(str(v))}" for k, v in mapping.items())
    return f"(CASE {col} {whens} ELSE 'Unknown' END)"


def read(path: str, sink, key: str = "p") -> list[ProcessTrace]:
    try:
        # a folder of its own per file: readers on threads of one process must not share spill files
        con = connect_sqlite(path, spill_dir=str(Path(sink.folder) / f"spill-{key}"))
    except (duckdb.Error, SqliteError) as e:
        raise InputError(path, f"not a readable SQLite file, or a damaged one ({one_line(e) or type(e).__name__})") from None
    try:
        return _read(con, path, sink, key)
    except duckdb.Error as e:
        raise InputError(path, f"corrupt or truncated nsys export ({one_line(e) or type(e).__name__})") from None
    finally:
        con.close()


def _read(con, path, sink, key) -> list[ProcessTrace]:
    # Long because: one pass over the export's tables in load order; most lines name the file in an error.
    src = _Src(con, path)
    if not src.n_tables:
        raise InputError(path, "SQLite file has no tables: not an Nsight Systems export")
    meta = _meta(src)
    _check_tables(src, path)
    base, time_warnings = _session_start(src, path)
    real_times = _whole_ns_times(src)

    con.execute("CREATE TEMP TABLE strings AS SELECT id, value FROM src.StringIds")
    gpu = _gpu_ops(src, base)  # noqa: F841 - the SQL below reads it by name (a DuckDB replacement scan)
    con.execute("CREATE TEMP TABLE g AS SELECT * FROM gpu")  # keep one materialisation
    n_unresolved = con.execute("SELECT count(*) FROM g WHERE name IS NULL").fetchone()[0]
    if n_unresolved:
        raise InputError(path, f"StringIds lacks the names of {n_unresolved} GPU ops (damaged export)")
    host = _host_ops(src, base)  # noqa: F841 - read by name in the SQL below
    con.execute("CREATE TEMP TABLE h AS SELECT *, NULL::VARCHAR AS input_dims FROM host")
    n_unresolved = con.execute("SELECT count(*) FROM h WHERE name IS NULL").fetchone()[0]
    if n_unresolved:
        raise InputError(path, f"StringIds lacks the names of {n_unresolved} host calls (damaged export)")
    _ranges(src, base)
    _emit_nvtx_ops(con)
    warnings = list(time_warnings) + real_times
    for rel, what in (("g", "GPU ops"), ("h", "host calls"), ("rng", "NVTX ranges")):
        # Times are ns after the session start: one before it, or 146 years after, is damage that would
        # stretch the rank's timeline (and overflow the arithmetic of every figure).
        bad = f"start_ns IS NULL OR end_ns IS NULL OR end_ns < start_ns OR start_ns < {base} OR end_ns > {base + 2**62}"
        n_back = con.execute(f"SELECT count(*) FROM {rel} WHERE {bad}").fetchone()[0]
        if n_back:
            con.execute(f"DELETE FROM {rel} WHERE {bad}")
            warnings.append(f"dropped {n_back} {what} with no start or end, an end before their start, or a time "
                            "outside the session")
    # --cuda-memory-usage=true: the memory timeline (readers/nsys_memory.py; docs/memory.md)
    warnings += nsys_memory.create(con, src.cols.get(nsys_memory.TABLE, set()), base, _one_process(src),
                                   _enum_map(src, "ENUM_CUDA_MEM_KIND", _MEM_KIND))

    procs = con.execute("""
        SELECT gpid, min(pid) FROM (
            SELECT gpid, (gpid >> 24) & 16777215 AS pid FROM g
            UNION ALL SELECT gpid, (gpid >> 24) & 16777215 FROM h WHERE kind IN ('cuda_runtime','cuda_driver'))
        GROUP BY gpid ORDER BY gpid""").fetchall()
    hostname = None
    if src.has("TARGET_INFO_SYSTEM_ENV", "name"):
        r = con.execute("SELECT value FROM src.TARGET_INFO_SYSTEM_ENV WHERE name = 'Hostname' LIMIT 1").fetchone()
        hostname = r[0] if r else None
    hostname = hostname or meta.get("EXPORT_HOST")
    if time_warnings:
        hostname = None  # no common time base: never assumed to share a clock with another rank
    version = meta.get("EXPORT_PRODUCT_VERSION")
    schema = meta.get("EXPORT_SCHEMA_VERSION")
    gpu_names = {}
    if src.has("TARGET_INFO_GPU", "name"):
        # the CUDA device index: cuDevice (2022 on), id, or deviceId (2021 exports)
        col = next((c for c in ("cuDevice", "id", "deviceId") if src.has("TARGET_INFO_GPU", c)), None)
        if col:
            gpu_names = dict(con.execute(f"SELECT {col}, name FROM src.TARGET_INFO_GPU").fetchall())
    gpu_memory = None  # the GPUs' memory: the memory packs' headroom (docs/memory.md)
    if gpu_names and src.has("TARGET_INFO_GPU", "totalMemory"):
        gpu_memory = arrow_table(con, f"""SELECT {col}::INTEGER AS device, name, totalMemory::BIGINT AS memory_bytes
                                          FROM src.TARGET_INFO_GPU""")

    out = []
    if not procs:
        warnings.append("no CUDA activity in this export")
        procs = [(None, None)]
    for i, (gpid, pid) in enumerate(procs):
        flt = "TRUE" if gpid is None else f"gpid = {int(gpid)}"
        pkey = f"{key}{i}"
        counts = {}
        for table, rel in (("gpu_ops", "g"), ("host_ops", "h"), ("ranges", "rng")):
            reader = relation(con, f"SELECT * EXCLUDE (gpid) FROM {rel} WHERE {flt}").to_arrow_reader(1 << 20)
            n = 0
            for batch in reader:
                n += batch.num_rows
                sink.write(pkey, table, batch)
            counts[table] = n
        mem = arrow_table(con, f"SELECT * EXCLUDE (gpid) FROM mem WHERE {flt}")
        if mem.num_rows:
            sink.write(pkey, "memory_events", mem)
            counts["memory_events"] = mem.num_rows
        if gpu_memory is not None and gpu_memory.num_rows:
            sink.write(pkey, "devices", gpu_memory)
        devs = [r[0] for r in con.execute(f"SELECT DISTINCT device FROM g WHERE {flt}").fetchall()]
        device_name = ", ".join(sorted({str(gpu_names.get(d, "")) for d in devs} - {""})) or None
        nccl_rank = _nccl_rank(src, gpid)
        out.append(ProcessTrace(
            source_path=path, source_format="nsys-sqlite", key=pkey,
            profiler_version=f"nsys {version}" + (f" (schema {schema})" if schema else "") if version else None,
            hostname=hostname, pid=pid, device_name=device_name, rank_hint=nccl_rank,
            rank_hint_source="nccl" if nccl_rank is not None else None, world_size=None,
            warnings=list(warnings), n_processes=len(procs), counts=counts,
            devices=tuple(sorted(d for d in devs if d is not None))))
    return out


_GPU_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")
# Columns without which a present table cannot be read. Every other column the reader uses is read
# when the export has it and is NULL when not (exports from 2021 to 2026 differ; a table without
# globalPid is one process, without correlationId its ops have no launch links): _col.
_REQUIRED_COLUMNS = {
    "CUPTI_ACTIVITY_KIND_KERNEL": ("start", "end", "demangledName"),
    "CUPTI_ACTIVITY_KIND_MEMCPY": ("start", "end"),
    "CUPTI_ACTIVITY_KIND_MEMSET": ("start", "end"),
    "CUPTI_ACTIVITY_KIND_RUNTIME": ("start", "end", "nameId"),
    "OSRT_API": ("start", "end", "globalTid", "nameId"),
    "NVTX_EVENTS": ("start", "end", "globalTid", "eventType", "text"),
    "StringIds": ("id", "value"),
}


def _check_tables(src: _Src, path: str):
    """An export is recognised by its tables (StringIds and CUPTI activity), not by a metadata table:
    nsys 2021-era exports have none and hold kernels other tools read."""
    if not src.has("StringIds") and not any(src.has(t) for t in (*_GPU_TABLES, "CUPTI_ACTIVITY_KIND_RUNTIME")):
        raise InputError(path, "SQLite file is not an Nsight Systems export (no StringIds and no CUPTI_ACTIVITY_KIND_* tables)")
    if not src.has("StringIds"):
        raise InputError(path, "nsys export has no StringIds table (required table missing: the names of "
                         "kernels and calls; damaged or unsupported export)")
    if not any(src.has(t) for t in _GPU_TABLES):
        raise InputError(path, "nsys export has no CUPTI_ACTIVITY_KIND_KERNEL / MEMCPY / MEMSET table (no GPU work "
                         "was traced; export with `nsys export --type sqlite` of a run traced with -t cuda)")
    for t, cols in _REQUIRED_COLUMNS.items():
        missing = [c for c in cols if src.has(t) and not src.has(t, c)]
        if missing:
            raise InputError(path, f"nsys export table {t} lacks column(s) {', '.join(missing)} (unsupported or damaged schema)")


def _whole_ns_times(src: _Src) -> list[str]:
    """Times are INTEGER ns; SQLite stores a REAL there as readily, and then the whole column comes as
    DOUBLE, every time rounded to 256 ns once the session start is added. Rows whose start or end is
    not a whole number are dropped (counted); the rest are read as the integers they are (exact
    below 2^53 ns, 104 days into a session)."""
    notes = []
    for t in (*_GPU_TABLES, "CUPTI_ACTIVITY_KIND_RUNTIME", "OSRT_API", "NVTX_EVENTS"):
        if not src.has(t, "start") or not src.has(t, "end"):
            continue
        types = dict(src.con.execute("SELECT column_name, data_type FROM duckdb_columns() WHERE schema_name = 'src' "
                                     "AND table_name = ? AND column_name IN ('start', 'end')", [t]).fetchall())
        if all(v in ("BIGINT", "INTEGER") for v in types.values()):
            continue
        whole = '(start IS NULL OR start = floor(start)) AND ("end" IS NULL OR "end" = floor("end"))'
        bad = src.con.execute(f"SELECT count(*) FROM src.{t} WHERE NOT ({whole})").fetchone()[0]
        src.con.execute(f"""CREATE OR REPLACE VIEW src.{t} AS SELECT * REPLACE (start::BIGINT AS start, "end"::BIGINT AS "end")
                            FROM {sql_ident('_sqlite_' + t)} WHERE {whole}""")
        if bad:
            notes.append(f"dropped {bad} rows of {t} whose start or end is not a whole number of ns (a REAL "
                         "in an INTEGER time column)")
    return notes


def _col(src: _Src, table: str, col: str, sql_type: str) -> str:
    """`col` cast to `sql_type` where `table` has it, else a typed NULL."""
    return f"{sql_ident(col)}::{sql_type}" if src.has(table, col) else f"NULL::{sql_type}"


def _one_process(src: _Src) -> bool:
    """A GPU activity table without globalPid: the export cannot say which process ran what."""
    return any(src.has(t) and not src.has(t, "globalPid") for t in _GPU_TABLES)


def _session_start(src: _Src, path: str) -> tuple[int, list[str]]:
    """The wall clock at the session's time 0 (ns since the epoch), and a warning when it is missing."""
    if src.has("TARGET_INFO_SESSION_START_TIME", "utcEpochNs"):
        row = src.con.execute("SELECT utcEpochNs FROM src.TARGET_INFO_SESSION_START_TIME LIMIT 1").fetchone()
        if row is not None and row[0] is not None:
            base = int(row[0])
            if not (-(2**62) < base < 2**62):
                raise InputError(path, f"session start time {base} ns is out of range (damaged export)")
            return base, []
    # Documented fallback (docs/bad-input.md): times stay relative to the session start, shown as if
    # the session began at the Unix epoch; such a rank is clock-aligned on its own.
    return 0, ["no session start time (TARGET_INFO_SESSION_START_TIME missing or empty): times are "
               "relative to the session start, shown from 1970-01-01; ranks are aligned by their collectives"]


def _gpu_ops(src: _Src, base: int):
    con = src.con
    k = "src.CUPTI_ACTIVITY_KIND_KERNEL"
    K, M, S = _GPU_TABLES

    def pid(table):
        return "NULL::BIGINT" if _one_process(src) else "globalPid"
    short = "s2.value" if src.has("CUPTI_ACTIVITY_KIND_KERNEL", "shortName") else "NULL"
    graph = ("graphId" if src.has("CUPTI_ACTIVITY_KIND_KERNEL", "graphId")
             else "graphNodeId" if src.has("CUPTI_ACTIVITY_KIND_KERNEL", "graphNodeId") else "NULL")
    parts = ["""
        SELECT NULL::BIGINT AS gpid, NULL::INTEGER AS device, NULL::BIGINT AS stream, NULL::VARCHAR AS kind,
               NULL::VARCHAR AS name, NULL::VARCHAR AS short_name, NULL::BIGINT AS start_ns, NULL::BIGINT AS end_ns,
               NULL::BIGINT AS correlation_id, NULL::BIGINT AS bytes, NULL::VARCHAR AS copy_kind,
               NULL::BIGINT AS graph_id WHERE FALSE"""]  # the column names; each table below is optional
    if src.has("CUPTI_ACTIVITY_KIND_KERNEL"):
        parts.append(f"""
        SELECT {pid(K)}, {_col(src, K, "deviceId", "INTEGER")}, {_col(src, K, "streamId", "BIGINT")}, 'kernel',
               s1.value, {short}, start + {base}, "end" + {base}, {_col(src, K, "correlationId", "BIGINT")},
               NULL::BIGINT, NULL::VARCHAR, {graph}::BIGINT
        FROM {k} LEFT JOIN strings s1 ON s1.id = demangledName
        {"LEFT JOIN strings s2 ON s2.id = shortName" if short != "NULL" else ""}""")
    if src.has("CUPTI_ACTIVITY_KIND_MEMCPY"):
        kinds = _enum_map(src, "ENUM_CUDA_MEMCPY_OPER", _COPY_KIND, short=True)
        mem = _enum_map(src, "ENUM_CUDA_MEM_KIND", _MEM_KIND)
        ck = _case("copyKind", kinds) if src.has(M, "copyKind") else "'Unknown'"
        has_sd = src.has("CUPTI_ACTIVITY_KIND_MEMCPY", "srcKind")
        label = (f"'Memcpy ' || {ck} || ' (' || {_case('srcKind', mem)} || ' -> ' || {_case('dstKind', mem)} || ')'"
                 if has_sd else f"'Memcpy ' || {ck}")
        g2 = "graphNodeId" if src.has("CUPTI_ACTIVITY_KIND_MEMCPY", "graphNodeId") else "NULL"
        # Unified-memory page migrations (copyKind CUDA_MEMCPY_KIND_UVM_*) are the driver moving managed
        # pages on demand, not copies a program issued: kind um_migration (docs/host-time.md), so that
        # no copy figure or "pin the buffer" advice counts them
        uvm = sorted(_uvm_copy_kinds(src))
        kind = (f"CASE WHEN copyKind IN ({', '.join(map(str, uvm))}) THEN 'um_migration' ELSE 'memcpy' END"
                if uvm and src.has(M, "copyKind") else "'memcpy'")
        if uvm and src.has(M, "copyKind"):
            label = f"CASE WHEN copyKind IN ({', '.join(map(str, uvm))}) THEN 'Unified memory migration ' || {ck} ELSE {label} END"
        parts.append(f"""
        SELECT {pid(M)}, {_col(src, M, "deviceId", "INTEGER")}, {_col(src, M, "streamId", "BIGINT")}, {kind},
               {label}, {ck}, start + {base}, "end" + {base}, {_col(src, M, "correlationId", "BIGINT")},
               {_col(src, M, "bytes", "BIGINT")}, {ck}, {g2}::BIGINT
        FROM src.CUPTI_ACTIVITY_KIND_MEMCPY""")
    if src.has("CUPTI_ACTIVITY_KIND_MEMSET"):
        mem = _enum_map(src, "ENUM_CUDA_MEM_KIND", _MEM_KIND)
        label = f"'Memset (' || {_case('memKind', mem)} || ')'" if src.has("CUPTI_ACTIVITY_KIND_MEMSET", "memKind") else "'Memset'"
        g3 = "graphNodeId" if src.has("CUPTI_ACTIVITY_KIND_MEMSET", "graphNodeId") else "NULL"
        parts.append(f"""
        SELECT {pid(S)}, {_col(src, S, "deviceId", "INTEGER")}, {_col(src, S, "streamId", "BIGINT")}, 'memset',
               {label}, 'Memset', start + {base}, "end" + {base}, {_col(src, S, "correlationId", "BIGINT")},
               {_col(src, S, "bytes", "BIGINT")}, NULL, {g3}::BIGINT
        FROM src.CUPTI_ACTIVITY_KIND_MEMSET""")
    con.execute("CREATE TEMP VIEW gpu AS " + " UNION ALL ".join(parts))
    return "gpu"


def _host_ops(src: _Src, base: int):
    con = src.con
    parts = []
    clean = "regexp_replace(s.value, '_v[0-9]+$', '')"  # cudaLaunchKernel_v7000 -> cudaLaunchKernel

    def gtid(table):
        # with no process for the GPU ops (_one_process), the calls keep their thread, in no process
        if not src.has(table, "globalTid"):
            return "NULL::BIGINT"
        return "(globalTid & 16777215)" if _one_process(src) else "globalTid"
    if src.has("CUPTI_ACTIVITY_KIND_RUNTIME"):
        # Name and kind once per distinct name (a few hundred), not per call (a million on the bench's
        # rank 2: the regexp per row was 0.3 s of its 0.45 s).
        con.execute(f"""CREATE TEMP TABLE api_names AS
            SELECT id, {clean} AS name,
                   CASE WHEN s.value LIKE 'cuda%' OR s.value NOT LIKE 'cu%' THEN 'cuda_runtime' ELSE 'cuda_driver' END AS kind
            FROM strings s WHERE id IN (SELECT DISTINCT nameId FROM src.CUPTI_ACTIVITY_KIND_RUNTIME)""")
        # Nsight Systems 2022.2 writes some calls twice, one row nested in the other, with one correlation
        # id and thread (`cudaMalloc` and `cudaMalloc_v3020`; pipit's saxpy-mpi-cuda: 95 rows for 57 ids,
        # 30 cudaMemcpy rows for 15 calls, blocking 748.7 ms where the calls blocked 374.3 ms): one call,
        # the longer row. Checked first, so that an export without such rows pays no window over its calls.
        corr = _col(src, "CUPTI_ACTIVITY_KIND_RUNTIME", "correlationId", "BIGINT")
        twice = src.has("CUPTI_ACTIVITY_KIND_RUNTIME", "correlationId") and con.execute(
            """SELECT count(*) > count(DISTINCT (globalTid, correlationId)) FROM src.CUPTI_ACTIVITY_KIND_RUNTIME
               WHERE correlationId IS NOT NULL AND correlationId <> 0""").fetchone()[0] \
            if src.has("CUPTI_ACTIVITY_KIND_RUNTIME", "globalTid") else False
        once = (f"""QUALIFY {corr} IS NULL OR {corr} = 0 OR row_number() OVER (
                        PARTITION BY r.globalTid, {corr}, s.name ORDER BY r."end" - r.start DESC, r.start) = 1""" if twice else "")
        parts.append(f"""
        SELECT {gtid("CUPTI_ACTIVITY_KIND_RUNTIME")} AS gtid, s.name, coalesce(s.kind, 'cuda_runtime') AS kind,
               start + {base} AS start_ns, "end" + {base} AS end_ns,
               {corr} AS correlation_id
        FROM src.CUPTI_ACTIVITY_KIND_RUNTIME r LEFT JOIN api_names s ON s.id = r.nameId {once}""")
    if src.has("OSRT_API"):
        parts.append(f"""
        SELECT {gtid("OSRT_API")}, s.value, 'osrt', start + {base}, "end" + {base}, NULL::BIGINT
        FROM src.OSRT_API o LEFT JOIN strings s ON s.id = o.nameId""")
    if not parts:
        con.execute("""CREATE TEMP VIEW host AS SELECT NULL::BIGINT AS gpid, NULL::BIGINT AS pid, NULL::BIGINT AS tid,
                       NULL::VARCHAR AS kind, NULL::VARCHAR AS name, NULL::BIGINT AS start_ns, NULL::BIGINT AS end_ns,
                       NULL::BIGINT AS correlation_id WHERE FALSE""")
        return "host"
    con.execute(f"""CREATE TEMP VIEW host AS
        SELECT {"NULL::BIGINT" if _one_process(src) else "(gtid >> 24) << 24"} AS gpid,
               {"NULL::BIGINT" if _one_process(src) else "(gtid >> 24) & 16777215"} AS pid, gtid & 16777215 AS tid,
               kind, name, start_ns, end_ns, correlation_id
        FROM ({" UNION ALL ".join(parts)})""")
    return "host"


def _ranges(src: _Src, base: int):
    con = src.con
    if not src.has("NVTX_EVENTS"):
        con.execute("""CREATE TEMP TABLE rng (gpid BIGINT, tid BIGINT, domain VARCHAR, name VARCHAR,
                       start_ns BIGINT, end_ns BIGINT, on_gpu BOOLEAN)""")
        return
    has_textid = src.has("NVTX_EVENTS", "textId")
    text = "coalesce(n.text, s.value)" if has_textid else "n.text"
    join = "LEFT JOIN strings s ON s.id = n.textId" if has_textid else ""
    dom = "domainId" if src.has("NVTX_EVENTS", "domainId") else "0"
    types = ", ".join(map(str, _NVTX_RANGE_TYPES))
    con.execute(f"""CREATE TEMP TABLE rng AS
        WITH domains AS (
            SELECT {dom} AS domain_id, any_value(text) AS domain FROM src.NVTX_EVENTS
            WHERE eventType = {_NVTX_DOMAIN_CREATE} GROUP BY ALL)
        SELECT (n.globalTid >> 24) << 24 AS gpid, n.globalTid & 16777215 AS tid, d.domain,
               {text} AS name, n.start + {base} AS start_ns, n."end" + {base} AS end_ns, FALSE AS on_gpu
        FROM src.NVTX_EVENTS n {join} LEFT JOIN domains d ON d.domain_id = n.{dom}
        WHERE n.eventType IN ({types}) AND n."end" IS NOT NULL""")


# PyTorch's emit_nvtx names each op's range "<op>, seq = N, op_id = N, sizes = [[2, 3], []], input_op_ids
# = [...]" (torch/csrc/profiler/util.cpp, getNvtxStr; seq and op_id come and go with the version, sizes
# only with record_shapes=True).
_EMIT_NVTX = r"^[^,]+, (seq|op_id|sizes) = "
_EMIT_NVTX_SIZES = r", sizes = (\[\]|\[\[.*?\]\])(?:, |$)"


def _emit_nvtx_ops(con):
    """The ranges that torch.autograd.profiler.emit_nvtx wrote are CPU ops, as the PyTorch profiler
    records them: moved from the NVTX ranges into the host calls (kind cpu_op), with their input
    shapes where recorded. The derive step links each kernel to the innermost of them around its
    launch call. They carry no dtypes."""
    con.execute(f"""INSERT INTO h (gpid, pid, tid, kind, name, start_ns, end_ns, correlation_id, input_dims)
        SELECT gpid, (gpid >> 24) & 16777215, tid, 'cpu_op', regexp_extract(name, '^([^,]+),', 1), start_ns, end_ns,
               NULL, nullif(regexp_extract(name, '{_EMIT_NVTX_SIZES}', 1), '')
        FROM rng WHERE regexp_matches(name, '{_EMIT_NVTX}')""")
    con.execute(f"DELETE FROM rng WHERE regexp_matches(name, '{_EMIT_NVTX}')")


def _nccl_rank(src: _Src, gpid) -> int | None:
    """Rank of the process from NCCL's NVTX payload (ncclCommInitRank* 'Rank' field), when stored.

    Exports keep the payload in NVTX_EVENTS.binaryData with the layout in NVTX_PAYLOAD_SCHEMA_ENTRIES;
    many exports leave it empty, and then the caller falls back to the file name.
    """
    if gpid is None or not (src.has("NVTX_EVENTS", "binaryData") and src.has("NVTX_PAYLOAD_SCHEMA_ENTRIES")):
        return None
    con = src.con
    try:
        row = con.execute(f"""
            SELECT n.binaryData, e."offset" FROM src.NVTX_EVENTS n
            JOIN src.NVTX_PAYLOAD_SCHEMA_ENTRIES e ON e.name = 'Rank'
            WHERE (n.globalTid >> 24) << 24 = {int(gpid)} AND n.binaryData IS NOT NULL AND octet_length(n.binaryData) >= e."offset" + 4
            LIMIT 1""").fetchone()
    except duckdb.Error:
        return None
    if not row or row[0] is None or row[1] is None:
        return None
    data, off = bytes(row[0]), int(row[1])
    return int.from_bytes(data[off:off + 4], "little", signed=True)
