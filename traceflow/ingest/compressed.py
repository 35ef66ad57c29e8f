"""Reading gzip / xz inputs with a ceiling, so a decompression bomb fails fast in bounded memory and disk."""
from __future__ import annotations

import lzma
import os
import zlib

from ..errors import InputError

MAX_RATIO = 200          # real traces compress 5-30x; a bomb inflates thousands of times
MAX_FLOOR = 2 << 30      # small files may always inflate to 2 GiB
RAW_CHUNK = 1 << 20      # compressed bytes per inflate call


class BoundedReader:
    """`read(n)` gives the next n inflated bytes (fewer only at the end). gzip is inflated by zlib
    directly, in calls of up to n output bytes: each releases the GIL for its whole length, where
    `gzip.GzipFile` takes it back every 128 KiB (on a thread beside the JSON decode, that waits
    out the decode's switch interval each time)."""

    def __init__(self, path: str, kind: str, raw=None):
        self.path, self.kind = path, kind
        self.raw = raw or open(path, "rb")
        self.limit = max(MAX_FLOOR, os.fstat(self.raw.fileno()).st_size * MAX_RATIO)
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
            raise InputError(self.path, f"{self.kind} data inflates past {self.limit >> 20} MiB ({MAX_RATIO}x the file): "
                             "refusing a likely decompression bomb")
        return b

    def _gunzip(self, n: int) -> bytes:
        want = n if n >= 0 else self.limit + 1
        out = []
        while want > 0:
            if self.z.eof:  # a member ended: what follows is another member, zero padding, or the end
                rest = (self.z.unused_data + self.pending).lstrip(b"\0")
                while not rest and (more := self.raw.read(RAW_CHUNK)):
                    rest = more.lstrip(b"\0")
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
