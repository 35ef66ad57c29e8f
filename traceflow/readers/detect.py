"""Which reader a file needs, from its first bytes (the suffix only breaks ties)."""
from __future__ import annotations

import gzip
import lzma
import os
import zlib
from dataclasses import dataclass

from ..errors import InputError

SQLITE_MAGIC = b"SQLite format 3\x00"
# ROCm's SQLite profiles (readers/rocm.py): rocprofv3's rocpd, rocmProfileData's .rpd, rocprof v1's results.db;
# and rocprofv3's CSV files (readers/rocprof_csv.py)
ROCM_FORMATS = ("rocpd-sqlite", "rpd-sqlite", "rocprof-sqlite", "rocprof-csv")
GZIP_MAGIC = b"\x1f\x8b"
XZ_MAGIC = b"\xfd7zXZ\x00"
PARQUET_MAGIC = b"PAR1"
ARROW_MAGIC = b"ARROW1"
ZIP_MAGIC = b"PK\x03\x04"
# Nsight Systems exports traceflow does not read, and what to pass instead (docs/formats.md): its
# parquetdir / arrowdir / arrow exports hold the SQLite export's tables, one file each; no public export
# of one has been found to test a reader on, so they are refused with the command that gives the SQLite.
NSYS_SQLITE_HINT = "pass the report's SQLite export instead: `nsys export --type sqlite --output REPORT.sqlite REPORT.nsys-rep`"


@dataclass(frozen=True)
class Input:
    """One input file, looked at once: what the pipeline schedules and a reader reads."""
    path: str
    format: str   # what detect() says
    size: int     # bytes on disk (compressed when compressed)


def identify(path: str) -> Input:
    """The file's format and size (InputError naming it when it is no trace)."""
    fmt = detect(path)
    return Input(path, fmt, os.path.getsize(path))


def detect(path: str) -> str:
    """'nsys-sqlite', 'rocpd-sqlite', 'rpd-sqlite', 'rocprof-sqlite' (ROCM_FORMATS), 'nsys-rep', 'kineto-json'
    (also JAX / XLA and autograd-list JSON), 'perfetto' (a Perfetto protobuf trace, readers/perfetto_trace.py),
    'sqlite-gz', 'sqlite-xz', 'fr-pickle', 'fr-json' (Flight
    Recorder dumps, readers/flight_recorder.py), 'torch-memory-snapshot' (readers/memory_snapshot.py);
    InputError otherwise."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(64)
    except FileNotFoundError:
        raise InputError(path, "no such file") from None
    except IsADirectoryError:
        raise InputError(path, "is a directory") from None
    except OSError as e:
        raise InputError(path, f"cannot read ({e.strerror})") from None
    if size == 0:
        raise InputError(path, "empty file (0 bytes)")
    if head.startswith(SQLITE_MAGIC):  # which profiler wrote it: by its tables (ROCm's, else nsys's)
        from .rocm import sniff as rocm_sniff
        return rocm_sniff(path) or "nsys-sqlite"
    if head.startswith(PARQUET_MAGIC) or head.startswith(ARROW_MAGIC):
        what = "a Parquet file" if head.startswith(PARQUET_MAGIC) else "an Arrow file"
        raise InputError(path, f"{what} (one table of an nsys parquetdir / arrowdir export?): traceflow does not read "
                         f"those; {NSYS_SQLITE_HINT}")
    if head.startswith(ZIP_MAGIC):
        raise InputError(path, _zip_problem(path))
    if head[:1] == b"\x80" and b"segments" in head:  # readers/memory_snapshot.py
        return "torch-memory-snapshot"
    if path.endswith((".nsys-rep", ".qdrep")):
        return "nsys-rep"
    from .perfetto_trace import looks_like
    if head.startswith(GZIP_MAGIC):
        inner = _peek(lambda: gzip.open(path, "rb"), path, "gzip")
        if inner.startswith(SQLITE_MAGIC):
            return "sqlite-gz"
        return "perfetto" if looks_like(inner) else "kineto-json"
    if head.startswith(XZ_MAGIC):
        inner = _peek(lambda: lzma.open(path, "rb"), path, "xz")
        if inner.startswith(SQLITE_MAGIC):
            return "sqlite-xz"
        raise InputError(path, "xz file that does not hold an SQLite export")
    from .flight_recorder import sniff
    if (fr := sniff(head.lstrip(b"\xef\xbb\xbf"))) is not None:
        return fr
    from .rocprof_csv import sniff as rocprof_csv
    if rocprof_csv(head):
        return "rocprof-csv"
    stripped = head.lstrip(b" \t\r\n\xef\xbb\xbf")
    if stripped[:1] in (b"{", b"["):
        return "kineto-json"
    if looks_like(head):
        return "perfetto"
    if not stripped:
        raise InputError(path, "file holds only whitespace")
    raise InputError(path, "unknown format: neither an Nsight Systems SQLite export (.sqlite), a ROCm rocpd / .rpd / rocprof "
                     "database or rocprofv3 CSV, an .nsys-rep, a Chrome-trace JSON (PyTorch profiler, JAX / XLA trace viewer; "
                     ".json / .json.gz), a Perfetto trace, nor a Flight Recorder dump")


def _zip_problem(path: str) -> str:
    """What a zip archive is, for its one-line refusal: an nsys-jax archive (NVIDIA JAX-Toolbox: a
    .nsys-rep beside its analysis scripts) names the report inside; any other zip says it is one."""
    import zipfile
    try:
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
    except (zipfile.BadZipFile, OSError, EOFError) as e:
        return f"corrupt or truncated zip archive ({e})"
    reports = [n for n in names if n.endswith((".nsys-rep", ".qdrep"))][:2]
    if reports:
        return (f"a zip archive holding the Nsight Systems report {reports[0]!r} (an nsys-jax archive?): unzip it and "
                "pass the .nsys-rep (read through `nsys export` when nsys is on PATH) or its SQLite export")
    if any(n.endswith("nvtx_gpu_proj_trace/trace.parquet") for n in names):
        # JAX-Toolbox's CI archives (.github/workflows/nsys-jax/test_data) keep nsys-jax's post-processed
        # tables and drop the report: NVTX ranges projected onto the GPU, no kernel, copy or launch rows
        return ("an nsys-jax archive without its Nsight Systems report: it holds NVTX ranges projected onto the GPU "
                "(nvtx_gpu_proj_trace), no GPU ops; pass the .nsys-rep nsys-jax recorded (or its SQLite export)")
    return "a zip archive with no trace traceflow reads: unzip it and pass the trace files inside"


def _peek(opener, path, what) -> bytes:
    try:
        with opener() as f:
            return f.read(16)
    except (OSError, EOFError, lzma.LZMAError, zlib.error) as e:
        raise InputError(path, f"corrupt or truncated {what} data ({e})") from None
