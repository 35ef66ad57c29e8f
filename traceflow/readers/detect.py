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
    """'nsys-sqlite', 'rocpd-sqlite', 'rpd-sqlite', 'rocprof-sqlite' (ROCM_FORMATS), 'nsys-rep', 'kineto-json', 'sqlite-gz', 'sqlite-xz', 'fr-pickle', 'fr-json' (Flight
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
    if head[:1] == b"\x80" and b"segments" in head:  # readers/memory_snapshot.py
        return "torch-memory-snapshot"
    if path.endswith((".nsys-rep", ".qdrep")):
        return "nsys-rep"
    if head.startswith(GZIP_MAGIC):
        inner = _peek(lambda: gzip.open(path, "rb"), path, "gzip")
        return "sqlite-gz" if inner.startswith(SQLITE_MAGIC) else "kineto-json"
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
    if not stripped:
        raise InputError(path, "file holds only whitespace")
    raise InputError(path, "unknown format: neither an Nsight Systems SQLite export (.sqlite), a ROCm rocpd / .rpd / rocprof database "
                     "or rocprofv3 CSV, "
                     "an .nsys-rep, a PyTorch profiler JSON trace (.json / .json.gz), nor a Flight Recorder dump")


def _peek(opener, path, what) -> bytes:
    try:
        with opener() as f:
            return f.read(16)
    except (OSError, EOFError, lzma.LZMAError, zlib.error) as e:
        raise InputError(path, f"corrupt or truncated {what} data ({e})") from None
