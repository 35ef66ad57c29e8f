"""ROCm's SQLite profiles -> Arrow tables, one set per traced process: rocprofv3's `rocpd` database
(ROCm 7's default output, `<pid>_results.db`) and rocmProfileData's `.rpd`.

Both are read like the nsys export (readers/nsys.py): the tables the reader uses come out of SQLite
through ADBC as Arrow, and DuckDB maps them onto the canonical tables; no Python runs per row.

- rocpd (rocprofiler-sdk): every table is written once per profiled process with the process's
  guid as a suffix (`rocpd_kernel_dispatch_00003fdc_...`), and views without the suffix union them;
  a merged database holds several guids. The guid tables are read, not the views (a view joins
  with INNER JOINs and drops a dispatch whose event row is missing). Correlation: a dispatch's
  event and the HIP call's event share `stack_id` (rocprofiler's internal correlation id).
- rpd (rocmProfileData, rocpd schema_version 2): `rocpd_op` (GPU work) and `rocpd_api` (host calls)
  linked by `rocpd_api_ops`, names in `rocpd_string`.

Times in both are the host's monotonic clock in ns (ns since boot), not the wall clock: they are
kept as recorded, so processes of one host share a clock and hosts do not (docs/formats.md).

Size: three SQLite formats (rocpd, .rpd, rocprof v1) share the host-call/GPU-op mapping and the checks.
"""
from __future__ import annotations

import os
import re
import sqlite3
from pathlib import Path
from urllib.parse import quote

import duckdb
import pyarrow as pa

from ..duck import relation, sql_string
from ..errors import InputError, one_line
from .model import ProcessTrace

GUID = r"_[0-9a-f]{8}_[0-9a-f]{4}_[0-9a-f]{4}_[0-9a-f]{4}_[0-9a-f]{12}"
# rocpd table families the reader uses, and their columns (JSON columns - agents' topology, a
# process's environment - are most of a database's bytes and are not read)
ROCPD = {
    "kernel_dispatch": ("guid", "pid", "tid", "agent_id", "kernel_id", "queue_id", "stream_id", "start", "end",
                        "event_id"),
    "memory_copy": ("guid", "pid", "tid", "start", "end", "name_id", "dst_agent_id", "src_agent_id", "size",
                    "queue_id", "stream_id", "event_id"),
    "memory_allocate": ("guid", "pid", "tid", "agent_id", "type", "level", "start", "end", "address", "size",
                        "queue_id", "stream_id", "event_id"),
    "region": ("guid", "pid", "tid", "start", "end", "name_id", "event_id"),
    "event": ("guid", "id", "category_id", "stack_id", "correlation_id"),
    "string": ("guid", "id", "string"),
    "info_agent": ("guid", "id", "type", "type_index", "product_name", "name"),
    "info_process": ("guid", "id", "nid", "pid", "command", "environment"),
    "info_thread": ("guid", "id", "tid"),
    "info_kernel_symbol": ("guid", "id", "kernel_name", "display_name"),
    "info_node": ("guid", "id", "hostname"),
    "metadata": ("tag", "value"),
}
_ROCPD_REQUIRED = {"kernel_dispatch": ("start", "end", "kernel_id"), "string": ("id", "string"),
                   "info_kernel_symbol": ("id",), "region": ("start", "end", "name_id")}
RPD = {
    "rocpd_op": ("id", "gpuId", "queueId", "start", "end", "description_id", "opType_id"),
    "rocpd_api": ("id", "pid", "tid", "start", "end", "apiName_id", "args_id"),
    "rocpd_api_ops": ("api_id", "op_id"),
    "rocpd_string": ("id", "string"),
    "rocpd_copyapi": ("api_ptr_id", "size"),
    "rocpd_metadata": ("tag", "value"),
}
# rocprof v1 (ROCm 5-6 `rocprof`, its results.db): KERN (kernel dispatches, with --timestamp on or
# --stats), OPS / COPY (kernels and copies of --hip-trace, by the HIP call's Index), HIP (the calls)
V1 = {
    "KERN": ("Index", "KernelName", "gpu-id", "queue-id", "pid", "tid", "BeginNs", "EndNs"),
    "OPS": ("Index", "Name", "dev-id", "queue-id", "stream-id", "pid", "tid", "BeginNs", "EndNs"),
    "COPY": ("Index", "Name", "dev-id", "queue-id", "stream-id", "pid", "tid", "BeginNs", "EndNs"),
    "HIP": ("Index", "Name", "pid", "tid", "BeginNs", "EndNs"),
}
_RPD_REQUIRED = {"rocpd_op": ("gpuId", "queueId", "start", "end", "description_id", "opType_id"),
                 "rocpd_string": ("id", "string"), "rocpd_api": ("pid", "tid", "start", "end", "apiName_id", "args_id")}

# rpd op types -> kind; the others (barriers, markers on the GPU queue) are counted, not read
RPD_KERNEL = ("KernelExecution", "Task")  # 'Task': a kernel node of a hipGraphLaunch
RPD_COPY = {"CopyHostToDevice": "HtoD", "CopyDeviceToHost": "DtoH", "CopyDeviceToDevice": "DtoD",
            "CopyHostToHost": "HtoH", "CopyPeerToPeer": "PtoP"}
RPD_FILL = ("FillBuffer",)
# rocprofiler-sdk's memory-copy operation names -> CUPTI's words (the packs read HtoD, DtoH, ...)
ROCPD_COPY = {"MEMORY_COPY_HOST_TO_DEVICE": "HtoD", "MEMORY_COPY_DEVICE_TO_HOST": "DtoH",
              "MEMORY_COPY_DEVICE_TO_DEVICE": "DtoD", "MEMORY_COPY_HOST_TO_HOST": "HtoH"}
MONOTONIC = ("times are the host's monotonic clock (ns since boot), as ROCm's profilers record them: shown from "
             "1970-01-01; processes of one host share that clock, hosts are aligned by their collectives")


def sniff(path: str) -> str | None:
    """'rocpd-sqlite', 'rpd-sqlite' or 'rocprof-sqlite' (rocprof v1's results.db) when the SQLite file at `path` holds those tables, else None.
    Its schema is read (read-only, immutable: nothing is written beside the file); a file SQLite
    cannot open is left to the reader that says so."""
    uri = "file:" + quote(os.fsencode(Path(path).resolve())) + "?mode=ro&immutable=1"
    try:
        with sqlite3.connect(uri, uri=True) as con:
            names = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
    except sqlite3.Error:
        return None
    if "rocpd_kernel_dispatch" in names or any(re.fullmatch("rocpd_kernel_dispatch" + GUID, n) for n in names):
        return "rocpd-sqlite"
    if {"rocpd_op", "rocpd_api"} <= names:  # rocpd_string is required too: the reader says so when it is gone
        return "rpd-sqlite"
    if ("OPS" in names or "KERN" in names) and "StringIds" not in names:
        return "rocprof-sqlite"
    return None


def read(path: str, sink, key: str, fmt: str) -> list[ProcessTrace]:
    """The map step for a rocpd database, an .rpd file or a rocprof v1 results.db (`fmt` as detect() named it)."""
    con = duckdb.connect(config={"autoinstall_known_extensions": "false", "autoload_known_extensions": "false"})
    try:
        con.execute("SET threads = 1")
        con.execute("SET memory_limit = '768MB'")
        con.execute(f"SET temp_directory = {sql_string(str(Path(sink.folder) / f'spill-{key}'))}")
        con.execute("CREATE SCHEMA src")
        try:
            if fmt == "rocpd-sqlite":
                cols = _load(con, path, _rocpd_tables)
                return _rocpd(con, cols, path, sink, key)
            if fmt == "rocprof-sqlite":
                cols = _load(con, path, lambda names: {t: t for t in V1 if t in names})
                return _rocprof_v1(con, cols, path, sink, key)
            cols = _load(con, path, lambda names: {t: t for t in RPD if t in names})
            return _rpd(con, cols, path, sink, key)
        except duckdb.Error as e:
            raise InputError(path, f"corrupt or unreadable {_WHAT[fmt]} ({one_line(e) or type(e).__name__})") from None
    finally:
        con.close()


_WHAT = {"rocpd-sqlite": "rocpd database", "rpd-sqlite": "rocmProfileData .rpd file",
         "rocprof-sqlite": "rocprof v1 results.db"}


def _rocpd_tables(names) -> dict[str, list[str]]:
    """family -> the guid tables holding it (one per process in the file); a file without guid
    tables (an older or hand-merged database) has the family as one table."""
    out: dict[str, list[str]] = {}
    for fam in ROCPD:
        found = sorted(n for n in names if re.fullmatch(f"rocpd_{fam}{GUID}", n))
        if not found and f"rocpd_{fam}" in names:
            found = [f"rocpd_{fam}"]
        if found:
            out[fam] = found
    return out


def _load(con, path, tables_of) -> dict[str, set[str]]:
    """Reads the wanted tables (only the reader's columns) into DuckDB views src.<name>; returns
    each name's columns. SQLite opens the file read-only and immutable (no journal beside it)."""
    import adbc_driver_sqlite.dbapi as adbc

    from .nsys import sql_ident, valid_utf8
    uri = "file:" + quote(os.fsencode(Path(path).resolve())) + "?mode=ro&immutable=1"
    wanted_cols = {**ROCPD, **RPD, **V1}
    cols: dict[str, set[str]] = {}
    try:
        with adbc.connect(uri) as db, db.cursor() as cur:
            cur.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            names = {r[0] for r in cur.fetchall()}
            for name, tables in tables_of(names).items():
                parts = []
                for t in ([tables] if isinstance(tables, str) else tables):
                    cur.execute(f"SELECT name, type FROM pragma_table_info('{t}')")
                    declared = {c: typ for c, typ in cur.fetchall() if c in wanted_cols[name]}
                    if not declared:
                        continue
                    cur.execute(f"SELECT {', '.join(map(sql_ident, declared))} FROM {sql_ident(t)}")
                    part = cur.fetch_arrow_table()
                    if not part.num_rows:  # ADBC types the columns of an empty table as int64: typed as declared
                        part = pa.table({c: pa.array([], pa.string() if "TEXT" in typ.upper() else pa.int64())
                                         for c, typ in declared.items()})
                    parts.append(part)
                if not parts:
                    continue
                table = pa.concat_tables(parts, promote_options="permissive") if len(parts) > 1 else parts[0]
                con.register(f"_sqlite_{name}", valid_utf8(table))
                con.execute(f"CREATE VIEW src.{sql_ident(name)} AS SELECT * FROM {sql_ident('_sqlite_' + name)}")
                cols[name] = set(table.column_names)
    except adbc.Error as e:
        raise InputError(path, f"not a readable SQLite file, or a damaged one ({one_line(e) or type(e).__name__})") from None
    return cols


def _require(cols, required, path, what):
    for t, need in required.items():
        if t not in cols:
            raise InputError(path, f"{what} has no {t} table (required; damaged or unsupported file)")
        missing = [c for c in need if c not in cols[t]]
        if missing:
            raise InputError(path, f"{what} table {t} lacks column(s) {', '.join(missing)} (unsupported or damaged schema)")


def _c(cols, table, col, typ, alias="") -> str:
    """`alias.col` cast to `typ` where the table has the column, else a typed NULL."""
    return f'{alias + "." if alias else ""}"{col}"::{typ}' if col in cols.get(table, ()) else f"NULL::{typ}"


def drop_bad(con, rels, warnings, path, what):
    """Every time column is INTEGER NOT NULL in these schemas: a missing or non-integer time (text, a
    blob) is damage, refused. An end before its start or a negative time are dropped and counted
    (as the nsys reader does)."""
    for rel, rows in rels:
        n = con.execute(f"SELECT count(*) FROM {rel} WHERE start_ns IS NULL OR end_ns IS NULL").fetchone()[0]
        if n:
            raise InputError(path, f"{what} has {n:,} {rows} whose start or end is missing or not an integer (damaged file)")
        bad = "end_ns < start_ns OR start_ns < 0 OR end_ns > 4611686018427387904"
        n = con.execute(f"SELECT count(*) FROM {rel} WHERE {bad}").fetchone()[0]
        if n:
            con.execute(f"DELETE FROM {rel} WHERE {bad}")
            warnings.append(f"dropped {n:,} {rows} with an end before their start or a negative time")


def _times(alias) -> str:
    """start/end as BIGINT ns; text in a time column (damage) becomes NULL, refused by drop_bad."""
    return f'TRY_CAST({alias}."start" AS BIGINT) AS start_ns, TRY_CAST({alias}."end" AS BIGINT) AS end_ns'


# --- rocpd (rocprofv3) ------------------------------------------------------------------------------

def _rocpd(con, cols, path, sink, key) -> list[ProcessTrace]:
    # Long because: one pass over the database's tables in load order, most lines SQL.
    _require(cols, _ROCPD_REQUIRED, path, "rocpd database")
    g = "guid" if "guid" in cols["kernel_dispatch"] else None

    def on(a, b):  # rows of one process (guid) of a merged database join only each other
        return f" AND {a}.guid = {b}.guid" if g and "guid" in cols.get(_fam(a), ()) and "guid" in cols.get(_fam(b), ()) else ""
    con.execute(f"CREATE TEMP TABLE strings AS SELECT {_c(cols, 'string', 'guid', 'VARCHAR')} AS guid, id, string FROM src.string")
    has_event = "event" in cols and "stack_id" in cols["event"] and "id" in cols["event"]
    ev_join = lambda a: (f"LEFT JOIN src.event E ON E.id = {a}.event_id{on('E', a)}"  # noqa: E731
                         if has_event and "event_id" in cols.get(_fam(a), ()) else "")
    corr = "E.stack_id::BIGINT" if has_event else "NULL::BIGINT"
    agents = "info_agent" in cols and {"id", "type_index"} <= cols["info_agent"]
    gpu_index = lambda a, col: (f"(SELECT any_value(A.type_index) FROM src.info_agent A WHERE A.id = {a}.{col}"  # noqa: E731
                                f"{on('A', a)} AND A.type = 'GPU')::INTEGER" if agents else "NULL::INTEGER")
    sym = "coalesce(S.display_name, S.kernel_name)" if "display_name" in cols["info_kernel_symbol"] else "S.kernel_name"
    kd = cols["kernel_dispatch"]
    parts = [f"""
        SELECT {_c(cols, 'kernel_dispatch', 'guid', 'VARCHAR', 'K')} AS guid, K.pid::BIGINT AS proc,
               {gpu_index('K', 'agent_id') if 'agent_id' in kd else 'NULL::INTEGER'} AS device,
               {_c(cols, 'kernel_dispatch', 'stream_id', 'BIGINT', 'K')} AS stream, 'kernel' AS kind,
               {sym} AS name, NULL::VARCHAR AS short_name, {_times('K')},
               {corr} AS correlation_id, NULL::BIGINT AS bytes, NULL::VARCHAR AS copy_kind
        FROM src.kernel_dispatch K LEFT JOIN src.info_kernel_symbol S ON S.id = K.kernel_id{on('S', 'K')}
        {ev_join('K')}"""]
    if "memory_copy" in cols:
        mc = cols["memory_copy"]
        case = " ".join(f"WHEN {sql_string(k)} THEN {sql_string(v)}" for k, v in ROCPD_COPY.items())
        dev = (f"coalesce({gpu_index('M', 'dst_agent_id')}, {gpu_index('M', 'src_agent_id')})"
               if {"dst_agent_id", "src_agent_id"} <= mc else "NULL::INTEGER")
        parts.append(f"""
        SELECT {_c(cols, 'memory_copy', 'guid', 'VARCHAR', 'M')}, M.pid::BIGINT, {dev},
               {_c(cols, 'memory_copy', 'stream_id', 'BIGINT', 'M')}, 'memcpy',
               'Memcpy ' || coalesce(CASE N.string {case} END, N.string, 'Unknown'), CASE N.string {case} END,
               {_times('M')}, {corr}, {_c(cols, 'memory_copy', 'size', 'BIGINT', 'M')},
               coalesce(CASE N.string {case} END, 'Unknown')
        FROM src.memory_copy M LEFT JOIN strings N ON N.id = M.name_id{on('N', 'M')} {ev_join('M')}""")
    con.execute("CREATE TEMP TABLE g AS " + " UNION ALL ".join(parts))
    n = con.execute("SELECT count(*) FROM g WHERE name IS NULL").fetchone()[0]
    if n:
        raise InputError(path, f"rocpd database lacks the names of {n} GPU ops (their kernel symbols or strings; damaged file)")
    # Host side: HIP / HSA / RCCL calls are host calls; roctx markers (pushed or started ranges) are
    # annotations, as NVTX ranges are in an nsys export.
    cat = "(SELECT C.string FROM strings C WHERE C.id = E.category_id" + (" AND C.guid = E.guid)" if g else ")")
    cat = cat if has_event and "category_id" in cols["event"] else "NULL"
    tid = ("(SELECT any_value(T.tid) FROM src.info_thread T WHERE T.id = R.tid" + on("T", "R") + ")::BIGINT"
           if "info_thread" in cols else "R.tid::BIGINT")
    con.execute(f"""CREATE TEMP TABLE r0 AS
        SELECT {_c(cols, 'region', 'guid', 'VARCHAR', 'R')} AS guid, R.pid::BIGINT AS proc, {tid} AS tid,
               {cat} AS category, N.string AS name, {_times('R')}, {corr} AS correlation_id
        FROM src.region R LEFT JOIN strings N ON N.id = R.name_id{on('N', 'R')} {ev_join('R')}""")
    n = con.execute("SELECT count(*) FROM r0 WHERE name IS NULL").fetchone()[0]
    if n:
        raise InputError(path, f"rocpd database lacks the names of {n} host calls (damaged file)")
    con.execute("""CREATE TEMP TABLE h AS
        SELECT guid, proc, tid,
               CASE WHEN category LIKE 'HIP%' THEN 'cuda_runtime' WHEN category LIKE 'HSA%' THEN 'cuda_driver'
                    WHEN category LIKE 'RCCL%' THEN 'rccl_api' ELSE lower(coalesce(category, 'other')) END AS kind,
               name, start_ns, end_ns, correlation_id
        FROM r0 WHERE coalesce(category, '') NOT LIKE 'MARKER%'""")
    con.execute("""CREATE TEMP TABLE rng AS
        SELECT guid, proc, tid, 'roctx' AS domain, name, start_ns, end_ns, FALSE AS on_gpu
        FROM r0 WHERE category LIKE 'MARKER%'""")
    warnings: list[str] = [MONOTONIC]
    n_copies = con.execute("SELECT count(*) FROM g WHERE kind = 'memcpy'").fetchone()[0]
    n_calls = con.execute("SELECT count(*) FROM h WHERE name LIKE 'hipMemcpy%'").fetchone()[0]
    if n_calls and not n_copies:  # rocprofv3 traces copies only with --memory-copy-trace (or --runtime-trace)
        warnings.append(f"{n_calls:,} hipMemcpy calls but no memory copies recorded (rocprofv3 ran without "
                        "--memory-copy-trace): the GPU's copy time is in no figure")
    torch_ops(con)
    drop_bad(con, (("g", "GPU ops"), ("h", "host calls"), ("rng", "roctx ranges")), warnings, path, "rocpd database")
    procs = con.execute("""SELECT guid, proc FROM (SELECT guid, proc FROM g UNION SELECT guid, proc FROM h)
                           GROUP BY ALL ORDER BY guid NULLS FIRST, proc""").fetchall()
    info: dict = {}
    ranks: dict = {}
    if "info_process" in cols and {"id", "pid"} <= cols["info_process"]:
        gcol = "guid" if "guid" in cols["info_process"] else "NULL"
        host = ("(SELECT any_value(N.hostname) FROM src.info_node N WHERE N.id = P.nid" + on("N", "P") + ")"
                if "info_node" in cols and "nid" in cols["info_process"] else "NULL")
        env = "P.environment" if "environment" in cols["info_process"] else "NULL"
        for guid, pid_row, pid, hostname, environ in con.execute(
                f"SELECT {gcol}, P.id, P.pid, {host}, {env} FROM src.info_process P").fetchall():
            info[(guid, pid_row)] = (pid, hostname)
            ranks[(guid, pid_row)] = launcher_rank(environ)
    names = {}
    if agents and "product_name" in cols["info_agent"]:
        gcol = "guid" if "guid" in cols["info_agent"] else "NULL"
        for guid, idx, name in con.execute(f"SELECT {gcol}, type_index, product_name FROM src.info_agent WHERE type = 'GPU'").fetchall():
            names[(guid, idx)] = name
    version = None
    if "metadata" in cols:
        meta = dict(con.execute("SELECT tag, value FROM src.metadata").fetchall())
        version = f"rocpd schema {meta['schema_version']}" if meta.get("schema_version") else None
    if not procs:
        warnings.append("no GPU work and no HIP calls in this rocpd database")
        procs = [(None, None)]
    traces = emit(con, procs, sink, key, path, "rocpd-sqlite", version, warnings,
                  lambda guid, proc: info.get((guid, proc), (None, None)), names)
    for t, (guid, proc) in zip(traces, procs):
        t.rank_hint, t.rank_hint_source, t.world_size = ranks.get((guid, proc)) or (None, None, None)
    return traces


# the launchers' variables that name a process's rank and the job's size, in the order they are trusted
# (torchrun, Open MPI, MPICH / PMIx, Slurm's srun)
RANK_VARS = (("RANK", "WORLD_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("PMI_RANK", "PMI_SIZE"),
             ("PMIX_RANK", None), ("SLURM_PROCID", "SLURM_NTASKS"))


def launcher_rank(environ) -> tuple[int, str, int | None] | None:
    """(rank, where it came from, world size) from the process's environment as rocprofv3 recorded it
    (rocpd_info_process.environment, a JSON object); None when it names none. One row per process:
    parsed here, not per event."""
    import json
    try:
        env = json.loads(environ) if isinstance(environ, (str, bytes)) else None
    except ValueError:
        return None
    if not isinstance(env, dict):
        return None
    for var, size_var in RANK_VARS:
        value = str(env.get(var, "")).strip()
        if value.isdigit():
            size = str(env.get(size_var, "")).strip() if size_var else ""
            return int(value), f"environment ({var})", int(size) if size.isdigit() else None
    return None


def _fam(alias: str) -> str:
    return {"K": "kernel_dispatch", "M": "memory_copy", "R": "region", "E": "event", "S": "info_kernel_symbol",
            "A": "info_agent", "N": "string", "T": "info_thread", "P": "info_process", "C": "string"}.get(alias, alias)


# PyTorch's ops as roctx writes them: emit_nvtx's "<op>, seq = N, ..." (the same text on ROCm as
# NVTX's, readers/nsys.py) or an op's bare qualified name (rpd's PyTorch hook: "aten::mm", "_C::...")
_TORCH_OP = r"^([A-Za-z_][A-Za-z0-9_]*::[A-Za-z0-9_.:]+)(?:$|, (?:seq|op_id|sizes) = )"


def torch_ops(con):
    """roctx ranges that are PyTorch ops become CPU ops (host_ops kind cpu_op), as emit_nvtx ranges do
    in an nsys export: the derive step charges each kernel to the innermost one around its launch.
    Other ranges (a user's "step 3") stay annotations."""
    con.execute(f"""INSERT INTO h (guid, proc, tid, kind, name, start_ns, end_ns, correlation_id)
        SELECT guid, proc, tid, 'cpu_op', regexp_extract(name, '{_TORCH_OP}', 1), start_ns, end_ns, NULL
        FROM rng WHERE regexp_matches(name, '{_TORCH_OP}')""")
    con.execute(f"DELETE FROM rng WHERE regexp_matches(name, '{_TORCH_OP}')")


def emit(con, procs, sink, key, path, fmt, version, warnings, proc_info, gpu_names) -> list[ProcessTrace]:
    """Writes each process's rows (g, h, rng keyed by guid and proc) to the sink."""
    out = []
    for i, (guid, proc) in enumerate(procs):
        flt = ("guid IS NULL" if guid is None else f"guid = {sql_string(guid)}") + \
              (" AND proc IS NULL" if proc is None else f" AND proc = {int(proc)}")
        if guid is None and proc is None:
            flt = "TRUE"
        pid, hostname = proc_info(guid, proc)
        pkey = f"{key}{i}"
        counts = {}
        for table, rel, cols in (("gpu_ops", "g", "device, stream, kind, name, short_name, start_ns, end_ns, correlation_id, "
                                  "bytes, copy_kind"),
                                 ("host_ops", "h", f"{int(pid) if pid is not None else 'NULL'}::BIGINT AS pid, tid, kind, name, "
                                  "start_ns, end_ns, correlation_id"),
                                 ("ranges", "rng", "tid, domain, name, start_ns, end_ns, on_gpu")):
            n = 0
            for batch in relation(con, f"SELECT {cols} FROM {rel} WHERE {flt}").to_arrow_reader(1 << 20):
                n += batch.num_rows
                sink.write(pkey, table, batch)
            counts[table] = n
        devs = [r[0] for r in con.execute(f"SELECT DISTINCT device FROM g WHERE {flt} AND device IS NOT NULL").fetchall()]
        device_name = ", ".join(sorted({str(gpu_names.get((guid, d), "")) for d in devs} - {""})) or None
        out.append(ProcessTrace(
            source_path=path, source_format=fmt, key=pkey, profiler_version=version, hostname=hostname,
            pid=pid, device_name=device_name, warnings=list(warnings), n_processes=len(procs), counts=counts,
            devices=tuple(sorted(devs))))
    return out


# --- rpd (rocmProfileData) ------------------------------------------------------------------------

def _rpd(con, cols, path, sink, key) -> list[ProcessTrace]:
    # Long because: the .rpd tables map onto ours in one pass of SQL (ops, calls, their links, markers), which
    # reads best whole; split, each piece would repeat the joins it shares.
    _require(cols, _RPD_REQUIRED, path, "rpd file")
    kernel = ", ".join(map(sql_string, RPD_KERNEL))
    copy = " ".join(f"WHEN {sql_string(k)} THEN {sql_string(v)}" for k, v in RPD_COPY.items())
    fill = ", ".join(map(sql_string, RPD_FILL))
    con.execute("CREATE TEMP TABLE strings AS SELECT id, string FROM src.rocpd_string")
    links = "rocpd_api_ops" in cols and {"api_id", "op_id"} <= cols["rocpd_api_ops"]
    link = ("LEFT JOIN (SELECT op_id, min(api_id) AS api_id FROM src.rocpd_api_ops GROUP BY op_id) L ON L.op_id = O.id"
            if links and "id" in cols["rocpd_op"] else "LEFT JOIN (SELECT NULL::BIGINT AS api_id) L ON FALSE")
    # a copy's size is in its call's row (rocpd_copyapi); rpd writes '' there for some calls
    size = ("TRY_CAST((SELECT any_value(C.size) FROM src.rocpd_copyapi C WHERE C.api_ptr_id = L.api_id) AS BIGINT)"
            if "rocpd_copyapi" in cols and {"api_ptr_id", "size"} <= cols["rocpd_copyapi"] else "NULL::BIGINT")
    con.execute(f"""CREATE TEMP TABLE o AS
        SELECT O.gpuId::INTEGER AS device, O.queueId::BIGINT AS stream, T.string AS optype, D.string AS description,
               TRY_CAST(O."start" AS BIGINT) AS start_ns, TRY_CAST(O."end" AS BIGINT) AS end_ns, L.api_id::BIGINT AS api_id,
               {size} AS size
        FROM src.rocpd_op O LEFT JOIN strings T ON T.id = O.opType_id LEFT JOIN strings D ON D.id = O.description_id {link}""")
    n = con.execute("SELECT count(*) FROM o WHERE optype IS NULL OR description IS NULL").fetchone()[0]
    if n:
        raise InputError(path, f"rpd file's rocpd_string lacks the names of {n} GPU ops (damaged file)")
    con.execute(f"""CREATE TEMP TABLE g0 AS
        SELECT device, stream,
               CASE WHEN optype IN ({kernel}) THEN 'kernel' WHEN optype IN ({fill}) THEN 'memset'
                    WHEN (CASE optype {copy} END) IS NOT NULL THEN 'memcpy' END AS kind,
               CASE WHEN optype IN ({kernel}) THEN description WHEN optype IN ({fill}) THEN 'Memset'
                    ELSE 'Memcpy ' || coalesce(CASE optype {copy} END, '') END AS name,
               CASE optype {copy} END AS short_name, start_ns, end_ns, api_id AS correlation_id,
               CASE WHEN optype NOT IN ({kernel}) THEN size END AS bytes, CASE optype {copy} END AS copy_kind
        FROM o""")
    warnings: list[str] = [MONOTONIC]
    other = con.execute(f"""SELECT optype, count(*) FROM o WHERE optype NOT IN ({kernel}, {fill})
                            AND (CASE optype {copy} END) IS NULL GROUP BY 1 ORDER BY 2 DESC""").fetchall()
    if other:
        warnings.append("GPU ops of types not read (not kernels, copies or fills): "
                        + ", ".join(f"{t} ({c:,})" for t, c in other))
    con.execute("CREATE TEMP TABLE api AS SELECT A.id::BIGINT AS id, A.pid::BIGINT AS pid, A.tid::BIGINT AS tid, N.string AS name, "
                "S.string AS args, TRY_CAST(A.\"start\" AS BIGINT) AS start_ns, TRY_CAST(A.\"end\" AS BIGINT) AS end_ns "
                "FROM src.rocpd_api A LEFT JOIN strings N ON N.id = A.apiName_id LEFT JOIN strings S ON S.id = A.args_id")
    n = con.execute("SELECT count(*) FROM api WHERE name IS NULL").fetchone()[0]
    if n:
        raise InputError(path, f"rpd file's rocpd_string lacks the names of {n} host calls (damaged file)")
    # A GPU op belongs to the process of the call that launched it; one with no call, to the file's
    # only process (or, with several, to the first: counted in the warnings).
    procs = [r[0] for r in con.execute("SELECT DISTINCT pid FROM api ORDER BY pid").fetchall()]
    first = procs[0] if procs else None
    con.execute(f"""CREATE TEMP TABLE g AS
        SELECT NULL::VARCHAR AS guid, coalesce(a.pid, {first if first is not None else 'NULL'})::BIGINT AS proc, g0.*
        FROM g0 LEFT JOIN api a ON a.id = g0.correlation_id WHERE g0.kind IS NOT NULL""")
    if len(procs) > 1:
        n = con.execute("SELECT count(*) FROM g0 WHERE kind IS NOT NULL AND correlation_id IS NULL").fetchone()[0]
        if n:
            warnings.append(f"{n} GPU ops have no launching call (rocpd_api_ops): put with process {first}")
    # roctx (the rpd tracer's 'UserMarker' calls: their text is in args) are annotations
    con.execute("""CREATE TEMP TABLE h AS
        SELECT NULL::VARCHAR AS guid, pid AS proc, tid,
               CASE WHEN name LIKE 'hip%' THEN 'cuda_runtime' WHEN name LIKE 'hsa%' THEN 'cuda_driver'
                    WHEN name LIKE 'nccl%' OR name LIKE 'rccl%' THEN 'rccl_api' ELSE 'other' END AS kind,
               name, start_ns, end_ns, id AS correlation_id
        FROM api WHERE name NOT IN ('UserMarker', 'UserMarkerRange')""")
    con.execute("""CREATE TEMP TABLE rng AS
        SELECT NULL::VARCHAR AS guid, pid AS proc, tid, 'roctx' AS domain, args AS name, start_ns, end_ns, FALSE AS on_gpu
        FROM api WHERE name IN ('UserMarker', 'UserMarkerRange')""")
    torch_ops(con)
    drop_bad(con, (("g", "GPU ops"), ("h", "host calls"), ("rng", "roctx ranges")), warnings, path, "rpd file")
    version = None
    if "rocpd_metadata" in cols:
        meta = dict(con.execute("SELECT tag, value FROM src.rocpd_metadata").fetchall())
        version = f"rpd schema {meta['schema_version']}" if meta.get("schema_version") else None
    rows = [(None, p) for p in procs] or [(None, None)]
    if not procs:
        warnings.append("no host calls in this rpd file")
    return emit(con, rows, sink, key, path, "rpd-sqlite", version, warnings, lambda guid, proc: (proc, None), {})


# --- rocprof v1 (results.db) ----------------------------------------------------------------------

def _rocprof_v1(con, cols, path, sink, key) -> list[ProcessTrace]:
    timed = lambda t: t in cols and {"BeginNs", "EndNs"} <= cols[t]  # noqa: E731
    if not any(timed(t) for t in ("KERN", "OPS", "COPY")):
        raise InputError(path, "rocprof v1 results.db has no timed KERN, OPS or COPY table (run rocprof with "
                         "--timestamp on or --hip-trace; a --stats-only database has no times)")
    for t in ("KERN", "OPS", "COPY", "HIP"):
        need = ("KernelName",) if t == "KERN" else ("Name",)
        if t in cols and timed(t) and (missing := [c for c in need if c not in cols[t]]):
            raise InputError(path, f"rocprof v1 table {t} lacks column(s) {', '.join(missing)} (unsupported or damaged schema)")
    copy = " ".join(f"WHEN {sql_string(k)} THEN {sql_string(v)}" for k, v in RPD_COPY.items())
    parts = ["""SELECT NULL::VARCHAR AS guid, NULL::BIGINT AS proc, NULL::INTEGER AS device, NULL::BIGINT AS stream,
                NULL::VARCHAR AS kind, NULL::VARCHAR AS name, NULL::VARCHAR AS short_name, NULL::BIGINT AS start_ns,
                NULL::BIGINT AS end_ns, NULL::BIGINT AS correlation_id, NULL::BIGINT AS bytes, NULL::VARCHAR AS copy_kind
             WHERE FALSE"""]
    # --hip-trace writes each kernel to OPS (with its call's Index) and leaves KERN without times;
    # a database with both holds each kernel twice: OPS is read, KERN is not
    ops_rows = con.execute("SELECT count(*) FROM src.OPS").fetchone()[0] if timed("OPS") else 0
    if ops_rows:
        parts.append(f"""SELECT NULL, {_c(cols, 'OPS', 'pid', 'BIGINT')}, {_c(cols, 'OPS', 'dev-id', 'INTEGER')},
            coalesce({_c(cols, 'OPS', 'stream-id', 'BIGINT')}, {_c(cols, 'OPS', 'queue-id', 'BIGINT')}), 'kernel',
            trim(Name, '"'), NULL, TRY_CAST(BeginNs AS BIGINT), TRY_CAST(EndNs AS BIGINT),
            {_c(cols, 'OPS', 'Index', 'BIGINT')}, NULL, NULL FROM src.OPS""")
    elif timed("KERN"):
        parts.append(f"""SELECT NULL, {_c(cols, 'KERN', 'pid', 'BIGINT')}, {_c(cols, 'KERN', 'gpu-id', 'INTEGER')},
            {_c(cols, 'KERN', 'queue-id', 'BIGINT')}, 'kernel',
            regexp_replace(trim(KernelName, '"'), ' \\[clone \\.kd\\]$', ''), NULL,
            TRY_CAST(BeginNs AS BIGINT), TRY_CAST(EndNs AS BIGINT), NULL, NULL, NULL FROM src.KERN""")
    if timed("COPY"):
        parts.append(f"""SELECT NULL, {_c(cols, 'COPY', 'pid', 'BIGINT')}, {_c(cols, 'COPY', 'dev-id', 'INTEGER')},
            coalesce({_c(cols, 'COPY', 'stream-id', 'BIGINT')}, {_c(cols, 'COPY', 'queue-id', 'BIGINT')}), 'memcpy',
            'Memcpy ' || coalesce(CASE Name {copy} END, Name), CASE Name {copy} END, TRY_CAST(BeginNs AS BIGINT),
            TRY_CAST(EndNs AS BIGINT),
            {_c(cols, 'COPY', 'Index', 'BIGINT')}, NULL, CASE Name {copy} END FROM src.COPY""")
    con.execute("CREATE TEMP TABLE g AS " + " UNION ALL ".join(parts))
    if timed("HIP"):
        con.execute(f"""CREATE TEMP TABLE h AS
            SELECT NULL::VARCHAR AS guid, {_c(cols, 'HIP', 'pid', 'BIGINT')} AS proc, {_c(cols, 'HIP', 'tid', 'BIGINT')} AS tid,
                   'cuda_runtime' AS kind, Name AS name, TRY_CAST(BeginNs AS BIGINT) AS start_ns,
                   TRY_CAST(EndNs AS BIGINT) AS end_ns, {_c(cols, 'HIP', 'Index', 'BIGINT')} AS correlation_id
            FROM src.HIP""")
    else:
        con.execute("""CREATE TEMP TABLE h (guid VARCHAR, proc BIGINT, tid BIGINT, kind VARCHAR, name VARCHAR,
                       start_ns BIGINT, end_ns BIGINT, correlation_id BIGINT)""")
    con.execute("""CREATE TEMP TABLE rng (guid VARCHAR, proc BIGINT, tid BIGINT, domain VARCHAR, name VARCHAR,
                   start_ns BIGINT, end_ns BIGINT, on_gpu BOOLEAN)""")
    warnings: list[str] = [MONOTONIC]
    drop_bad(con, (("g", "GPU ops"), ("h", "host calls")), warnings, path, "rocprof v1 results.db")
    procs = con.execute("SELECT DISTINCT NULL::VARCHAR, proc FROM (SELECT proc FROM g UNION ALL SELECT proc FROM h) "
                        "ORDER BY proc NULLS FIRST").fetchall()
    if not procs:
        warnings.append("no GPU work and no HIP calls in this results.db")
        procs = [(None, None)]
    return emit(con, procs, sink, key, path, "rocprof-sqlite", "rocprof v1", warnings,
                 lambda guid, proc: (proc, None), {})
