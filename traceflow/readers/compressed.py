"""Reading gzip / xz inputs with a ceiling, so a decompression bomb fails fast in bounded memory and disk."""
from __future__ import annotations

import lzma
import os
import zlib
from contextlib import contextmanager
from contextvars import ContextVar

from ..errors import InputError
from ..options import parse_limit

# The bound on inflation (--max-inflate / TRACEFLOW_MAX_INFLATE, options.parse_limit): 'Nx' times the file's size, or a
# size. Real traces inflate 3x (nsys SQLite) to 22x (Kineto JSON: every fixture and bench input
# measured, 2022-2026); a bomb inflates thousands of times. 100x, at least 256 MiB, keeps every real
# trace and holds a bomb to what the streaming readers handle in their own bounded memory.
DEFAULT_LIMIT = "100x"
RATIO_FLOOR = 256 << 20
RAW_CHUNK = 1 << 20      # compressed bytes per inflate call
MAX_PADDING = 1 << 20    # zero bytes allowed after the last gzip member (a tape or disk block pads to 512 B-64 KiB)
# The bound in force on this thread: the ingest's --max-inflate (options.Options.max_inflate, which
# holds $TRACEFLOW_MAX_INFLATE too), set by readers/worker.read_file around each file it reads, in
# whichever thread or process reads it (a reader process, a Dask worker); None: DEFAULT_LIMIT.
_BOUND: ContextVar[str | None] = ContextVar("traceflow_max_inflate", default=None)


@contextmanager
def inflate_bound(text: str | None):
    """`text` ('100x', '4GB'; None: the default) is the bound for what this thread reads inside."""
    token = _BOUND.set(text)
    try:
        yield
    finally:
        _BOUND.reset(token)


def inflate_limit(compressed_size: int) -> tuple[int, str]:
    """The most bytes a file of this size may inflate to, and how that was set (for the error)."""
    text = _BOUND.get() or DEFAULT_LIMIT
    kind, value = parse_limit(text)
    if kind == "ratio":
        return max(RATIO_FLOOR, int(compressed_size * value)), f"{value:g}x the file, at least {RATIO_FLOOR >> 20} MiB"
    return int(value), f"--max-inflate {text}"


class BoundedReader:
    """`read(n)` gives the next n inflated bytes (fewer only at the end). gzip is inflated by zlib
    directly, in calls of up to n output bytes: each releases the GIL for its whole length, where
    `gzip.GzipFile` takes it back every 128 KiB (on a thread beside the JSON decode, that waits
    out the decode's switch interval each time)."""

    def __init__(self, path: str, kind: str, raw=None):
        self.path, self.kind = path, kind
        self.raw = raw or open(path, "rb")
        self.limit, self.why = inflate_limit(os.fstat(self.raw.fileno()).st_size)
        self.f = None if kind == "gzip" else lzma.LZMAFile(self.raw, "rb")
        self.z = zlib.decompressobj(31)   # 31: a gzip member, CRC and length checked at its end
        self.pending = b""                # compressed bytes not yet given to self.z
        self.n = 0

    def read(self, n=-1):
        try:
            b = self._gunzip(n) if self.f is None else self.f.read(n)
        except EOFError:
            raise InputError(self.path, f"truncated {self.kind} stream (the file ends early)") from None
        except (OSError, zlib.error, lzma.LZMAError) as e:
            raise InputError(self.path, f"corrupt {self.kind} data ({e})") from None
        self.n += len(b)
        if self.n > self.limit:
            raise InputError(self.path, f"{self.kind} data inflates past {self.limit >> 20} MiB ({self.why}): refusing "
                             "a likely decompression bomb (a real trace? raise the bound with --max-inflate)")
        return b

    def _gunzip(self, n: int) -> bytes:
        want = n if n >= 0 else self.limit + 1
        out = []
        while want > 0:
            if self.z.eof:  # a member ended: what follows is another member, zero padding, or the end
                rest = (self.z.unused_data + self.pending).lstrip(b"\0")
                zeros = 0
                while not rest and (more := self.raw.read(RAW_CHUNK)):
                    rest = more.lstrip(b"\0")
                    zeros += len(more) - len(rest)
                    if zeros > MAX_PADDING:  # a 5 GB sparse tail of zeros was read to its end
                        raise OSError(f"more than {MAX_PADDING >> 20} MiB of zero bytes after the gzip data (padding "
                                      "is a block at most): not a trace as written")
                if not rest:
                    break
                if not rest.startswith(b"\x1f\x8b"):
                    raise OSError("not a gzip member after the end of the previous one")
                self.z, self.pending = zlib.decompressobj(31), rest
            data = self.z.unconsumed_tail or self.pending or self.raw.read(RAW_CHUNK)
            self.pending = b""
            b = self.z.decompress(data, min(want, 1 << 30))  # empty data: what zlib still holds back
            if not data and not b and not self.z.eof:
                raise EOFError
            want -= len(b)
            out.append(b)
        return b"".join(out) if len(out) != 1 else out[0]

    def close(self):
        if self.f is not None:
            self.f.close()
        self.raw.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
