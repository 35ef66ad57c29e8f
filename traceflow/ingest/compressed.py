"""Reading gzip / xz inputs with a ceiling, so a decompression bomb fails fast in bounded memory and disk."""
from __future__ import annotations

import gzip
import lzma
import os
import zlib

from ..errors import InputError

MAX_RATIO = 200          # real traces compress 5-30x; a bomb inflates thousands of times
MAX_FLOOR = 2 << 30      # small files may always inflate to 2 GiB


class BoundedReader:
    def __init__(self, path: str, kind: str):
        self.path, self.kind = path, kind
        self.raw = open(path, "rb")
        self.limit = max(MAX_FLOOR, os.fstat(self.raw.fileno()).st_size * MAX_RATIO)
        self.f = gzip.GzipFile(fileobj=self.raw, mode="rb") if kind == "gzip" else lzma.LZMAFile(self.raw, "rb")
        self.n = 0

    def read(self, n=-1):
        try:
            b = self.f.read(n)
        except EOFError:
            raise InputError(self.path, f"truncated {self.kind} stream (the file ends early)") from None
        except (OSError, zlib.error, lzma.LZMAError) as e:
            raise InputError(self.path, f"corrupt {self.kind} data ({e})") from None
        self.n += len(b)
        if self.n > self.limit:
            raise InputError(self.path, f"{self.kind} data inflates past {self.limit >> 20} MiB ({MAX_RATIO}x the file): "
                             "refusing a likely decompression bomb")
        return b

    def close(self):
        self.f.close()
        self.raw.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
